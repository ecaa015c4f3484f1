/**
 * The configuration file as the web console changes it (docs/console.md#configuration): read with its content hash
 * (etag), changed (config-document.ts), validated as `--check-config` does, shown as a diff, written atomically
 * (`replaceFile`), the text it replaced kept in the history folder (the last ten), and applied by the reload SIGHUP
 * runs. One change at a time; a file changed on disk since the page read it is not overwritten.
 */
import { mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { asError, type ConfigProblem } from '../util/errors.js';
import { replaceFile } from '../util/replace-file.js';
import { parseDocument } from 'yaml';
import { applyOps, describeChange, EditError, etagOf, maskedView, parseOps, type EditOp } from './config-document.js';
import { CsvError, tagsFromCsv, tagsToCsv, type CsvFormat, type CsvProblem } from './tag-csv.js';

/** Versions kept for "undo last change". */
export const HISTORY_SIZE = 10;
/** Files of the history hold passwords as the config file does: the owner's only. */
const PRIVATE = 0o600;

export interface Refusal {
  readonly ok: false;
  readonly status: 400 | 404 | 409 | 422 | 500;
  readonly error: string;
  readonly problems?: readonly ConfigProblem[];
  /** The diff of a change that is refused for what it would make of the file (the page shows both). */
  readonly diff?: string;
}

export interface ChangeSummary {
  readonly diff: string;
  readonly added: number;
  readonly removed: number;
  /** The keys changed, e.g. `connectors.0.tags` (for the audit line). */
  readonly paths: readonly string[];
}

export interface Applied<R> extends ChangeSummary {
  readonly ok: true;
  /** The file's new etag. */
  readonly etag: string;
  readonly reload: R;
}

interface HistoryEntry {
  readonly at: string;
  readonly user: string;
  /** The file as the change left it: undo only restores over that. */
  readonly afterEtag: string;
  readonly before: string;
}

export interface ConfigEditorOptions<R> {
  readonly file: string;
  /** Where the previous versions go (`<storage.path>/config-history`). */
  readonly historyDir: string;
  /** The problems `--check-config` would report for this text (an empty list: valid). */
  readonly validate: (text: string) => readonly ConfigProblem[];
  /** The reload SIGHUP runs. */
  readonly reload: () => Promise<R>;
  /** The file's JSON Schema, made when first asked for. */
  readonly schema: () => object;
}

export class ConfigEditor<R> {
  private queue: Promise<unknown> = Promise.resolve();
  private madeSchema: object | undefined;

  constructor(private readonly options: ConfigEditorOptions<R>) {}

  /** The file as the page shows it: secrets masked, with the etag a change must send back. */
  read(): { file: string; etag: string; text: string; config: unknown; undoable: number } {
    const text = this.text();
    return { file: this.options.file, etag: etagOf(text), ...maskedView(text), undoable: this.history().length };
  }

  /** The file's JSON Schema: the console's forms offer its keys and choices (docs/console.md#configuration). */
  schema(): object {
    this.madeSchema ??= this.options.schema();
    return this.madeSchema;
  }

  /** What `ops` would make of the file, validated, without writing it. */
  preview(etag: string, ops: unknown): Promise<Refusal | ({ ok: true; etag: string } & ChangeSummary)> {
    return this.serial(async () => {
      const change = this.prepare(etag, ops);
      if (!change.ok) return change;
      return { ok: true, etag, ...change.summary };
    });
  }

  /** Validates, writes and reloads; the text it replaces goes into the history. */
  apply(etag: string, ops: unknown, user: string): Promise<Refusal | Applied<R>> {
    return this.serial(async () => {
      const change = this.prepare(etag, ops);
      if (!change.ok) return change;
      if (change.summary.diff === '') return { ok: false, status: 422, error: 'the change leaves the file as it is' };
      return this.write(change.before, change.after, change.summary, user);
    });
  }

  /** Puts back the text the last change replaced, when the file is still as that change left it. */
  undo(etag: string): Promise<Refusal | Applied<R>> {
    return this.serial(async () => {
      const now = this.text();
      if (etagOf(now) !== etag) return changedOnDisk();
      const last = this.history().at(-1);
      if (last === undefined) return { ok: false, status: 409, error: 'no change from the console to undo' };
      if (last.entry.afterEtag !== etag)
        return {
          ok: false,
          status: 409,
          error: 'the file was changed after the last change from the console (by hand?): undo it by hand',
        };
      const problems = this.options.validate(last.entry.before);
      if (problems.length > 0)
        return { ok: false, status: 422, error: 'the previous version is not valid any more', problems };
      const summary = { ...describeChange(now, last.entry.before, basename(this.options.file)), paths: ['(undo)'] };
      const applied = await this.writeText(last.entry.before, summary);
      rmSync(last.path, { force: true });
      return applied;
    });
  }

  /**
   * A device's tags from CSV (tag-csv.ts), replacing its list or appended to it; previewed, or applied with
   * `apply`. Every bad row is refused by line, those the schema refuses too: nothing is applied then.
   */
  importTags(
    etag: string,
    input: unknown,
    user: string,
  ): Promise<Refusal | Applied<R> | ({ ok: true; etag: string } & ChangeSummary)> {
    return this.serial(async () => {
      const request = importRequest(input);
      if ('status' in request) return request;
      const text = this.text();
      const found = this.device(text, request.device);
      if ('status' in found) return found;
      let parsed: ReturnType<typeof tagsFromCsv>;
      try {
        parsed = tagsFromCsv(request.csv, request.format, found.addressBase);
      } catch (err) {
        if (!(err instanceof CsvError)) throw err;
        return badRows(err.problems);
      }
      const tagsPath = ['connectors', found.index, 'tags'];
      const ops =
        request.mode === 'replace'
          ? [{ op: 'set', path: tagsPath, value: parsed.tags }]
          : parsed.tags.map((value) => ({ op: 'add', path: tagsPath, value }));
      const first = request.mode === 'replace' ? 0 : found.tagCount;
      // The good rows are validated too, so that every bad row is named at once.
      const change = ops.length > 0 ? this.prepare(etag, ops) : undefined;
      const prefix = `connectors.${found.index}.tags.`;
      const rows =
        change === undefined || change.ok
          ? []
          : (change.problems ?? []).flatMap((p) => {
              const m = p.path.startsWith(prefix) ? /^(\d+)(?:\.(.*))?$/.exec(p.path.slice(prefix.length)) : null;
              const line = m === null ? undefined : parsed.lines[Number(m[1]) - first];
              return line === undefined
                ? []
                : [{ line, message: m?.[2] === undefined ? p.message : `${m[2]}: ${p.message}` }];
            });
      if (parsed.problems.length + rows.length > 0) return badRows([...parsed.problems, ...rows]);
      if (change === undefined) return { ok: false, status: 422, error: 'the CSV has no tags' };
      if (!change.ok) return change;
      if (!request.apply) return { ok: true, etag, ...change.summary };
      return this.write(change.before, change.after, change.summary, user);
    });
  }

  /** A device's tags as edgeferry's CSV. */
  exportTags(device: unknown): Refusal | { ok: true; csv: string } {
    if (typeof device !== 'string' || device === '')
      return { ok: false, status: 400, error: '"device" (its id) is required' };
    const found = this.device(this.text(), device);
    if ('status' in found) return found;
    return { ok: true, csv: tagsToCsv(found.tags) };
  }

  private device(
    text: string,
    id: string,
  ): Refusal | { index: number; addressBase: 0 | 1; tagCount: number; tags: Record<string, unknown>[] } {
    const connectors = (parseDocument(text).toJS() as { connectors?: unknown } | null)?.connectors;
    const list = Array.isArray(connectors) ? (connectors as Record<string, unknown>[]) : [];
    const index = list.findIndex((c) => c.id === id);
    if (index < 0) return { ok: false, status: 404, error: `no device "${id}" in the configuration file` };
    const tags = Array.isArray(list[index].tags) ? (list[index].tags as Record<string, unknown>[]) : [];
    return { index, addressBase: list[index].addressBase === 1 ? 1 : 0, tagCount: tags.length, tags };
  }

  private prepare(
    etag: string,
    rawOps: unknown,
  ): Refusal | { ok: true; before: string; after: string; summary: ChangeSummary } {
    const before = this.text();
    if (etagOf(before) !== etag) return changedOnDisk();
    let ops: EditOp[];
    let after: string;
    try {
      ops = parseOps(rawOps);
      after = applyOps(before, ops);
    } catch (err) {
      if (!(err instanceof EditError)) throw err;
      return { ok: false, status: 400, error: err.message, problems: [{ path: err.path, message: err.message }] };
    }
    const paths = [...new Set(ops.map((op) => op.path.slice(0, 3).join('.')))];
    const summary = { ...describeChange(before, after, basename(this.options.file)), paths };
    const problems = this.options.validate(after);
    if (problems.length > 0) {
      const count = `${problems.length} problem${problems.length === 1 ? '' : 's'}`;
      return { ok: false, status: 422, error: `the change is not valid (${count})`, problems, diff: summary.diff };
    }
    return { ok: true, before, after, summary };
  }

  private async write(before: string, after: string, summary: ChangeSummary, user: string): Promise<Applied<R>> {
    const { historyDir } = this.options;
    mkdirSync(historyDir, { recursive: true, mode: 0o700 });
    const entries = this.history();
    const next = (entries.at(-1)?.seq ?? 0) + 1;
    const entry: HistoryEntry = { at: new Date().toISOString(), user, afterEtag: etagOf(after), before };
    replaceFile(join(historyDir, `${String(next).padStart(8, '0')}.json`), JSON.stringify(entry), PRIVATE);
    for (const old of entries.slice(0, Math.max(0, entries.length + 1 - HISTORY_SIZE)))
      rmSync(old.path, { force: true });
    return this.writeText(after, summary);
  }

  private async writeText(text: string, summary: ChangeSummary): Promise<Applied<R>> {
    replaceFile(this.options.file, text, PRIVATE);
    const reload = await this.options.reload();
    return { ok: true, etag: etagOf(text), ...summary, reload };
  }

  private text(): string {
    return readFileSync(this.options.file, 'utf8');
  }

  /** The kept versions, oldest first; an unreadable entry is left out (it cannot be restored). */
  private history(): { seq: number; path: string; entry: HistoryEntry }[] {
    let names: string[];
    try {
      names = readdirSync(this.options.historyDir);
    } catch {
      return [];
    }
    return names
      .filter((name) => /^\d{8}\.json$/.test(name))
      .sort()
      .flatMap((name) => {
        const path = join(this.options.historyDir, name);
        try {
          const entry = JSON.parse(readFileSync(path, 'utf8')) as HistoryEntry;
          return typeof entry.before === 'string' ? [{ seq: Number(name.slice(0, 8)), path, entry }] : [];
        } catch {
          return [];
        }
      });
  }

  /** Changes run one after another: two pages applying at once must not both read the same file. */
  private serial<T>(run: () => Promise<T>): Promise<T> {
    const result = this.queue.then(run, run);
    this.queue = result.catch((err: unknown) => asError(err));
    return result;
  }
}

function importRequest(
  input: unknown,
): Refusal | { device: string; csv: string; format: CsvFormat; mode: 'replace' | 'append'; apply: boolean } {
  const body = (typeof input === 'object' && input !== null ? input : {}) as Record<string, unknown>;
  const bad = (path: string, message: string): Refusal => ({
    ok: false,
    status: 400,
    error: `${path}: ${message}`,
    problems: [{ path, message }],
  });
  if (typeof body.device !== 'string' || body.device === '') return bad('device', 'the id of the device is required');
  if (typeof body.csv !== 'string') return bad('csv', 'the CSV text is required');
  const format = body.format ?? 'edgeferry';
  if (format !== 'edgeferry' && format !== 'kepware') return bad('format', 'edgeferry or kepware');
  const mode = body.mode ?? 'replace';
  if (mode !== 'replace' && mode !== 'append') return bad('mode', 'replace or append');
  return { device: body.device, csv: body.csv, format, mode, apply: body.apply === true };
}

function badRows(problems: readonly CsvProblem[]): Refusal {
  const sorted = [...problems].sort((a, b) => a.line - b.line);
  return {
    ok: false,
    status: 422,
    error: `${sorted.length} bad row${sorted.length === 1 ? '' : 's'}: nothing was applied`,
    problems: sorted.map((p) => ({ path: `line ${p.line}`, message: p.message })),
  };
}

function changedOnDisk(): Refusal {
  return {
    ok: false,
    status: 409,
    error: 'the configuration file changed since this page read it: reload the page and make the change again',
  };
}
