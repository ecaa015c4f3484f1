/** A bridge outbox in the LMDB store: the journal of messages bound upstream (see store.ts for batches). */
import type { Database } from 'lmdb';
import type { Message } from '../../protocol/message.js';
import { asError, StoreError } from '../../util/errors.js';
import {
  decodeMessage,
  encodeStampedValue,
  keySeq,
  STAMPED_HEADER_BYTES,
  stampedValueMs,
  ownerPrefix,
  prefixEnd,
  RELEASE_MARK,
  seqKey,
} from '../codec.js';
import { closedError, emptyDropped, entryTooLargeError, isLimited, queueFullError } from '../outbox-limits.js';
import type { DropReason, Outbox, OutboxDepth, OutboxEntry, OutboxLimits } from '../types.js';
import { steadyNowMs } from '../../util/clock.js';
import { DelayedFlush, type Batch } from './batch.js';
import type { LmdbStoreImpl } from './store.js';

/** Outbox counters live in `meta` under `outbox:<name>`; the range of those keys lists the outboxes. */
export const OUTBOX_META_PREFIX = 'outbox:';
export const OUTBOX_META_END = 'outbox;';
export const outboxMetaKey = (name: string): string => OUTBOX_META_PREFIX + name;
/** Outbox entries read per step when looking for the oldest live one. */
const HEAD_CHUNK = 64;

export interface OutboxMeta {
  lastSeq: number;
  messages: number;
  bytes: number;
  dropped: Record<DropReason, number>;
}

interface HeadEntry {
  seq: number;
  bytes: number;
  appendedAtMs: number;
}

export class LmdbOutbox implements Outbox {
  readonly name: string;
  limits: OutboxLimits;
  private readonly store: LmdbStoreImpl;
  private readonly db: Database<Buffer, Buffer>;
  private readonly prefix: Buffer;
  private readonly end: Buffer;
  private readonly metaKey: string;
  private lastSeq: number;
  private messages: number;
  private bytes: number;
  private dropped: Record<DropReason, number>;
  private oldestAppendedAtMs: number | undefined;
  /** Seqs with a committed `released` mark (QoS 2 received upstream); at most a window's worth. */
  private readonly released = new Set<number>();

  // Per batch (see Batch): undo data, changes not yet visible to readers, head scanning.
  private snapshot: (OutboxMeta & { oldest: number | undefined }) | undefined;
  /** Seqs removed or dropped by the batch in flight; hidden from `peek` until it commits. */
  private removedInFlight = new Set<number>();
  /** Seqs passed to `remove()` whose op has not run yet; hidden from `peek` too. */
  private readonly removalsQueued = new Map<number, number>();
  /**
   * Sizes of the committed entries `peek` returned, until they are removed: a removal then needs no read to
   * keep `bytes` exact. Holds what the bridge read ahead and has in flight, a window's worth.
   */
  private readonly peekedBytes = new Map<number, number>();
  /** Seqs passed to `remove()`, in order, until `removalFlush` applies them. */
  private removals: number[] = [];
  private readonly removalFlush: DelayedFlush;
  /** Seqs and values appended in this batch (not readable from the database before the commit). */
  private batchSeqs: number[] = [];
  private batchValues: Buffer[] = [];
  /** Index in `batchSeqs` before which every entry was removed again (drop-oldest on a tiny queue). */
  private batchHead = 0;
  private headBuffer: HeadEntry[] = [];
  private headScanFrom = 0;
  /** No committed entry has a lower seq: where the scan for the head starts. */
  private headFloor: number;
  /** The head found by this batch, the new floor once it commits. */
  private nextHeadFloor: number | undefined;
  private committedExhausted = false;
  private headChanged = false;
  /** Counters changed in this batch, so they must be written. */
  private dirty = false;
  /** `released` marks written and deleted by the batch in flight, applied to `released` when it commits. */
  private marking: { added: number[]; deleted: number[] } = { added: [], deleted: [] };

  constructor(store: LmdbStoreImpl, name: string, limits: OutboxLimits) {
    this.store = store;
    this.name = name;
    this.limits = limits;
    this.db = store.outboxDb;
    try {
      this.prefix = ownerPrefix(name);
    } catch (err) {
      throw new StoreError('EF_STORE_OPEN', `invalid outbox name ${JSON.stringify(name)}`, { cause: err });
    }
    this.end = prefixEnd(this.prefix);
    this.metaKey = outboxMetaKey(name);
    this.removalFlush = new DelayedFlush(store, (b) => this.applyRemovals(b));
    const meta = store.meta.get(this.metaKey) as OutboxMeta | undefined;
    let lastKeySeq = 0;
    for (const key of this.db.getKeys({ start: this.end, end: this.prefix, reverse: true, limit: 1, snapshot: false })) {
      lastKeySeq = keySeq(key);
    }
    if (meta !== undefined) {
      this.messages = meta.messages;
      this.bytes = meta.bytes;
      this.dropped = { ...emptyDropped(), ...meta.dropped };
      this.lastSeq = Math.max(meta.lastSeq, lastKeySeq);
    } else {
      // No counters yet (new outbox): count what is there, normally nothing.
      this.messages = 0;
      this.bytes = 0;
      for (const { value } of this.db.getRange({ start: this.prefix, end: this.end, snapshot: false })) {
        this.messages++;
        this.bytes += value.length;
      }
      this.dropped = emptyDropped();
      this.lastSeq = lastKeySeq;
    }
    const head = this.readCommittedHead();
    this.oldestAppendedAtMs = head?.appendedAtMs;
    this.headFloor = head?.seq ?? this.lastSeq + 1;
    for (const key of store.outboxReleasedDb.getKeys({ start: this.prefix, end: this.end, snapshot: false })) {
      this.released.add(keySeq(key));
    }
  }

  append(msg: Message): Promise<void> {
    let value: Buffer;
    try {
      value = encodeStampedValue(msg, steadyNowMs());
    } catch (err) {
      return Promise.reject(new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }));
    }
    return this.store.schedule((b) => this.applyAppend(b, value));
  }

  private applyAppend(b: Batch, value: Buffer): void {
    this.touch(b);
    const bytes = value.length;
    const { maxBytes, maxMessages, overflow } = this.limits;
    if (isLimited(maxBytes) && bytes > maxBytes) throw entryTooLargeError(this.name, this.limits, bytes);
    const overLimit = (): boolean =>
      (isLimited(maxMessages) && this.messages + 1 > maxMessages) || (isLimited(maxBytes) && this.bytes + bytes > maxBytes);
    if (overLimit()) {
      if (overflow === 'reject-new') throw queueFullError(this.name, this.limits, bytes);
      while (overLimit() && this.makeRoom(b) > 0);
    }
    this.store.reserve(b, bytes, overflow === 'drop-oldest' ? () => this.makeRoom(b) : undefined);
    const seq = this.lastSeq + 1;
    this.store.put(b, this.db, seqKey(this.prefix, seq), value);
    this.lastSeq = seq;
    this.messages++;
    this.bytes += bytes;
    this.batchSeqs.push(seq);
    this.batchValues.push(value);
    this.dirty = true;
    if (this.messages === 1) this.headChanged = true;
  }

  peek(limit: number, afterSeq?: number): readonly OutboxEntry[] {
    const out: OutboxEntry[] = [];
    if (limit <= 0) return out;
    const hidden = this.removedInFlight.size > 0 || this.removalsQueued.size > 0;
    const start = afterSeq === undefined ? this.prefix : seqKey(this.prefix, Math.floor(afterSeq) + 1);
    // Without `limit` in the range when entries may be hidden; the iteration is lazy and stops below.
    const range = this.db.getRange({ start, end: this.end, snapshot: false, ...(hidden ? {} : { limit }) });
    for (const { key, value } of range) {
      const seq = keySeq(key);
      if (hidden && (this.removedInFlight.has(seq) || this.removalsQueued.has(seq))) continue;
      this.peekedBytes.set(seq, value.length);
      out.push({
        seq,
        msg: decodeMessage(value, STAMPED_HEADER_BYTES),
        appendedAtMs: stampedValueMs(value),
        bytes: value.length,
        released: this.released.size > 0 && this.released.has(seq),
      });
      if (out.length >= limit) break;
    }
    return out;
  }

  remove(seqs: readonly number[]): Promise<void> {
    if (this.store.isClosing) return Promise.reject(closedError());
    for (const seq of seqs) {
      this.removalsQueued.set(seq, (this.removalsQueued.get(seq) ?? 0) + 1);
      this.removals.push(seq);
    }
    return this.removalFlush.wait();
  }

  /** Close: collected removals go now, so a graceful stop sends nothing twice. */
  flushRemovals(): void {
    this.removalFlush.now();
  }

  private applyRemovals(b: Batch): void {
    const list = this.removals;
    this.removals = [];
    for (const seq of list) {
      const n = (this.removalsQueued.get(seq) ?? 1) - 1;
      if (n > 0) this.removalsQueued.set(seq, n);
      else this.removalsQueued.delete(seq);
    }
    this.touch(b);
    for (const seq of list) this.removeOne(b, seq);
  }

  markReleased(seq: number): Promise<void> {
    if (this.store.isClosing) return Promise.reject(closedError());
    return this.store.schedule((b) => {
      if (!Number.isSafeInteger(seq) || seq <= 0 || seq > this.lastSeq || this.removedInFlight.has(seq) || this.released.has(seq)) return;
      const key = seqKey(this.prefix, seq);
      if (!this.batchSeqs.includes(seq) && this.db.getBinaryFast(key) === undefined) return; // unknown: ignored
      this.touch(b);
      this.store.put(b, this.store.outboxReleasedDb, key, RELEASE_MARK);
      this.marking.added.push(seq);
    });
  }

  private removeOne(b: Batch, seq: number): number {
    if (!Number.isSafeInteger(seq) || seq <= 0 || seq > this.lastSeq || this.removedInFlight.has(seq)) return 0;
    let bytes = this.peekedBytes.get(seq);
    if (bytes === undefined) {
      const inBatch = this.batchSeqs.length > 0 && seq >= this.batchSeqs[0] ? this.batchSeqs.indexOf(seq) : -1;
      if (inBatch >= 0) bytes = this.batchValues[inBatch].length;
      else bytes = this.db.getBinaryFast(seqKey(this.prefix, seq))?.length;
      if (bytes === undefined) return 0; // unknown or already removed: ignored by contract
    } else {
      this.peekedBytes.delete(seq);
    }
    const key = seqKey(this.prefix, seq);
    this.store.del(b, this.db, key);
    if (this.released.has(seq) || this.marking.added.includes(seq)) {
      this.store.del(b, this.store.outboxReleasedDb, key);
      this.marking.deleted.push(seq);
    }
    this.removedInFlight.add(seq);
    this.messages--;
    this.bytes -= bytes;
    this.store.release(b, bytes);
    this.headChanged = true;
    this.dirty = true;
    return bytes;
  }

  expire(nowMs: number = steadyNowMs()): Promise<number> {
    const maxAgeS = this.limits.maxAgeS;
    if (this.store.isClosing) return Promise.reject(closedError());
    const cutoffMs = nowMs - maxAgeS * 1000;
    // Called periodically: skip the batch (a commit) when even the oldest entry is young enough. Appends still
    // queued are younger, removals still queued only make the head younger, so this answer is exact.
    if (!isLimited(maxAgeS) || this.oldestAppendedAtMs === undefined || this.oldestAppendedAtMs >= cutoffMs) {
      return Promise.resolve(0);
    }
    return this.store.schedule((b) => {
      this.touch(b);
      // Acknowledged entries whose delete is pending are delivered, not expired.
      if (this.removals.length > 0) this.applyRemovals(b);
      let n = 0;
      for (;;) {
        const head = this.firstLive();
        if (head === undefined || head.appendedAtMs >= cutoffMs) break;
        this.dropHead(b, 'expired');
        n++;
      }
      return n;
    });
  }

  countDropped(reason: DropReason, n: number): void {
    this.store
      .schedule((b) => {
        this.touch(b);
        this.dropped[reason] += n;
        this.dirty = true;
      })
      .catch((err: unknown) => {
        // Only the persisted copy of a statistic is lost; the in-memory count was rolled back with the batch.
        this.store.log.warn({ err, outbox: this.name, reason, n }, 'could not persist dropped count');
      });
  }

  get depth(): OutboxDepth {
    return {
      messages: this.messages,
      bytes: this.bytes,
      oldestAppendedAtMs: this.oldestAppendedAtMs,
      dropped: { ...this.dropped },
    };
  }

  /** Registers this outbox in the batch and keeps its counters for a rollback. */
  private touch(b: Batch): void {
    if (b.outboxes.has(this)) return;
    b.outboxes.add(this);
    this.snapshot = {
      lastSeq: this.lastSeq,
      messages: this.messages,
      bytes: this.bytes,
      dropped: { ...this.dropped },
      oldest: this.oldestAppendedAtMs,
    };
  }

  /**
   * Frees room for an append past the limits: acknowledged entries whose delete is pending (DelayedFlush) go
   * first, as they are no loss; else the oldest live entry is dropped. Returns the bytes freed, 0 when none.
   */
  private makeRoom(b: Batch): number {
    if (this.removals.length > 0) {
      const before = this.bytes;
      this.applyRemovals(b);
      if (this.bytes < before) return before - this.bytes;
    }
    return this.dropHead(b, 'queue_full');
  }

  /** Drops the oldest live entry; returns its bytes, 0 when the outbox is empty. */
  private dropHead(b: Batch, reason: DropReason): number {
    const head = this.firstLive();
    if (head === undefined) return 0;
    this.headBuffer.shift();
    const freed = this.removeOne(b, head.seq);
    if (freed > 0) this.dropped[reason]++;
    return freed;
  }

  /**
   * The oldest entry not removed in this batch: committed entries (read ahead in chunks, as the committed
   * database does not change while the batch is built), then those appended in this batch.
   */
  private firstLive(): HeadEntry | undefined {
    for (;;) {
      while (this.headBuffer.length > 0) {
        const e = this.headBuffer[0];
        if (!this.removedInFlight.has(e.seq)) return e;
        this.headBuffer.shift();
      }
      if (this.committedExhausted) break;
      let limit = HEAD_CHUNK;
      if (this.headScanFrom === 0) {
        // Entries removed in this batch are still committed, normally as a run at the head (acknowledgements
        // come in order): the first read starts past that run and takes just enough to pass any other removed
        // ones (the head's age is needed after every batch of acknowledgements).
        let from = this.headFloor;
        while (this.removedInFlight.has(from)) from++;
        limit = Math.min(HEAD_CHUNK, this.removedInFlight.size - (from - this.headFloor) + 1);
        this.headScanFrom = from;
      }
      let n = 0;
      for (const { key, value } of this.db.getRange({
        start: seqKey(this.prefix, this.headScanFrom),
        end: this.end,
        limit,
        snapshot: false,
      })) {
        const seq = keySeq(key);
        this.headBuffer.push({ seq, bytes: value.length, appendedAtMs: stampedValueMs(value) });
        this.headScanFrom = seq + 1;
        n++;
      }
      if (n < limit) this.committedExhausted = true;
    }
    while (this.batchHead < this.batchSeqs.length && this.removedInFlight.has(this.batchSeqs[this.batchHead])) {
      this.batchHead++;
    }
    if (this.batchHead === this.batchSeqs.length) return undefined;
    const value = this.batchValues[this.batchHead];
    return { seq: this.batchSeqs[this.batchHead], bytes: value.length, appendedAtMs: stampedValueMs(value) };
  }

  private readCommittedHead(): HeadEntry | undefined {
    for (const { key, value } of this.db.getRange({ start: this.prefix, end: this.end, limit: 1, snapshot: false })) {
      return { seq: keySeq(key), bytes: value.length, appendedAtMs: stampedValueMs(value) };
    }
    return undefined;
  }

  /** End of building a batch: persist counters in the same transaction, recompute the head's age. */
  finishBatch(b: Batch): void {
    if (this.dirty) {
      const meta: OutboxMeta = { lastSeq: this.lastSeq, messages: this.messages, bytes: this.bytes, dropped: this.dropped };
      this.store.put(b, this.store.meta, this.metaKey, meta);
    }
    this.dirty = false;
    if (this.headChanged) {
      const head = this.firstLive();
      this.oldestAppendedAtMs = head?.appendedAtMs;
      this.nextHeadFloor = head?.seq ?? this.lastSeq + 1;
    }
    this.batchSeqs = [];
    this.batchValues = [];
    this.batchHead = 0;
    this.headBuffer = [];
    this.headScanFrom = 0;
    this.committedExhausted = false;
    this.headChanged = false;
  }

  committed(): void {
    for (const seq of this.marking.added) this.released.add(seq);
    for (const seq of this.marking.deleted) this.released.delete(seq);
    if (this.nextHeadFloor !== undefined) this.headFloor = this.nextHeadFloor;
    this.forgetBatch();
  }

  private forgetBatch(): void {
    this.snapshot = undefined;
    this.nextHeadFloor = undefined;
    this.removedInFlight = new Set();
    if (this.marking.added.length > 0 || this.marking.deleted.length > 0) this.marking = { added: [], deleted: [] };
  }

  rollback(): void {
    const s = this.snapshot;
    if (s !== undefined) {
      this.lastSeq = s.lastSeq;
      this.messages = s.messages;
      this.bytes = s.bytes;
      this.dropped = s.dropped;
      this.oldestAppendedAtMs = s.oldest;
    }
    this.forgetBatch();
  }
}
