/**
 * The store contract (src/store/types.ts), run against the memory store and the LMDB store. LMDB-only
 * behaviour (reopen, crash, corrupt files) has its own files in test/unit/store-lmdb-*.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createMessage, type Message } from '../../src/protocol/message.js';
import { outboxEntryBytes } from '../../src/store/codec.js';
import { openLmdbStore } from '../../src/store/lmdb/open.js';
import { createMemoryStore } from '../../src/store/memory.js';
import type { OutboxLimits, Store } from '../../src/store/types.js';
import { StoreError } from '../../src/util/errors.js';
import { silentLogger } from '../../src/util/logger.js';
import { removeDir, tempDir } from '../helpers/temp.js';

const UNLIMITED: OutboxLimits = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'drop-oldest' };

function msg(n: number, extra: Partial<Parameters<typeof createMessage>[0]> = {}): Message {
  return createMessage({
    topic: `plant/line4/${n}`,
    payload: Buffer.from(`payload-${n}`),
    qos: 1,
    origin: 'c1',
    ...extra,
  });
}

/** Payload length is fixed so every entry has the same size. */
function fixed(n: number): Message {
  return createMessage({ topic: 't', payload: Buffer.from(String(n).padStart(8, '0')), qos: 1, origin: 'c' });
}

async function rejection(p: Promise<unknown>): Promise<StoreError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(StoreError);
  return err as StoreError;
}

/** `maxSessionBytes`: the persistent sessions' share of the store (LMDB counts pages, memory encoded bytes). */
interface Impl {
  name: string;
  open(options?: { maxSessionBytes?: number }): Promise<Store>;
}

const dirs: string[] = [];
const stores: Store[] = [];

const impls: Impl[] = [
  { name: 'memory', open: async (options) => createMemoryStore(undefined, options) },
  {
    name: 'lmdb',
    open: async (options) => {
      const dir = tempDir('edgeferry-store-');
      dirs.push(dir);
      return openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, ...options, log: silentLogger });
    },
  },
];

afterEach(async () => {
  for (const s of stores.splice(0)) await s.close();
  for (const d of dirs.splice(0)) removeDir(d);
});

describe.each(impls)('store contract: $name', (impl) => {
  async function open(options?: { maxSessionBytes?: number }): Promise<Store> {
    const s = await impl.open(options);
    stores.push(s);
    return s;
  }

  describe('outbox', () => {
    it('peeks appended messages oldest first with strictly increasing seqs, and removes by seq', async () => {
      const store = await open();
      const box = store.outbox('central', UNLIMITED);
      for (let i = 1; i <= 5; i++) await box.append(msg(i));
      const all = box.peek(10);
      expect(all.map((e) => e.msg.topic)).toEqual([1, 2, 3, 4, 5].map((n) => `plant/line4/${n}`));
      for (let i = 1; i < all.length; i++) expect(all[i].seq).toBeGreaterThan(all[i - 1].seq);
      expect(box.peek(2).map((e) => e.seq)).toEqual([all[0].seq, all[1].seq]);
      expect(box.peek(10, all[1].seq).map((e) => e.seq)).toEqual(all.slice(2).map((e) => e.seq));
      expect(box.peek(2, all[1].seq).map((e) => e.seq)).toEqual([all[2].seq, all[3].seq]);

      await box.remove([all[0].seq, all[2].seq, 999_999]); // an unknown seq is ignored
      expect(box.peek(10).map((e) => e.seq)).toEqual([all[1].seq, all[3].seq, all[4].seq]);
      expect(box.depth.messages).toBe(3);
      expect(box.depth.bytes).toBe(all[1].bytes + all[3].bytes + all[4].bytes);
      expect(box.depth.oldestAppendedAtMs).toBe(all[1].appendedAtMs);
      await box.remove([all[1].seq, all[1].seq]); // a repeated seq counts once
      expect(box.depth.messages).toBe(2);
    });

    it('keeps every field of a message, including MQTT 5 properties and the expiry deadline', async () => {
      const store = await open();
      const box = store.outbox('central', UNLIMITED);
      const original = createMessage({
        topic: 'spBv1.0/plant1/DDATA/gw/press-1',
        payload: Buffer.from([0, 1, 2, 255]),
        qos: 2,
        retain: true,
        origin: 'bridge:central',
        properties: {
          payloadFormatIndicator: true,
          messageExpiryInterval: 60,
          contentType: 'application/json',
          responseTopic: 'reply/here',
          correlationData: Buffer.from('corr'),
          userProperties: { a: '1', many: ['x', 'y'], empty: '' },
        },
      });
      const before = store.clock.nowMs();
      await box.append(original);
      const [entry] = box.peek(1);
      expect(entry.msg.topic).toBe(original.topic);
      expect(Buffer.compare(entry.msg.payload, original.payload)).toBe(0);
      expect(entry.msg.qos).toBe(2);
      expect(entry.msg.retain).toBe(true);
      expect(entry.msg.origin).toBe('bridge:central');
      expect(entry.msg.properties).toEqual(original.properties);
      expect(Math.abs((entry.msg.expiresAt ?? 0) - (original.expiresAt ?? 0))).toBeLessThan(50);
      expect(entry.appendedAtMs).toBeGreaterThanOrEqual(before);
      expect(entry.bytes).toBe(outboxEntryBytes(original));
    });

    it('resolves many appends made in one event turn, in order', async () => {
      const store = await open();
      const box = store.outbox('central', UNLIMITED);
      await Promise.all(Array.from({ length: 2000 }, (_, i) => box.append(fixed(i))));
      const entries = box.peek(5000);
      expect(entries.map((e) => e.msg.payload.toString())).toEqual(
        Array.from({ length: 2000 }, (_, i) => String(i).padStart(8, '0')),
      );
      expect(box.depth.messages).toBe(2000);
    });

    it('keeps outboxes apart, also when one name is a prefix of another', async () => {
      const store = await open();
      const a = store.outbox('a', UNLIMITED);
      const ab = store.outbox('ab', UNLIMITED);
      await a.append(msg(1));
      await ab.append(msg(2));
      await ab.append(msg(3));
      expect(a.peek(10).map((e) => e.msg.topic)).toEqual(['plant/line4/1']);
      expect(ab.peek(10).map((e) => e.msg.topic)).toEqual(['plant/line4/2', 'plant/line4/3']);
      expect(store.outbox('a', UNLIMITED)).toBe(a);
      await a.remove(a.peek(10).map((e) => e.seq));
      expect(ab.depth.messages).toBe(2);
    });

    it('drops the oldest entries past maxMessages with drop-oldest, counted as queue_full', async () => {
      const store = await open();
      const box = store.outbox('central', { ...UNLIMITED, maxMessages: 3, overflow: 'drop-oldest' });
      for (let i = 0; i < 5; i++) await box.append(fixed(i));
      expect(box.peek(10).map((e) => e.msg.payload.toString())).toEqual(['00000002', '00000003', '00000004']);
      expect(box.depth.messages).toBe(3);
      expect(box.depth.dropped.queue_full).toBe(2);
      // In one event turn as well.
      await Promise.all([5, 6, 7, 8].map((i) => box.append(fixed(i))));
      expect(box.peek(10).map((e) => e.msg.payload.toString())).toEqual(['00000006', '00000007', '00000008']);
      expect(box.depth.dropped.queue_full).toBe(6);
    });

    it('makes room with acknowledged entries whose removal is still pending before dropping live ones', async () => {
      const store = await open();
      const box = store.outbox('central', { ...UNLIMITED, maxMessages: 3, overflow: 'drop-oldest' });
      for (let i = 0; i < 3; i++) await box.append(fixed(i));
      const [first] = box.peek(1);
      // The central broker acknowledged the oldest; its delete is not committed yet when the next one arrives.
      const removed = box.remove([first.seq]);
      expect(box.peek(10).map((e) => e.seq)).not.toContain(first.seq); // hidden from the call on
      await box.append(fixed(3));
      await removed;
      expect(box.peek(10).map((e) => e.msg.payload.toString())).toEqual(['00000001', '00000002', '00000003']);
      expect(box.depth.dropped.queue_full).toBe(0); // delivered, not dropped
      expect(box.depth.messages).toBe(3);
    });

    it('drops the oldest entries past maxBytes with drop-oldest', async () => {
      const store = await open();
      const size = outboxEntryBytes(fixed(0));
      const box = store.outbox('central', { ...UNLIMITED, maxBytes: 3 * size + 1, overflow: 'drop-oldest' });
      for (let i = 0; i < 5; i++) await box.append(fixed(i));
      expect(box.peek(10).map((e) => e.msg.payload.toString())).toEqual(['00000002', '00000003', '00000004']);
      expect(box.depth.bytes).toBe(3 * size);
      expect(box.depth.dropped.queue_full).toBe(2);
    });

    it('refuses appends past the limits with reject-new (EF_STORE_FULL) and keeps the queue as it was', async () => {
      const store = await open();
      const box = store.outbox('central', { ...UNLIMITED, maxMessages: 2, overflow: 'reject-new' });
      await box.append(fixed(0));
      await box.append(fixed(1));
      const err = await rejection(box.append(fixed(2)));
      expect(err.code).toBe('EF_STORE_FULL');
      expect(box.peek(10).map((e) => e.msg.payload.toString())).toEqual(['00000000', '00000001']);
      expect(box.depth.messages).toBe(2);
      expect(box.depth.dropped.queue_full).toBe(0);
      await box.remove([box.peek(1)[0].seq]);
      await box.append(fixed(3)); // room again
      expect(box.depth.messages).toBe(2);

      const size = outboxEntryBytes(fixed(0));
      const byBytes = store.outbox('bytes', { ...UNLIMITED, maxBytes: 2 * size, overflow: 'reject-new' });
      await Promise.all([byBytes.append(fixed(0)), byBytes.append(fixed(1))]);
      expect((await rejection(byBytes.append(fixed(2)))).code).toBe('EF_STORE_FULL');
    });

    it('tells beforehand what append would refuse, counting appends not applied yet', async () => {
      const store = await open();
      const box = store.outbox('central', { ...UNLIMITED, maxMessages: 2, overflow: 'reject-new' });
      expect(box.refusal(fixed(0))).toBeUndefined();
      const appended = [box.append(fixed(0)), box.append(fixed(1))]; // one event turn: not applied yet
      expect(box.refusal(fixed(2))?.code).toBe('EF_STORE_FULL');
      await Promise.all(appended);
      expect(box.refusal(fixed(2))?.code).toBe('EF_STORE_FULL');
      await box.remove([box.peek(1)[0].seq]);
      expect(box.refusal(fixed(2))).toBeUndefined();
      const dropping = store.outbox('dropping', {
        ...UNLIMITED,
        maxMessages: 1,
        maxBytes: 100,
        overflow: 'drop-oldest',
      });
      await dropping.append(fixed(0));
      expect(dropping.refusal(fixed(1))).toBeUndefined(); // it makes room
      expect(dropping.refusal(createMessage({ topic: 't', payload: Buffer.alloc(200), origin: 'c' }))?.code).toBe(
        'EF_STORE_FULL',
      );
    });

    it('refuses a message larger than maxBytes under either policy', async () => {
      const store = await open();
      for (const overflow of ['drop-oldest', 'reject-new'] as const) {
        const box = store.outbox(overflow, { ...UNLIMITED, maxBytes: 100, overflow });
        await box.append(fixed(0));
        const big = createMessage({ topic: 't', payload: Buffer.alloc(200), origin: 'c' });
        expect((await rejection(box.append(big))).code).toBe('EF_STORE_FULL');
        expect(box.depth.messages).toBe(1); // nothing was dropped for it
      }
    });

    it('expires entries older than maxAgeS, counted as expired', async () => {
      const store = await open();
      const box = store.outbox('central', { ...UNLIMITED, maxAgeS: 10 });
      for (let i = 0; i < 3; i++) await box.append(fixed(i));
      const t = box.peek(1)[0].appendedAtMs;
      expect(await box.expire(t + 5_000)).toBe(0);
      expect(box.depth.messages).toBe(3);
      expect(await box.expire(store.clock.nowMs() + 10_001)).toBe(3);
      expect(box.depth.messages).toBe(0);
      expect(box.depth.bytes).toBe(0);
      expect(box.depth.oldestAppendedAtMs).toBeUndefined();
      expect(box.depth.dropped.expired).toBe(3);
      expect(box.peek(10)).toEqual([]);

      const noAge = store.outbox('no-age', UNLIMITED);
      await noAge.append(fixed(0));
      expect(await noAge.expire(store.clock.nowMs() + 1e12)).toBe(0); // maxAgeS 0 disables the age limit
    });

    it('counts drops decided outside the outbox, in depth once the count settles', async () => {
      const store = await open();
      const box = store.outbox('central', UNLIMITED);
      void box.countDropped('rejected_upstream', 2);
      void box.countDropped('rejected_upstream', 1);
      await box.countDropped('dead_letter_deleted', 4);
      expect(box.depth.dropped).toEqual({ queue_full: 0, expired: 0, rejected_upstream: 3, dead_letter_deleted: 4 });
      await box.countDropped('dead_letter_deleted', 1);
      expect(box.depth.dropped.dead_letter_deleted).toBe(5);
    });

    it('continues seqs after the outbox was emptied', async () => {
      const store = await open();
      const box = store.outbox('central', UNLIMITED);
      await box.append(fixed(0));
      const [first] = box.peek(1);
      await box.remove([first.seq]);
      await box.append(fixed(1));
      expect(box.peek(1)[0].seq).toBeGreaterThan(first.seq);
    });

    it('marks entries the central broker received (QoS 2 PUBREC) until they are removed or dropped', async () => {
      const store = await open();
      const box = store.outbox('central', { ...UNLIMITED, maxMessages: 4 });
      await Promise.all([0, 1, 2, 3].map((i) => box.append(fixed(i))));
      const [a, b, c, d] = box.peek(4);
      await Promise.all([box.markReleased(a.seq), box.markReleased(c.seq), box.markReleased(999_999)]); // unknown: ignored
      expect(box.peek(4).map((e) => e.released === true)).toEqual([true, false, true, false]);
      expect(box.depth.messages).toBe(4); // a mark is not a removal
      // Marked and removed in one turn: the removal wins.
      await Promise.all([box.markReleased(b.seq), box.remove([b.seq, c.seq])]);
      expect(box.peek(4).map((e) => [e.seq, e.released === true])).toEqual([
        [a.seq, true],
        [d.seq, false],
      ]);
      await box.append(fixed(4));
      await box.append(fixed(5));
      await box.append(fixed(6)); // drop-oldest takes the marked head with it
      expect(box.peek(4).map((e) => [e.seq > a.seq, e.released === true])).toEqual(Array(4).fill([true, false]));
      await box.markReleased(a.seq); // gone: ignored
      expect(box.peek(4).some((e) => e.released === true)).toBe(false);
    });

    it('moves entries oldest first to the tail of another outbox, stopping where it is full, dropping nothing', async () => {
      const store = await open();
      const payloads = (box: { peek(n: number): readonly { msg: Message }[] }) =>
        box.peek(10).map((e) => e.msg.payload.toString());
      const dead = store.outbox('central.dead-letter', UNLIMITED);
      const box = store.outbox('central', { ...UNLIMITED, maxMessages: 4, overflow: 'drop-oldest' });
      await box.append(fixed(0));
      for (let i = 1; i <= 5; i++) await dead.append(fixed(i));
      const tail = box.tailSeq;
      expect(await dead.moveTo(box, 2)).toBe(2);
      expect(payloads(box)).toEqual(['00000000', '00000001', '00000002']);
      expect(box.peek(10)[1].seq).toBeGreaterThan(tail); // new entries of the target
      expect(payloads(dead)).toEqual(['00000003', '00000004', '00000005']);
      // Room for one more: the move stops there instead of drop-oldest making room.
      expect(await dead.moveTo(box, 10)).toBe(1);
      expect(payloads(box)).toEqual(['00000000', '00000001', '00000002', '00000003']);
      expect(payloads(dead)).toEqual(['00000004', '00000005']);
      expect([box.depth.messages, dead.depth.messages, box.depth.dropped.queue_full]).toEqual([4, 2, 0]);
      expect(await dead.moveTo(box, 10)).toBe(0);
      await box.remove(box.peek(10).map((e) => e.seq));
      expect(await dead.moveTo(box, 10)).toBe(2);
      expect([payloads(box), dead.depth.messages, dead.depth.bytes]).toEqual([['00000004', '00000005'], 0, 0]);
    });

    it('hides removed entries from peek as soon as remove is called', async () => {
      const store = await open();
      const box = store.outbox('central', UNLIMITED);
      await Promise.all([0, 1, 2].map((i) => box.append(fixed(i))));
      const [a, b, c] = box.peek(3);
      const removed = box.remove([a.seq]);
      expect(box.peek(2).map((e) => e.seq)).toEqual([b.seq, c.seq]);
      await removed;
      expect(box.peek(2).map((e) => e.seq)).toEqual([b.seq, c.seq]);
    });
  });

  describe('retained', () => {
    it('stores, replaces and (with an empty payload) deletes retained messages, and counts them', async () => {
      const store = await open();
      const r = store.retained;
      await r.set(msg(1, { retain: true }));
      await r.set(
        msg(2, { retain: true, qos: 1, properties: { messageExpiryInterval: 3600, contentType: 'text/plain' } }),
      );
      await r.set(createMessage({ topic: 'plant/line4/1', payload: Buffer.from('v2'), retain: true, origin: 'c2' }));
      expect(r.count).toBe(2);
      const index = [...r.loadIndex()].sort((x, y) => x.topic.localeCompare(y.topic));
      expect(index.map((m) => [m.topic, m.qos, m.origin, m.bytes, m.expiresAt === undefined])).toEqual([
        ['plant/line4/1', 0, 'c2', 2, true],
        ['plant/line4/2', 1, 'c1', 9, false],
      ]);
      expect(r.get('plant/line4/1')?.payload.toString()).toBe('v2');
      const two = r.get('plant/line4/2')!;
      expect([two.payload.toString(), two.origin, two.qos, two.properties?.contentType]).toEqual([
        'payload-2',
        'c1',
        1,
        'text/plain',
      ]);
      await r.set(createMessage({ topic: 'plant/line4/1', payload: Buffer.alloc(0), origin: 'c' }));
      await r.set(createMessage({ topic: 'never/set', payload: Buffer.alloc(0), origin: 'c' }));
      expect(r.count).toBe(1);
      expect(r.get('plant/line4/1')).toBeUndefined();
      expect(r.get('never/set')).toBeUndefined();
      expect([...r.loadIndex()].map((m) => m.topic)).toEqual(['plant/line4/2']);
    });

    it('counts correctly when the same topic is set and deleted within one event turn', async () => {
      const store = await open();
      const r = store.retained;
      await Promise.all([
        r.set(msg(1)),
        r.set(msg(1)),
        r.set(createMessage({ topic: 'plant/line4/1', payload: Buffer.alloc(0), origin: 'c' })),
        r.set(msg(2)),
      ]);
      expect(r.count).toBe(1);
      expect([...r.loadIndex()].map((m) => m.topic)).toEqual(['plant/line4/2']);
    });
  });

  describe('sessions', () => {
    it('records sessions, subscriptions and queued messages by small changes', async () => {
      const store = await open();
      const s = store.sessions;
      await s.putSession('hmi-1', { expiryIntervalS: 3600 });
      await s.putSubscription('hmi-1', {
        filter: 'a/#',
        qos: 1,
        noLocal: false,
        retainAsPublished: false,
        retainHandling: 0,
      });
      await s.putSubscription('hmi-1', {
        filter: '$share/g/b/+',
        qos: 2,
        noLocal: true,
        retainAsPublished: true,
        retainHandling: 2,
        subscriptionId: 7,
      });
      await s.putSubscription('hmi-1', {
        filter: 'a/#',
        qos: 2,
        noLocal: false,
        retainAsPublished: false,
        retainHandling: 1,
      });
      await s.deleteSubscription('hmi-1', 'gone/+');
      const seq1 = await s.enqueue('hmi-1', msg(1));
      const seq2 = await s.enqueue('hmi-1', msg(2, { qos: 2 }));
      const seq3 = await s.enqueue('hmi-1', msg(3));
      expect(seq2).toBeGreaterThan(seq1);
      expect(seq3).toBeGreaterThan(seq2);
      await s.ack('hmi-1', seq1);
      await s.ack('hmi-1', 424242); // unknown: ignored
      await s.putSession('hmi-1', { expiryIntervalS: 3600, disconnectedAtMs: 1_700_000_000_000 });

      const records = [...s.loadAll()];
      expect(records).toHaveLength(1);
      const [rec] = records;
      expect(rec.clientId).toBe('hmi-1');
      expect(rec.expiryIntervalS).toBe(3600);
      expect(rec.disconnectedAtMs).toBe(1_700_000_000_000);
      const subs = [...rec.subscriptions].sort((x, y) => x.filter.localeCompare(y.filter));
      expect(subs).toEqual([
        {
          filter: '$share/g/b/+',
          qos: 2,
          noLocal: true,
          retainAsPublished: true,
          retainHandling: 2,
          subscriptionId: 7,
        },
        { filter: 'a/#', qos: 2, noLocal: false, retainAsPublished: false, retainHandling: 1 },
      ]);
      expect(rec.queue.map((q) => q.seq)).toEqual([seq2, seq3]);
      expect(rec.queue.map((q) => [q.msg.topic, q.msg.qos, q.msg.payload.toString()])).toEqual([
        ['plant/line4/2', 2, 'payload-2'],
        ['plant/line4/3', 1, 'payload-3'],
      ]);

      await s.deleteSubscription('hmi-1', 'a/#');
      expect([...s.loadAll()][0].subscriptions.map((x) => x.filter)).toEqual(['$share/g/b/+']);
    });

    it('refuses queued messages past the sessions share of the store, and nothing else (docs/reliability.md#sessions-share)', async () => {
      const store = await open({ maxSessionBytes: 64 * 1024 });
      const s = store.sessions;
      const kib = (n: number): Message =>
        createMessage({ topic: 'atk/x', payload: Buffer.alloc(1024, n), qos: 1, origin: 'c' });
      await s.putSession('atk', { expiryIntervalS: 60 });
      let queued = 0;
      const seqs: number[] = [];
      while (!s.sessionsFull() && queued < 1000) seqs.push(await s.enqueue('atk', kib(queued++)));
      expect(queued).toBeGreaterThan(16);
      expect(queued).toBeLessThan(100);
      expect((await rejection(s.enqueue('atk', kib(0)))).code).toBe('EF_STORE_FULL');
      // Not a refusal for every target: the outboxes, retained messages and session records are stored as before.
      expect(s.refusal()).toBeUndefined();
      const box = store.outbox('central', UNLIMITED);
      expect(box.refusal(msg(1))).toBeUndefined();
      await box.append(msg(1));
      await store.retained.set(msg(2, { retain: true }));
      await s.putSession('hmi', { expiryIntervalS: 60 });
      expect(box.depth.messages).toBe(1);
      expect(store.retained.count).toBe(1);
      // One message less does not end it (SESSIONS_RESUME_BELOW): the sessions queue again once theirs drained.
      await s.ack('atk', seqs[0]);
      expect(s.sessionsFull()).toBe(true);
      await s.drop('atk');
      expect(s.sessionsFull()).toBe(false);
      await s.enqueue('hmi', kib(1));
    });

    it('remembers incoming QoS 2 packet ids awaiting PUBREL until released, and drops them with the session', async () => {
      const store = await open();
      const s = store.sessions;
      await s.putSession('plc', { expiryIntervalS: 60 });
      await s.putAwaitingRelease('plc', 7);
      await s.putAwaitingRelease('plc', 65535);
      await s.putAwaitingRelease('plc', 9);
      await s.deleteAwaitingRelease('plc', 9);
      await s.deleteAwaitingRelease('plc', 12); // unknown: ignored
      expect([...[...s.loadAll()][0].awaitingRelease].sort((a, b) => a - b)).toEqual([7, 65535]);
      await s.drop('plc');
      await s.putSession('plc', { expiryIntervalS: 60 });
      expect([...s.loadAll()][0].awaitingRelease).toEqual([]);
    });

    it('records the flight state of a queued QoS 2 message, and never revives one already acknowledged or dropped', async () => {
      const store = await open();
      const s = store.sessions;
      await s.putSession('hmi', { expiryIntervalS: 60 });
      const m = msg(1, { qos: 2 });
      const [a, b, c] = [await s.enqueue('hmi', m), await s.enqueue('hmi', m), await s.enqueue('hmi', m)];
      await s.markInFlight('hmi', a, m, { packetId: 65535, released: false });
      await s.markInFlight('hmi', a, m, { packetId: 65535, released: true });
      await s.markInFlight('hmi', b, m, { packetId: 2, released: false });
      // Marked and acknowledged in one turn: the ack wins, whatever the order inside the batch.
      await Promise.all([s.markInFlight('hmi', c, m, { packetId: 3, released: true }), s.ack('hmi', c)]);
      await s.ack('hmi', b);
      await s.markInFlight('hmi', b, m, { packetId: 2, released: true }); // already acknowledged: ignored
      const queue = [...s.loadAll()][0].queue;
      expect(queue.map((q) => [q.seq, q.flight])).toEqual([[a, { packetId: 65535, released: true }]]);
      expect(queue[0].msg.payload.toString()).toBe('payload-1');
      expect(queue[0].msg.qos).toBe(2);
      await Promise.all([s.drop('hmi'), s.markInFlight('hmi', a, m, { packetId: 1, released: false })]);
      expect([...s.loadAll()]).toEqual([]);
    });

    it('keeps one pending delayed will per client with its due time, until deleted or the session is dropped', async () => {
      const store = await open();
      const s = store.sessions;
      await s.putSession('plc', { expiryIntervalS: 60, disconnectedAtMs: 1_700_000_000_000 });
      const will = msg(1, { retain: true, properties: { contentType: 'text/plain', userProperties: { line: '4' } } });
      await s.putWill('plc', { msg: createMessage({ ...will, topic: 'old' }), dueAtMs: 1 });
      await s.putWill('plc', { msg: will, dueAtMs: 1_700_000_005_000 }); // replaces
      const record = [...s.loadAll()][0];
      expect(record.will?.dueAtMs).toBe(1_700_000_005_000);
      expect(record.will?.msg.topic).toBe(will.topic);
      expect(record.will?.msg.payload.toString()).toBe(will.payload.toString());
      expect(record.will?.msg.retain).toBe(true);
      expect(record.will?.msg.properties).toEqual(will.properties);
      await s.deleteWill('plc');
      expect([...s.loadAll()][0].will).toBeUndefined();
      await s.deleteWill('nobody'); // unknown: ignored
      await s.putWill('plc', { msg: will, dueAtMs: 5 });
      await s.drop('plc');
      expect([...s.loadAll()]).toEqual([]);
    });

    it('loads at most a window of queued messages per session, counts the rest, and reads them back by seq', async () => {
      const store = await open();
      const s = store.sessions;
      await s.putSession('big', { expiryIntervalS: 60 });
      await s.putSession('small', { expiryIntervalS: 60 });
      const seqs = await Promise.all(Array.from({ length: 7 }, (_, i) => s.enqueue('big', msg(i))));
      await s.enqueue('small', msg(100));
      const window = (messages: number, bytes = Infinity) => ({ messages, bytes });
      const byId = new Map([...s.loadAll(window(3))].map((r) => [r.clientId, r]));
      const big = byId.get('big')!;
      expect(big.queue.map((q) => q.seq)).toEqual(seqs.slice(0, 3));
      const payloadBytes = (from: number, to = 7) =>
        seqs.slice(from, to).reduce((n, _, i) => n + msg(from + i).payload.length, 0);
      expect(big.queueTail).toEqual({ count: 4, bytes: payloadBytes(3) });
      expect(byId.get('small')!.queueTail).toBeUndefined();
      expect([...s.loadAll()].find((r) => r.clientId === 'big')!.queue).toHaveLength(7); // no window: everything
      // A window in payload bytes: what fits in them, and always one message.
      const byBytes = [...s.loadAll(window(Infinity, payloadBytes(0, 2)))].find((r) => r.clientId === 'big')!;
      expect(byBytes.queue.map((q) => q.seq)).toEqual(seqs.slice(0, 2));
      expect(byBytes.queueTail).toEqual({ count: 5, bytes: payloadBytes(2) });
      expect([...s.loadAll(window(0, 0))].find((r) => r.clientId === 'big')!.queue).toHaveLength(1);

      const next = s.readQueue('big', seqs[2], window(2));
      expect(next.skipped).toBe(0);
      expect(next.lastSeq).toBe(seqs[4]);
      expect(next.records.map((q) => [q.seq, q.msg.topic])).toEqual([
        [seqs[3], msg(3).topic],
        [seqs[4], msg(4).topic],
      ]);
      expect(s.readQueue('big', seqs[2], window(10, payloadBytes(3, 6))).records.map((q) => q.seq)).toEqual(
        seqs.slice(3, 6),
      );
      expect(s.readQueue('big', seqs[2], window(10, 1)).records.map((q) => q.seq)).toEqual([seqs[3]]);
      expect(s.readQueue('big', seqs[4], window(10)).records.map((q) => q.seq)).toEqual(seqs.slice(5));
      expect(s.readQueue('big', seqs[6], window(10))).toEqual({ records: [], skipped: 0, lastSeq: undefined });
      expect(s.readQueue('nobody', 0, window(10))).toEqual({ records: [], skipped: 0, lastSeq: undefined });
      await s.ack('big', seqs[5]);
      await store.flushed();
      expect(s.readQueue('big', seqs[4], window(10)).records.map((q) => q.seq)).toEqual([seqs[6]]);
    });

    it('drops a session with its subscriptions and queue, leaving other clients alone', async () => {
      const store = await open();
      const s = store.sessions;
      for (const id of ['a', 'ab', 'b']) {
        await s.putSession(id, { expiryIntervalS: 60 });
        await s.putSubscription(id, {
          filter: 'x',
          qos: 1,
          noLocal: false,
          retainAsPublished: false,
          retainHandling: 0,
        });
        await s.enqueue(id, msg(1));
      }
      await s.drop('a');
      const ids = [...s.loadAll()].map((r) => r.clientId).sort();
      expect(ids).toEqual(['ab', 'b']);
      for (const r of s.loadAll()) {
        expect(r.subscriptions).toHaveLength(1);
        expect(r.queue).toHaveLength(1);
      }
    });

    it('applies changes made in one event turn in call order (subscribe, queue, then drop)', async () => {
      const store = await open();
      const s = store.sessions;
      await Promise.all([
        s.putSession('c', { expiryIntervalS: 60 }),
        s.putSubscription('c', { filter: 'x', qos: 1, noLocal: false, retainAsPublished: false, retainHandling: 0 }),
        s.enqueue('c', msg(1)),
        s.drop('c'),
        s.putSubscription('c', { filter: 'y', qos: 0, noLocal: false, retainAsPublished: false, retainHandling: 0 }),
      ]);
      const records = [...s.loadAll()];
      expect(records).toHaveLength(1);
      expect(records[0].subscriptions.map((x) => x.filter)).toEqual(['y']);
      expect(records[0].queue).toEqual([]);
    });
  });

  it('refuses writes after close with EF_STORE_WRITE', async () => {
    const store = await impl.open();
    const box = store.outbox('central', UNLIMITED);
    await box.append(fixed(0));
    await store.close();
    expect((await rejection(box.append(fixed(1)))).code).toBe('EF_STORE_WRITE');
    expect((await rejection(store.retained.set(msg(1)))).code).toBe('EF_STORE_WRITE');
    expect((await rejection(store.sessions.enqueue('c', msg(1)))).code).toBe('EF_STORE_WRITE');
  });
});
