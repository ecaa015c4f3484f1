/**
 * The integrity walk of a stored data directory (`storage.verifyOnStart`). LMDB checks no page checksums: a page
 * damaged on disk (a power cut on flash storage) is found only when read, and some damage makes LMDB abort the
 * whole process (`Assertion 'IS_LEAF(mp)' failed`) or crash it. So the walk runs in a child process
 * (verify-child.ts): whatever happens there, the gateway gets a report, or learns the child died, and refuses
 * to start with a message that says what is damaged and the ways out (exit 3, which systemd does not restart).
 *
 * - `quick`: every page reachable in the data file, checked as a file (pages.ts: headers, links, the freelist,
 *   what LMDB never checks), then every key of every database through LMDB: the B-trees' structure.
 * - `full`: also every value, with its checksum (codec.ts): what a quick walk cannot see in the values.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Database, RootDatabase } from 'lmdb';
import {
  CorruptValueError,
  decodeJsonValue,
  decodePlainValue,
  decodeQueuedValue,
  decodeStampedValue,
  keyOwner,
  keySeq,
  seqKey,
} from '../codec.js';
import { Chunk, chunkCount, chunkStart } from './outbox-chunk.js';
import { checkPages } from './pages.js';
import { SteadyClock } from '../../util/clock.js';
import { StoreError } from '../../util/errors.js';
import { OUTBOX_META_END, OUTBOX_META_PREFIX, type OutboxMeta } from './outbox.js';

export type VerifyMode = 'quick' | 'full' | 'off';

/** Damaged records of one outbox or session (or database, where records have no owner). */
export interface DamagedOwner {
  readonly what: string;
  readonly owner: string;
  records: number;
  seqFrom?: number;
  seqTo?: number;
}

export interface VerifyReport {
  /** Records walked, all databases. */
  records: number;
  readonly damaged: DamagedOwner[];
  /** Errors LMDB raised while walking (a damaged B-tree), by database. */
  readonly errors: string[];
}

/**
 * How each database's values are checked in a full walk: `decode` returns how many records in the value are
 * damaged, or throws CorruptValueError for a damaged value. The owner of a key is its prefix up to the 0 byte.
 */
/** The walk only checks that values decode: any timeline converts their expiry. */
const WALK_CLOCK = new SteadyClock();

export const DATABASES: Record<
  string,
  { what: string; decode?: (key: Buffer, value: Buffer) => number; seqs: boolean }
> = {
  meta: { what: 'store metadata', decode: (_k, v) => (decodeJsonValue(v), 0), seqs: false },
  outbox: { what: 'outbox', seqs: true }, // checked entry by entry: damagedChunkEntries
  retained: { what: 'retained message', decode: (_k, v) => (decodePlainValue(v, WALK_CLOCK), 0), seqs: false },
  sessions: { what: 'session record', decode: (_k, v) => (decodeJsonValue(v), 0), seqs: false },
  subscriptions: { what: 'subscriptions of session', decode: (_k, v) => (decodeJsonValue(v), 0), seqs: false },
  'session-queue': { what: 'queue of session', decode: (_k, v) => (decodeQueuedValue(v, WALK_CLOCK), 0), seqs: true },
  'session-will': {
    what: 'delayed will of session',
    decode: (_k, v) => (decodeStampedValue(v, WALK_CLOCK), 0),
    seqs: false,
  },
  'session-qos2': { what: 'QoS 2 state of session', seqs: true },
  'outbox-released': { what: 'QoS 2 state of outbox', seqs: true },
  'outbox-removed': { what: 'removal marks of outbox', seqs: true },
};

/**
 * Which outbox entries are gone already (below their outbox's floor, or marked removed: acknowledged), so that
 * damage to them loses nothing. Read from `env`'s meta and outbox-removed databases, best effort.
 */
export function outboxRemovedEntries(env: RootDatabase): (prefix: Buffer, seq: number) => boolean {
  const floors = new Map<string, number>();
  const marks = new Set<string>();
  try {
    const meta = env.openDB<Buffer, string>('meta', { encoding: 'binary', create: false } as never);
    for (const { key, value } of meta.getRange({ start: OUTBOX_META_PREFIX, end: OUTBOX_META_END, snapshot: false })) {
      try {
        const floor = decodeJsonValue<OutboxMeta>(value).floor;
        if (floor !== undefined) floors.set(String(key).slice(OUTBOX_META_PREFIX.length), floor);
      } catch {
        // a damaged counter record: no floor known for that outbox
      }
    }
    const removed = env.openDB<Buffer, Buffer>('outbox-removed', {
      encoding: 'binary',
      keyEncoding: 'binary',
      create: false,
    } as never);
    for (const key of removed.getKeys({ snapshot: false })) marks.add(key.toString('hex'));
  } catch {
    // a store without them, or damaged there: then every damaged entry counts
  }
  return (prefix, seq) =>
    seq < (floors.get(prefix.toString('utf8', 0, prefix.length - 1)) ?? 0) ||
    marks.has(seqKey(prefix, seq).toString('hex'));
}

/** The seqs of the damaged entries of an outbox chunk, but for those `gone` says are removed already. */
export function damagedChunkEntries(
  key: Buffer,
  value: Buffer,
  gone: (prefix: Buffer, seq: number) => boolean,
): number[] {
  const prefix = key.subarray(0, key.indexOf(0) + 1);
  const chunk = new Chunk(key, prefix.length, value, WALK_CLOCK);
  const damaged: number[] = [];
  for (let seq = chunk.start; seq < chunk.end; seq++) {
    if (gone(prefix, seq)) continue;
    try {
      chunk.entry(seq, false);
    } catch (err) {
      if (!(err instanceof CorruptValueError)) throw err;
      damaged.push(seq);
    }
  }
  return damaged;
}

/** Damaged records by database and owner (outbox name, client id, topic), with their seq ranges. */
export class DamageTally {
  readonly owners: DamagedOwner[] = [];
  private readonly byId = new Map<string, DamagedOwner>();

  /** `n` damaged records under `key` of database `db`. */
  note(db: string, key: Buffer, n: number): void {
    const spec = DATABASES[db];
    const owner = db === 'meta' ? key.toString('utf8') : keyOwner(key);
    const id = `${spec.what}\u0000${owner}`;
    let d = this.byId.get(id);
    if (d === undefined) {
      this.byId.set(id, (d = { what: spec.what, owner, records: 0 }));
      this.owners.push(d);
    }
    d.records += n;
    const prefixBytes = key.indexOf(0) + 1;
    if (!spec.seqs || prefixBytes === 0 || key.length < prefixBytes + 8) return;
    const seq = db === 'outbox' ? chunkStart(key, prefixBytes) : keySeq(key);
    const last = db === 'outbox' ? seq + chunkCount(key, prefixBytes) - 1 : seq;
    d.seqFrom = Math.min(d.seqFrom ?? seq, seq);
    d.seqTo = Math.max(d.seqTo ?? last, last);
  }
}

/** Walks `env` (opened read-only by the caller). Never throws for damage: it is reported. */
export function walkStore(env: RootDatabase, mode: 'quick' | 'full'): VerifyReport {
  const tally = new DamageTally();
  const report: VerifyReport = { records: 0, damaged: tally.owners, errors: [] };
  const gone = mode === 'full' ? outboxRemovedEntries(env) : undefined;
  for (const [name, spec] of Object.entries(DATABASES)) {
    let db: Database<Buffer, Buffer> | undefined;
    try {
      db = env.openDB<Buffer, Buffer>(name, { encoding: 'binary', keyEncoding: 'binary', create: false } as never) as
        Database<Buffer, Buffer> | undefined; // undefined: no such database
    } catch (err) {
      report.errors.push(`${name}: ${(err as Error).message}`);
      continue;
    }
    if (db === undefined) continue; // an older store without this database
    let walked = 0;
    try {
      if (gone === undefined || (spec.decode === undefined && name !== 'outbox')) {
        for (const key of db.getKeys({ snapshot: false })) {
          void key;
          walked++;
        }
      } else {
        for (const { key, value } of db.getRange({ snapshot: false })) {
          walked++;
          const k = typeof key === 'string' ? Buffer.from(key) : key;
          let damaged: number;
          try {
            damaged = name === 'outbox' ? damagedChunkEntries(k, value, gone).length : (spec.decode?.(k, value) ?? 0);
          } catch (err) {
            if (!(err instanceof CorruptValueError)) throw err;
            damaged = 1;
          }
          if (damaged > 0) tally.note(name, k, damaged);
        }
      }
      // A walk may end early on a damaged page without an error; LMDB's own count of the entries tells.
      const entries = (db.getStats() as { entryCount: number }).entryCount;
      if (walked !== entries) report.errors.push(`${name}: only ${walked} of its ${entries} records can be reached`);
    } catch (err) {
      report.errors.push(`${name}: ${(err as Error).message}`);
    }
    report.records += walked;
  }
  return report;
}

/**
 * Checks the data file page by page (pages.ts), then runs the walk in a child process; returns what is damaged,
 * as lines for an operator, empty when the store is intact. A child that dies (an LMDB assertion, a crash) means
 * a damaged structure; one that cannot be started throws (StoreError).
 */
export function verifyInChild(dir: string, mode: 'quick' | 'full'): string[] {
  try {
    const pages = checkPages(join(dir, 'data.mdb'));
    if (pages.length > 0) return pages;
  } catch (err) {
    return [`the integrity check could not read data.mdb (${(err as Error).message})`];
  }
  const child = fileURLToPath(new URL('./verify-child.js', import.meta.url));
  const result = spawnSync(process.execPath, [child, dir, mode], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  // A check that cannot start says nothing about the data: refusing it as damaged would send the operator to
  // salvage or --reset-store a store that may be intact.
  if (result.error !== undefined) {
    throw new StoreError(
      'EF_STORE_OPEN',
      `the integrity check of ${dir} could not start (${result.error.message}): nothing is known to be damaged. ` +
        `The runtime ${process.execPath} must be executable by the user edgeferry runs as; ` +
        `storage.verifyOnStart: off skips the check.`,
    );
  }
  if (result.status !== 0) {
    const how = result.signal !== null ? `was killed by ${result.signal}` : `exited with ${String(result.status)}`;
    const said = result.stderr.trim().split('\n').slice(-1)[0] ?? '';
    return [`its B-tree structure is damaged: LMDB ${how} while walking it${said === '' ? '' : ` (${said})`}`];
  }
  const report = JSON.parse(result.stdout) as VerifyReport;
  return describeDamage(report);
}

/** One line per damaged outbox, session or database. */
export function describeDamage(report: VerifyReport): string[] {
  const lines = report.errors.map((e) => `database ${e}`);
  for (const d of report.damaged) {
    const range =
      d.seqFrom === undefined ? '' : ` (seq ${d.seqFrom}${d.seqTo === d.seqFrom ? '' : `-${String(d.seqTo)}`})`;
    // The journal's entries are under the empty owner (journal.ts): every outbox holding them lost them.
    const where = d.what === 'outbox' && d.owner === '' ? 'outbox journal' : `${d.what} "${d.owner}"`;
    lines.push(`${where}: ${d.records} damaged record${d.records === 1 ? '' : 's'}${range}`);
  }
  return lines;
}
