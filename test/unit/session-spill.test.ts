/**
 * A persistent session's queue longer than its memory window (broker.maxQueuedInMemory) goes on in the
 * LMDB store only and is read back in chunks as it drains, in order, once, with its subscription identifiers;
 * after a restart too.
 * The real broker and LMDB store in-process; the client is a ClientLink that acknowledges what it gets.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { Broker } from '../../src/broker/broker.js';
import type { ClientLink, Session } from '../../src/broker/session.js';
import type { SessionLimits } from '../../src/broker/session-limits.js';
import { createMessage, type QoS } from '../../src/protocol/message.js';
import { openLmdbStore } from '../../src/store/lmdb/open.js';
import type { Store } from '../../src/store/types.js';
import { silentLogger } from '../../src/util/logger.js';
import { useDisposer } from '../helpers/disposer.js';
import { waitFor } from '../helpers/wait.js';

// A full collection on demand, without starting vitest's workers with --expose-gc: memory is what this tests.
v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const d = useDisposer();
const stores: Store[] = [];
const brokers: Broker[] = [];
afterEach(async () => {
  for (const b of brokers.splice(0)) b.close();
  for (const s of stores.splice(0)) await s.close();
});

/** Queued messages kept in memory (broker.maxQueuedInMemory), small enough for a quick test. */
const WINDOW = 1000;
const PAYLOAD_BYTES = 20_000;
const SUBSCRIPTION_ID = 5;

async function open(
  dir: string,
  window: Partial<SessionLimits> = { maxQueuedInMemory: WINDOW },
): Promise<{ broker: Broker; store: Store }> {
  const store = await openLmdbStore({ path: dir, sync: 'relaxed', maxBytes: 0, log: silentLogger });
  stores.push(store);
  const broker = new Broker({
    limits: { maxInflight: 20, maxQueuedMessages: 0, maxQueuedBytes: 0, ...window },
    store,
    log: silentLogger,
  });
  brokers.push(broker);
  return { broker, store };
}

/**
 * Publishes messages `from`..`to - 1` in-process, QoS 1 and 2 alternating; each payload starts with its number.
 * Returns weak references to the payloads, to count how many the broker still holds.
 */
async function publishRange(broker: Broker, from: number, to: number): Promise<WeakRef<Buffer>[]> {
  const refs: WeakRef<Buffer>[] = [];
  for (let start = from; start < to; start += 100) {
    const batch: Promise<unknown>[] = [];
    for (let i = start; i < Math.min(to, start + 100); i++) {
      const payload = Buffer.alloc(PAYLOAD_BYTES);
      payload.writeUInt32BE(i);
      refs.push(new WeakRef(payload));
      batch.push(
        broker.publish(createMessage({ topic: `plant/${i % 3}`, payload, qos: (1 + (i % 2)) as QoS, origin: 'plc' })),
      );
    }
    await Promise.all(batch);
  }
  return refs;
}

/** How many of the payloads are still reachable after a full garbage collection. */
async function alive(refs: readonly WeakRef<Buffer>[]): Promise<number> {
  await new Promise((resolve) => setImmediate(resolve)); // a WeakRef keeps its target until the job ends
  gc();
  return refs.filter((r) => r.deref() !== undefined).length;
}

/** A connected client that acknowledges every message (PUBACK, or PUBREC then PUBCOMP) on the next tick. */
function attachClient(session: Session): { numbers: number[]; ids: (readonly number[] | undefined)[] } {
  const got = { numbers: [] as number[], ids: [] as (readonly number[] | undefined)[] };
  const link: ClientLink = {
    version: 5,
    remoteAddress: '127.0.0.1',
    certificateIdentity: undefined,
    receiveMaximum: 65_535,
    canTakeQoS0: () => true,
    backedUp: () => false,
    sendQoS0: () => true,
    sendPublish({ msg, qos, subscriptionIds }, packetId) {
      got.numbers.push(msg.payload.readUInt32BE(0));
      got.ids.push(subscriptionIds);
      setImmediate(() => {
        if (qos === 1) session.handlePuback(packetId);
        else session.handlePubrec(packetId, 0);
      });
      return true;
    },
    sendPubrel(packetId) {
      setImmediate(() => session.handlePubcomp(packetId));
    },
  };
  session.attach(link);
  return got;
}

function subscribe(broker: Broker, clientId: string): Session {
  const { session } = broker.openSession(clientId, null, false, 3600);
  const record = {
    filter: 'plant/#',
    qos: 2 as QoS,
    noLocal: false,
    retainAsPublished: false,
    retainHandling: 0 as const,
    subscriptionId: SUBSCRIPTION_ID,
  };
  void broker.persistSubscriptions(session, [record]);
  broker.subscribeSession(session, record);
  broker.sessionDisconnected(session);
  return session;
}

const range = (from: number, to: number): number[] => Array.from({ length: to - from }, (_, i) => from + i);

describe('persistent session queue beyond its memory window', () => {
  it('keeps what exceeds the window in the store only, and delivers it all in order, once, with its subscription id', async () => {
    const { broker } = await open(d.tempDir());
    const session = subscribe(broker, 'historian');
    const total = 3 * WINDOW;
    const payloads = await publishRange(broker, 0, total);
    // In memory: the window, not all of them.
    expect(await alive(payloads)).toBe(WINDOW);
    expect(session.queuedCount).toBe(total);

    const got = attachClient(session);
    // Live traffic while the stored part is read back goes behind it.
    await waitFor(() => got.numbers.length >= WINDOW / 2, 10_000);
    await publishRange(broker, total, total + 200);
    await waitFor(() => got.numbers.length >= total + 200, 20_000, {
      message: () => `${got.numbers.length}/${total + 200}`,
    });
    expect(got.numbers).toEqual(range(0, total + 200));
    // Read back from the store, the subscription identifier is that of the matching subscription [MQTT-3.3.4-3].
    expect(got.ids.every((ids) => ids?.[0] === SUBSCRIPTION_ID)).toBe(true);
    await waitFor(() => session.queuedCount === 0, 5000);
  });

  it('bounds the window by payload bytes too (broker.maxQueuedBytesInMemory): large payloads spill sooner', async () => {
    const inMemory = 150;
    const { broker } = await open(d.tempDir(), {
      maxQueuedInMemory: 0,
      maxQueuedBytesInMemory: inMemory * PAYLOAD_BYTES,
    });
    const session = subscribe(broker, 'historian');
    const total = 1000;
    const payloads = await publishRange(broker, 0, total);
    expect(await alive(payloads)).toBe(inMemory);
    const got = attachClient(session);
    await waitFor(() => got.numbers.length >= total, 20_000, { message: () => `${got.numbers.length}/${total}` });
    expect(got.numbers).toEqual(range(0, total));
    await waitFor(() => session.queuedCount === 0, 5000);
  });

  it('loads only the window at start and reads the rest back from the store after a restart', async () => {
    const dir = d.tempDir();
    const first = await open(dir);
    subscribe(first.broker, 'historian');
    const total = 3 * WINDOW;
    await publishRange(first.broker, 0, total);
    first.broker.close();
    brokers.splice(brokers.indexOf(first.broker), 1);
    await first.store.close();
    stores.splice(stores.indexOf(first.store), 1);

    gc();
    const before = process.memoryUsage().arrayBuffers;
    const { broker } = await open(dir);
    expect(broker.restoreSessions()).toBe(1);
    // The window's payloads (20 MB, plus what the allocator keeps), not all of them (60 MB). Reading the tail
    // for its sizes leaves 40 MB of copies behind, and V8 frees collected backing stores on a background thread,
    // so the figure settles only after a collection has finished sweeping: polled, with a full collection each
    // time. Were the whole queue held, it would never fall below 60 MB.
    const held = (): number => {
      gc();
      return process.memoryUsage().arrayBuffers - before;
    };
    await waitFor(() => held() < 2 * WINDOW * PAYLOAD_BYTES, 5000, { message: () => `${held()} bytes held` });
    const session = broker.sessions.get('historian') as Session;
    expect(session.queuedCount).toBe(total);
    const got = attachClient(session);
    await waitFor(() => got.numbers.length >= total, 20_000, { message: () => `${got.numbers.length}/${total}` });
    expect(got.numbers).toEqual(range(0, total));
    await waitFor(() => session.queuedCount === 0, 5000);
  });
});
