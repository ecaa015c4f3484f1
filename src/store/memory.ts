/**
 * In-memory store, for broker and contract tests (the gateway always opens LMDB). Same semantics as `lmdb/open.ts` (one contract
 * suite runs against both), nothing survives the process. Writes resolve on the next microtask.
 */
import type { Message } from '../protocol/message.js';
import { encodedMessageBytes, outboxEntryBytes } from './codec.js';
import { QueueSplit } from './queue-window.js';
import {
  appendRefusal,
  closedError,
  emptyDropped,
  entryTooLargeError,
  isLimited,
  outboxInUseError,
  queueFullError,
} from './outbox-limits.js';
import {
  fitsWindow,
  SESSIONS_RESUME_BELOW,
  type DropReason,
  type FlightState,
  type Outbox,
  type OutboxDepth,
  type OutboxEntry,
  type QueueRead,
  type OutboxLimits,
  type PendingWill,
  type QueuedRecord,
  type QueueWindow,
  type RetainedMeta,
  type RetainedStore,
  retainedMeta,
  type SessionFields,
  type SessionRecord,
  type SessionStore,
  type Store,
  type SubscriptionRecord,
} from './types.js';
import { SteadyClock } from '../util/clock.js';
import { StoreError } from '../util/errors.js';

const RESOLVED: Promise<void> = Promise.resolve();

function queuedRecord(seq: number, q: { msg: Message; flight?: FlightState }): QueuedRecord {
  return q.flight === undefined ? { seq, msg: q.msg } : { seq, msg: q.msg, flight: q.flight };
}

class MemoryOutbox implements Outbox {
  readonly name: string;
  limits: OutboxLimits;
  // Entries in seq order from `head`; removed entries leave `undefined` holes until the head passes them.
  private entries: (OutboxEntry | undefined)[] = [];
  private head = 0;
  private lastSeq = 0;
  private messages = 0;
  private bytes = 0;
  private readonly dropped = emptyDropped();
  private readonly isClosed: () => boolean;

  constructor(
    name: string,
    limits: OutboxLimits,
    isClosed: () => boolean,
    private readonly clock: SteadyClock,
  ) {
    this.name = name;
    this.limits = limits;
    this.isClosed = isClosed;
  }

  get tailSeq(): number {
    return this.lastSeq;
  }

  refusal(msg: Message): StoreError | undefined {
    return appendRefusal(this.name, this.limits, this.messages, this.bytes, outboxEntryBytes(msg));
  }

  append(msg: Message): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    const refused = this.add(msg, true);
    return refused === undefined ? RESOLVED : Promise.reject(refused);
  }

  moveTo(target: Outbox, limit: number): Promise<number> {
    if (!(target instanceof MemoryOutbox))
      return Promise.reject(new StoreError('EF_STORE_WRITE', `outbox "${target.name}" is not in this store`));
    if (this.isClosed()) return Promise.reject(closedError());
    let moved = 0;
    for (const entry of this.peek(limit)) {
      if (target.add(entry.msg, false) !== undefined) break;
      void this.remove([entry.seq]); // rejects only when closed, checked above
      moved++;
    }
    return Promise.resolve(moved);
  }

  /** Appends `msg`, or returns why not; `mayDrop: false` refuses rather than drop-oldest. */
  private add(msg: Message, mayDrop: boolean): StoreError | undefined {
    const bytes = outboxEntryBytes(msg);
    const { maxBytes, maxMessages, overflow } = this.limits;
    if (isLimited(maxBytes) && bytes > maxBytes) return entryTooLargeError(this.name, this.limits, bytes);
    const overLimit = (): boolean =>
      (isLimited(maxMessages) && this.messages + 1 > maxMessages) ||
      (isLimited(maxBytes) && this.bytes + bytes > maxBytes);
    if (overLimit()) {
      if (overflow === 'reject-new' || !mayDrop) return queueFullError(this.name, this.limits, bytes);
      while (overLimit() && this.dropHead()) this.dropped.queue_full++;
    }
    this.entries.push({ seq: ++this.lastSeq, msg, appendedAtMs: this.clock.nowMs(), bytes });
    this.messages++;
    this.bytes += bytes;
    return undefined;
  }

  peek(limit: number, afterSeq?: number): readonly OutboxEntry[] {
    const out: OutboxEntry[] = [];
    let i = afterSeq === undefined ? this.head : this.firstIndexAfter(afterSeq);
    for (; i < this.entries.length && out.length < limit; i++) {
      const e = this.entries[i];
      if (e !== undefined) out.push(e);
    }
    return out;
  }

  remove(seqs: readonly number[]): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    for (const seq of seqs) {
      const i = this.indexOf(seq);
      const e = this.entries[i];
      if (e === undefined) continue; // unknown or already removed: ignored by contract
      this.entries[i] = undefined;
      this.messages--;
      this.bytes -= e.bytes;
    }
    this.compact();
    return RESOLVED;
  }

  markReleased(seq: number): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    const i = this.indexOf(seq);
    const e = this.entries[i];
    if (e !== undefined) this.entries[i] = { ...e, released: true };
    return RESOLVED;
  }

  expire(nowMs: number = this.clock.nowMs()): Promise<number> {
    if (this.isClosed()) return Promise.reject(closedError());
    if (!isLimited(this.limits.maxAgeS)) return Promise.resolve(0);
    const cutoffMs = nowMs - this.limits.maxAgeS * 1000;
    let n = 0;
    for (;;) {
      const first = this.entries[this.head];
      if (first === undefined || first.appendedAtMs >= cutoffMs) break;
      this.dropHead();
      n++;
    }
    this.dropped.expired += n;
    return Promise.resolve(n);
  }

  countDropped(reason: DropReason, n: number): Promise<void> {
    this.dropped[reason] += n;
    return Promise.resolve();
  }

  get depth(): OutboxDepth {
    return {
      messages: this.messages,
      bytes: this.bytes,
      oldestAppendedAtMs: this.entries[this.head]?.appendedAtMs,
      dropped: { ...this.dropped },
    };
  }

  /** Removes the oldest entry; false when empty. */
  private dropHead(): boolean {
    const e = this.entries[this.head];
    if (e === undefined) return false;
    this.entries[this.head] = undefined;
    this.messages--;
    this.bytes -= e.bytes;
    this.compact();
    return true;
  }

  /** Moves the head past holes and reclaims the array prefix once it is at least half of the array. */
  private compact(): void {
    while (this.head < this.entries.length && this.entries[this.head] === undefined) this.head++;
    if (this.head === this.entries.length) {
      this.entries = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 >= this.entries.length) {
      this.entries = this.entries.slice(this.head);
      this.head = 0;
    }
  }

  /** The slot of the live entry `seq`; a slot without it (undefined there) when unknown or removed. */
  private indexOf(seq: number): number {
    let i = this.firstIndexAfter(seq - 1);
    while (i < this.entries.length && this.entries[i] === undefined) i++;
    return this.entries[i]?.seq === seq ? i : this.entries.length;
  }

  /** Index of the first slot (hole or entry) whose seq is > `seq`; slots keep their seq order. */
  private firstIndexAfter(seq: number): number {
    let lo = this.head;
    let hi = this.entries.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const s = this.seqAt(mid, hi);
      if (s === undefined || s > seq) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  /**
   * The seq that the slot at `i` stands for: its own, or, for a hole, that of the next live entry before `hi`
   * (holes sort with the entry after them, which keeps the binary search monotonic).
   */
  private seqAt(i: number, hi: number): number | undefined {
    for (let j = i; j < hi; j++) {
      const e = this.entries[j];
      if (e !== undefined) return e.seq;
    }
    return undefined;
  }
}

interface MemorySession {
  expiryIntervalS: number;
  disconnectedAtMs?: number;
  owner?: string | null;
  subscriptions: Map<string, SubscriptionRecord>;
  queue: Map<number, { msg: Message; flight?: FlightState }>; // insertion order is seq order
  awaitingRelease: Set<number>;
  will?: PendingWill;
}

class MemorySessionStore implements SessionStore {
  private readonly sessions = new Map<string, MemorySession>();
  private lastSeq = 0;
  /** Encoded bytes of every queued message, against `maxSessionBytes` (the LMDB store counts its pages). */
  private queuedBytes = 0;
  /** At the share since `sessionsFull` last found it so, until below SESSIONS_RESUME_BELOW of it. */
  private atShare = false;
  private readonly isClosed: () => boolean;

  constructor(
    isClosed: () => boolean,
    private readonly maxSessionBytes: number,
  ) {
    this.isClosed = isClosed;
  }

  *loadAll(window?: QueueWindow): Iterable<SessionRecord> {
    for (const [clientId, s] of this.sessions) {
      const split = new QueueSplit(window);
      for (const [seq, q] of s.queue) {
        if (split.keeps(q.msg.payload.length, q.flight !== undefined)) split.queue.push(queuedRecord(seq, q));
      }
      const { queue, tail } = split;
      const record: SessionRecord = {
        clientId,
        expiryIntervalS: s.expiryIntervalS,
        subscriptions: [...s.subscriptions.values()],
        queue,
        ...(tail.count > 0 ? { queueTail: tail } : {}),
        awaitingRelease: [...s.awaitingRelease],
        ...(s.disconnectedAtMs === undefined ? {} : { disconnectedAtMs: s.disconnectedAtMs }),
        ...(s.owner === undefined ? {} : { owner: s.owner }),
        ...(s.will === undefined ? {} : { will: s.will }),
      };
      yield record;
    }
  }

  readQueue(clientId: string, afterSeq: number, window: QueueWindow): QueueRead {
    const out: QueuedRecord[] = [];
    const queue = this.sessions.get(clientId)?.queue;
    if (queue === undefined) return { records: out, skipped: 0, lastSeq: undefined };
    let bytes = 0;
    // Map order is insertion order, which is seq order.
    for (const [seq, q] of queue) {
      if (seq <= afterSeq) continue;
      const size = q.msg.payload.length;
      if (!fitsWindow(window, out.length, bytes, size)) break;
      out.push(queuedRecord(seq, q));
      bytes += size;
    }
    return { records: out, skipped: 0, lastSeq: out.at(-1)?.seq };
  }

  putSession(clientId: string, fields: SessionFields): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    const s = this.session(clientId);
    s.expiryIntervalS = fields.expiryIntervalS;
    s.disconnectedAtMs = fields.disconnectedAtMs;
    s.owner = fields.owner;
    return RESOLVED;
  }

  drop(clientId: string): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    for (const q of this.sessions.get(clientId)?.queue.values() ?? []) this.queuedBytes -= encodedMessageBytes(q.msg);
    this.sessions.delete(clientId);
    return RESOLVED;
  }

  putSubscription(clientId: string, sub: SubscriptionRecord): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    this.session(clientId).subscriptions.set(sub.filter, { ...sub });
    return RESOLVED;
  }

  deleteSubscription(clientId: string, filter: string): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    this.sessions.get(clientId)?.subscriptions.delete(filter);
    return RESOLVED;
  }

  enqueue(clientId: string, msg: Message): Promise<number> {
    if (this.isClosed()) return Promise.reject(closedError());
    if (this.sessionsFull()) {
      return Promise.reject(
        new StoreError(
          'EF_STORE_FULL',
          `the persistent sessions hold their share of the store (${this.maxSessionBytes} bytes)`,
        ),
      );
    }
    const seq = ++this.lastSeq;
    this.session(clientId).queue.set(seq, { msg });
    this.queuedBytes += encodedMessageBytes(msg);
    return Promise.resolve(seq);
  }

  /** Encoded bytes of every queued message. */
  get bytes(): number {
    return this.queuedBytes;
  }

  /** Nothing but the sessions' share bounds the memory store: never refused. */
  refusal(): undefined {
    return undefined;
  }

  sessionsFull(): boolean {
    if (!isLimited(this.maxSessionBytes)) return false;
    this.atShare = this.queuedBytes >= this.maxSessionBytes * (this.atShare ? SESSIONS_RESUME_BELOW : 1);
    return this.atShare;
  }

  putAwaitingRelease(clientId: string, packetId: number): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    this.session(clientId).awaitingRelease.add(packetId);
    return RESOLVED;
  }

  deleteAwaitingRelease(clientId: string, packetId: number): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    this.sessions.get(clientId)?.awaitingRelease.delete(packetId);
    return RESOLVED;
  }

  markInFlight(clientId: string, seq: number, msg: Message, flight: FlightState): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    const queue = this.sessions.get(clientId)?.queue;
    if (queue?.has(seq)) queue.set(seq, { msg, flight: { packetId: flight.packetId, released: flight.released } });
    return RESOLVED;
  }

  ack(clientId: string, seq: number): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    const queue = this.sessions.get(clientId)?.queue;
    const q = queue?.get(seq);
    if (q === undefined) return RESOLVED;
    queue!.delete(seq);
    this.queuedBytes -= encodedMessageBytes(q.msg);
    return RESOLVED;
  }

  putWill(clientId: string, will: PendingWill): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    this.session(clientId).will = { msg: will.msg, dueAtMs: will.dueAtMs };
    return RESOLVED;
  }

  deleteWill(clientId: string): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    const s = this.sessions.get(clientId);
    if (s !== undefined) s.will = undefined;
    return RESOLVED;
  }

  private session(clientId: string): MemorySession {
    let s = this.sessions.get(clientId);
    if (s === undefined) {
      s = { expiryIntervalS: 0, subscriptions: new Map(), queue: new Map(), awaitingRelease: new Set() };
      this.sessions.set(clientId, s);
    }
    return s;
  }
}

class MemoryRetainedStore implements RetainedStore {
  private readonly byTopic = new Map<string, Message>();
  private readonly isClosed: () => boolean;

  constructor(isClosed: () => boolean) {
    this.isClosed = isClosed;
  }

  loadIndex(): Iterable<RetainedMeta> {
    return [...this.byTopic.values()].map(retainedMeta);
  }

  get(topic: string): Message | undefined {
    return this.byTopic.get(topic);
  }

  set(msg: Message): Promise<void> {
    if (this.isClosed()) return Promise.reject(closedError());
    if (msg.payload.length === 0) this.byTopic.delete(msg.topic);
    else this.byTopic.set(msg.topic, msg);
    return RESOLVED;
  }

  /** Nothing bounds the memory store: never refused. */
  refusal(): undefined {
    return undefined;
  }

  get count(): number {
    return this.byTopic.size;
  }
}

class MemoryStore implements Store {
  readonly durable = false;
  readonly corruptRecords = 0; // nothing is read back from a disk
  readonly commits = 0; // nothing is written to one
  readonly retained: MemoryRetainedStore;
  readonly sessions: MemorySessionStore;
  private readonly outboxes = new Map<string, MemoryOutbox>();
  private closed = false;

  constructor(
    readonly clock: SteadyClock,
    maxSessionBytes: number,
  ) {
    const isClosed = (): boolean => this.closed;
    this.retained = new MemoryRetainedStore(isClosed);
    this.sessions = new MemorySessionStore(isClosed, maxSessionBytes);
  }

  sessionBytes(): number {
    return this.sessions.bytes;
  }

  outbox(name: string, limits: OutboxLimits): Outbox {
    let box = this.outboxes.get(name);
    if (box === undefined) {
      box = new MemoryOutbox(name, limits, () => this.closed, this.clock);
      this.outboxes.set(name, box);
    } else {
      box.limits = limits; // a config reload may change limits; content stays
    }
    return box;
  }

  outboxNames(): string[] {
    return [...this.outboxes.keys()];
  }

  /** A memory outbox exists only once opened, so every existing one is refused. */
  deleteOutbox(name: string): Promise<number> {
    if (this.closed) return Promise.reject(closedError());
    return this.outboxes.has(name) ? Promise.reject(outboxInUseError(name)) : Promise.resolve(0);
  }

  flushed(): Promise<void> {
    return RESOLVED;
  }

  close(): Promise<void> {
    this.closed = true;
    return RESOLVED;
  }
}

/**
 * `maxSessionBytes`: the persistent sessions' share of the store (`SessionStore.sessionsFull`), counted in encoded
 * message bytes; 0 (default) = none of their own.
 */
export function createMemoryStore(clock = new SteadyClock(), options: { maxSessionBytes?: number } = {}): Store {
  return new MemoryStore(clock, options.maxSessionBytes ?? 0);
}
