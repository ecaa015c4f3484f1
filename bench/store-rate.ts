/**
 * The rate the LMDB store itself commits durable writes at, with a given number of writes in flight and no
 * network, broker or client in the way: the ceiling of every durable ingest path (QoS 1 publishes into a
 * persistent session's offline queue or a bridge outbox can be acknowledged no faster). Used by
 * `npm run bench:store` and, in the same run as the brokers, by `npm run bench:persistence` (its `store` row).
 *
 * Each of `inFlight` writers queues one message, waits until the store says it is durable (as the broker does
 * before a PUBACK), and queues the next at once. With `storage.sync: full` every commit waits for the disk, so
 * the rate is about in-flight / (commit latency): every writer is back before the next commit starts, which a
 * writer on the other side of a network round trip is not (docs/architecture.md#durability).
 */
import { createMessage } from '../src/protocol/message.js';
import { openLmdbStore } from '../src/store/lmdb/open.js';
import type { Store } from '../src/store/types.js';
import { silentLogger } from '../src/util/logger.js';

export const storeTargets = ['session queue', 'bridge outbox'] as const;
export type StoreTarget = (typeof storeTargets)[number];

export interface StoreRateOptions {
  inFlight: number;
  messages: number;
  sync: 'full' | 'relaxed';
  payloadBytes: number;
}

/** Messages per second through `write`, keeping `inFlight` writes waiting for durability at any time. */
async function measure(opts: StoreRateOptions, write: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const writer = async (): Promise<void> => {
    while (next < opts.messages) await write(next++);
  };
  const startedMs = performance.now();
  await Promise.all(Array.from({ length: opts.inFlight }, writer));
  return (opts.messages * 1000) / (performance.now() - startedMs);
}

/** Durable messages per second into `target` of a fresh store in `dir`. */
export async function storeRate(target: StoreTarget, opts: StoreRateOptions, dir: string): Promise<number> {
  const store: Store = await openLmdbStore({ path: dir, sync: opts.sync, maxBytes: 0, log: silentLogger });
  try {
    const payload = Buffer.alloc(opts.payloadBytes, 0x61);
    const message = (i: number) => createMessage({ topic: `bench/${i % 10}`, payload, qos: 1, origin: 'bench' });
    if (target === 'session queue') {
      await store.sessions.putSession('bench-subscriber', { expiryIntervalS: 3600 });
      return await measure(opts, (i) => store.sessions.enqueue('bench-subscriber', message(i)));
    }
    const outbox = store.outbox('bench', { maxMessages: 0, maxBytes: 0, maxAgeS: 0, overflow: 'drop-oldest' });
    return await measure(opts, (i) => outbox.append(message(i)));
  } finally {
    await store.close();
  }
}
