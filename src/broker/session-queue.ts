/**
 * A session's queue: the QoS 1/2 messages waiting for an inflight slot or for the client to come back, in order
 * of arrival, bounded by `maxQueuedMessages` and `maxQueuedBytes`. A persistent session keeps part of it in
 * memory only (`broker.maxQueuedInMemory`, `maxQueuedBytesInMemory`): the rest is in the store only (spilled) and
 * is read back in chunks as the queue drains (docs/architecture.md#session-queues-in-the-store).
 */
import type { Message, QoS } from '../protocol/message.js';
import { fitsWindow, type QueueWindow, type SessionStore } from '../store/types.js';
import type { SharedGroup } from './topic-tree.js';
import type { SessionLimits } from './session-limits.js';

/** One message on its way to a session: queued, then in flight until acknowledged. */
export interface Delivery {
  readonly msg: Message;
  readonly qos: QoS;
  readonly retain: boolean;
  readonly subscriptionIds: readonly number[] | undefined;
  /** Set when delivered through a shared subscription, so an unacknowledged message can go to another member. */
  readonly group: SharedGroup | undefined;
  /** QoS 2 only: 'pubrel' once the client sent PUBREC. */
  state: 'publish' | 'pubrel';
  /** Persistent sessions: the store's sequence number of this message, once it is durable. */
  stored: Promise<number> | undefined;
}

/** What a queue needs from the session it belongs to (implemented by `Session`). */
export interface QueueOwner {
  readonly id: string;
  /** Set while the session is persistent: where a spilled queue is read back from. */
  readonly store: SessionStore | undefined;
  isOnline(): boolean;
  /** The identifiers of the session's subscriptions that match `topic` now (for messages read back). */
  subscriptionIdsFor(topic: string): number[] | undefined;
  /** Spilled messages were read back or became readable: send what the inflight window takes. */
  sendQueued(): void;
}

/** A spilled queue is read back at most this many messages at a time, once less than half the window is in memory. */
const REFILL_CHUNK = 250;

/**
 * The part of a persistent session's queue that is in the store only: every queued message of the session
 * with a store seq above `afterSeq`. Deliveries keep going there until it is read back completely, so the
 * order stays that of arrival.
 */
interface Spill {
  count: number;
  /** Payload bytes of the spilled messages. */
  bytes: number;
  /** Unknown until the first spilled message is durable (its seq minus one). */
  afterSeq: number | undefined;
  /** The latest spilled write: once it settled, everything spilled so far is readable or failed. */
  lastWrite: Promise<unknown>;
  /** A read back came up short (writes still running): it is retried when `lastWrite` settles. */
  waiting: boolean;
  /** A read back is scheduled for after the current writes (see `refillSoon`). */
  scheduled: boolean;
}

/** Made by a session at its first queued message (an idle session keeps none), kept until the session ends. */
export class SessionQueue {
  /** In memory, from `head` on (taken ones are cleared, the array compacted now and then). */
  private items: Delivery[] = NO_DELIVERIES;
  private head = 0;
  /** Payload bytes of the whole queue, spilled part included. */
  private bytes = 0;
  private spill: Spill | undefined;

  /** `window`: the part kept in memory before the queue goes on in the store; none = never spills. */
  constructor(
    private readonly owner: QueueOwner,
    private readonly limits: SessionLimits,
    private readonly window: QueueWindow | undefined,
  ) {}

  /** Queued messages, in memory and spilled. */
  get count(): number {
    return this.items.length - this.head + (this.spill?.count ?? 0);
  }

  /** Whether part of the queue is in the store only (see `addSpilled`). */
  get hasSpilled(): boolean {
    return this.spill !== undefined;
  }

  /** Whether a stored message of `payloadBytes` goes on in the store only: the queue spilled already, or memory is full. */
  spills(payloadBytes: number): boolean {
    return (
      this.spill !== undefined ||
      (this.window !== undefined && !fitsWindow(this.window, this.count, this.bytes, payloadBytes))
    );
  }

  /** Appends in memory; false if the queue is full (`maxQueuedMessages`, `maxQueuedBytes`): the caller drops it. */
  add(d: Delivery): boolean {
    if (this.isFull(d.msg)) return false;
    this.append(d);
    return true;
  }

  /**
   * Queues a message in the store only (the spilled part of the queue); false if the queue is full. A
   * shared-subscription message spilled stays with this session: it is not handed to another member if this
   * one disconnects.
   */
  addSpilled(msg: Message, stored: Promise<number>): boolean {
    if (this.isFull(msg)) return false;
    const spill = (this.spill ??= {
      count: 0,
      bytes: 0,
      afterSeq: undefined,
      lastWrite: stored,
      waiting: false,
      scheduled: false,
    });
    spill.count++;
    spill.bytes += msg.payload.length;
    spill.lastWrite = stored;
    this.bytes += msg.payload.length;
    stored.then(
      (seq) => {
        // Writes resolve in seq order: the first one to resolve is the lowest spilled seq.
        spill.afterSeq ??= seq - 1;
      },
      () => {
        // Neither in the store nor in memory (its publisher was refused): no longer queued.
        spill.count--;
        spill.bytes -= msg.payload.length;
        this.bytes -= msg.payload.length;
        if (this.spill === spill && spill.count === 0) this.spill = undefined;
      },
    );
    return true;
  }

  /** A queued message whose store write failed: its publisher was refused, so it is never delivered. */
  unqueue(d: Delivery): void {
    // Refusals hit the newest messages: search from the tail.
    for (let i = this.items.length - 1; i >= this.head; i--) {
      if (this.items[i] !== d) continue;
      this.items.splice(i, 1);
      this.bytes -= d.msg.payload.length;
      return;
    }
  }

  /** A message restored from the store by an earlier run, appended without the bounds (it was queued then). */
  putBack(d: Delivery): void {
    this.append(d);
  }

  /** At restore: `count` messages of `bytes` after `afterSeq` are left in the store (a spilled queue). */
  restoreSpill(count: number, bytes: number, afterSeq: number): void {
    this.spill = { count, bytes, afterSeq, lastWrite: Promise.resolve(), waiting: false, scheduled: false };
    this.bytes += bytes;
  }

  /** Whether a message is in memory to `take`. */
  get hasInMemory(): boolean {
    return this.head < this.items.length;
  }

  /** Takes the oldest message in memory; only when `hasInMemory`. */
  take(): Delivery {
    const d = this.items[this.head];
    this.items[this.head++] = undefined as unknown as Delivery;
    this.bytes -= d.msg.payload.length;
    return d;
  }

  /** Takes the shared-subscription messages in memory out of the queue (they go to another member). */
  takeShared(): Delivery[] | undefined {
    if (this.head === this.items.length) return undefined;
    let shared: Delivery[] | undefined;
    const kept: Delivery[] = [];
    for (let i = this.head; i < this.items.length; i++) {
      const d = this.items[i];
      if (d.group) {
        this.bytes -= d.msg.payload.length;
        (shared ??= []).push(d);
      } else kept.push(d);
    }
    this.items = kept;
    this.head = 0;
    return shared;
  }

  /** Empties it (clean start on an existing session); what it holds in the store is the store's to delete. */
  clear(): void {
    this.items = NO_DELIVERIES;
    this.head = 0;
    this.bytes = 0;
    this.spill = undefined;
  }

  /**
   * Reads spilled messages back into memory once few are left there; false when none came (none spilled, or
   * not yet readable: then the owner sends again when the writes settle).
   */
  refill(): boolean {
    const spill = this.spill;
    const store = this.owner.store;
    const window = this.window;
    if (!spill || !store || !window || !this.belowHalfWindow(window) || spill.waiting) return false;
    const want = Math.min(spill.count, REFILL_CHUNK);
    const read =
      spill.afterSeq === undefined
        ? undefined
        : store.readQueue(this.owner.id, spill.afterSeq, { messages: want, bytes: window.bytes / 2 });
    const records = read?.records ?? [];
    for (const { seq, msg } of records) {
      this.ownItems().push(storedDelivery(seq, msg, this.owner.subscriptionIdsFor(msg.topic), 'publish'));
      spill.bytes -= msg.payload.length;
    }
    if (read?.lastSeq !== undefined) spill.afterSeq = read.lastSeq;
    // Damaged records are gone from the queue (their bytes are unknown: the count is what ends the spill).
    spill.count -= records.length + (read?.skipped ?? 0);
    if (spill.count <= 0) {
      this.bytes -= spill.bytes; // what is left belonged to damaged records
      this.spill = undefined;
    } else if (records.length + (read?.skipped ?? 0) < want) {
      // The rest is still being written.
      spill.waiting = true;
      const retry = (): void => {
        spill.waiting = false;
        if (this.spill === spill) this.owner.sendQueued();
      };
      spill.lastWrite.then(retry, retry);
    }
    return records.length > 0;
  }

  /**
   * After sending: reads the next chunk back before the queue runs dry, but after this turn's writes went out: the
   * read then overlaps the client's round trip instead of delaying the messages it releases. Compacts the array
   * once the consumed head dominates it, keeping `take` O(1) amortized.
   */
  afterSending(): void {
    const spill = this.spill;
    if (spill && !spill.scheduled && this.window && this.belowHalfWindow(this.window)) {
      spill.scheduled = true;
      setImmediate(() => {
        spill.scheduled = false;
        if (this.spill === spill && this.owner.isOnline() && this.refill()) this.owner.sendQueued();
      });
    }
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }

  /** Whether less than half the memory window is used: time to read spilled messages back. */
  private belowHalfWindow(window: QueueWindow): boolean {
    const inMemory = this.items.length - this.head;
    const inMemoryBytes = this.bytes - (this.spill?.bytes ?? 0);
    return inMemory < window.messages / 2 && inMemoryBytes < window.bytes / 2;
  }

  private isFull(msg: Message): boolean {
    const max = this.limits.maxQueuedMessages;
    const maxBytes = this.limits.maxQueuedBytes;
    return (max > 0 && this.count >= max) || (maxBytes > 0 && this.bytes + msg.payload.length > maxBytes);
  }

  private append(d: Delivery): void {
    this.ownItems().push(d);
    this.bytes += d.msg.payload.length;
  }

  /** The array to append to: the queue's own, made at its first message. */
  private ownItems(): Delivery[] {
    if (this.items === NO_DELIVERIES) this.items = [];
    return this.items;
  }
}

/** A delivery of a message read from the store (stored as delivered: its QoS and retain flag). */
export function storedDelivery(
  seq: number,
  msg: Message,
  subscriptionIds: readonly number[] | undefined,
  state: Delivery['state'],
): Delivery {
  return {
    msg,
    qos: msg.qos,
    retain: msg.retain,
    subscriptionIds,
    group: undefined,
    state,
    stored: Promise.resolve(seq),
  };
}

/** The shared empty array of a queue that holds nothing in memory yet; only read (`ownItems` replaces it first). */
const NO_DELIVERIES: Delivery[] = [];
