/**
 * Checksums on stored values: a damaged value found while running is skipped, counted, logged once
 * with where it is, deleted, and never delivered; values written before checksums still read.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { removeDir, tempDir as makeTempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';
import { createMessage, type Message } from '../../src/protocol/message.js';
import { openLmdbStore } from '../../src/store/lmdb/open.js';
import {
  CorruptValueError,
  decodePlainValue,
  decodeQueuedValue,
  encodePlainValue,
  encodeStampedValue,
  decodeStampedValue,
} from '../../src/store/codec.js';
import { SteadyClock } from '../../src/util/clock.js';
import type { LmdbStore } from '../../src/store/lmdb/store.js';
import type { OutboxLimits, Store } from '../../src/store/types.js';
import { silentLogger, type Logger } from '../../src/util/logger.js';
import type { StoreError } from '../../src/util/errors.js';
import { recordingLogger, type LoggedError } from '../helpers/logger.js';

const UNLIMITED: OutboxLimits = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'drop-oldest' };
const dirs: string[] = [];
const open: Store[] = [];

afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
  for (const d of dirs.splice(0)) removeDir(d);
});

function tempDir(): string {
  const d = makeTempDir('edgeferry-crc-');
  dirs.push(d);
  return d;
}

async function openStore(dir: string, log: Logger): Promise<LmdbStore> {
  const s = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log });
  open.push(s);
  return s as unknown as LmdbStore;
}

async function closeStore(s: Store): Promise<void> {
  open.splice(open.indexOf(s), 1);
  await s.close();
}

const msg = (n: number): Message =>
  createMessage({ topic: `plant/${n}`, payload: Buffer.alloc(100, n), qos: 1, origin: 'c' });

/** Flips one payload byte of the value under `key`, as a damaged page would. */
function damage(db: LmdbStore['queueDb'], key: Buffer, at = 40): void {
  const value = Buffer.from(db.get(key)!);
  value[at] ^= 0xff;
  db.putSync(key, value);
}

describe('stored value checksums', () => {
  it('detects a flipped byte anywhere in a value, and reads values from before checksums', () => {
    const clock = new SteadyClock();
    const sealed = encodePlainValue(msg(1), clock);
    for (let i = 0; i < sealed.length; i++) {
      const bad = Buffer.from(sealed);
      bad[i] ^= 0x01;
      // Flipping the flag bit of the format byte makes it a value from before checksums; its layout then fails.
      expect(() => decodePlainValue(bad, clock), `byte ${i}`).toThrow(CorruptValueError);
    }
    expect(decodePlainValue(sealed, clock).payload).toEqual(msg(1).payload);
    // A value as edgeferry wrote it before checksums: format byte 1, the message, nothing after.
    const legacy = Buffer.from(sealed.subarray(0, sealed.length - 4));
    legacy[0] = 1;
    expect(decodePlainValue(legacy, clock).topic).toBe('plant/1');
    expect(decodeQueuedValue(legacy, clock).msg.payload).toEqual(msg(1).payload);
    const stamped = encodeStampedValue(msg(2), 1234, clock);
    expect(decodeStampedValue(stamped, clock).stampMs).toBe(1234);
  });

  it('skips, counts, logs and deletes damaged session-queue, retained and outbox records, delivering the rest', async () => {
    const dir = tempDir();
    const errors: LoggedError[] = [];
    let store = await openStore(dir, recordingLogger(errors));
    const seqs: number[] = [];
    for (let i = 0; i < 5; i++) seqs.push(await store.sessions.enqueue('historian', msg(i)));
    await store.retained.set({ ...msg(7), retain: true });
    await store.retained.set({
      ...createMessage({ topic: 'plant/8', payload: Buffer.alloc(50, 8), qos: 1, origin: 'c' }),
      retain: true,
    });
    const box = store.outbox('central', UNLIMITED);
    await Promise.all([0, 1, 2, 3].map((i) => box.append(msg(10 + i)))); // one chunk of four
    const queueKey = [...store.queueDb.getKeys({ snapshot: false })][2];
    damage(store.queueDb, queueKey);
    damage(store.retainedDb, Buffer.from('plant/7'));
    const chunkKey = [...store.outboxDb.getKeys({ snapshot: false })][0];
    const chunk = Buffer.from(store.outboxDb.get(chunkKey)!);
    // The second entry of the chunk: past the header (5 bytes + 4 offsets) and the first entry.
    chunk[5 + 16 + chunk.readUInt32BE(5) + 30] ^= 0xff;
    store.outboxDb.putSync(chunkKey, chunk);
    await closeStore(store);

    store = await openStore(dir, recordingLogger(errors));
    const [session] = [...store.sessions.loadAll()];
    expect(session.queue.map((q) => q.seq)).toEqual([seqs[0], seqs[1], seqs[3], seqs[4]]);
    expect([...store.retained.loadIndex()].map((m) => m.topic)).toEqual(['plant/8']);
    expect(store.retained.count).toBe(1);
    const reopened = store.outbox('central', UNLIMITED);
    expect(reopened.peek(10).map((e) => e.msg.topic)).toEqual(['plant/10', 'plant/12', 'plant/13']);
    expect(store.corruptRecords).toBe(3);
    expect(errors.map((e) => e.obj.what)).toEqual(['queued messages', 'retained messages', 'outbox entries']);
    expect(errors[0].obj).toMatchObject({ clientIds: ['historian'], seqFrom: seqs[2], seqTo: seqs[2], records: 1 });
    expect(errors[2].obj).toMatchObject({ outbox: 'central', records: 1 });
    // The outbox removal starts after its short delay: until the count says so, then until it is committed.
    await waitFor(() => reopened.depth.messages === 3, 5000, { message: 'the damaged outbox entry removed' });
    await store.flushed();
    await closeStore(store);

    // Deleted: a second start meets none of them again.
    store = await openStore(dir, recordingLogger(errors));
    expect([...store.sessions.loadAll()][0].queue).toHaveLength(4);
    expect(store.outbox('central', UNLIMITED).peek(10)).toHaveLength(3);
    expect(store.outbox('central', UNLIMITED).depth.messages).toBe(3);
    expect(store.corruptRecords).toBe(0);
  });

  it('reads session records from before checksums, and keeps a session whose record is damaged, never expiring', async () => {
    const dir = tempDir();
    const errors: LoggedError[] = [];
    let store = await openStore(dir, recordingLogger(errors));
    await store.sessions.putSession('old', { expiryIntervalS: 60 });
    await store.sessions.putSession('hit', { expiryIntervalS: 60 });
    await store.sessions.enqueue('hit', msg(1));
    store.sessionDb.putSync(Buffer.from('old'), Buffer.from('{"expiryIntervalS":60}')); // as written before checksums
    damage(store.sessionDb, Buffer.from('hit'), 5);
    await closeStore(store);
    store = await openStore(dir, recordingLogger(errors));
    const byId = new Map([...store.sessions.loadAll()].map((r) => [r.clientId, r]));
    expect(byId.get('old')?.expiryIntervalS).toBe(60);
    expect(byId.get('hit')?.expiryIntervalS).toBe(0xffffffff);
    expect(byId.get('hit')?.queue).toHaveLength(1);
    expect(errors[0].obj).toMatchObject({ what: 'session records', clientIds: ['hit'], records: 1 });
    await store.flushed();
    await closeStore(store);
    // Not deleted: the next start still keeps the session and its queue.
    store = await openStore(dir, recordingLogger(errors));
    const hit = [...store.sessions.loadAll()].find((r) => r.clientId === 'hit');
    expect(hit?.expiryIntervalS).toBe(0xffffffff);
    expect(hit?.queue).toHaveLength(1);
  });

  it('skips a damaged record read back from a spilled queue and reports how many it skipped', async () => {
    const dir = tempDir();
    const errors: LoggedError[] = [];
    const store = await openStore(dir, recordingLogger(errors));
    const seqs: number[] = [];
    for (let i = 0; i < 6; i++) seqs.push(await store.sessions.enqueue('historian', msg(i)));
    damage(store.queueDb, [...store.queueDb.getKeys({ snapshot: false })][5]);
    const read = store.sessions.readQueue('historian', seqs[1], { messages: 10, bytes: Infinity });
    expect(read.records.map((r) => r.seq)).toEqual([seqs[2], seqs[3], seqs[4]]);
    expect(read.skipped).toBe(1);
    expect(read.lastSeq).toBe(seqs[5]);
    expect(store.corruptRecords).toBe(1);
  });

  it("checksums the store's counters, reads those written before checksums, and refuses to open on a damaged one", async () => {
    const dir = tempDir();
    const errors: LoggedError[] = [];
    let store = await openStore(dir, recordingLogger(errors));
    await store.outbox('central', UNLIMITED).append(msg(1));
    await store.sessions.enqueue('historian', msg(2));
    for (const key of ['sessionSeq', 'outbox:central', 'clock']) {
      const value = store.meta.get(key)!;
      expect(value[0] & 0x80, key).toBe(0x80); // sealed: format byte with its flag, CRC-32 at the end
    }
    expect(store.meta.get('schema')!.toString()).toMatch(/^\{"version":3,/); // plain JSON, readable by every release
    // Counters as written before checksums: plain JSON.
    store.meta.putSync('sessionSeq', Buffer.from('41'));
    store.meta.putSync(
      'outbox:central',
      Buffer.from(
        '{"lastSeq":9,"messages":1,"bytes":146,"dropped":{"queue_full":2,"expired":0,"rejected_upstream":0},"floor":1,"slot":0}',
      ),
    );
    await closeStore(store);
    store = await openStore(dir, recordingLogger(errors));
    expect(await store.sessions.enqueue('historian', msg(3))).toBe(42);
    const box = store.outbox('central', UNLIMITED);
    expect(box.depth.dropped.queue_full).toBe(2);
    await box.append(msg(4));
    expect(box.peek(10).map((e) => e.seq)).toEqual([1, 10]);

    // One bit of a counter flipped: the store is damaged, named, whatever verifyOnStart says.
    const value = Buffer.from(store.meta.get('outbox:central')!);
    value[5] ^= 0x01;
    store.meta.putSync('outbox:central', value);
    await closeStore(store);
    const err = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger, verify: 'off' }).then(
      () => undefined,
      (e: unknown) => e as StoreError,
    );
    expect(err?.code).toBe('EF_STORE_OPEN');
    expect(err?.message).toContain(`the data directory ${dir} is damaged`);
    expect(err?.message).toContain('store metadata "outbox:central": 1 damaged record');
    expect(err?.message).toContain('edgeferry store salvage');
    expect(errors).toEqual([]);
  });
});
