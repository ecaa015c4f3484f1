/**
 * Line diffs: the edit script between two texts (longest common subsequence of the lines that differ, after the
 * common head and tail are set aside) and its unified-diff rendering, as `diff -u` prints it.
 */

export type LineEdit =
  | { readonly kind: 'same'; readonly a: number; readonly b: number }
  | { readonly kind: 'del'; readonly a: number }
  | { readonly kind: 'add'; readonly b: number };

/** Above this many cells the middle part is shown as all removed then all added, not searched for common lines. */
const MAX_TABLE_CELLS = 4_000_000;

/** The edits that turn the lines `a` into the lines `b`, in order; indexes are into `a` and `b`. */
export function lineDiff(a: readonly string[], b: readonly string[]): LineEdit[] {
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const edits: LineEdit[] = [];
  for (let i = 0; i < head; i++) edits.push({ kind: 'same', a: i, b: i });
  const n = a.length - head - tail;
  const m = b.length - head - tail;
  if (n * m > MAX_TABLE_CELLS) {
    for (let i = 0; i < n; i++) edits.push({ kind: 'del', a: head + i });
    for (let j = 0; j < m; j++) edits.push({ kind: 'add', b: head + j });
  } else {
    // lcs[i][j]: the length of the longest common subsequence of a[head+i..] and b[head+j..].
    const width = m + 1;
    const lcs = new Uint32Array((n + 1) * width);
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        lcs[i * width + j] =
          a[head + i] === b[head + j]
            ? lcs[(i + 1) * width + j + 1] + 1
            : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[head + i] === b[head + j]) {
        edits.push({ kind: 'same', a: head + i++, b: head + j++ });
      } else if (i < n && (j === m || lcs[(i + 1) * width + j] >= lcs[i * width + j + 1])) {
        // Removed lines before added ones, as diff -u shows a replaced line.
        edits.push({ kind: 'del', a: head + i++ });
      } else {
        edits.push({ kind: 'add', b: head + j++ });
      }
    }
  }
  for (let k = tail; k > 0; k--) edits.push({ kind: 'same', a: a.length - k, b: b.length - k });
  return edits;
}

/** Splits a text into lines; a final newline does not make an empty last line. */
export function linesOf(text: string): string[] {
  const lines = text.split(/\r?\n/);
  if (lines.at(-1) === '') lines.pop();
  return lines;
}

/** `diff -u` of two texts with `context` lines around each change; '' when they are the same. */
export function unifiedDiff(before: string, after: string, labels: { a: string; b: string }, context = 3): string {
  const a = linesOf(before);
  const b = linesOf(after);
  const edits = lineDiff(a, b);
  const changed = edits.flatMap((e, k) => (e.kind === 'same' ? [] : [k]));
  if (changed.length === 0) return '';
  const out = [`--- ${labels.a}`, `+++ ${labels.b}`];
  let k = 0;
  while (k < changed.length) {
    // A hunk: changes closer than twice the context share one.
    let last = k;
    while (last + 1 < changed.length && changed[last + 1] - changed[last] <= 2 * context) last++;
    const from = Math.max(0, changed[k] - context);
    const to = Math.min(edits.length - 1, changed[last] + context);
    const hunk = edits.slice(from, to + 1);
    const firstA = hunk.find((e) => e.kind !== 'add');
    const firstB = hunk.find((e) => e.kind !== 'del');
    const countA = hunk.filter((e) => e.kind !== 'add').length;
    const countB = hunk.filter((e) => e.kind !== 'del').length;
    const startA = firstA === undefined ? startBefore(edits, from, 'a') : (firstA as { a: number }).a + 1;
    const startB = firstB === undefined ? startBefore(edits, from, 'b') : (firstB as { b: number }).b + 1;
    out.push(`@@ -${startA},${countA} +${startB},${countB} @@`);
    for (const e of hunk) {
      if (e.kind === 'same') out.push(` ${a[e.a]}`);
      else if (e.kind === 'del') out.push(`-${a[e.a]}`);
      else out.push(`+${b[e.b]}`);
    }
    k = last + 1;
  }
  return `${out.join('\n')}\n`;
}

/** For a hunk with no line of one side: the line number before which it applies, as `diff -u` gives it (0 at the top). */
function startBefore(edits: readonly LineEdit[], from: number, side: 'a' | 'b'): number {
  let count = 0;
  for (let k = 0; k < from; k++)
    if (edits[k].kind === 'same' || edits[k].kind === (side === 'a' ? 'del' : 'add')) count++;
  return count;
}
