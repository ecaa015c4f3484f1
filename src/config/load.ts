/**
 * YAML file → defaults → validation → frozen `Config`. Every problem is reported at once, each with its key
 * path and `file:line:col`, so an operator fixes a file in one pass (`edgeferry --check-config`).
 */
import { accessSync, constants, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import {
  isMap,
  isNode,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  type Document,
  type Node,
  type YAMLError,
} from 'yaml';
import { z } from 'zod';
import { asError, ConfigError, type ConfigProblem } from '../util/errors.js';
import { suggestKey } from './did-you-mean.js';
import { expandProfiles, type Expansion, type Path } from './profiles.js';
import { configSchema, type Config } from './schema.js';

export function loadConfig(file: string): Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(file, [{ path: '(root)', message: `cannot read the file: ${asError(err).message}` }], {
      cause: err,
      code: 'EF_CONFIG_UNREADABLE',
    });
  }
  return parseConfig(text, file, dirname(resolve(file)));
}

/** Parses config text; `file` labels locations in problems, relative file paths resolve against `baseDir`. */
export function parseConfig(text: string, file: string, baseDir: string): Config {
  const lineCounter = new LineCounter();
  // prettyErrors off: we format positions ourselves, the same way for syntax and schema problems.
  const doc = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false });
  const at = (offset: number): string => {
    const { line, col } = lineCounter.linePos(offset);
    return `${file}:${line}:${col}`;
  };
  if (doc.errors.length > 0) {
    const problems = doc.errors.map((e) => syntaxProblem(e, text, lineCounter, file));
    // Two of the parser's errors may be about one line: said once.
    throw new ConfigError(
      file,
      problems.filter((p, i) => problems.findIndex((q) => q.location === p.location && q.message === p.message) === i),
    );
  }

  const problem = (path: Path, message: string, atKey = false): ConfigProblem => ({
    path: path.length === 0 ? '(root)' : path.join('.'),
    message,
    location: at(nodeAt(doc, path, atKey)?.range?.[0] ?? 0),
  });

  const expansion = expandProfiles(doc.toJS() ?? {});
  const result = configSchema.safeParse(expansion.input, { error: describeMissingKey });
  if (!result.success || expansion.problems.length > 0) {
    // An unknown key near a known one says which (`url` → `urls`), and stands for that key's "missing" too.
    const meant = new Set<string>();
    const issues = result.error?.issues.flatMap((issue) => {
      const path = issue.path as Path; // YAML keys are strings and indexes, never symbols
      if (issue.code !== 'unrecognized_keys') return [{ path, message: issue.message, atKey: false }];
      return issue.keys.map((key) => {
        const suggestion = suggestKey(path, key);
        if (suggestion !== undefined) meant.add([...path, suggestion].join('.'));
        return {
          path: [...path, key],
          message: `unknown key "${key}"${suggestion === undefined ? '' : `: did you mean "${suggestion}"?`}`,
          atKey: true,
        };
      });
    });
    const kept = (issues ?? []).filter(
      ({ path, message }) => !(message.startsWith(MISSING_KEY) && meant.has(path.join('.'))),
    );
    throw new ConfigError(file, [
      ...expansion.problems.map((p) => problem(p.path, p.message)),
      ...fromProfiles(kept, expansion, problem),
    ]);
  }

  const config = result.data;
  const problems: ConfigProblem[] = [];
  resolveFiles(config, baseDir, (path, message) => problems.push(problem(path, message)));
  if (problems.length > 0) throw new ConfigError(file, problems);
  return deepFreeze(config);
}

/**
 * Problems of the expanded input where they are in the file: one in a key a device took from its profile is
 * the profile's, reported once (when the profile itself has it, or for the first device that does, named).
 */
function fromProfiles(
  issues: readonly { path: Path; message: string; atKey: boolean }[],
  expansion: Expansion,
  problem: (path: Path, message: string, atKey: boolean) => ConfigProblem,
): ConfigProblem[] {
  const seen = new Set<string>();
  const out: ConfigProblem[] = [];
  // `profiles` comes before `connectors` in the schema, so a profile's own problems come first.
  for (const { path, message, atKey } of issues) {
    const at = expansion.locate(path);
    if (at === null) continue;
    const key = `${at.path.join('.')}\u0000${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push(problem(at.path, at.device === undefined ? message : `${message} (in device ${at.device})`, atKey));
  }
  return out;
}

const MISSING_KEY = 'missing required key';

function describeMissingKey(issue: z.core.$ZodRawIssue): string | undefined {
  return issue.code === 'invalid_type' && issue.input === undefined
    ? `${MISSING_KEY} (expected ${issue.expected})`
    : undefined;
}

/**
 * A YAML syntax error where it is. A key indented deeper than the one above it reaches the parser as the rest of
 * that key's value, which it reports at the value on the line above ("Nested mappings are not allowed in compact
 * mappings"): said here at the line that is wrong, as what it is.
 */
function syntaxProblem(e: YAMLError, text: string, lines: LineCounter, file: string): ConfigProblem {
  const { line, col } = lines.linePos(e.pos[0]);
  if (e.code === 'BLOCK_AS_IMPLICIT_KEY' || e.code === 'MULTILINE_IMPLICIT_KEY') {
    const all = text.split(/\r?\n/);
    const indentOf = (l: string): number => l.length - l.trimStart().length;
    const wrong = all.findIndex((l, i) => i >= line && l.trim() !== '' && !l.trim().startsWith('#'));
    if (wrong >= 0 && indentOf(all[wrong]) > indentOf(all[line - 1])) {
      const indent = indentOf(all[wrong]);
      return {
        path: '(root)',
        message: `this line is indented deeper than the key above it (line ${line}): keys of one mapping start at the same column, and a value that is a mapping goes on the lines after its key`,
        location: `${file}:${wrong + 1}:${indent + 1}`,
      };
    }
  }
  return { path: '(root)', message: `${e.message} (${e.code})`, location: `${file}:${line}:${col}` };
}

/** The YAML node at `path` (its key node when `atKey`), or the nearest ancestor present in the file. */
function nodeAt(doc: Document, path: Path, atKey: boolean): Node | null {
  let node: unknown = doc.contents;
  for (const [i, segment] of path.entries()) {
    let next: unknown;
    if (isMap(node)) {
      const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === String(segment));
      next = pair && (atKey && i === path.length - 1 ? pair.key : (pair.value ?? pair.key));
    } else if (isSeq(node)) {
      next = node.items[Number(segment)];
    }
    if (!isNode(next)) break;
    node = next;
  }
  return isNode(node) ? node : null;
}

/**
 * Makes file references absolute (relative ones are relative to the config file), checks that they can be
 * read, so that a typo fails `--check-config` rather than a TLS handshake, and reads password files.
 */
function resolveFiles(config: Config, baseDir: string, report: (path: Path, message: string) => void): void {
  const readable = (file: string, path: Path): string => {
    const absolute = resolve(baseDir, file);
    try {
      accessSync(absolute, constants.R_OK);
    } catch (err) {
      report(path, `cannot read the file: ${asError(err).message}`);
    }
    return absolute;
  };
  const resolveTls = (tls: { caFile?: string; certFile?: string; keyFile?: string }, path: Path): void => {
    for (const key of ['caFile', 'certFile', 'keyFile'] as const) {
      const file = tls[key];
      if (file !== undefined) tls[key] = readable(file, [...path, key]);
    }
  };

  config.storage.path = resolve(baseDir, config.storage.path);
  if (config.log.auditFile !== undefined) config.log.auditFile = resolve(baseDir, config.log.auditFile);
  for (const key of ['passwordFile', 'aclFile'] as const) {
    const file = config.auth[key];
    if (file !== undefined) config.auth[key] = readable(file, ['auth', key]);
  }
  config.listeners.forEach((listener, i) => {
    if (listener.tls) resolveTls(listener.tls, ['listeners', i, 'tls']);
  });
  const metricsAuth = config.metrics?.auth;
  if (metricsAuth?.tokenFile !== undefined)
    metricsAuth.tokenFile = readable(metricsAuth.tokenFile, ['metrics', 'auth', 'tokenFile']);
  config.bridges.forEach(({ remote }, i) => {
    if (remote.tls) resolveTls(remote.tls, ['bridges', i, 'remote', 'tls']);
    if (remote.passwordFile === undefined) return;
    remote.passwordFile = resolve(baseDir, remote.passwordFile);
    try {
      // One trailing newline is the editor's, not the password's.
      remote.password = readFileSync(remote.passwordFile, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      report(['bridges', i, 'remote', 'passwordFile'], `cannot read the file: ${asError(err).message}`);
    }
  });
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
