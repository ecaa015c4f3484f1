/**
 * Changes to the configuration file as the web console makes them (docs/console.md#configuration): the file stays
 * the truth, so a change is applied to the file's YAML document (the `yaml` package's Document API), keeping its
 * comments and order, and only the lines the change touches are rewritten. Secrets (`password` keys) never leave
 * here in clear: views and diffs show a mask, and the mask sent back means "keep the stored value".
 */
import { createHash } from 'node:crypto';
import { isMap, isNode, isSeq, parseDocument, type Document, type Node } from 'yaml';
import { lineDiff, linesOf, unifiedDiff } from '../util/text-diff.js';

/** What the page sees in place of a secret; sent back unchanged, the stored value stays. */
export const SECRET_MASK = '********';
const SECRET_KEYS: ReadonlySet<string> = new Set(['password']);
/** A secret key's value on a YAML line (block or flow style), for masking texts and diffs. */
const SECRET_ON_LINE = /(\bpassword\s*:\s*)("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s,}#][^,}#]*?)(\s*(?:[,}#]|$))/g;

export type PathSegment = string | number;

/**
 * One change: `set` a key or list item, `add` to the end of a list (made when absent), `remove` a key or item,
 * `copy` what is at `from` to the end of the list at `path`, or as the key `path` (a new one).
 */
export type EditOp =
  | { readonly op: 'set'; readonly path: readonly PathSegment[]; readonly value: unknown }
  | { readonly op: 'add'; readonly path: readonly PathSegment[]; readonly value: unknown }
  | { readonly op: 'remove'; readonly path: readonly PathSegment[] }
  | { readonly op: 'copy'; readonly from: readonly PathSegment[]; readonly path: readonly PathSegment[] };

/** A change that cannot be made as asked (a path that is not there, a malformed operation). */
export class EditError extends Error {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
  }
}

const MAX_OPS = 5000;
const MAX_PATH = 16;

/** The content hash a page sends back, so a file changed since it read it is not overwritten. */
export function etagOf(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 24);
}

/** The operations of a request body, checked; an EditError names what is wrong. */
export function parseOps(input: unknown): EditOp[] {
  if (!Array.isArray(input) || input.length === 0)
    throw new EditError('ops', 'a non-empty list of changes is required');
  if (input.length > MAX_OPS) throw new EditError('ops', `at most ${MAX_OPS} changes at once`);
  return input.map((raw: unknown, i): EditOp => {
    const where = `ops.${i}`;
    if (typeof raw !== 'object' || raw === null) throw new EditError(where, 'a change is an object {op, path, value}');
    const { op, path, value, from } = raw as Record<string, unknown>;
    const segments = keyPath(path, `${where}.path`);
    if (op === 'remove') return { op, path: segments };
    if (op === 'copy') return { op, from: keyPath(from, `${where}.from`), path: segments };
    if (op !== 'set' && op !== 'add') throw new EditError(`${where}.op`, 'one of set, add, remove, copy');
    if (value === undefined) throw new EditError(`${where}.value`, 'a value is required');
    return { op, path: segments, value };
  });
}

function keyPath(path: unknown, where: string): PathSegment[] {
  if (!Array.isArray(path) || path.length === 0 || path.length > MAX_PATH)
    throw new EditError(where, `a list of 1 to ${MAX_PATH} keys and list indexes`);
  for (const segment of path as unknown[]) {
    const ok =
      (typeof segment === 'string' && segment !== '') ||
      (typeof segment === 'number' && Number.isInteger(segment) && segment >= 0);
    if (!ok) throw new EditError(where, 'keys are non-empty strings, list indexes whole numbers from 0');
  }
  return path as PathSegment[];
}

/** The file's text with every secret masked, and its content as plain data with the same secrets masked. */
export function maskedView(text: string): { text: string; config: unknown } {
  return { text: maskText(text), config: maskSecrets(parseDocument(text).toJS() ?? {}) };
}

export function maskText(text: string): string {
  return text
    .split('\n')
    .map((line) =>
      line.replace(SECRET_ON_LINE, (_all, key: string, _value: string, end: string) => `${key}${SECRET_MASK}${end}`),
    )
    .join('\n');
}

function maskSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(maskSecrets);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k,
      SECRET_KEYS.has(k) && typeof v === 'string' ? SECRET_MASK : maskSecrets(v),
    ]),
  );
}

/**
 * `text` with the operations applied, in order. Lines the change does not touch are kept byte for byte (their
 * comments' columns too); an operation that cannot be made throws an EditError with its path.
 */
export function applyOps(text: string, ops: readonly EditOp[]): string {
  const doc = parseDocument(text);
  if (doc.errors.length > 0) throw new EditError('(root)', `the file has YAML errors: ${doc.errors[0].message}`);
  const before = render(doc);
  for (const [i, op] of ops.entries()) {
    const where = op.path.join('.');
    const parentPath = op.path.slice(0, -1);
    const parent = parentPath.length === 0 ? doc.contents : doc.getIn(parentPath, true);
    if (op.op === 'remove') {
      if (!doc.hasIn(op.path)) throw new EditError(where, `nothing to remove there (change ${i + 1})`);
      doc.deleteIn(op.path);
      continue;
    }
    const list = doc.getIn(op.path, true);
    // A copy is taken from the file as it is (its comments, a password in clear): none of it went through a page.
    const value = op.op === 'copy' ? copyOf(doc, op.from, i) : unmask(op.value, op.path, doc);
    if (op.op === 'add' || (op.op === 'copy' && isSeq(list))) {
      if (list !== undefined && !isSeq(list))
        throw new EditError(where, `is not a list: cannot add to it (change ${i + 1})`);
      if (list === undefined && !(isMap(parent) || parentPath.length === 0))
        throw new EditError(where, `its parent is not there (change ${i + 1})`);
      doc.addIn(op.path, styledLike(doc.createNode(value), isSeq(list) ? list.items.at(-1) : undefined));
      continue;
    }
    if (op.op === 'copy' && list !== undefined)
      throw new EditError(where, `is there already (change ${i + 1}): copy to a list or a new key`);
    const last = op.path[op.path.length - 1];
    if (typeof last === 'number' && !(isSeq(parent) && last < parent.items.length))
      throw new EditError(where, `no list item there (change ${i + 1}): add appends to a list`);
    if (parentPath.length > 0 && parent === undefined)
      throw new EditError(where, `its parent is not there (change ${i + 1})`);
    doc.setIn(op.path, styledLike(doc.createNode(value), doc.getIn(op.path, true)));
  }
  return keepUntouchedLines(text, before, render(doc));
}

function copyOf(doc: Document, from: readonly PathSegment[], i: number): unknown {
  const source: unknown = doc.getIn(from, true);
  if (source === undefined) throw new EditError(from.join('.'), `nothing to copy there (change ${i + 1})`);
  return isNode(source) ? source.clone() : source;
}

/** A new map or list written in the style of the one it replaces or follows: `{ ... }` among flow items. */
function styledLike(node: Node, like: unknown): Node {
  if ((isMap(node) || isSeq(node)) && (isMap(like) || isSeq(like)) && like.flow === true) node.flow = true;
  return node;
}

function render(doc: Document): string {
  // lineWidth 0: long values stay on their line, as the person wrote them.
  return doc.toString({ lineWidth: 0 });
}

/**
 * The new rendering with every line that did not change taken from the original text: the renderer normalizes
 * spacing (a comment's column), which must not show as a change. When the rendering of the unchanged document
 * does not match the original line for line, its own text is the best there is.
 */
function keepUntouchedLines(original: string, before: string, after: string): string {
  const source = linesOf(original);
  const old = linesOf(before);
  if (source.length !== old.length) return after;
  const next = linesOf(after);
  const out = lineDiff(old, next).flatMap((e) =>
    e.kind === 'same' ? [source[e.a]] : e.kind === 'add' ? [next[e.b]] : [],
  );
  return `${out.join('\n')}\n`;
}

/** The mask in place of a secret means the stored value; a mask where nothing is stored is refused. */
function unmask(value: unknown, path: readonly PathSegment[], doc: Document): unknown {
  if (Array.isArray(value)) return value.map((v, i) => unmask(v, [...path, i], doc));
  if (typeof value === 'object' && value !== null)
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, unmask(v, [...path, k], doc)]));
  const key = path[path.length - 1];
  if (value !== SECRET_MASK || typeof key !== 'string' || !SECRET_KEYS.has(key)) return value;
  const stored: unknown = doc.getIn(path);
  if (typeof stored !== 'string') throw new EditError(path.join('.'), 'no stored password to keep: type the password');
  return stored;
}

/** The unified diff of a change, secrets masked, with its size. */
export function describeChange(
  before: string,
  after: string,
  file: string,
): { diff: string; added: number; removed: number } {
  // Diffed in clear, then masked: a changed password shows as a changed line, never its value.
  const diff = maskText(unifiedDiff(before, after, { a: `${file} (now)`, b: `${file} (changed)` }));
  const lines = diff.split('\n');
  return {
    diff,
    added: lines.filter((l) => l.startsWith('+') && !l.startsWith('+++')).length,
    removed: lines.filter((l) => l.startsWith('-') && !l.startsWith('---')).length,
  };
}
