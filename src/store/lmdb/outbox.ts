/**
 * A bridge outbox in the LMDB store: a cursor over the store's one journal of messages bound upstream
 * (journal.ts; docs/architecture.md#one-journal). Its entries are the journal's entries whose mask has its bit;
 * it removes them by moving its floor and, for those acknowledged out of order, by marks (outbox-removed).
 */
import type { Message } from '../../protocol/message.js';
import { asError, StoreError } from '../../util/errors.js';
import { IdTable } from '../../util/id-table.js';
import {
  CorruptValueError,
  encodeStampedValue,
  keySeq,
  outboxEntryBytes,
  ownerPrefix,
  prefixEnd,
  MARK,
  seqKey,
  stampedValueMs,
} from '../codec.js';
import {
  appendRefusal,
  closedError,
  emptyDropped,
  entryTooLargeError,
  isLimited,
  queueFullError,
} from '../outbox-limits.js';
import type { DropReason, Outbox, OutboxDepth, OutboxEntry, OutboxLimits } from '../types.js';
import type { Chunk } from './outbox-chunk.js';
import { storedCursor, type JournalCursor, type LmdbJournal } from './journal.js';
import { DelayedFlush, type Batch, type BatchMember, type StoreWriter } from './store-writer.js';

/** Outbox counters live in `meta` under `outbox:<name>`; the range of those keys lists the outboxes. */
export const OUTBOX_META_PREFIX = 'outbox:';
export const OUTBOX_META_END = 'outbox;';
export const outboxMetaKey = (name: string): string => OUTBOX_META_PREFIX + name;

export interface OutboxMeta {
  lastSeq: number;
  /** Absent after `store salvage` (salvage.ts): counted from the entries at the next open. */
  messages: number;
  bytes: number;
  dropped: Record<DropReason, number>;
  /** No live entry has a lower seq. Absent in stores from before chunks, whose first entry is live. */
  floor?: number;
  /** The outbox's bit in the journal's masks; absent in an outbox from before the journal (migrate.ts). */
  slot?: number;
}

/** The journal's stand-in for an outbox not opened in this process, from its stored counters. */
export function storedOutboxCursor(meta: OutboxMeta): JournalCursor {
  // Without counts (after `store salvage`) it may hold any entry from its floor on.
  return storedCursor(meta.floor ?? 0, (meta.messages as number | undefined) ?? 1);
}

interface HeadEntry {
  seq: number;
  bytes: number;
  appendedAtMs: number;
}

export class LmdbOutbox implements Outbox, BatchMember, JournalCursor {
  readonly name: string;
  limits: OutboxLimits;
  private readonly store: StoreWriter;
  private readonly journal: LmdbJournal;
  readonly slot: number;
  private readonly bit: number;
  /** Owner prefix of its marks (outbox-removed, outbox-released). */
  private readonly prefix: Buffer;
  private readonly end: Buffer;
  private readonly metaKey: string;
  private lastSeq: number;
  private messages: number;
  private bytes: number;
  /** Appends scheduled and not applied to a batch yet: `refusal` counts them. */
  private readonly pending = { messages: 0, bytes: 0 };
  private dropped: Record<DropReason, number>;
  private oldestAppendedAtMs: number | undefined;
  /** No committed live entry has a lower seq. */
  private floor: number;
  /**
   * Committed removals at or above the floor (acknowledged out of order), each with a mark in outbox-removed.
   * This and the other per-message tables here are `IdTable`s, not `Set`s or `Map`s: entries come and go with every
   * message, and a replaced Map table chains to the next through every scavenge (util/id-table.ts).
   */
  private readonly removed = new IdTable<true>();
  /** Seqs with a committed `released` mark (QoS 2 received upstream); at most a window's worth. */
  private readonly released = new IdTable<true>();

  // Per batch (see BatchMember): undo data, changes not yet visible to readers, head scanning.
  private snapshot: (OutboxMeta & { oldest: number | undefined }) | undefined;
  /** Seqs removed or dropped by the batch in flight; hidden from `peek` until it commits. */
  private removedInFlight = new Set<number>();
  /** Seqs passed to `remove()` whose op has not run yet (with how many times); hidden from `peek` too. */
  private readonly removalsQueued = new IdTable<number>();
  /** Seqs passed to `remove()`, in order, until `removalFlush` applies them. */
  private removals: number[] = [];
  private readonly removalFlush: DelayedFlush;
  /** Where this batch's search for the head resumes: every entry below it is removed. */
  private scanFrom = 0;
  /** The floor once this batch commits. */
  private nextFloor: number | undefined;
  private headChanged = false;
  /** Bytes of the entries removed here that no other outbox held: freed in the store (see `makeStoreRoom`). */
  private storeFreed = 0;
  /** Counters changed in this batch, so they must be written. */
  private dirty = false;
  /** `released` marks written and deleted by the batch in flight, applied to `released` when it commits. */
  private marking: { added: number[]; deleted: number[] } = { added: [], deleted: [] };

  constructor(store: StoreWriter, journal: LmdbJournal, name: string, limits: OutboxLimits) {
    this.store = store;
    this.journal = journal;
    this.name = name;
    this.limits = limits;
    try {
      this.prefix = ownerPrefix(name);
    } catch (err) {
      throw new StoreError('EF_STORE_OPEN', `invalid outbox name ${JSON.stringify(name)}`, { cause: err });
    }
    this.end = prefixEnd(this.prefix);
    this.metaKey = outboxMetaKey(name);
    this.removalFlush = new DelayedFlush(store, (b) => this.applyRemovals(b));
    const meta = store.readMeta<OutboxMeta>(this.metaKey);
    // A new outbox claims no entry older than itself: its floor is the journal's tail, and its slot a free one
    // (a slot freed by `deleteOutbox` may be set in older entries, which are below that floor).
    this.slot = meta?.slot ?? journal.freeSlot(name);
    this.bit = 1 << this.slot;
    journal.attach(this.slot, this);
    for (const key of store.outboxRemovedDb.getKeys({ start: this.prefix, end: this.end, snapshot: false })) {
      this.removed.set(keySeq(key), true);
    }
    for (const key of store.outboxReleasedDb.getKeys({ start: this.prefix, end: this.end, snapshot: false })) {
      this.released.set(keySeq(key), true);
    }
    this.lastSeq = meta?.lastSeq ?? 0;
    this.floor = meta?.slot === undefined ? journal.tailSeq + 1 : (meta.floor ?? 0);
    this.dropped = { ...emptyDropped(), ...meta?.dropped };
    if (meta?.messages !== undefined && (meta.bytes as number | undefined) !== undefined) {
      this.messages = meta.messages;
      this.bytes = meta.bytes;
    } else {
      // No counts yet (a new outbox, normally empty; or one `store salvage` copied): count what is there.
      this.messages = 0;
      this.bytes = 0;
      for (const chunk of this.journal.chunksFrom(this.floor)) {
        for (let seq = Math.max(chunk.start, this.floor); seq < chunk.end; seq++) {
          if (this.removed.has(seq) || (chunk.mask(seq) & this.bit) === 0) continue;
          this.messages++;
          this.bytes += chunk.bytes(seq);
        }
      }
    }
    this.oldestAppendedAtMs = this.firstLive()?.appendedAtMs;
    this.scanFrom = 0;
    // A new outbox is recorded (its slot with it) by the first batch it joins: until then it holds nothing, so
    // after a restart without it, a new slot and floor lose nothing.
    if (meta?.slot === undefined) this.dirty = true;
  }

  claimFloor(): number {
    return this.messages > 0 ? (this.nextFloor ?? this.floor) : Infinity;
  }

  holds(seq: number): boolean {
    return this.isLive(seq);
  }

  refusal(msg: Message): StoreError | undefined {
    const messages = this.messages + this.pending.messages;
    return (
      appendRefusal(this.name, this.limits, messages, this.bytes + this.pending.bytes, outboxEntryBytes(msg)) ??
      this.store.quotaRefusal(this.canMakeRoom(messages))
    );
  }

  /** Past `storage.maxBytes` a `drop-oldest` outbox holding entries drops its oldest instead of refusing. */
  private canMakeRoom(messages: number): boolean {
    return this.limits.overflow === 'drop-oldest' && messages > 0;
  }

  append(msg: Message): Promise<void> {
    let value: Buffer;
    const before = this.journal.lastEncoded;
    try {
      value = this.journal.encode(msg);
    } catch (err) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }),
      );
    }
    if (this.store.isClosing) return Promise.reject(closedError());
    const canMakeRoom = this.canMakeRoom(this.messages + this.pending.messages);
    const refused = this.store.quotaRefusal(canMakeRoom);
    if (refused !== undefined) return Promise.reject(refused);
    this.pending.messages++;
    this.pending.bytes += value.length;
    // Admitted (the store's answer holds for this synchronous section). Another bridge's copy of the message
    // just appended shares its entry: no new bytes for the store.
    return this.store.admit(
      value === before ? 0 : value.length,
      (b) => {
        this.pending.messages--;
        this.pending.bytes -= value.length;
        this.applyAppend(b, value);
      },
      canMakeRoom,
    );
  }

  /** Throws (changing nothing but joining the batch) when refused; `mayDrop: false` refuses rather than drop-oldest. */
  private applyAppend(b: Batch, value: Buffer, mayDrop = true): void {
    this.touch(b);
    const bytes = value.length;
    const { maxBytes, maxMessages } = this.limits;
    const dropOldest = mayDrop && this.limits.overflow === 'drop-oldest';
    if (isLimited(maxBytes) && bytes > maxBytes) throw entryTooLargeError(this.name, this.limits, bytes);
    const overLimit = (): boolean =>
      (isLimited(maxMessages) && this.messages + 1 > maxMessages) ||
      (isLimited(maxBytes) && this.bytes + bytes > maxBytes);
    if (overLimit()) {
      if (!dropOldest) throw queueFullError(this.name, this.limits, bytes);
      while (overLimit() && this.makeRoom(b) > 0);
    }
    // Another bridge's copy of the same message adds this outbox to that entry: no new bytes for the store.
    if (!this.journal.merges(value, this.bit))
      this.store.reserve(b, bytes, dropOldest ? () => this.makeStoreRoom(b) : undefined);
    this.lastSeq = this.journal.append(b, value, this.bit);
    this.messages++;
    this.bytes += bytes;
    this.dirty = true;
    if (this.messages === 1) this.headChanged = true;
  }

  peek(limit: number, afterSeq?: number): readonly OutboxEntry[] {
    const out: OutboxEntry[] = [];
    if (limit <= 0) return out;
    const from = afterSeq === undefined ? this.floor : Math.max(this.floor, Math.floor(afterSeq) + 1);
    const hidden = this.removed.size > 0 || this.removedInFlight.size > 0 || this.removalsQueued.size > 0;
    let damaged: number[] | undefined;
    try {
      for (const chunk of this.journal.chunksFrom(from)) {
        for (let seq = Math.max(from, chunk.start); seq < chunk.end; seq++) {
          if ((chunk.mask(seq) & this.bit) === 0) continue;
          if (hidden && (this.removed.has(seq) || this.removedInFlight.has(seq) || this.removalsQueued.has(seq)))
            continue;
          try {
            out.push(chunk.entry(seq, this.released.size > 0 && this.released.has(seq)));
          } catch (err) {
            if (!(err instanceof CorruptValueError)) throw err;
            (damaged ??= []).push(seq);
            continue;
          }
          if (out.length >= limit) return out;
        }
      }
      return out;
    } finally {
      if (damaged !== undefined) this.dropDamaged(damaged);
    }
  }

  /** Damaged entries met by a read: never sent; removed like acknowledged ones (counted by the store). */
  private dropDamaged(seqs: number[]): void {
    this.store.reportCorrupt(
      'outbox entries',
      { outbox: this.name, seqFrom: seqs[0], seqTo: seqs[seqs.length - 1] },
      seqs.length,
      [],
    );
    this.remove(seqs).catch((err: unknown) =>
      this.store.log.warn({ err, outbox: this.name }, 'damaged outbox entries not removed'),
    );
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

  /**
   * One operation, so one transaction: the appends to `target` (its chunk and counters) commit together with the
   * removals here (floor or removed marks, counters), or neither does; a failed commit rolls both back in JS.
   */
  moveTo(target: Outbox, limit: number): Promise<number> {
    if (!(target instanceof LmdbOutbox) || target.store !== this.store) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `outbox "${target.name}" is not in the store of outbox "${this.name}"`),
      );
    }
    if (this.store.isClosing) return Promise.reject(closedError());
    return this.store.schedule((b) => {
      this.touch(b);
      let moved = 0;
      for (const entry of this.peek(limit)) {
        if (!target.appendMoved(b, entry.msg)) break;
        this.removeOne(b, entry.seq);
        moved++;
      }
      return moved;
    });
  }

  /** Appends `msg`, taken from another outbox in this batch, if it fits without dropping anything; false if not. */
  private appendMoved(b: Batch, msg: Message): boolean {
    try {
      this.applyAppend(b, encodeStampedValue(msg, this.store.clock.nowMs(), this.store.clock), false);
      return true;
    } catch (err) {
      if (err instanceof StoreError) return false; // full, or the disk is: the entry stays where it is
      throw err;
    }
  }

  markReleased(seq: number): Promise<void> {
    if (this.store.isClosing) return Promise.reject(closedError());
    return this.store.schedule((b) => {
      if (!this.isLive(seq) || this.released.has(seq) || this.entryBytes(seq) === undefined) return; // unknown: ignored
      this.touch(b);
      this.store.put(b, this.store.outboxReleasedDb, seqKey(this.prefix, seq), MARK);
      this.marking.added.push(seq);
    });
  }

  /** Whether `seq` may be a live entry: in range and not removed (it may still be a gap, see `entryBytes`). */
  private isLive(seq: number): boolean {
    return (
      Number.isSafeInteger(seq) &&
      seq >= this.floor &&
      seq <= this.lastSeq &&
      !this.removed.has(seq) &&
      !this.removedInFlight.has(seq)
    );
  }

  /** Stored bytes of entry `seq`, committed or appended in this batch; undefined when there is none. */
  private entryBytes(seq: number): number | undefined {
    return this.entryMask(seq) === undefined ? undefined : this.ownBytes(seq);
  }

  /** The journal mask of entry `seq` when it is one of this outbox's, else undefined. */
  private entryMask(seq: number): number | undefined {
    const mask =
      seq >= this.journal.batchFrom ? this.journal.batchMask(seq) : this.journal.chunkHolding(seq)?.mask(seq);
    return mask !== undefined && (mask & this.bit) !== 0 ? mask : undefined;
  }

  /** Stored bytes of entry `seq`, one of this outbox's (see `entryMask`). */
  private ownBytes(seq: number): number {
    return seq >= this.journal.batchFrom
      ? this.journal.batchValue(seq).length
      : (this.journal.chunkHolding(seq) as Chunk).bytes(seq);
  }

  private removeOne(b: Batch, seq: number): number {
    if (!this.isLive(seq)) return 0;
    const mask = this.entryMask(seq);
    if (mask === undefined) return 0; // unknown or already removed: ignored by contract
    const bytes = this.ownBytes(seq);
    if (this.released.has(seq) || this.marking.added.includes(seq)) {
      this.store.del(b, this.store.outboxReleasedDb, seqKey(this.prefix, seq));
      this.marking.deleted.push(seq);
    }
    this.removedInFlight.add(seq);
    this.messages--;
    this.bytes -= bytes;
    // The journal keeps the entry while another outbox holds it.
    if (mask === this.bit || !this.journal.heldByOthers(seq, mask, this)) {
      this.store.free(b, bytes);
      this.storeFreed += bytes;
    }
    this.headChanged = true;
    this.dirty = true;
    return bytes;
  }

  expire(nowMs: number = this.store.clock.nowMs()): Promise<number> {
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

  countDropped(reason: DropReason, n: number): Promise<void> {
    // Counted as its batch is built (after the group-commit wait): `depth` shows it at the latest when this settles.
    return this.store
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

  get tailSeq(): number {
    return this.lastSeq;
  }

  get depth(): OutboxDepth {
    return {
      messages: this.messages,
      bytes: this.bytes,
      oldestAppendedAtMs: this.oldestAppendedAtMs,
      dropped: { ...this.dropped },
      cursor: {
        slot: this.slot,
        floor: this.floor,
        removedMarks: this.removed.size,
        releasedMarks: this.released.size,
      },
    };
  }

  /** Registers this outbox in the batch and keeps its counters for a rollback. */
  private touch(b: Batch): void {
    if (!b.join(this)) return;
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

  /**
   * Frees room in the store past `storage.maxBytes` (drop-oldest): drops the oldest entries until one that no
   * other outbox holds is gone. Returns the bytes that freed in the store, 0 when this outbox has no more.
   */
  private makeStoreRoom(b: Batch): number {
    const before = this.storeFreed;
    while (this.storeFreed === before && this.makeRoom(b) > 0);
    return this.storeFreed - before;
  }

  /** Drops the oldest live entry; returns its bytes, 0 when the outbox is empty. */
  private dropHead(b: Batch, reason: DropReason): number {
    const head = this.firstLive();
    if (head === undefined) return 0;
    const freed = this.removeOne(b, head.seq);
    if (freed > 0) this.dropped[reason]++;
    return freed;
  }

  /** The oldest entry not removed, committed or appended in this batch. */
  private firstLive(): HeadEntry | undefined {
    const from = Math.max(this.scanFrom, this.floor);
    const batchFrom = this.journal.batchFrom;
    if (from < batchFrom) {
      for (const chunk of this.journal.chunksFrom(from)) {
        if (chunk.start >= batchFrom) break;
        for (let seq = Math.max(from, chunk.start); seq < chunk.end; seq++) {
          if (this.removed.has(seq) || this.removedInFlight.has(seq) || (chunk.mask(seq) & this.bit) === 0) continue;
          this.scanFrom = seq;
          return { seq, bytes: chunk.bytes(seq), appendedAtMs: chunk.appendedAtMs(seq) };
        }
        this.scanFrom = chunk.end;
      }
    }
    for (let seq = Math.max(from, batchFrom); seq <= this.lastSeq; seq++) {
      if (this.removedInFlight.has(seq) || (this.journal.batchMask(seq) & this.bit) === 0) continue;
      this.scanFrom = seq;
      const value = this.journal.batchValue(seq);
      return { seq, bytes: value.length, appendedAtMs: stampedValueMs(value) };
    }
    this.scanFrom = this.lastSeq + 1;
    return undefined;
  }

  /**
   * End of building a batch: the floor moves up to the new head (the journal, finished after its outboxes,
   * deletes the chunks every floor passed); removals above the floor are marked; the counters are persisted in
   * the same transaction.
   */
  finishBatch(b: Batch): void {
    if (this.headChanged) {
      const head = this.firstLive();
      this.oldestAppendedAtMs = head?.appendedAtMs;
      // Empty: past the journal's tail, so that its next head is not searched for among other outboxes' entries.
      this.nextFloor = head?.seq ?? this.journal.tailSeq + 1;
    }
    const floor = this.nextFloor ?? this.floor;
    if (floor > this.floor) {
      this.journal.join(b); // chunks below every floor go in this transaction
      this.removed.forEach((_, seq) => {
        if (seq < floor) this.store.del(b, this.store.outboxRemovedDb, seqKey(this.prefix, seq));
      });
    }
    for (const seq of this.removedInFlight) {
      if (seq >= floor) this.store.put(b, this.store.outboxRemovedDb, seqKey(this.prefix, seq), MARK);
    }
    if (this.dirty) {
      const meta: OutboxMeta = {
        lastSeq: this.lastSeq,
        messages: this.messages,
        bytes: this.bytes,
        dropped: this.dropped,
        floor,
        slot: this.slot,
      };
      this.store.putMeta(b, this.metaKey, meta);
      this.journal.record(b, this.name, this.slot);
    }
    this.dirty = false;
    this.scanFrom = 0;
    this.headChanged = false;
  }

  committed(): void {
    for (const seq of this.marking.added) this.released.set(seq, true);
    for (const seq of this.marking.deleted) this.released.delete(seq);
    const floor = this.nextFloor ?? this.floor;
    for (const seq of this.removedInFlight) if (seq >= floor) this.removed.set(seq, true);
    if (floor > this.floor) {
      this.removed.forEach((_, seq) => {
        if (seq < floor) this.removed.delete(seq);
      });
      this.floor = floor;
    }
    this.forgetBatch();
  }

  private forgetBatch(): void {
    this.snapshot = undefined;
    this.nextFloor = undefined;
    // Replaced, not cleared: its tables' chain ends with the batch (util/id-table.ts).
    if (this.removedInFlight.size > 0) this.removedInFlight = new Set();
    if (this.marking.added.length > 0 || this.marking.deleted.length > 0) this.marking = { added: [], deleted: [] };
  }

  rollback(): void {
    this.scanFrom = 0;
    this.headChanged = false;
    this.dirty = false;
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
