/**
 * Every relative link in the repository's Markdown resolves: the file (or folder, or image) exists, and a `#anchor`
 * names a heading of the target file by GitHub's slug. External http(s) and mailto links are not fetched.
 * The README is the front door and links into docs/ by reader (docs/development.md#tests): a moved section must not
 * leave a dead link behind.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/util/errors.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** Not ours, built, or written by tests and benchmarks. */
const skipped = new Set(['node_modules', 'dist', 'release', '.git', 'bench/results', 'test/artifacts']);

function markdownFiles(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (skipped.has(relative(root, path))) continue;
    if (entry.isDirectory()) found.push(...markdownFiles(path));
    else if (entry.name.endsWith('.md')) found.push(path);
  }
  return found;
}

/** The text outside fenced code blocks, one string per line (code blocks become empty lines, to keep numbering). */
function proseLines(text: string): string[] {
  let fenced = false;
  return text.split('\n').map((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return '';
    }
    return fenced ? '' : line;
  });
}

/** GitHub's heading anchor: lowercase, punctuation removed, each space a '-'; a repeated slug gets -1, -2, ... */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(readFileSync(file, 'utf8'))) {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (m === null) continue;
    const base = slug(m[1]);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

/** Every broken relative link of one file, as `file:line: target: why`. */
function brokenLinks(file: string, anchorCache: Map<string, Set<string>>): string[] {
  const problems: string[] = [];
  const anchors = (path: string): Set<string> => {
    let set = anchorCache.get(path);
    if (set === undefined) anchorCache.set(path, (set = anchorsOf(path)));
    return set;
  };
  proseLines(readFileSync(file, 'utf8')).forEach((raw, i) => {
    const line = raw.replace(/`[^`]*`/g, '');
    for (const m of line.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      const target = m[1];
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:: not fetched
      const where = `${relative(root, file)}:${i + 1}: ${target}`;
      const hash = target.indexOf('#');
      const pathPart = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
      const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
      const dest = pathPart === '' ? file : resolve(dirname(file), pathPart);
      if (!existsSync(dest)) {
        problems.push(`${where}: no such file`);
        continue;
      }
      if (anchor === undefined) continue;
      if (statSync(dest).isDirectory() || !dest.endsWith('.md')) {
        problems.push(`${where}: an anchor into something that is not a Markdown file`);
      } else if (!anchors(dest).has(anchor)) {
        problems.push(`${where}: no heading "#${anchor}" in ${relative(root, dest)}`);
      }
    }
  });
  return problems;
}

describe('documentation links', () => {
  it('computes GitHub heading slugs', () => {
    expect(slug('What is kept when things fail')).toBe('what-is-kept-when-things-fail');
    expect(slug('Persistence benchmark (`npm run bench:persistence`)')).toBe(
      'persistence-benchmark-npm-run-benchpersistence',
    );
    expect(slug('Installed files, upgrade and removal')).toBe('installed-files-upgrade-and-removal');
    expect(slug('store/')).toBe('store');
  });

  it('every relative link in every Markdown file reaches an existing file and heading', () => {
    const files = markdownFiles(root);
    expect(files.map((f) => relative(root, f))).toContain('README.md');
    const cache = new Map<string, Set<string>>();
    expect(files.flatMap((f) => brokenLinks(f, cache))).toEqual([]);
  });
});

describe('troubleshooting', () => {
  it('has one row per EF_ code, each with what it means and what to do', () => {
    const rows = new Map<string, string[]>();
    for (const line of readFileSync(join(root, 'docs/troubleshooting.md'), 'utf8').split('\n')) {
      const m = /^\| `(EF_[A-Z_]+)` \|(.*)\|\s*$/.exec(line);
      if (m !== null)
        rows.set(
          m[1],
          m[2].split(' | ').map((cell) => cell.trim()),
        );
    }
    expect([...rows.keys()].sort()).toEqual(Object.keys(ErrorCodes).sort());
    for (const [code, [meaning, whatToDo]] of rows) {
      expect(meaning, code).toMatch(/\w/);
      expect(whatToDo, code).toMatch(/\w/);
    }
  });
});
