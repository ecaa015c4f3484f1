/**
 * The child process of `salvageStore` (salvage.ts): copies every record of the damaged store in <src> that
 * still reads and checks out into the new store in <dest>, one database at a time. It prints a JSON line when it
 * starts a database and one when it is done with it (what was copied and lost), so that the parent knows where it
 * was if LMDB aborts on a damaged page. A database whose walk fails half-way is walked again from its end
 * backwards, which recovers what lies after the damage. When the damage is in one database alone, that database
 * is read from its leaf pages in the file instead (pages.ts `pageRecords`), which also finds what a damaged branch
 * page cut off.
 * Usage: node salvage-child.js <src> <dest> <plan JSON: { [db]: 'both' | 'forward' | 'reverse' | 'skip' }>
 * (salvage.ts narrows a database's plan when a walk of it killed the child: the other direction only, then none).
 */
import fs from 'node:fs';
import path from 'node:path';
import { open, type Database } from 'lmdb';
import { CorruptValueError, keyOwner, keySeq, MARK, seqKey } from '../codec.js';
import { DamageTally, DATABASES, damagedChunkEntries, outboxRemovedEntries } from './verify.js';
import { chunkCount, chunkStart } from './outbox-chunk.js';
import { pageRecords } from './pages.js';

const [src, dest, planJson] = process.argv.slice(2);
// Read from the file before LMDB opens it; pure JavaScript, it cannot crash on the damage.
const fromPages = pageRecords(path.join(src, 'data.mdb'));
const plan = JSON.parse(planJson) as Record<string, 'both' | 'forward' | 'reverse' | 'skip'>;
const from = open({ path: src, readOnly: true, noSubdir: false, maxDbs: 12 });
fs.mkdirSync(dest, { recursive: true });
const to = open({ path: dest, noSubdir: false, maxDbs: 12 });
/** Records written per transaction of the new store: what a crash of this child loses of its copy. */
const BATCH = 100;

/** Removal marks for the damaged entries of kept outbox chunks. */
const removedMarks: { key: Buffer; value: Buffer }[] = [];

const say = (line: object): void => {
  process.stdout.write(`${JSON.stringify(line)}\n`);
};

for (const [name, spec] of Object.entries(DATABASES)) {
  const direction = plan[name] ?? 'both';
  if (direction === 'skip') continue;
  // Said first: whatever kills this child from here on is put down to this database (see salvage.ts).
  say({ walk: name, reverse: direction === 'reverse' });
  let source: Database<Buffer, Buffer> | undefined;
  try {
    source = from.openDB<Buffer, Buffer>(name, {
      encoding: 'binary',
      keyEncoding: 'binary',
      create: false,
    } as never) as Database<Buffer, Buffer> | undefined; // undefined: no such database
  } catch (err) {
    say({
      done: name,
      lost: [],
      gap: `${spec.what}: the database cannot be opened, all of it is lost (${(err as Error).message})`,
    });
    continue;
  }
  if (source === undefined) {
    say({ done: name, lost: [] }); // not in this store
    continue;
  }
  const target = to.openDB<Buffer, Buffer>(name, { encoding: 'binary', keyEncoding: 'binary' });
  // LMDB's own count of the database's records (kept in its root record): what the copy is measured against.
  say({ entries: name, count: (source.getStats() as { entryCount: number }).entryCount });
  // Which outbox entries are acknowledged already (damage to them loses nothing); read only for the outbox.
  const gone = name === 'outbox' ? outboxRemovedEntries(from) : () => false;
  const lost = new DamageTally();
  let pending: { key: Buffer; value: Buffer }[] = [];
  const flush = (): void => {
    const batch = pending;
    pending = [];
    to.transactionSync(() => {
      for (const { key, value } of batch) void target.put(key, value);
    });
  };
  /** Copies one record if it checks out; what does not is tallied as lost. */
  const keep = (k: Buffer, value: Buffer): void => {
    let damaged: number;
    try {
      if (name !== 'outbox') damaged = spec.decode?.(k, value) ?? 0;
      else {
        // A chunk with some entries damaged is kept, those entries marked removed (as if acknowledged).
        const seqs = damagedChunkEntries(k, value, gone);
        damaged = seqs.length;
        if (damaged === chunkCount(k, k.indexOf(0) + 1)) throw new CorruptValueError('every entry damaged');
        for (const seq of seqs) removedMarks.push({ key: seqKey(k.subarray(0, k.indexOf(0) + 1), seq), value: MARK });
      }
    } catch (err) {
      if (!(err instanceof CorruptValueError)) throw err;
      lost.note(name, k, name === 'outbox' ? chunkCount(k, k.indexOf(0) + 1) : 1);
      return;
    }
    if (damaged > 0) lost.note(name, k, damaged);
    pending.push({ key: k, value: Buffer.from(value) });
    if (pending.length >= BATCH) flush();
  };
  const walk = (reverse: boolean, stopAt?: Buffer): { error?: string; last?: Buffer } => {
    let last: Buffer | undefined;
    try {
      for (const { key, value } of source.getRange({ reverse, snapshot: false })) {
        const k = Buffer.from(key);
        if (stopAt !== undefined && (reverse ? Buffer.compare(k, stopAt) <= 0 : Buffer.compare(k, stopAt) >= 0)) break;
        last = k;
        keep(k, value);
      }
      return { last };
    } catch (err) {
      return { error: (err as Error).message, last };
    } finally {
      flush();
    }
  };
  let forward: { error?: string; last?: Buffer } = {};
  let backward: { error?: string; last?: Buffer } = {};
  if (fromPages?.db === name) {
    // The one damaged database, read from its leaf pages in the file (pages.ts) rather than through LMDB: also the
    // leaves a damaged branch page cut off, and no LMDB abort on the damage. What is still missing is what the
    // counts say (salvage.ts).
    for (const { key, value } of fromPages.records) keep(key, value);
    flush();
  } else if (direction === 'both' || direction === 'forward') {
    say({ walk: name, reverse: false });
    forward = walk(false);
  }
  // Backwards too, down to where the forward walk got: on a damaged page a walk may also end early without an
  // error (seen: half a queue, then nothing).
  if (fromPages?.db !== name && (direction === 'both' || direction === 'reverse')) {
    say({ walk: name, reverse: true });
    backward = walk(true, forward.last);
  }
  const error = forward.error ?? backward.error;
  const gap = error === undefined ? undefined : `${describeGap(spec, forward.last, backward.last)} (${error})`;
  if (removedMarks.length > 0) {
    const marks = to.openDB<Buffer, Buffer>('outbox-removed', { encoding: 'binary', keyEncoding: 'binary' });
    to.transactionSync(() => {
      for (const { key, value } of removedMarks) void marks.put(key, value);
    });
    removedMarks.length = 0;
  }
  say({ done: name, lost: lost.owners, gap });
}
await to.close();
await from.close();

/** Where the unreadable part of a database lies: between the last key read forwards and the last read backwards. */
function describeGap(spec: (typeof DATABASES)[string], after: Buffer | undefined, before: Buffer | undefined): string {
  const owner = (key: Buffer | undefined): string | undefined => (key === undefined ? undefined : keyOwner(key));
  const seq = (key: Buffer): number => (spec.what === 'outbox' ? chunkStart(key, key.indexOf(0) + 1) : keySeq(key));
  if (!spec.seqs || after === undefined || before === undefined || owner(after) !== owner(before)) {
    const from = after === undefined ? 'its start' : `"${owner(after) ?? ''}"`;
    const to = before === undefined ? 'its end' : `"${owner(before) ?? ''}"`;
    return `${spec.what}: the records from ${from} to ${to} are unreadable and lost`;
  }
  return `${spec.what} "${owner(after) ?? ''}": the records after seq ${seq(after)} and before seq ${seq(before)} are unreadable and lost`;
}
