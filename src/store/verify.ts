/**
 * The integrity walk of a stored data directory (`storage.verifyOnStart`). LMDB checks no page checksums: a page
 * damaged on disk (a power cut on flash storage) is found only when read, and some damage makes LMDB abort the
 * whole process (`Assertion 'IS_LEAF(mp)' failed`) or crash it. So the walk runs in a child process
 * (verify-child.ts): whatever happens there, the gateway gets a report, or learns the child died, and refuses
 * to start with a message that says what is damaged and the ways out (exit 3, which systemd does not restart).
 *
 * - `quick`: every key of every database, page by page: the B-trees' structure.
 * - `full`: also every value, with its checksum (codec.ts): what a quick walk cannot see in the values.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Database, RootDatabase } from 'lmdb';
import { CorruptValueError, decodeJsonValue, decodePlainValue, decodeQueuedValue, decodeStampedValue, keyOwner, keySeq } from './codec.js';
import { Chunk, chunkCount, chunkStart } from './lmdb/outbox-chunk.js';

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
const DATABASES: Record<string, { what: string; decode?: (key: Buffer, value: Buffer) => number; seqs: boolean }> = {
  meta: { what: 'store metadata', decode: (_k, v) => (decodeMeta(v), 0), seqs: false },
  outbox: { what: 'outbox', decode: decodeChunk, seqs: true },
  retained: { what: 'retained message', decode: (_k, v) => (decodePlainValue(v), 0), seqs: false },
  sessions: { what: 'session record', decode: (_k, v) => (decodeJsonValue(v), 0), seqs: false },
  subscriptions: { what: 'subscriptions of session', decode: (_k, v) => (decodeJsonValue(v), 0), seqs: false },
  'session-queue': { what: 'queue of session', decode: (_k, v) => (decodeQueuedValue(v), 0), seqs: true },
  'session-will': { what: 'delayed will of session', decode: (_k, v) => (decodeStampedValue(v), 0), seqs: false },
  'session-qos2': { what: 'QoS 2 state of session', seqs: true },
  'outbox-released': { what: 'QoS 2 state of outbox', seqs: true },
  'outbox-removed': { what: 'removal marks of outbox', seqs: true },
};

/** The store's own metadata is plain JSON (counters, schema, clock). */
function decodeMeta(value: Buffer): unknown {
  try {
    return JSON.parse(value.toString('utf8'));
  } catch (err) {
    throw new CorruptValueError(`undecodable metadata (${(err as Error).message})`);
  }
}

/** Checks every entry of an outbox chunk; returns how many are damaged. */
function decodeChunk(key: Buffer, value: Buffer): number {
  const prefixBytes = key.indexOf(0) + 1;
  const chunk = new Chunk(key, prefixBytes, value);
  let damaged = 0;
  for (let seq = chunk.start; seq < chunk.end; seq++) {
    try {
      chunk.entry(seq, false);
    } catch (err) {
      if (!(err instanceof CorruptValueError)) throw err;
      damaged++;
    }
  }
  return damaged;
}

/** Walks `env` (opened read-only by the caller). Never throws for damage: it is reported. */
export function walkStore(env: RootDatabase, mode: 'quick' | 'full'): VerifyReport {
  const report: VerifyReport = { records: 0, damaged: [], errors: [] };
  const owners = new Map<string, DamagedOwner>();
  const note = (what: string, owner: string, seqs: boolean, key: Buffer, n: number): void => {
    const id = `${what}\u0000${owner}`;
    let d = owners.get(id);
    if (d === undefined) {
      owners.set(id, (d = { what, owner, records: 0 }));
      report.damaged.push(d);
    }
    d.records += n;
    if (seqs && key.length >= owner.length + 9) {
      const seq = what === 'outbox' ? chunkStart(key, key.indexOf(0) + 1) : keySeq(key);
      const end = what === 'outbox' ? seq + chunkCount(key, key.indexOf(0) + 1) - 1 : seq;
      d.seqFrom = Math.min(d.seqFrom ?? seq, seq);
      d.seqTo = Math.max(d.seqTo ?? end, end);
    }
  };
  for (const [name, spec] of Object.entries(DATABASES)) {
    let db: Database<Buffer, Buffer>;
    try {
      db = env.openDB<Buffer, Buffer>(name, { encoding: 'binary', keyEncoding: 'binary', create: false } as never);
    } catch (err) {
      if (/not ?found/i.test(String(err))) continue; // an older store without this database
      report.errors.push(`${name}: ${(err as Error).message}`);
      continue;
    }
    try {
      if (mode === 'quick' || spec.decode === undefined) {
        for (const key of db.getKeys({ snapshot: false })) {
          void key;
          report.records++;
        }
      } else {
        for (const { key, value } of db.getRange({ snapshot: false })) {
          report.records++;
          const k = typeof key === 'string' ? Buffer.from(key) : key;
          let damaged: number;
          try {
            damaged = spec.decode(k, value);
          } catch (err) {
            if (!(err instanceof CorruptValueError)) throw err;
            damaged = 1;
          }
          if (damaged > 0) note(spec.what, name === 'meta' ? String(key) : keyOwner(k), spec.seqs, k, damaged);
        }
      }
    } catch (err) {
      report.errors.push(`${name}: ${(err as Error).message}`);
    }
  }
  return report;
}

/**
 * Runs the walk in a child process and returns what is damaged, as lines for an operator; empty when the store
 * is intact. A child that dies (an LMDB assertion, a crash) means a damaged structure.
 */
export function verifyInChild(dir: string, mode: 'quick' | 'full'): string[] {
  const child = fileURLToPath(new URL('./verify-child.js', import.meta.url));
  const result = spawnSync(process.execPath, [child, dir, mode], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (result.error !== undefined) return [`the integrity check could not run (${result.error.message})`];
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
    const range = d.seqFrom === undefined ? '' : ` (seq ${d.seqFrom}${d.seqTo === d.seqFrom ? '' : `-${String(d.seqTo)}`})`;
    lines.push(`${d.what} "${d.owner}": ${d.records} damaged record${d.records === 1 ? '' : 's'}${range}`);
  }
  return lines;
}
