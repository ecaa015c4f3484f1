/**
 * `edgeferry store salvage`: the way out of a damaged data directory that keeps what can be kept. Every record that
 * still reads and checks out is copied into a new data directory (in a child process, salvage-child.ts, as LMDB
 * may abort on a damaged page), the counters are rebuilt from what was copied, the damaged directory is moved
 * aside (`<path>.damaged-<time>`, kept for analysis) and the new one takes its place. What was lost is reported
 * by outbox and session with seq ranges.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { open } from 'lmdb';
import { decodeJsonValue, encodeJsonValue, encodeSchemaValue, keySeq } from '../codec.js';
import { chunkCount, chunkStart } from './outbox-chunk.js';
import { JOURNAL_META_KEY, type JournalMeta } from './journal.js';
import { OUTBOX_META_END, OUTBOX_META_PREFIX, type OutboxMeta } from './outbox.js';
import { DATABASES, describeDamage, verifyInChild, type DamagedOwner } from './verify.js';
import { StoreError } from '../../util/errors.js';

export interface SalvageResult {
  /** Where the damaged directory was moved. */
  readonly damagedDir: string;
  readonly copied: number;
  /** One line per outbox, session or database that lost records. */
  readonly lost: string[];
}

/** Child runs before a database that keeps killing the child is given up. */
const MAX_RUNS = 24;

/** Salvages the store in `dir`, which no process may have open (the caller holds its lock). */
export async function salvageStore(dir: string, schemaVersion: number): Promise<SalvageResult> {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const fresh = `${dir}.salvage-${stamp}`;
  const plan: Record<string, 'both' | 'forward' | 'reverse' | 'skip'> = {};
  const lost: DamagedOwner[] = [];
  const problems: string[] = [];
  /** Records of each database of the damaged store, by LMDB's count. */
  const entries = new Map<string, number>();
  const child = fileURLToPath(new URL('./salvage-child.js', import.meta.url));
  let diedOutsideWalks = 0;
  for (let run = 0; run < MAX_RUNS; run++) {
    const result = spawnSync(process.execPath, [child, dir, fresh, JSON.stringify(plan)], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
    });
    let current: { walk: string; reverse: boolean } | undefined;
    for (const line of result.stdout.split('\n')) {
      if (line === '') continue;
      const event = JSON.parse(line) as {
        entries?: string;
        count?: number;
        walk?: string;
        reverse?: boolean;
        done?: string;
        lost?: DamagedOwner[];
        gap?: string;
      };
      if (event.entries !== undefined) entries.set(event.entries, event.count ?? 0);
      if (event.walk !== undefined) current = { walk: event.walk, reverse: event.reverse === true };
      if (event.done !== undefined) {
        current = undefined;
        plan[event.done] = 'skip';
        lost.push(...(event.lost ?? []));
        if (event.gap !== undefined) problems.push(event.gap);
      }
    }
    if (result.status === 0) break;
    // Every database was copied, and the child died after that (LMDB closing the damaged environment): the copy is
    // complete, as every batch of it was committed.
    if (Object.keys(DATABASES).every((db) => plan[db] === 'skip')) break;
    if (current === undefined) {
      // It died outside every walk: opening or closing the damaged environment, which is not always fatal twice.
      if (++diedOutsideWalks < 3) continue;
      throw new StoreError(
        'EF_STORE_OPEN',
        `salvage of ${dir} failed: ${result.error?.message ?? result.stderr.trim()}`,
      );
    }
    // The child died walking `current` (LMDB aborted on a damaged page); what it copied before is in `fresh`.
    // Forwards: walk it backwards next; backwards: give it up.
    const how = result.signal ?? `exit ${String(result.status)}`;
    const db = current.walk;
    plan[db] = current.reverse || plan[db] === 'reverse' ? 'skip' : 'reverse';
    if (plan[db] === 'skip')
      problems.push(`database ${db}: LMDB aborted (${how}) reading a damaged page; the records beyond it are lost`);
  }
  const copiedByDb = await rebuildCounters(fresh, schemaVersion);
  let copied = 0;
  for (const [db, n] of copiedByDb) {
    copied += n;
    // Whatever the walks met or not: the records of the damaged store that are not in the new one.
    const missing = (entries.get(db) ?? 0) - n;
    if (missing > 0)
      problems.unshift(`${DATABASES[db].what} (all of them): ${missing} of ${entries.get(db) ?? 0} records lost`);
  }
  const check = verifyInChild(fresh, 'full');
  if (check.length > 0) {
    throw new StoreError(
      'EF_STORE_OPEN',
      `salvage of ${dir}: the new store ${fresh} does not verify (${check.join('; ')}); nothing was moved`,
    );
  }
  const damagedDir = `${dir}.damaged-${stamp}`;
  fs.renameSync(dir, damagedDir);
  fs.renameSync(fresh, dir);
  // The lock file travelled with the damaged directory; the new one has none (released by the caller's own).
  return { damagedDir, copied, lost: [...problems, ...describeDamage({ records: copied, damaged: lost, errors: [] })] };
}

/**
 * The counters of the copied store, from what it holds: the schema, the session queue's last seq and, for each
 * outbox, its live entries (the messages and bytes are counted again at its next open). Returns the records copied
 * by database.
 */
async function rebuildCounters(dir: string, schemaVersion: number): Promise<Map<string, number>> {
  const env = open({ path: dir, noSubdir: false, maxDbs: 12 });
  const meta = env.openDB<Buffer, string>('meta', { encoding: 'binary' });
  // The copy holds only records whose checksum held.
  const read = <T>(key: string): T | undefined => {
    const value = meta.get(key);
    return value === undefined ? undefined : decodeJsonValue<T>(value);
  };
  const write = (key: string, value: unknown): void => void meta.put(key, encodeJsonValue(value));
  const queue = env.openDB<Buffer, Buffer>('session-queue', { encoding: 'binary', keyEncoding: 'binary' });
  const outbox = env.openDB<Buffer, Buffer>('outbox', { encoding: 'binary', keyEncoding: 'binary' });
  env.transactionSync(() => {
    if (meta.get('schema') === undefined) void meta.put('schema', encodeSchemaValue(schemaVersion));
    let lastSeq = read<number>('sessionSeq') ?? 0;
    for (const key of queue.getKeys({ snapshot: false })) lastSeq = Math.max(lastSeq, keySeq(key));
    write('sessionSeq', lastSeq);
    const outboxLast = new Map<string, number>();
    for (const key of outbox.getKeys({ snapshot: false })) {
      const prefixBytes = key.indexOf(0) + 1;
      const name = key.toString('utf8', 0, prefixBytes - 1);
      outboxLast.set(
        name,
        Math.max(outboxLast.get(name) ?? 0, chunkStart(key, prefixBytes) + chunkCount(key, prefixBytes) - 1),
      );
    }
    for (const key of meta.getKeys({ start: OUTBOX_META_PREFIX, end: OUTBOX_META_END, snapshot: false })) {
      const name = String(key).slice(OUTBOX_META_PREFIX.length);
      const old = read<OutboxMeta>(String(key))!;
      // Without messages and bytes the outbox counts them from its entries when it opens.
      const { messages: _m, bytes: _b, ...kept } = old;
      write(String(key), { ...kept, lastSeq: Math.max(old.lastSeq, outboxLast.get(name) ?? 0) });
      outboxLast.delete(name);
    }
    // The journal's chunks (under the empty name): its last seq, so that no seq is used twice. An outbox whose own
    // record was left behind is found in the journal's record of slots and counts its entries again from floor 0
    // (acknowledged ones of a chunk still kept go once more). Either record rebuilds the other.
    const journal = read<JournalMeta>(JOURNAL_META_KEY);
    const journalLast = Math.max(journal?.lastSeq ?? 0, outboxLast.get('') ?? 0);
    outboxLast.delete('');
    const cursors: Record<string, number> = { ...journal?.cursors };
    for (const key of meta.getKeys({ start: OUTBOX_META_PREFIX, end: OUTBOX_META_END, snapshot: false })) {
      const slot = read<OutboxMeta>(String(key))!.slot;
      if (slot !== undefined) cursors[String(key).slice(OUTBOX_META_PREFIX.length)] = slot;
    }
    for (const [name, slot] of Object.entries(cursors)) {
      if (meta.get(OUTBOX_META_PREFIX + name) !== undefined) continue;
      write(OUTBOX_META_PREFIX + name, {
        lastSeq: journalLast,
        floor: 0,
        slot,
        dropped: { queue_full: 0, expired: 0, rejected_upstream: 0 },
      });
    }
    if (journalLast > 0 || Object.keys(cursors).length > 0) write(JOURNAL_META_KEY, { lastSeq: journalLast, cursors });
    for (const [name, lastSeq] of outboxLast) {
      write(OUTBOX_META_PREFIX + name, { lastSeq, dropped: { queue_full: 0, expired: 0, rejected_upstream: 0 } });
    }
  });
  const records = new Map<string, number>();
  for (const name of Object.keys(DATABASES)) {
    const db = env.openDB<Buffer, Buffer>(name, { encoding: 'binary', keyEncoding: 'binary' });
    records.set(name, (db.getStats() as { entryCount: number }).entryCount);
  }
  await env.close();
  return records;
}
