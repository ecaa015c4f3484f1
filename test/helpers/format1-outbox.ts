/**
 * Writes an outbox in the layout of store format 1 (before the one journal): its own chunks under its owner
 * prefix in the `outbox` database, removal and QoS 2 marks under the same prefix, its counters without a slot,
 * and the schema record 1. What the first open of a store of that release finds and moves to the journal.
 */
import type { Message } from '../../src/protocol/message.js';
import {
  encodeJsonValue,
  encodeSchemaValue,
  encodeStampedValue,
  MARK,
  ownerPrefix,
  seqKey,
} from '../../src/store/codec.js';
import { chunkKey, encodeChunk } from '../../src/store/lmdb/outbox-chunk.js';
import { outboxMetaKey, type OutboxMeta } from '../../src/store/lmdb/outbox.js';
import type { LmdbStore } from '../../src/store/lmdb/store.js';

export interface Format1Outbox {
  readonly name: string;
  /** Entry `seq` is `messages[seq - 1]`, in chunks of `chunkEntries`. */
  readonly messages: readonly Message[];
  readonly chunkEntries: number;
  /** Entries below it were acknowledged (their chunks may still be there). */
  readonly floor: number;
  /** Acknowledged out of order. */
  readonly removed: readonly number[];
  /** QoS 2 entries the central broker has (PUBREC). */
  readonly released: readonly number[];
}

/** Writes `outbox` into the open store `store` (synchronously) and marks the store format 1. */
export function writeFormat1Outbox(store: LmdbStore, outbox: Format1Outbox): void {
  const prefix = ownerPrefix(outbox.name);
  const values = outbox.messages.map((msg, i) => encodeStampedValue(msg, 1000 + i, store.clock));
  for (let start = 0; start < values.length; start += outbox.chunkEntries) {
    const to = Math.min(values.length, start + outbox.chunkEntries);
    if (to <= outbox.floor - 1) continue; // deleted once the floor passed it
    store.outboxDb.putSync(chunkKey(prefix, start + 1, to - start), encodeChunk(values, start, to));
  }
  for (const seq of outbox.removed) store.outboxRemovedDb.putSync(seqKey(prefix, seq), MARK);
  for (const seq of outbox.released) store.outboxReleasedDb.putSync(seqKey(prefix, seq), MARK);
  let messages = 0;
  let bytes = 0;
  values.forEach((v, i) => {
    if (i + 1 >= outbox.floor && !outbox.removed.includes(i + 1)) {
      messages++;
      bytes += v.length;
    }
  });
  const meta: OutboxMeta = {
    lastSeq: values.length,
    messages,
    bytes,
    dropped: { queue_full: 3, expired: 0, rejected_upstream: 0, dead_letter_deleted: 0 },
    floor: outbox.floor,
  };
  store.meta.putSync(outboxMetaKey(outbox.name), encodeJsonValue(meta));
  store.meta.putSync('schema', encodeSchemaValue(1));
}
