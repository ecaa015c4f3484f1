/**
 * LMDB store behaviour beyond the shared contract: persistence across reopen, group commit (with the
 * throughput figure logged), storage.maxBytes, and refusing directories it must not open.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { removeDir, tempDir as makeTempDir } from '../helpers/temp.js';
import { createMessage, type Message } from '../../src/protocol/message.js';
import { openLmdbStore, SCHEMA_VERSION, type LmdbStoreOptions } from '../../src/store/lmdb/open.js';
import { encodeStampedValue, ownerPrefix, prefixEnd, seqKey } from '../../src/store/codec.js';
import { JOURNAL_PREFIX } from '../../src/store/lmdb/journal.js';
import { writeFormat1Outbox } from '../helpers/format1-outbox.js';
import { outboxMetaKey, type OutboxMeta } from '../../src/store/lmdb/outbox.js';
import type { LmdbStore } from '../../src/store/lmdb/store.js';
import type { OutboxLimits, Store } from '../../src/store/types.js';
import { StoreError } from '../../src/util/errors.js';
import { SteadyClock } from '../../src/util/clock.js';
import { silentLogger, type Logger } from '../../src/util/logger.js';

const UNLIMITED: OutboxLimits = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'drop-oldest' };
const dirs: string[] = [];
const open: Store[] = [];

afterEach(async () => {
  for (const s of open.splice(0)) await s.close();
  for (const d of dirs.splice(0)) removeDir(d);
});

function tempDir(): string {
  const d = makeTempDir('edgeferry-lmdb-');
  dirs.push(d);
  return d;
}

async function openStore(dir: string, opts: Partial<LmdbStoreOptions> = {}): Promise<Store> {
  const s = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger, ...opts });
  open.push(s);
  return s;
}

async function closeStore(s: Store): Promise<void> {
  open.splice(open.indexOf(s), 1);
  await s.close();
}

async function openError(p: Promise<Store>): Promise<StoreError> {
  const err = await p.then(
    (s) => s.close().then(() => undefined),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreError);
  expect((err as StoreError).code).toBe('EF_STORE_OPEN');
  return err as StoreError;
}

function small(n: number, bytes = 64): Message {
  return createMessage({
    topic: 'spBv1.0/plant1/DDATA/gw/dev',
    payload: Buffer.alloc(bytes, n & 0xff),
    qos: 1,
    origin: 'c',
  });
}

describe('LMDB store', () => {
  it('keeps outbox content, counters and dropped counts across a reopen, and seqs keep increasing', async () => {
    const dir = tempDir();
    let store = await openStore(dir);
    let box = store.outbox('central', { ...UNLIMITED, maxMessages: 5 });
    await Promise.all(Array.from({ length: 8 }, (_, i) => box.append(small(i))));
    void box.countDropped('rejected_upstream', 4);
    const before = box.peek(100);
    await box.remove([before[0].seq]);
    const depth = box.depth;
    expect(depth.messages).toBe(4);
    expect(depth.dropped).toEqual({ queue_full: 3, expired: 0, rejected_upstream: 4, dead_letter_deleted: 0 });
    // An outbox emptied completely must not reuse its seqs either.
    const other = store.outbox('emptied', UNLIMITED);
    await other.append(small(1));
    const otherSeq = other.peek(1)[0].seq;
    await other.remove([otherSeq]);
    await closeStore(store);

    store = await openStore(dir);
    box = store.outbox('central', { ...UNLIMITED, maxMessages: 5 });
    expect(box.depth).toEqual(depth);
    const after = box.peek(100);
    expect(after.map((e) => [e.seq, e.appendedAtMs, e.bytes, e.msg.payload[0]])).toEqual(
      before.slice(1).map((e) => [e.seq, e.appendedAtMs, e.bytes, e.msg.payload[0]]),
    );
    await box.append(small(99));
    expect(box.peek(100).at(-1)!.seq).toBeGreaterThan(before.at(-1)!.seq);
    const reopenedOther = store.outbox('emptied', UNLIMITED);
    await reopenedOther.append(small(2));
    expect(reopenedOther.peek(1)[0].seq).toBeGreaterThan(otherSeq);
  });

  it('stores an outbox in chunks: removals out of order survive a reopen, and a chunk goes once all of it is removed', async () => {
    const dir = tempDir();
    let store = await openStore(dir);
    let box = store.outbox('central', UNLIMITED);
    await Promise.all(Array.from({ length: 300 }, (_, i) => box.append(small(i)))); // one batch: chunks of 128, 128, 44
    const seqs = box.peek(300).map((e) => e.seq);
    await box.remove([seqs[5], seqs[150], seqs[299]]);
    await closeStore(store);

    store = await openStore(dir);
    box = store.outbox('central', UNLIMITED);
    const left = seqs.filter((_, i) => i !== 5 && i !== 150 && i !== 299);
    expect(box.peek(300).map((e) => e.seq)).toEqual(left);
    expect(box.depth.messages).toBe(297);
    await box.remove(seqs.slice(0, 200));
    await closeStore(store);

    store = await openStore(dir);
    box = store.outbox('central', UNLIMITED);
    expect(box.peek(300).map((e) => e.seq)).toEqual(left.filter((seq) => seq > seqs[199]));
    expect(box.depth.messages).toBe(99);
    // The first chunk is gone, the second still holds live entries; one mark is left (the last entry).
    const impl = store as unknown as LmdbStore;
    const prefix = ownerPrefix('central');
    const journalChunks = (): number =>
      [...impl.outboxDb.getKeys({ start: JOURNAL_PREFIX, end: prefixEnd(JOURNAL_PREFIX), snapshot: false })].length;
    expect(journalChunks()).toBe(2);
    expect([...impl.outboxRemovedDb.getKeys({ start: prefix, snapshot: false })].length).toBe(1);
    await box.remove(seqs.slice(200, 299));
    expect([box.depth.messages, box.peek(10)]).toEqual([0, []]);
    expect(journalChunks()).toBe(0);
    expect([...impl.outboxRemovedDb.getKeys({ start: prefix, snapshot: false })].length).toBe(0);
  });

  it("shares a journal entry only between the bridges' copies of one message, never between two messages of equal content", async () => {
    const store = await openStore(tempDir());
    const a = store.outbox('a', UNLIMITED);
    const b = store.outbox('b', UNLIMITED);
    // Two publishes with equal content, then one routed to `a` twice (two out rules): four entries, not one.
    const first = createMessage({ topic: 't', payload: Buffer.from('same'), qos: 1, origin: 'c' });
    const second = createMessage({ topic: 't', payload: Buffer.from('same'), qos: 1, origin: 'c' });
    const third = createMessage({ topic: 'u', payload: Buffer.from('x'), qos: 1, origin: 'c' });
    await Promise.all([
      a.append(first),
      b.append(first),
      a.append(second),
      b.append(second),
      a.append(third),
      a.append(third),
    ]);
    expect(store.journalDepth?.().entries).toBe(4);
    expect(a.peek(10).map((e) => [e.msg.topic, e.msg.payload.toString()])).toEqual([
      ['t', 'same'],
      ['t', 'same'],
      ['u', 'x'],
      ['u', 'x'],
    ]);
    expect(b.peek(10).map((e) => [e.msg.topic, e.msg.payload.toString()])).toEqual([
      ['t', 'same'],
      ['t', 'same'],
    ]);
    // The chunk goes when the last cursor holding any of its entries has passed them.
    await a.remove(a.peek(10).map((e) => e.seq));
    expect([a.depth.messages, store.journalDepth?.().entries]).toEqual([0, 4]);
    await b.remove(b.peek(10).map((e) => e.seq));
    expect([b.depth.messages, store.journalDepth?.().entries]).toEqual([0, 0]);
  });

  it('moves an outbox written before chunks (one entry per key, gaps where entries were removed) to the journal', async () => {
    const dir = tempDir();
    let store = await openStore(dir);
    const impl = store as unknown as LmdbStore;
    const prefix = ownerPrefix('central');
    const values = [2, 4, 5].map((seq) => [seq, encodeStampedValue(small(seq), 1000 + seq, impl.clock)] as const);
    for (const [seq, value] of values) impl.outboxDb.putSync(seqKey(prefix, seq), value);
    const bytes = values.reduce((sum, [, v]) => sum + v.length, 0);
    // Without `dead_letter_deleted`, as stores of earlier versions hold it.
    const dropped = { queue_full: 0, expired: 0, rejected_upstream: 0 } as OutboxMeta['dropped'];
    const meta: OutboxMeta = { lastSeq: 5, messages: 3, bytes, dropped };
    impl.meta.putSync(outboxMetaKey('central'), Buffer.from(JSON.stringify(meta))); // plain JSON, as written then
    await closeStore(store);

    // Journal seqs follow the old outbox's last seq (5), so that old marks and new ones never share a key.
    store = await openStore(dir);
    let box = store.outbox('central', UNLIMITED);
    expect(box.peek(10).map((e) => [e.seq, e.appendedAtMs, e.msg.payload[0]])).toEqual(
      values.map(([seq], i) => [6 + i, 1000 + seq, seq]),
    );
    expect(box.depth.oldestAppendedAtMs).toBe(1002);
    expect(box.depth.dropped.dead_letter_deleted).toBe(0);
    expect([
      ...(store as unknown as LmdbStore).outboxDb.getKeys({ start: prefix, end: prefixEnd(prefix), snapshot: false }),
    ]).toEqual([]);
    await box.remove([5, 7]); // 5 is not one of its seqs: ignored
    await box.markReleased(5);
    expect(box.depth.messages).toBe(2);
    await box.append(small(6));
    await closeStore(store);

    store = await openStore(dir);
    box = store.outbox('central', UNLIMITED);
    expect(box.peek(10).map((e) => [e.seq, e.released === true])).toEqual([
      [6, false],
      [8, false],
      [9, false],
    ]);
    await box.remove([6]);
    expect(box.depth.oldestAppendedAtMs).toBe(1005);
    expect(box.depth.bytes).toBe(values[2][1].length + box.peek(10)[1].bytes);
  });

  it('moves the outboxes of store format 1 to the journal at the first open: each live entry to its outbox once, in order, marks kept', async () => {
    const dir = tempDir();
    let store = await openStore(dir);
    const impl = store as unknown as LmdbStore;
    const central = Array.from({ length: 300 }, (_, i) => small(i + 1));
    const historian = Array.from({ length: 50 }, (_, i) => small(1000 + i));
    writeFormat1Outbox(impl, {
      name: 'central',
      messages: central,
      chunkEntries: 100,
      floor: 1,
      removed: [5, 150],
      released: [7],
    });
    writeFormat1Outbox(impl, {
      name: 'historian',
      messages: historian,
      chunkEntries: 50,
      floor: 11,
      removed: [],
      released: [],
    });
    await closeStore(store);

    store = await openStore(dir);
    const box = store.outbox('central', UNLIMITED);
    const entries = box.peek(1000);
    expect(entries.map((e) => e.msg.payload[0])).toEqual(
      central.filter((_, i) => i + 1 !== 5 && i + 1 !== 150).map((m) => m.payload[0]),
    );
    expect(entries.map((e) => e.appendedAtMs)).toEqual([...entries.map((e) => e.appendedAtMs)].sort((x, y) => x - y));
    expect(entries.filter((e) => e.released).map((e) => e.msg.payload[0])).toEqual([7]);
    expect(box.depth).toMatchObject({ messages: 298, dropped: { queue_full: 3 } });
    const other = store.outbox('historian', UNLIMITED);
    expect(other.peek(1000).map((e) => e.msg.payload.readUInt8(0))).toEqual(
      historian.slice(10).map((m) => m.payload[0]),
    );
    expect(other.depth.bytes).toBe(other.peek(1000).reduce((sum, e) => sum + e.bytes, 0));
    // Nothing is left in the old layout; the schema record says format 2.
    const impl2 = store as unknown as LmdbStore;
    for (const name of ['central', 'historian']) {
      const prefix = ownerPrefix(name);
      expect([...impl2.outboxDb.getKeys({ start: prefix, end: prefixEnd(prefix), snapshot: false })]).toEqual([]);
      const marks = [...impl2.outboxRemovedDb.getKeys({ start: prefix, end: prefixEnd(prefix), snapshot: false })];
      expect(marks).toEqual([]);
    }
    expect(JSON.parse(impl2.meta.get('schema')!.toString())).toMatchObject({ version: SCHEMA_VERSION });
    // Sent and acknowledged from the journal like any entry.
    await box.remove(entries.map((e) => e.seq));
    await other.remove(other.peek(1000).map((e) => e.seq));
    expect(store.journalDepth!()).toMatchObject({ entries: 0, chunks: 0 });
  });

  it('keeps the released mark of an outbox entry (QoS 2 PUBREC) across a reopen, and deletes it with the outbox', async () => {
    const dir = tempDir();
    let store = await openStore(dir);
    let box = store.outbox('central', UNLIMITED);
    await Promise.all([1, 2, 3].map((i) => box.append(small(i))));
    const [, second] = box.peek(3);
    await box.markReleased(second.seq);
    await closeStore(store);

    store = await openStore(dir);
    box = store.outbox('central', UNLIMITED);
    expect(box.peek(3).map((e) => e.released === true)).toEqual([false, true, false]);
    const other = store.outbox('other', UNLIMITED);
    await other.append(small(9));
    await other.markReleased(other.peek(1)[0].seq);
    await closeStore(store);

    store = await openStore(dir);
    expect(await store.deleteOutbox('other')).toBe(1);
    // A new outbox of that name starts without stale marks (its seqs continue from the meta record's absence).
    const again = store.outbox('other', UNLIMITED);
    await again.append(small(10));
    expect(again.peek(1)[0].released === true).toBe(false);
    expect(
      store
        .outbox('central', UNLIMITED)
        .peek(3)
        .map((e) => e.released === true),
    ).toEqual([false, true, false]);
  });

  it('lists every outbox on disk and deletes a closed one in chunks, leaving the others alone', async () => {
    const dir = tempDir();
    let s = await openStore(dir);
    const gone = s.outbox('gone', UNLIMITED);
    const kept = s.outbox('kept', UNLIMITED);
    await Promise.all(Array.from({ length: 10_005 }, (_, i) => gone.append(small(i))));
    await Promise.all([kept.append(small(1)), kept.append(small(2))]);
    const refused = await s.deleteOutbox('gone').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(StoreError); // open in this process: its bridge would go on with it
    await closeStore(s);

    s = await openStore(dir);
    expect(s.outboxNames().sort()).toEqual(['gone', 'kept']);
    expect(await s.deleteOutbox('gone')).toBe(10_005);
    expect(await s.deleteOutbox('never-there')).toBe(0);
    expect(s.outboxNames()).toEqual(['kept']);
    expect(s.outbox('kept', UNLIMITED).depth.messages).toBe(2);
    const again = s.outbox('gone', UNLIMITED);
    expect([again.depth.messages, again.peek(10)]).toEqual([0, []]);
  });

  it('keeps retained messages and sessions across a reopen; session seqs keep increasing', async () => {
    const dir = tempDir();
    let store = await openStore(dir);
    await store.retained.set(createMessage({ topic: 'cfg/a', payload: Buffer.from('A'), retain: true, origin: 'x' }));
    await store.retained.set(createMessage({ topic: 'cfg/b', payload: Buffer.from('B'), retain: true, origin: 'x' }));
    await store.sessions.putSession('hmi', { expiryIntervalS: 0xffffffff, disconnectedAtMs: 1234 });
    await store.sessions.putSubscription('hmi', {
      filter: 'cfg/#',
      qos: 1,
      noLocal: false,
      retainAsPublished: false,
      retainHandling: 0,
    });
    const seq = await store.sessions.enqueue('hmi', small(7));
    await closeStore(store);

    store = await openStore(dir);
    expect(store.retained.count).toBe(2);
    expect(
      [...store.retained.loadIndex()]
        .map((m) => `${m.topic}=${store.retained.get(m.topic)?.payload.toString()}`)
        .sort(),
    ).toEqual(['cfg/a=A', 'cfg/b=B']);
    const [rec] = [...store.sessions.loadAll()];
    expect(rec).toMatchObject({ clientId: 'hmi', expiryIntervalS: 0xffffffff, disconnectedAtMs: 1234 });
    expect(rec.subscriptions.map((s) => s.filter)).toEqual(['cfg/#']);
    expect(rec.queue.map((q) => [q.seq, q.msg.payload[0]])).toEqual([[seq, 7]]);
    expect(await store.sessions.enqueue('hmi', small(8))).toBeGreaterThan(seq);
  });

  it("sets the base of the gateway's clock from the one it recorded, and only that clock's", async () => {
    const dir = tempDir();
    const first = new SteadyClock();
    let store = await openStore(dir, { clock: first });
    expect(store.clock).toBe(first);
    const recorded = first.record()!;
    await closeStore(store);
    // A clock made later starts at the system clock; the store puts it on the recorded timeline (same boot: exactly).
    const second = new SteadyClock();
    const bystander = new SteadyClock();
    store = await openStore(dir, { clock: second });
    expect(second.record()!.baseMs).toBe(recorded.baseMs);
    expect(bystander.record()).toBeUndefined(); // no store adopted into it: nothing to record
    await closeStore(store);
  });

  it('keeps a message expiry deadline on the wall clock, so time spent down counts', async () => {
    const dir = tempDir();
    let store = await openStore(dir);
    const m = createMessage({
      topic: 't',
      payload: Buffer.from('x'),
      origin: 'c',
      properties: { messageExpiryInterval: 60 },
    });
    await store.outbox('central', UNLIMITED).append(m);
    const remainingBefore = m.expiresAt! - performance.now();
    await closeStore(store);
    // 20 s down, on the clock the store is given (it adopts the recorded timeline, then runs 20 s ahead of it).
    class Later extends SteadyClock {
      override nowMs(): number {
        return super.nowMs() + 20_000;
      }
    }
    store = await openStore(dir, { clock: new Later() });
    const [e] = store.outbox('central', UNLIMITED).peek(1);
    const remainingAfter = e.msg.expiresAt! - performance.now();
    expect(remainingAfter).toBeLessThanOrEqual(remainingBefore - 20_000);
    expect(remainingAfter).toBeGreaterThan(remainingBefore - 25_000);
  });

  it('commits appends made in one event turn together (group commit) and logs the durable append rate', async () => {
    const dir = tempDir();
    const store = await openStore(dir);
    const box = store.outbox('central', UNLIMITED);
    // One append per commit: each waits for its own fsync.
    const singles = 20;
    let t0 = performance.now();
    for (let i = 0; i < singles; i++) await box.append(small(i));
    const singleMs = (performance.now() - t0) / singles;

    const rates: string[] = [];
    let batchedMsPerAppend = Infinity;
    for (const batch of [100, 1000]) {
      const total = 10_000;
      t0 = performance.now();
      for (let i = 0; i < total; i += batch) {
        await Promise.all(Array.from({ length: batch }, (_, j) => box.append(small(i + j))));
      }
      const ms = performance.now() - t0;
      batchedMsPerAppend = Math.min(batchedMsPerAppend, ms / total);
      rates.push(`batches of ${batch}: ${Math.round((total / ms) * 1000)}/s`);
    }
    console.log(
      `durable appends (64-byte payload, sync full, 10k per run): one per commit ${Math.round(1000 / singleMs)}/s; ${rates.join('; ')}`,
    );
    expect(box.depth.messages).toBe(singles + 20_000);
    // Without group commit every append would cost about one fsync.
    expect(batchedMsPerAppend).toBeLessThan(singleMs / 10);
  }, 120_000);

  it("resolves at commit with sync 'relaxed' and still persists", async () => {
    const dir = tempDir();
    let store = await openStore(dir, { sync: 'relaxed' });
    await Promise.all(Array.from({ length: 100 }, (_, i) => store.outbox('central', UNLIMITED).append(small(i))));
    await store.flushed();
    await closeStore(store);
    store = await openStore(dir);
    expect(store.outbox('central', UNLIMITED).depth.messages).toBe(100);
  });

  it('refuses new data with EF_STORE_FULL past storage.maxBytes, and drop-oldest outboxes make room', async () => {
    const dir = tempDir();
    const warnings: string[] = [];
    const warn = (a: object | string, b?: string): void => {
      warnings.push(typeof a === 'string' ? a : (b ?? ''));
    };
    const log: Logger = { ...silentLogger, warn: warn as Logger['warn'], child: () => log };
    const store = await openStore(dir, { maxBytes: 512 * 1024, log });
    const reject = store.outbox('reject', { ...UNLIMITED, overflow: 'reject-new' });
    let accepted = 0;
    let full: StoreError | undefined;
    for (let i = 0; i < 200 && full === undefined; i++) {
      const results = await Promise.allSettled(
        Array.from({ length: 50 }, (_, j) => reject.append(small(i * 50 + j, 1000))),
      );
      for (const r of results) {
        if (r.status === 'fulfilled') accepted++;
        else full ??= r.reason as StoreError;
      }
    }
    expect(full).toBeInstanceOf(StoreError);
    expect(full!.code).toBe('EF_STORE_FULL');
    expect(full!.message).toContain('storage.maxBytes');
    expect(accepted).toBeGreaterThan(100);
    expect(accepted).toBeLessThan(600); // about 1 KB each in a 512 KB store
    expect(reject.depth.messages).toBe(accepted);
    expect(warnings.filter((w) => w.includes('store full'))).toHaveLength(1); // once per episode
    expect((await store.sessions.enqueue('c', small(1, 1000)).catch((e: unknown) => e)) as StoreError).toMatchObject({
      code: 'EF_STORE_FULL',
    });

    // A drop-oldest outbox keeps accepting by dropping its own oldest entries.
    const drop = store.outbox('drop', { ...UNLIMITED, overflow: 'drop-oldest' });
    await reject.remove(reject.peek(60).map((e) => e.seq)); // some room for it to start with
    for (let i = 0; i < 300; i++) await drop.append(small(i, 1000));
    expect(drop.depth.dropped.queue_full).toBeGreaterThan(0);
    expect(drop.peek(1_000_000).at(-1)!.msg.payload[0]).toBe(299 & 0xff);
    expect(drop.depth.messages + drop.depth.dropped.queue_full).toBe(300);

    // Deleting data always works and ends the episode.
    await reject.remove(reject.peek(1_000_000).map((e) => e.seq));
    await drop.remove(drop.peek(1_000_000).map((e) => e.seq));
    await reject.append(small(1, 1000));
  }, 60_000);

  it('fills the pages of the queue whose client id sorts last (appended), and queues of any order read back whole', async () => {
    const dir = tempDir();
    let store = await openStore(dir, { sync: 'relaxed' });
    const impl = store as unknown as LmdbStore;
    const queueBytes = (): number => {
      const st = impl.queueDb.getStats() as {
        treeBranchPageCount: number;
        treeLeafPageCount: number;
        overflowPages: number;
        pageSize: number;
      };
      return (st.treeBranchPageCount + st.treeLeafPageCount + st.overflowPages) * st.pageSize;
    };
    // One offline session, 1 KiB messages: three fit a 4 KiB page; split in halves it held two.
    for (let i = 0; i < 3000; i += 50)
      await Promise.all(Array.from({ length: 50 }, (_, j) => store.sessions.enqueue('historian', small(i + j, 1024))));
    const perMessage = queueBytes() / 3000;
    console.log(`session queue: ${Math.round(perMessage)} bytes of pages per queued 1 KiB message`);
    expect(perMessage).toBeLessThan(1450);
    // Sessions that sort before it are not last: written the usual way, interleaved in batches, also after a reopen.
    const sent = new Map<string, number[]>([
      ['historian', []],
      ['a-first', []],
      ['zz-last', []],
    ]);
    const round = async (): Promise<void> => {
      for (let i = 0; i < 20; i++) {
        await Promise.all(
          [...sent].map(async ([clientId, seqs]) => seqs.push(await store.sessions.enqueue(clientId, small(i, 300)))),
        );
      }
    };
    await round();
    await closeStore(store);
    store = await openStore(dir, { sync: 'relaxed' });
    await round();
    for (const [clientId, seqs] of sent) {
      const read = store.sessions.readQueue(clientId, 0, { messages: Infinity, bytes: Infinity });
      const expected = clientId === 'historian' ? 3000 + seqs.length : seqs.length;
      expect(read.records.length, clientId).toBe(expected);
      expect(read.records.slice(-seqs.length).map((r) => r.seq)).toEqual(seqs);
    }
  }, 60_000);

  it('keeps the data file from growing under queue-like use: freed pages are reused (docs/reliability.md#fault-scenarios soak, lmdb-js#321)', async () => {
    // A bridge in steady state: every round appends 1,000 messages and the upstream acknowledges the oldest 1,000.
    const dir = tempDir();
    const s = await openStore(dir);
    const box = s.outbox('central', { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'drop-oldest' });
    const dataBytes = (): number => fs.statSync(path.join(dir, 'data.mdb')).size;
    let warmBytes = 0;
    for (let round = 0; round < 80; round++) {
      const appends: Promise<void>[] = [];
      for (let i = 0; i < 1000; i++) appends.push(box.append(small(i, 200)));
      await Promise.all(appends);
      if (round >= 2) await box.remove(box.peek(1000).map((e) => e.seq));
      if (round === 20) warmBytes = dataBytes();
    }
    expect(box.depth.messages).toBe(2000);
    // 60,000 more messages (about 15 MB) went through since the warm-up; without page reuse the file grows by that.
    expect(dataBytes()).toBeLessThanOrEqual(warmBytes * 1.25);
  }, 30_000);

  it('refuses to open a directory that is already open in this process', async () => {
    const dir = tempDir();
    await openStore(dir);
    const err = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger }).then(
      (s) => s.close().then(() => undefined),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(StoreError);
    expect(err).toMatchObject({
      code: 'EF_STORE_IN_USE',
      message: expect.stringContaining('already open in this process'),
    });
  });

  it('refuses a store written with another schema version, naming the directory', async () => {
    const dir = tempDir();
    const newer = await openLmdbStore(
      { path: dir, sync: 'full', maxBytes: 0, log: silentLogger },
      { schemaVersion: SCHEMA_VERSION + 1 },
    );
    await newer.outbox('central', UNLIMITED).append(small(1));
    await newer.close();
    const err = await openError(openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger }));
    expect(err.message).toContain(dir);
    expect(err.message).toContain(
      `store format is version ${SCHEMA_VERSION + 1}, written by a newer edgeferry release`,
    );
    // Refusing changed nothing: the newer release can still read its data.
    const again = await openLmdbStore(
      { path: dir, sync: 'full', maxBytes: 0, log: silentLogger },
      { schemaVersion: SCHEMA_VERSION + 1 },
    );
    expect(again.outbox('central', UNLIMITED).depth.messages).toBe(1);
    await again.close();
  });

  describe('damaged data directories give EF_STORE_OPEN instead of crashing the process', () => {
    async function damaged(damage: (dataFile: string) => void): Promise<StoreError> {
      const dir = tempDir();
      const store = await openStore(dir);
      await Promise.all(
        Array.from({ length: 500 }, (_, i) => store.outbox('central', UNLIMITED).append(small(i, 200))),
      );
      await closeStore(store);
      damage(path.join(dir, 'data.mdb'));
      const err = await openError(openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger }));
      expect(err.message).toContain(dir);
      expect(err.message).toMatch(/backup|move the directory aside/);
      return err;
    }

    it('garbage over the meta pages', async () => {
      const err = await damaged((f) => {
        const fd = fs.openSync(f, 'r+');
        fs.writeSync(fd, Buffer.alloc(8192, 0xab), 0, 8192, 0);
        fs.closeSync(fd);
      });
      expect(err.message).toContain('not an LMDB data file');
    });

    it('a file truncated to a few bytes', async () => {
      expect((await damaged((f) => fs.truncateSync(f, 100))).message).toContain('truncated');
    });

    it('a file truncated after its meta pages', async () => {
      expect((await damaged((f) => fs.truncateSync(f, 3 * 4096))).message).toContain('truncated');
    });

    it('a damaged second meta page', async () => {
      const err = await damaged((f) => {
        const fd = fs.openSync(f, 'r+');
        fs.writeSync(fd, Buffer.alloc(256, 0x5a), 0, 256, 4096);
        fs.closeSync(fd);
      });
      expect(err.message).toContain('second meta page');
    });
  });

  it('refuses a path that is a file', async () => {
    const dir = tempDir();
    const file = path.join(dir, 'not-a-dir');
    fs.writeFileSync(file, 'x');
    const err = await openError(openLmdbStore({ path: file, sync: 'full', maxBytes: 0, log: silentLogger }));
    expect(err.message).toContain(file);
  });
});
