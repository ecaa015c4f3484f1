/**
 * Store contracts. `memory.ts` (persistence off, tests) and `lmdb/open.ts` (one LMDB environment, named
 * databases) implement them and pass one contract suite (`test/contracts/store.test.ts`).
 * Writes are small change operations, never snapshots. A returned promise resolves once the change is
 * durable (flushed to disk for LMDB), which is what an MQTT acknowledgement may promise.
 */
import type { SteadyClock } from '../util/clock.js';
import type { Message, QoS } from '../protocol/message.js';
import type { StoreError } from '../util/errors.js';

/**
 * What the broker's retained index keeps in memory of a retained message: everything matching and delivery decide
 * on, but not the payload, which stays in the store (docs/architecture.md#retained-messages).
 */
export interface RetainedMeta {
  readonly topic: string;
  readonly qos: QoS;
  /** For no-local [MQTT-3.8.3-3]. */
  readonly origin: string;
  /** As `Message.expiresAt`. */
  readonly expiresAt: number | undefined;
  /** Payload bytes, counted against `broker.maxRetainedBytes`. */
  readonly bytes: number;
}

/** The index part of a retained message. */
export function retainedMeta(msg: Message): RetainedMeta {
  return { topic: msg.topic, qos: msg.qos, origin: msg.origin, expiresAt: msg.expiresAt, bytes: msg.payload.length };
}

export interface RetainedStore {
  /** The index of every retained message (no payloads), for the broker's retained index at start. */
  loadIndex(): Iterable<RetainedMeta>;
  /** The retained message of `topic` as stored (a copy the caller may keep), or undefined (none, or damaged). */
  get(topic: string): Message | undefined;
  /** Stores `msg` under its topic; an empty payload deletes the topic's retained message. */
  set(msg: Message): Promise<void>;
  /** The error `set(msg)` would be refused with now (a store at `storage.maxBytes`), or undefined (see `Outbox.refusal`). */
  refusal(msg: Message): StoreError | undefined;
  readonly count: number;
}

export interface SubscriptionRecord {
  readonly filter: string; // as subscribed, including any `$share/<group>/` prefix
  readonly qos: QoS;
  readonly noLocal: boolean;
  readonly retainAsPublished: boolean;
  readonly retainHandling: 0 | 1 | 2;
  readonly subscriptionId?: number;
}

export interface SessionRecord {
  readonly clientId: string;
  readonly expiryIntervalS: number; // 0xFFFFFFFF: never expires
  /** The user name that made the session, null for an anonymous client; absent in records of older versions. */
  readonly owner?: string | null;
  /** When it disconnected (steady clock, util/clock.ts), so time spent down counts towards expiry after a restart. */
  readonly disconnectedAtMs?: number;
  readonly subscriptions: readonly SubscriptionRecord[];
  readonly queue: readonly QueuedRecord[];
  /** Queued messages after those in `queue`, left in the store (see `loadAll`), with their payload bytes. */
  readonly queueTail?: { readonly count: number; readonly bytes: number };
  /** Incoming QoS 2 packet ids between PUBREC and PUBREL: a resent PUBLISH must not be delivered again. */
  readonly awaitingRelease: readonly number[];
  /** The will whose delay was running when the gateway stopped. */
  readonly will?: PendingWill;
}

/** A will waiting out its delay (MQTT 5 Will Delay Interval) after its client's connection was lost. */
export interface PendingWill {
  readonly msg: Message;
  /** When it is due (steady clock, util/clock.ts), so time spent down counts. */
  readonly dueAtMs: number;
}

/** Where a queued QoS 2 delivery stands once sent: its packet id, and whether PUBREC came (PUBREL sent). */
export interface FlightState {
  readonly packetId: number;
  readonly released: boolean;
}

export interface QueuedRecord {
  readonly seq: number;
  readonly msg: Message;
  /** A QoS 2 delivery that was under way: resumed with its packet id (PUBLISH with DUP, or PUBREL). */
  readonly flight?: FlightState;
}

/**
 * How much of a session's queue is loaded into memory: the oldest messages until either bound is reached
 * (payload bytes; one message always fits).
 */
export interface QueueWindow {
  readonly messages: number;
  readonly bytes: number;
}

/** What `readQueue` found. */
export interface QueueRead {
  readonly records: QueuedRecord[];
  /** Damaged records passed over (never delivered; the store counts and logs them and deletes them). */
  readonly skipped: number;
  /** The highest seq read, skipped records included; undefined when nothing was there. */
  readonly lastSeq: number | undefined;
}

/**
 * Sessions that reached their share of the store queue again once below this part of it (`sessionsFull`): one
 * episode while a queue drains under a flood, not one per commit that frees a page.
 */
export const SESSIONS_RESUME_BELOW = 0.9;

/** Whether one more message of `size` payload bytes fits after `count` messages of `bytes`; the first always does. */
export function fitsWindow(window: QueueWindow, count: number, bytes: number, size: number): boolean {
  return count === 0 || (count < window.messages && bytes + size <= window.bytes);
}

/** A session's own record: what `putSession` stores. */
export interface SessionFields {
  readonly expiryIntervalS: number;
  readonly disconnectedAtMs?: number;
  /** undefined: not known (a session stored before owners were recorded). */
  readonly owner?: string | null;
}

export interface SessionStore {
  /**
   * Every stored session. Of each queue, the QoS 2 deliveries in flight (the oldest messages) and then what fits
   * in `window` are returned; the rest stay in the store, counted in `queueTail`, and are read with `readQueue`.
   * Without a window, all of it.
   */
  loadAll(window?: QueueWindow): Iterable<SessionRecord>;
  /**
   * The queued messages of the session with a seq above `afterSeq`, oldest first, as many as fit in `window`,
   * as committed: messages whose `enqueue` has not resolved yet may be missing.
   */
  readQueue(clientId: string, afterSeq: number, window: QueueWindow): QueueRead;
  /** Creates or updates the session's own fields (expiry, disconnect time). */
  putSession(clientId: string, fields: SessionFields): Promise<void>;
  /** Removes the session with its subscriptions and queue (clean start, expiry). */
  drop(clientId: string): Promise<void>;
  putSubscription(clientId: string, sub: SubscriptionRecord): Promise<void>;
  deleteSubscription(clientId: string, filter: string): Promise<void>;
  /**
   * Queues a QoS > 0 message for the session; resolves with its sequence number once durable. Refused with
   * EF_STORE_FULL at `storage.maxBytes` (`refusal`) and while `sessionsFull`.
   */
  enqueue(clientId: string, msg: Message): Promise<number>;
  /** The error `enqueue` would be refused with now (a store at `storage.maxBytes`), or undefined (see `Outbox.refusal`). */
  refusal(): StoreError | undefined;
  /**
   * Whether the persistent sessions together hold their share of the store (`storage.sessionShare`), counting
   * what is scheduled and not committed yet, and, once they did, until they are below SESSIONS_RESUME_BELOW of it:
   * `enqueue` is then refused (EF_STORE_FULL), and a session asks first, so that it drops the message for itself
   * alone instead of refusing its publisher and the other targets (docs/reliability.md#sessions-share). Always
   * false without a share of their own.
   */
  sessionsFull(): boolean;
  /**
   * A queued QoS 2 message was sent, or its PUBREC came: records the packet id and state, so that after a
   * restart the flow resumes with the same id instead of starting again as a new message [MQTT-4.3.3-9].
   */
  markInFlight(clientId: string, seq: number, msg: Message, flight: FlightState): Promise<void>;
  /**
   * Removes a queued message once its delivery completed (PUBACK / PUBCOMP). Nobody waits for it: LMDB commits
   * these a few milliseconds later, in groups; a crash in between delivers the message again.
   */
  ack(clientId: string, seq: number): Promise<void>;
  /** An incoming QoS 2 message was accepted (PUBREC): remember its packet id until PUBREL. */
  putAwaitingRelease(clientId: string, packetId: number): Promise<void>;
  /** PUBREL arrived: forget the packet id (before PUBCOMP, so the id can be reused safely). */
  deleteAwaitingRelease(clientId: string, packetId: number): Promise<void>;
  /** The client's connection was lost and its will waits out its delay (one per client; replaces). */
  putWill(clientId: string, will: PendingWill): Promise<void>;
  /** The pending will was published, or the client came back. */
  deleteWill(clientId: string): Promise<void>;
}

export type OverflowPolicy = 'drop-oldest' | 'reject-new';

export interface OutboxLimits {
  readonly maxBytes: number;
  readonly maxMessages: number;
  /** Entries older than this are dropped (reason `expired`); 0 disables the age limit. */
  readonly maxAgeS: number;
  readonly overflow: OverflowPolicy;
}

export interface OutboxEntry {
  /** Strictly increasing per outbox, never reused, independent of the wall clock. */
  readonly seq: number;
  readonly msg: Message;
  /** When appended, in ms since the epoch by the steady clock (util/clock.ts): for ages and the backlog flag. */
  readonly appendedAtMs: number;
  /** Bytes the entry counts against `maxBytes`. */
  readonly bytes: number;
  /** The central broker acknowledged receipt of this QoS 2 entry (PUBREC): it is completed with PUBREL only. */
  readonly released?: boolean;
}

/** `dead_letter_deleted`: an operator deleted the bridge's dead letters (counted on the bridge's outbox). */
export type DropReason = 'queue_full' | 'expired' | 'rejected_upstream' | 'dead_letter_deleted';

/**
 * The outbox that keeps what the central broker refused for bridge `bridge` (its dead letters), until an operator
 * requeues them. The dot keeps it apart from bridge names, which cannot contain one.
 */
export const deadLetterOutbox = (bridge: string): string => `${bridge}.dead-letter`;

export interface OutboxDepth {
  readonly messages: number;
  readonly bytes: number;
  /** When the oldest entry was appended (steady clock, util/clock.ts), undefined when empty. */
  readonly oldestAppendedAtMs: number | undefined;
  readonly dropped: Readonly<Record<DropReason, number>>;
  /** Its position in the store's journal (LMDB; docs/architecture.md#one-journal); undefined in the memory store. */
  readonly cursor?: CursorPosition;
}

/** An outbox's cursor over the journal: every entry of its own below `floor` is gone; marks above it. */
export interface CursorPosition {
  readonly slot: number;
  readonly floor: number;
  /** Entries removed out of order above the floor (acknowledged during a live-first drain, dropped, damaged). */
  readonly removedMarks: number;
  /** QoS 2 entries the central broker has (PUBREC), to be completed with PUBREL. */
  readonly releasedMarks: number;
}

/** What the journal of every outbox holds: its stored entries, acknowledged ones of partly kept chunks included. */
export interface JournalDepth {
  readonly entries: number;
  /** Bytes stored: compressed chunks as they are stored. */
  readonly bytes: number;
  /** Bytes of its chunks decompressed: `logicalBytes / bytes` is the compression ratio. */
  readonly logicalBytes: number;
  readonly chunks: number;
  /** The seq of the oldest stored entry and of the newest entry ever appended. */
  readonly firstSeq: number | undefined;
  readonly lastSeq: number;
}

/** A durable FIFO, one per bridge. */
export interface Outbox {
  readonly name: string;
  /**
   * Appends at the tail; resolves once durable. With policy `reject-new` and a full queue it rejects with a
   * StoreError `EF_STORE_FULL` (the caller answers 0x97 Quota exceeded); with `drop-oldest` it drops from the
   * head (counted as `queue_full`) to make room.
   */
  append(msg: Message): Promise<void>;
  /**
   * The error `append(msg)` would be refused with now (a full `reject-new` outbox, counting appends not applied
   * yet; an entry larger than `maxBytes`; a store at `storage.maxBytes`, which a `drop-oldest` outbox with entries
   * answers by dropping its oldest), or undefined. Routing asks before any target stores a message, so that a
   * refused message is stored nowhere (docs/reliability.md#full-disk). The store's part of the answer holds for
   * the rest of the synchronous section: `append` right after gets the same.
   */
  refusal(msg: Message): StoreError | undefined;
  /** Up to `limit` entries, oldest first, with seq > `afterSeq` when given. Reads only; never blocks writers. */
  peek(limit: number, afterSeq?: number): readonly OutboxEntry[];
  /**
   * Removes acknowledged entries; unknown seqs are ignored. `peek` no longer returns them from the call on; the
   * deletes are collected for a few ms and committed together.
   */
  remove(seqs: readonly number[]): Promise<void>;
  /**
   * Records that the central broker has a QoS 2 entry (PUBREC), durable when resolved: from then on, also after
   * a restart, the entry is completed with PUBREL and never published again. Unknown seqs are ignored.
   */
  markReleased(seq: number): Promise<void>;
  /**
   * Moves up to `limit` entries, oldest first, to the tail of `target` (an outbox of the same store) in one
   * batch, so that after a crash at any point each is in exactly one of the two. Stops at the first entry
   * `target` has no room for: nothing is dropped to make room for a moved entry. Resolves with how many moved.
   */
  moveTo(target: Outbox, limit: number): Promise<number>;
  /** Drops entries older than `maxAgeS`, counting them as `expired`. Returns how many were dropped. */
  expire(nowMs?: number): Promise<number>;
  /** The seq of the newest entry appended (0 for none yet): what a reader after it sees is newer. */
  readonly tailSeq: number;
  /**
   * Counts entries dropped for a reason decided outside the outbox (e.g. refused upstream). Settles once the count
   * is in `depth` and stored; never rejects (a count that could not be stored is logged).
   */
  countDropped(reason: DropReason, n: number): Promise<void>;
  readonly depth: OutboxDepth;
}

export interface Store {
  /** Whether what is stored outlives the process (LMDB); the memory store's content ends with it. */
  readonly durable: boolean;
  /** The steady timeline of every time it stores (util/clock.ts); an LMDB store continues the one it recorded. */
  readonly clock: SteadyClock;
  /** Damaged records (bad checksum) found while running: skipped, never delivered, deleted. */
  readonly corruptRecords: number;
  /** Transactions committed since the store opened (each one flush with `storage.sync: full`); 0 in memory. */
  readonly commits: number;
  /** What the persistent sessions hold of the store, in the unit of their share (`SessionStore.sessionsFull`). */
  sessionBytes(): number;
  readonly retained: RetainedStore;
  readonly sessions: SessionStore;
  /** Opens (or creates) the named outbox; the same name returns the same outbox with its content. */
  outbox(name: string, limits: OutboxLimits): Outbox;
  /** Every outbox in the store, opened or not: also those of bridges no longer configured. */
  outboxNames(): string[];
  /**
   * Deletes an outbox with its entries and counters (an operator's decision, e.g. for a removed bridge);
   * resolves with the number of entries deleted, 0 for an unknown name. Refused (EF_STORE_WRITE) for an
   * outbox opened in this process: its bridge would go on with it.
   */
  deleteOutbox(name: string): Promise<number>;
  /** What the one journal of the outboxes holds (LMDB), counted from its chunks: for `store list`, not for metrics. */
  journalDepth?(): JournalDepth;
  /** Resolves when every write so far is durable. */
  flushed(): Promise<void>;
  close(): Promise<void>;
}
