/**
 * The one journal of the messages bound upstream (docs/architecture.md#one-journal): every outbox of the store is
 * a cursor over it (outbox.ts), so a message that several bridges take is written once. Entries lie in the
 * `outbox` database under the owner prefix of the empty name (no outbox has it), in chunks with a cursor mask per
 * entry (outbox-chunk.ts); a cursor's slot is its bit. A chunk is deleted once every cursor that holds entries
 * has its floor past the chunk's end. Chunks that stay are merged and compressed (compaction.ts).
 */
import type { Message } from '../../protocol/message.js';
import { StoreError } from '../../util/errors.js';
import type { JournalDepth } from '../types.js';
import { encodeStampedValue, ownerPrefix, prefixEnd, seqKey } from '../codec.js';
import { Chunk, chunkCount, chunkEnd, chunkKey, chunkStart, encodeChunk, logicalChunkBytes } from './outbox-chunk.js';
import { COMPACT_AFTER_MS, COMPACT_IN_BATCHES_UP_TO, JournalCompactor } from './compaction.js';
import type { Batch, BatchMember, StoreWriter } from './store-writer.js';

/** The journal's own record in `meta`: its last seq, so that a seq is never used twice, not even once it is empty. */
export const JOURNAL_META_KEY = 'journal';
export const JOURNAL_PREFIX = ownerPrefix('');
/** One bit per cursor in a u32 mask. */
export const MAX_CURSORS = 32;
/** Chunks kept decoded: what each bridge reads ahead and has in flight, and the heads. */
const CACHED_CHUNKS = 24;
/** An encoded value is shared with another bridge's append of the same message object within this time (a stale stamp would misstate its age). */
const SHARE_WINDOW_MS = 1000;

export interface JournalMeta {
  lastSeq: number;
  /**
   * The slot of each outbox recorded, by name: a second record of what `outbox:<name>` holds, so that `store
   * salvage` finds an outbox whose own record was damaged (salvage.ts).
   */
  cursors?: Record<string, number>;
  /** No chunk below it is left to compact (compaction.ts); absent before compaction: from the first chunk. */
  compacted?: number;
}

/** What the journal needs of a cursor: where its claim on entries starts, and whether it holds one entry. */
export interface JournalCursor {
  /** No entry it still holds has a lower seq, once the batch being built commits; Infinity when it holds none. */
  claimFloor(): number;
  /** Whether it still holds entry `seq` (one of its own). */
  holds(seq: number): boolean;
}

/** A cursor of an outbox not opened in this process (a removed bridge, `store list`): its committed floor. */
export function storedCursor(floor: number, messages: number): JournalCursor {
  return { claimFloor: () => (messages > 0 ? floor : Infinity), holds: (seq) => messages > 0 && seq >= floor };
}

export class LmdbJournal implements BatchMember {
  private readonly store: StoreWriter;
  private readonly end = prefixEnd(JOURNAL_PREFIX);
  private lastSeq: number;
  /** No stored chunk ends at or below it: the lowest claim floor as of the last commit. */
  private floor: number;
  /** By slot; undefined for a free slot. */
  private readonly cursors: (JournalCursor | undefined)[] = [];
  private readonly chunks = new Map<number, Chunk>();
  /** The chunk `chunkHolding` found last (see there). */
  private lastHeld: Chunk | undefined;
  // Per batch: the entries appended (readable from the database only after the commit), undo data.
  private batchValues: Buffer[] = [];
  private batchMasks: number[] = [];
  private batchFirstSeq = 0;
  private lastSeqBefore = 0;
  /** The slots by outbox name as recorded in `meta` (see JournalMeta.cursors); `namesChanged` until written. */
  private readonly names: Map<string, number>;
  private namesChanged = false;
  private nextFloor: number | undefined;
  private deletedChunks: number[] = [];
  /** The last message encoded, so another bridge's append of it in the same routing pass shares its value. */
  private shared: { msg: Message; value: Buffer; atMs: number } | undefined;
  private readonly compactor: JournalCompactor;
  /** `compactor.compacted` as written in `meta` (or before the batch in flight, for a rollback). */
  private compactedBefore: number;
  /**
   * The seqs of the chunks a compaction in flight replaces: chunks there are not cached until it settles, so that
   * no read follows a cached chunk the commit replaced into the database's new layout (see `keysFrom`).
   */
  private merging: { start: number; end: number } | undefined;

  constructor(store: StoreWriter, compactAfterMs = COMPACT_AFTER_MS) {
    this.store = store;
    let lastStored = 0;
    this.floor = Infinity;
    for (const key of store.outboxDb.getKeys({ start: JOURNAL_PREFIX, end: this.end, limit: 1, snapshot: false })) {
      this.floor = chunkStart(key, JOURNAL_PREFIX.length);
    }
    for (const key of store.outboxDb.getKeys({
      start: this.end,
      end: JOURNAL_PREFIX,
      reverse: true,
      limit: 1,
      snapshot: false,
    })) {
      lastStored = chunkStart(key, JOURNAL_PREFIX.length) + chunkCount(key, JOURNAL_PREFIX.length) - 1;
    }
    const meta = store.readMeta<JournalMeta>(JOURNAL_META_KEY);
    this.lastSeq = Math.max(meta?.lastSeq ?? 0, lastStored);
    this.names = new Map(Object.entries(meta?.cursors ?? {}));
    if (this.floor === Infinity) this.floor = this.lastSeq + 1;
    this.compactedBefore = meta?.compacted ?? 0;
    this.compactor = new JournalCompactor(this.compactedBefore, JOURNAL_PREFIX, store.clock, compactAfterMs);
  }

  /** Its stored chunks counted (reads them all). */
  depth(): JournalDepth {
    let entries = 0;
    let bytes = 0;
    let logicalBytes = 0;
    let chunks = 0;
    let firstSeq: number | undefined;
    for (const { key, value } of this.store.outboxDb.getRange({
      start: JOURNAL_PREFIX,
      end: this.end,
      snapshot: false,
    })) {
      firstSeq ??= chunkStart(key, JOURNAL_PREFIX.length);
      entries += chunkCount(key, JOURNAL_PREFIX.length);
      bytes += value.length;
      logicalBytes += logicalChunkBytes(value);
      chunks++;
    }
    return { entries, bytes, logicalBytes, chunks, firstSeq, lastSeq: this.lastSeq };
  }

  /** The seq of the newest entry (0 for none yet). */
  get tailSeq(): number {
    return this.lastSeq;
  }

  /** Registers the cursor of `slot` (stored or opened; an opened one replaces its stored stand-in). */
  attach(slot: number, cursor: JournalCursor): void {
    this.cursors[slot] = cursor;
  }

  /** No seq at or below an outbox's recorded last seq is used again (its marks and message ids name them). */
  follow(lastSeq: number): void {
    this.lastSeq = Math.max(this.lastSeq, lastSeq);
  }

  /** The cursor of `slot` is deleted: its claims end, and the slot may be given to a new outbox. */
  detach(slot: number): void {
    this.cursors[slot] = undefined;
  }

  /** Records outbox `name` with its slot in the journal's record, in batch `b` (when not recorded yet). */
  record(b: Batch, name: string, slot: number): void {
    if (this.names.get(name) === slot) return;
    this.names.set(name, slot);
    this.namesChanged = true;
    this.join(b);
  }

  /** Outbox `name` is deleted (its cursor detached): its name leaves the journal's record in batch `b`. */
  forget(b: Batch, name: string): void {
    this.namesChanged = this.names.delete(name) || this.namesChanged;
    this.join(b);
  }

  /** The lowest slot no cursor has. */
  freeSlot(name: string): number {
    for (let slot = 0; slot < MAX_CURSORS; slot++) if (this.cursors[slot] === undefined) return slot;
    throw new StoreError(
      'EF_STORE_OPEN',
      `outbox "${name}": the store holds ${MAX_CURSORS} outboxes already (bridges and dead-letter outboxes); ` +
        'delete one of a removed bridge with `edgeferry store delete-outbox NAME`',
    );
  }

  /**
   * `msg` stamped for storage. The bridges a local message is routed to append it one after another in one
   * synchronous pass (each its own copy with the remote topic and QoS): when one equals the message encoded
   * just before, its value is returned again, and `append` then adds the cursor to that entry's mask.
   */
  encode(msg: Message): Buffer {
    const nowMs = this.store.clock.nowMs();
    const last = this.shared;
    if (last !== undefined && nowMs - last.atMs < SHARE_WINDOW_MS && sameMessage(last.msg, msg)) return last.value;
    const value = encodeStampedValue(msg, nowMs, this.store.clock);
    this.shared = { msg, value, atMs: nowMs };
    return value;
  }

  /** The value `encode` returned last. */
  get lastEncoded(): Buffer | undefined {
    return this.shared?.value;
  }

  /** Whether appending `value` for cursor `bit` adds it to the last entry (no new bytes) instead of a new entry. */
  merges(value: Buffer, bit: number): boolean {
    const i = this.batchValues.length - 1;
    return i >= 0 && this.batchValues[i] === value && (this.batchMasks[i] & bit) === 0;
  }

  /** Appends `value` for cursor `bit` in batch `b` (or adds the cursor to the same last entry); returns its seq. */
  append(b: Batch, value: Buffer, bit: number): number {
    this.join(b);
    if (this.merges(value, bit)) {
      this.batchMasks[this.batchMasks.length - 1] |= bit;
      return this.lastSeq;
    }
    if (this.batchValues.length === 0) this.batchFirstSeq = this.lastSeq + 1;
    this.batchValues.push(value);
    this.batchMasks.push(bit);
    return ++this.lastSeq;
  }

  /** The journal is finished after every cursor of the batch: its deletes follow their floors. */
  join(b: Batch): void {
    if (b.joinLast(this)) this.lastSeqBefore = this.lastSeq;
  }

  /** First seq appended in the batch being built (lastSeq + 1 when none): lower seqs are in stored chunks. */
  get batchFrom(): number {
    return this.batchValues.length > 0 ? this.batchFirstSeq : this.lastSeq + 1;
  }

  /** Value of entry `seq` appended in the batch being built (at or above `batchFrom`). */
  batchValue(seq: number): Buffer {
    return this.batchValues[seq - this.batchFirstSeq];
  }

  batchMask(seq: number): number {
    return this.batchMasks[seq - this.batchFirstSeq];
  }

  /** Whether another cursor than `self` still holds entry `seq` of mask `mask` (on the acknowledgement path: no allocation). */
  heldByOthers(seq: number, mask: number, self: JournalCursor): boolean {
    for (let rest = mask; rest !== 0; rest &= rest - 1) {
      const cursor = this.cursors[31 - Math.clz32(rest & -rest)];
      if (cursor !== undefined && cursor !== self && cursor.holds(seq)) return true;
    }
    return false;
  }

  /** The stored chunk holding `seq`, if any. */
  chunkHolding(seq: number): Chunk | undefined {
    // Acknowledgements come mostly in order: the chunk of the last one usually holds the next.
    if (this.lastHeld?.has(seq) === true) return this.lastHeld;
    for (const chunk of this.chunks.values()) if (chunk.has(seq)) return (this.lastHeld = chunk);
    const key = this.storedKeyHolding(seq);
    return key === undefined ? undefined : (this.lastHeld = this.chunk(key));
  }

  private storedKeyHolding(seq: number): Buffer | undefined {
    const bound = chunkKey(JOURNAL_PREFIX, seq, 0xffff_ffff);
    for (const key of this.store.outboxDb.getKeys({
      start: bound,
      end: JOURNAL_PREFIX,
      reverse: true,
      limit: 1,
      snapshot: false,
    })) {
      if (chunkStart(key, JOURNAL_PREFIX.length) + chunkCount(key, JOURNAL_PREFIX.length) > seq) return key;
    }
    return undefined;
  }

  /**
   * Keys of the stored chunks holding seqs from `seq` on, in order. Consecutive chunks in the cache follow one
   * another without a database read (a range read costs more than a small chunk's decoding).
   */
  private *keysFrom(seq: number): Generator<Buffer> {
    let next = seq;
    let key: Buffer | undefined;
    for (const chunk of this.chunks.values()) if (chunk.has(seq)) key = chunk.key;
    key ??= this.storedKeyHolding(seq);
    for (; key !== undefined; key = this.chunks.get(next)?.key) {
      yield key;
      next = chunkStart(key, JOURNAL_PREFIX.length) + chunkCount(key, JOURNAL_PREFIX.length);
    }
    yield* this.store.outboxDb.getKeys({ start: seqKey(JOURNAL_PREFIX, next), end: this.end, snapshot: false });
  }

  /**
   * The stored chunks holding seqs from `seq` on, in order. `cache: false` (compaction, which reads runs of old
   * chunks once) keeps the cache for the readers' heads.
   */
  *chunksFrom(seq: number, cache = true): Generator<Chunk> {
    for (const key of this.keysFrom(seq)) yield this.chunk(key, cache);
  }

  /** The chunk under `key`, decoded once and cached (with `cache`). */
  private chunk(key: Buffer, cache = true): Chunk {
    const cached = this.chunks.get(chunkStart(key, JOURNAL_PREFIX.length));
    if (cached !== undefined) return cached;
    const value = this.store.outboxDb.get(key);
    if (value === undefined) throw new StoreError('EF_STORE_OPEN', 'the outbox journal: a chunk vanished while read');
    const chunk = new Chunk(key, JOURNAL_PREFIX.length, value, this.store.clock);
    const merging = this.merging;
    if (!cache || (merging !== undefined && chunk.start >= merging.start && chunk.start < merging.end)) return chunk;
    this.chunks.set(chunk.start, chunk);
    if (this.chunks.size > CACHED_CHUNKS) this.chunks.delete(this.chunks.keys().next().value as number);
    return chunk;
  }

  /**
   * End of building a batch, after its cursors: the entries appended go in as chunks (but those every cursor has
   * dropped already), and stored chunks below the lowest claim floor are deleted.
   */
  finishBatch(b: Batch): void {
    let floor = this.lastSeq + 1;
    for (const cursor of this.cursors) if (cursor !== undefined) floor = Math.min(floor, cursor.claimFloor());
    const values = this.batchValues;
    for (let i = Math.max(0, floor - this.batchFirstSeq); i < values.length;) {
      const to = chunkEnd(values, i);
      this.store.put(
        b,
        this.store.outboxDb,
        chunkKey(JOURNAL_PREFIX, this.batchFirstSeq + i, to - i),
        encodeChunk(values, i, to, this.batchMasks),
      );
      i = to;
    }
    if (floor > this.floor) {
      for (const key of this.keysFrom(this.floor)) {
        const start = chunkStart(key, JOURNAL_PREFIX.length);
        if (start + chunkCount(key, JOURNAL_PREFIX.length) > floor) break;
        this.store.del(b, this.store.outboxDb, key);
        this.deletedChunks.push(start);
      }
      this.nextFloor = floor;
    }
    // Driven by light appends: a replay that drains the journal spends nothing on compacting what it is about to
    // send, nor does a heavy load (COMPACT_IN_BATCHES_UP_TO).
    if (values.length > 0 && values.length <= COMPACT_IN_BATCHES_UP_TO) this.compact(b, Math.max(floor, this.floor));
    if (this.lastSeq !== this.lastSeqBefore || this.namesChanged || this.compactor.compacted !== this.compactedBefore) {
      this.store.putMeta(b, JOURNAL_META_KEY, {
        lastSeq: this.lastSeq,
        cursors: Object.fromEntries(this.names),
        compacted: this.compactor.compacted,
      } satisfies JournalMeta);
    }
    this.batchValues = [];
    this.batchMasks = [];
  }

  /**
   * One compaction (compaction.ts) of the stored chunks from `floor` on, in batch `b`; none while the disk is full:
   * the merged chunk takes pages before the chunks it replaces free theirs.
   */
  private compact(b: Batch, floor: number): void {
    if (this.store.diskFull) return;
    const compaction = this.compactor.next((seq) => this.chunksFrom(seq, false), floor);
    if (compaction === undefined) return;
    for (const key of compaction.replaced) this.store.del(b, this.store.outboxDb, key);
    this.store.put(b, this.store.outboxDb, compaction.key, compaction.value);
    this.merging = { start: compaction.start, end: compaction.end };
    this.forgetCached(this.merging);
  }

  /** Drops the cached chunks that start in `range`. */
  private forgetCached(range: { start: number; end: number }): void {
    for (const start of [...this.chunks.keys()])
      if (start >= range.start && start < range.end) this.chunks.delete(start);
    if (this.lastHeld !== undefined && this.lastHeld.start >= range.start && this.lastHeld.start < range.end)
      this.lastHeld = undefined;
  }

  committed(): void {
    this.namesChanged = false;
    this.compactedBefore = this.compactor.compacted;
    if (this.merging !== undefined) this.forgetCached(this.merging);
    if (this.nextFloor !== undefined) this.floor = this.nextFloor;
    for (const start of this.deletedChunks) this.chunks.delete(start);
    if (this.lastHeld !== undefined && this.deletedChunks.includes(this.lastHeld.start)) this.lastHeld = undefined;
    this.forgetBatch();
  }

  rollback(): void {
    this.lastSeq = this.lastSeqBefore;
    this.compactor.rollback(this.compactedBefore);
    this.batchValues = [];
    this.batchMasks = [];
    this.shared = undefined;
    this.forgetBatch();
  }

  private forgetBatch(): void {
    this.merging = undefined;
    this.nextFloor = undefined;
    this.deletedChunks = [];
  }
}

/** The same message as far as its stored value goes (the bridges' copies share payload and properties). */
function sameMessage(a: Message, b: Message): boolean {
  return (
    a.payload === b.payload &&
    a.topic === b.topic &&
    a.qos === b.qos &&
    a.retain === b.retain &&
    a.properties === b.properties &&
    a.expiresAt === b.expiresAt &&
    a.origin === b.origin
  );
}
