/**
 * One client id's session: its subscriptions, outgoing QoS 1/2 flows, the queue of messages waiting for an
 * inflight slot or for the client to come back, and incoming QoS 2 packet ids awaiting PUBREL. Survives the
 * connection when the session is persistent; the connection is attached as a `ClientLink`.
 */
import type { Message, QoS } from '../protocol/message.js';
import { isExpired } from '../protocol/message.js';
import type { PublishEncodings, ProtocolVersion } from '../protocol/codec.js';
import { parseSharedFilter, topicMatches } from '../protocol/topics.js';
import { fitsWindow, type QueuedRecord, type QueueWindow, type SessionStore, type SubscriptionRecord } from '../store/types.js';
import { StoreError } from '../util/errors.js';
import { IdTable } from '../util/id-table.js';
import type { SharedGroup, Subscriber } from './topic-tree.js';
import type { RetainedPace } from './retained-sender.js';
import type { ClientInfo } from './auth.js';
import { highWaterOf, type SessionLimits } from './session-limits.js';

/** What a session needs from the connection currently attached to it (implemented by server/connection.ts). */
export interface ClientLink {
  readonly version: ProtocolVersion;
  /** Where the client connects from, and its verified client certificate's identity (for the audit log). */
  readonly remoteAddress: string;
  readonly certificateIdentity: string | undefined;
  /** The client's Receive Maximum (v5), else 65535. */
  readonly receiveMaximum: number;
  /** False while the connection's write buffer is over its limit: QoS 0 is then dropped for this client. */
  canTakeQoS0(): boolean;
  /** True while the connection's write buffer holds half its limit or more: paced work (retained messages) waits. */
  backedUp(): boolean;
  /**
   * Sends a QoS 0 PUBLISH. Nothing of it is kept, so it has no `Delivery` record (one per message and
   * subscriber would be an allocation on the hottest path). False if it could not be sent (too large for the client).
   */
  sendQoS0(msg: Message, retain: boolean, subscriptionIds: readonly number[] | undefined, encodings: PublishEncodings | undefined): boolean;
  /** Sends the PUBLISH of a QoS 1/2 delivery under `packetId` (`dup` when resent); false if it could not be sent. */
  sendPublish(d: Delivery, packetId: number, dup: boolean, encodings: PublishEncodings | undefined): boolean;
  sendPubrel(packetId: number): void;
}

/** One message on its way to this session: queued, then in flight until acknowledged. */
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

/**
 * A publisher that stopped reading because a session it fed is above its high-water mark; `released` resumes it
 * (docs/architecture.md#back-pressure).
 */
export interface PressureHolder {
  released(): void;
}

/** `quota_exceeded`: the persistent sessions hold their share of the store (docs/reliability.md#sessions-share). */
export type DropReason = 'queue_full' | 'expired' | 'too_large' | 'slow_client' | 'not_authorized' | 'session_taken_over' | 'quota_exceeded';

/** Who a session belongs to: the user name it was made with (a certificate's identity included), null for anonymous. */
export type SessionOwner = string | null;

/**
 * The ACL read check in force now, one object shared by every session and swapped on reload, so that sessions
 * online, offline and restored from the store all answer to the rules of the moment.
 */
export interface ReadGate {
  check: ((client: ClientInfo, topic: string) => boolean) | undefined;
}

/** Hooks from the session back to the broker: counters and shared-subscription redelivery. */
export interface SessionEvents {
  dropped(reason: DropReason, msg: Message): void;
  /** A write after a delivery failed for a reason other than the store's own (StoreError, logged by the store). */
  storeFailed(err: unknown, clientId: string): void;
  sent(qos: QoS): void;
  /** An online session's queue is at its high-water mark: the publisher of the message being routed is to pause. */
  congested(session: Session): void;
  redeliverShared(group: SharedGroup, delivery: Delivery, from: Subscriber): void;
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
  /** A read back is scheduled for after the current writes (see `pump`). */
  scheduled: boolean;
}

export const NEVER_EXPIRES = 0xffffffff;

/**
 * What every session of a broker shares, made once by the broker: an idle client's session holds one reference
 * to it (docs/architecture.md#what-a-connection-costs).
 */
export class SessionSettings {
  /** Back-pressure (docs/architecture.md#back-pressure): the high-water mark, and half of it, where publishers resume. */
  readonly highWater: number;
  readonly lowWater: number;

  /** `memoryWindow`: the part of a persistent session's queue kept in memory before it goes on in the store; none = never spills. */
  constructor(
    readonly limits: SessionLimits,
    readonly events: SessionEvents,
    readonly readGate: ReadGate,
    readonly memoryWindow: QueueWindow | undefined,
  ) {
    this.highWater = highWaterOf(limits);
    this.lowWater = Math.floor(this.highWater / 2);
  }
}

export class Session implements Subscriber {
  /** NO_SUBSCRIPTIONS until the first one: an idle client keeps no map of its own. */
  private subs: Map<string, SubscriptionRecord> = NO_SUBSCRIPTIONS;
  /**
   * Incoming QoS 2 packet ids between PUBREC and PUBREL: a resent PUBLISH is not routed twice [MQTT-4.3.3-9].
   * Created on first use, like `inflight`: an idle or QoS 0 client keeps neither.
   */
  private inboundQoS2: IdTable<true> | undefined;
  link: ClientLink | undefined;
  /** Set while the session is persistent (expiry > 0): QoS 1/2 messages for it are stored before acknowledgement. */
  store: SessionStore | undefined;
  expiryIntervalS = 0;
  /** performance.now() when the session was last disconnected. */
  disconnectedAtMs = 0;

  /**
   * Who made the session. Undefined only for a session stored before owners were recorded: the next client to
   * resume it adopts it, and until then what it queues is checked against the reader when it is sent.
   */
  owner: SessionOwner | undefined;
  /** The identity the ACL read check is asked about: made at the first check and kept, so a check allocates nothing. */
  private reader: ClientInfo | undefined;
  routeMark = 0;
  routeSlot = 0;

  private inflight: IdTable<Delivery> = NO_FLOWS;
  /** NO_DELIVERIES until the first message is queued: an idle client keeps no array of its own. */
  private queue: Delivery[] = NO_DELIVERIES;
  private queueHead = 0;
  /** Payload bytes of the whole queue, spilled part included. */
  private queuedBytes = 0;
  private spill: Spill | undefined;
  private nextPacketId = 1;
  /** When the queue, online, last reached the high-water mark without draining to the low-water mark since. */
  private highSinceMs: number | undefined;
  /** Publishers paused for this session; created on first use. */
  private holders: PressureHolder[] | undefined;
  /**
   * Held publishers for slowClientTimeoutMs without draining: it holds none any more, and what passes the
   * high-water mark is dropped (`slow_client`) until it is down to the low-water mark.
   */
  private overflowing = false;

  constructor(
    readonly id: string,
    owner: SessionOwner | undefined,
    private readonly settings: SessionSettings,
  ) {
    this.owner = owner;
  }

  /** A client resumed a session stored without an owner: it is the owner from now on. */
  adopt(owner: SessionOwner): void {
    this.owner = owner;
    this.reader = undefined;
  }

  get subscriptions(): ReadonlyMap<string, SubscriptionRecord> {
    return this.subs;
  }

  subscribe(record: SubscriptionRecord): void {
    if (this.subs === NO_SUBSCRIPTIONS) this.subs = new Map();
    this.subs.set(record.filter, record);
  }

  /** False if it had no such subscription. */
  unsubscribe(filter: string): boolean {
    return this.subs.delete(filter);
  }

  /** The ACL read check of the rules in force now, for this session's owner; every delivery passes it. */
  mayRead(topic: string): boolean {
    const check = this.settings.readGate.check;
    return check === undefined || this.owner === undefined || check((this.reader ??= { clientId: this.id, username: this.owner ?? undefined }), topic);
  }

  /** Whether part of the queue is in the store only (see `spillOne`). */
  get hasSpilled(): boolean {
    return this.spill !== undefined;
  }

  /** Messages sent and not yet acknowledged. */
  get inflightCount(): number {
    return this.inflight.size;
  }

  /** Queued messages, in memory and spilled. */
  get queuedCount(): number {
    return this.queue.length - this.queueHead + (this.spill?.count ?? 0);
  }

  isAwaitingRelease(packetId: number): boolean {
    return this.inboundQoS2?.has(packetId) ?? false;
  }

  awaitRelease(packetId: number): void {
    (this.inboundQoS2 ??= new IdTable()).set(packetId, true);
  }

  /** PUBREL: returns whether the id was awaiting release. */
  release(packetId: number): boolean {
    return this.inboundQoS2?.delete(packetId) ?? false;
  }


  isOnline(): boolean {
    return this.link !== undefined;
  }

  /** A persistent session refuses a QoS 1/2 message its store would refuse (`storage.maxBytes`): see `Subscriber.refusal`. */
  refusal(): Error | undefined {
    return this.store?.refusal();
  }

  /**
   * The retained messages of a new subscription go to this connection while the subscription and the connection
   * last, each once its write buffer has room and its queue is shorter than its inflight window.
   */
  retainedPace(record: SubscriptionRecord): RetainedPace | undefined {
    const link = this.link;
    if (link === undefined) return undefined;
    return {
      wanted: () => this.link === link && this.subs.get(record.filter) === record,
      ready: () => !link.backedUp() && this.queuedCount < this.window,
    };
  }

  private get window(): number {
    return Math.min(this.settings.limits.maxInflight, this.link?.receiveMaximum ?? this.settings.limits.maxInflight);
  }

  deliver(
    msg: Message,
    qos: QoS,
    retain: boolean,
    subscriptionIds: readonly number[] | undefined,
    encodings: PublishEncodings | undefined,
    group?: SharedGroup,
  ): void | Promise<unknown> {
    const link = this.link;
    if (qos === 0) {
      // QoS 0 is not queued for offline clients (Mosquitto's default) and is the first thing shed by a slow one.
      if (!link) return;
      if (!link.canTakeQoS0()) return this.settings.events.dropped('slow_client', msg);
      if (link.sendQoS0(msg, retain, subscriptionIds, encodings)) this.settings.events.sent(0);
      else this.settings.events.dropped('too_large', msg);
      return;
    }
    if (link && this.settings.highWater > 0 && this.queuedCount >= this.settings.highWater) {
      // Dropped before it is stored: the publisher is acknowledged, this subscriber has given up its claim to hold it.
      if (this.overflowing) return this.settings.events.dropped('slow_client', msg);
      this.highSinceMs ??= performance.now();
      this.settings.events.congested(this);
    }
    // A persistent session stores the message (as delivered: its QoS and retain flag) before the publisher is
    // acknowledged, so it survives a crash; the stored copy is removed when the flow completes. While the sessions
    // hold their share of the store it queues nothing: what it can send at once goes without a stored copy, the
    // rest is dropped for it alone, never refused to the publisher (docs/reliability.md#sessions-share).
    const store = this.store;
    const shareFull = store !== undefined && store.sessionsFull();
    if (shareFull && !(link && this.queuedCount === 0 && this.inflight.size < this.window)) return this.settings.events.dropped('quota_exceeded', msg);
    const stored = shareFull ? undefined : store?.enqueue(this.id, asDelivered(msg, qos, retain));
    if (stored && (this.spill || (this.settings.memoryWindow && !fitsWindow(this.settings.memoryWindow, this.queuedCount, this.queuedBytes, msg.payload.length)))) {
      this.spillOne(msg, stored);
      return stored;
    }
    const delivery: Delivery = { msg, qos, retain, subscriptionIds, group, state: 'publish', stored };
    if (link && this.queuedCount === 0 && this.inflight.size < this.window) {
      this.sendNew(link, delivery, encodings);
    } else {
      this.enqueue(delivery);
      // Registered before the publisher's own handler, so a refused message has left the queue before the
      // refusal (0x97) goes out. One sent already cannot be called back: a live delivery does not wait for the disk.
      stored?.then(undefined, () => this.unqueue(delivery));
    }
    return stored;
  }

  /**
   * Puts messages stored by an earlier run back, oldest first: QoS 2 flows that were under way in flight with
   * their packet ids (resent on attach: PUBLISH with DUP, or PUBREL), the rest in the queue. `tail`: the
   * messages after those, left in the store (a spilled queue).
   */
  restore(queue: readonly QueuedRecord[], tail?: { count: number; bytes: number }): void {
    if (tail !== undefined && tail.count > 0 && queue.length > 0) {
      this.spill = {
        count: tail.count,
        bytes: tail.bytes,
        afterSeq: queue[queue.length - 1].seq,
        lastWrite: Promise.resolve(),
        waiting: false,
        scheduled: false,
      };
      this.queuedBytes += tail.bytes;
    }
    for (const { seq, msg, flight } of queue) {
      const d = storedDelivery(seq, msg, undefined, flight?.released ? 'pubrel' : 'publish');
      if (flight !== undefined) {
        if (this.inflight === NO_FLOWS) this.inflight = new IdTable();
        this.inflight.set(flight.packetId, d);
      } else {
        this.ownQueue().push(d);
        this.queuedBytes += msg.payload.length;
      }
    }
  }

  /** Attaches a connection; on resume, unacknowledged messages are sent again first, with DUP [MQTT-4.4.0-1]. */
  attach(link: ClientLink): void {
    this.link = link;
    this.inflight.forEach((f, packetId) => {
      if (f.state === 'pubrel') {
        link.sendPubrel(packetId);
        return;
      }
      const dropped = isExpired(f.msg) ? 'expired' : this.mayRead(f.msg.topic) ? undefined : 'not_authorized';
      if (dropped === undefined) {
        link.sendPublish(f, packetId, true, undefined);
        return;
      }
      this.inflight.delete(packetId);
      this.forget(f);
      this.settings.events.dropped(dropped, f.msg);
    });
    this.pump();
  }

  /**
   * Pauses `holder` (a publisher) until the queue is down to the low-water mark, the client goes offline, or
   * `releaseIfStuck` gives up on it.
   */
  hold(holder: PressureHolder): void {
    (this.holders ??= []).push(holder);
  }

  /**
   * Asked by held publishers' timers: a session that has been at its high-water mark for `timeoutMs` without
   * draining to the low-water mark stops holding them, and overflows instead. True when that happened now.
   */
  releaseIfStuck(nowMs: number, timeoutMs: number): boolean {
    if (this.overflowing || this.highSinceMs === undefined || nowMs - this.highSinceMs <= timeoutMs) return false;
    this.overflowing = true;
    this.releaseHolders();
    return true;
  }

  /** Down to the low-water mark, or offline (an offline session never holds publishers): publishers go on. */
  private relieve(): void {
    this.highSinceMs = undefined;
    this.overflowing = false;
    this.releaseHolders();
  }

  private releaseHolders(): void {
    const holders = this.holders;
    if (holders === undefined) return;
    this.holders = undefined;
    // Next turn: not inside the acknowledgement (or timer) being handled now.
    setImmediate(releaseAll, holders);
  }

  /** Detaches the connection. Unacknowledged shared-subscription messages go to another member of the group. */
  detach(): void {
    this.link = undefined;
    this.relieve();
    this.disconnectedAtMs = performance.now();
    this.inflight.forEach((f, packetId) => {
      if (f.group && f.state === 'publish') {
        this.inflight.delete(packetId);
        this.forget(f);
        this.settings.events.redeliverShared(f.group, f, this);
      }
    });
    if (this.queuedCount > 0) {
      const kept: Delivery[] = [];
      for (let i = this.queueHead; i < this.queue.length; i++) {
        const d = this.queue[i];
        if (d.group) {
          this.queuedBytes -= d.msg.payload.length;
          this.forget(d);
          this.settings.events.redeliverShared(d.group, d, this);
        } else kept.push(d);
      }
      this.queue = kept;
      this.queueHead = 0;
    }
  }

  /** PUBACK (QoS 1) or PUBCOMP (QoS 2) completed a flow. Returns false for an unknown packet id. */
  complete(packetId: number): boolean {
    const f = this.inflight.get(packetId);
    if (!f) return false;
    this.inflight.delete(packetId);
    this.forget(f);
    this.pump();
    return true;
  }

  /** PUBREC: a QoS 2 message reached the client; an error reason (>= 0x80) ends the flow (MQTT 5 §4.3.3). */
  received(packetId: number, reasonCode: number): boolean {
    const f = this.inflight.get(packetId);
    if (!f || f.qos !== 2) return false;
    if (reasonCode >= 0x80) {
      this.inflight.delete(packetId);
      this.forget(f);
      this.pump();
      return true;
    }
    f.state = 'pubrel';
    const recorded = this.recordFlight(f, packetId);
    if (!recorded) {
      this.link?.sendPubrel(packetId);
      return true;
    }
    // PUBREL only once the released state is stored: the client forgets the packet id at PUBREL, so a crash before
    // that commit must resume the flow with PUBREL, never with the PUBLISH it already delivered [MQTT-4.3.3-9].
    // A reconnect meanwhile resumes the flow from the state in memory (PUBREL) itself.
    const link = this.link;
    const send = (): void => {
      if (link !== undefined && this.link === link && this.inflight.get(packetId) === f) link.sendPubrel(packetId);
    };
    recorded.then(send, send);
    return true;
  }

  /** Forgets everything but the identity (clean start of a new connection on an existing session). */
  clear(): void {
    this.subs = NO_SUBSCRIPTIONS;
    this.inboundQoS2 = undefined;
    this.inflight = NO_FLOWS;
    this.queue = NO_DELIVERIES;
    this.queueHead = 0;
    this.queuedBytes = 0;
    this.spill = undefined;
    this.relieve();
  }

  /** A queued message whose store write failed: its publisher was refused, so it is never delivered. */
  private unqueue(d: Delivery): void {
    // Refusals hit the newest messages: search from the tail.
    for (let i = this.queue.length - 1; i >= this.queueHead; i--) {
      if (this.queue[i] !== d) continue;
      this.queue.splice(i, 1);
      this.queuedBytes -= d.msg.payload.length;
      return;
    }
  }

  /**
   * A write after a delivery (its removal, its flight state) failed. Store errors are left to the store, which
   * logs them once per episode (a full disk fails thousands of these); a refused delivery has nothing to remove.
   */
  private get writeFailed(): (err: unknown) => void {
    // Made at the first store write and kept: sessions without a store (clean sessions) carry no closure.
    return (this.onWriteFailed ??= (err: unknown): void => {
      if (!(err instanceof StoreError)) this.settings.events.storeFailed(err, this.id);
    });
  }

  private onWriteFailed: ((err: unknown) => void) | undefined;

  /** The queue to append to: the session's own, made at its first message. */
  private ownQueue(): Delivery[] {
    if (this.queue === NO_DELIVERIES) this.queue = [];
    return this.queue;
  }

  private enqueue(d: Delivery): void {
    if (this.queueFull(d.msg)) {
      this.forget(d);
      return this.settings.events.dropped('queue_full', d.msg);
    }
    this.ownQueue().push(d);
    this.queuedBytes += d.msg.payload.length;
  }

  private queueFull(msg: Message): boolean {
    const max = this.settings.limits.maxQueuedMessages;
    const maxBytes = this.settings.limits.maxQueuedBytes;
    return (max > 0 && this.queuedCount >= max) || (maxBytes > 0 && this.queuedBytes + msg.payload.length > maxBytes);
  }

  /**
   * Queues a message in the store only (the spilled part of the queue). A shared-subscription message spilled
   * stays with this session: it is not handed to another member if this one disconnects.
   */
  private spillOne(msg: Message, stored: Promise<number>): void {
    const store = this.store as SessionStore;
    if (this.queueFull(msg)) {
      stored.then((seq) => store.ack(this.id, seq)).catch(this.writeFailed);
      return this.settings.events.dropped('queue_full', msg);
    }
    const spill = (this.spill ??= { count: 0, bytes: 0, afterSeq: undefined, lastWrite: stored, waiting: false, scheduled: false });
    spill.count++;
    spill.bytes += msg.payload.length;
    spill.lastWrite = stored;
    this.queuedBytes += msg.payload.length;
    stored.then(
      (seq) => {
        // Writes resolve in seq order: the first one to resolve is the lowest spilled seq.
        spill.afterSeq ??= seq - 1;
      },
      () => {
        // Neither in the store nor in memory (its publisher was refused): no longer queued.
        spill.count--;
        spill.bytes -= msg.payload.length;
        this.queuedBytes -= msg.payload.length;
        if (this.spill === spill && spill.count === 0) this.spill = undefined;
      },
    );
  }

  /**
   * Reads spilled messages back into memory once few are left there; false when none came (none spilled, or
   * not yet readable: then the pump runs again when the writes settle).
   */
  private refill(): boolean {
    const spill = this.spill;
    const store = this.store;
    const window = this.settings.memoryWindow;
    if (!spill || !store || !window || !this.belowHalfWindow(window) || spill.waiting) return false;
    const want = Math.min(spill.count, REFILL_CHUNK);
    const read = spill.afterSeq === undefined ? undefined : store.readQueue(this.id, spill.afterSeq, { messages: want, bytes: window.bytes / 2 });
    const records = read?.records ?? [];
    for (const { seq, msg } of records) {
      this.ownQueue().push(storedDelivery(seq, msg, this.subscriptionIdsFor(msg.topic), 'publish'));
      spill.bytes -= msg.payload.length;
    }
    if (read?.lastSeq !== undefined) spill.afterSeq = read.lastSeq;
    // Damaged records are gone from the queue (their bytes are unknown: the count is what ends the spill).
    spill.count -= records.length + (read?.skipped ?? 0);
    if (spill.count <= 0) {
      this.queuedBytes -= spill.bytes; // what is left belonged to damaged records
      this.spill = undefined;
    } else if (records.length + (read?.skipped ?? 0) < want) {
      // The rest is still being written.
      spill.waiting = true;
      const retry = (): void => {
        spill.waiting = false;
        if (this.spill === spill) this.pump();
      };
      spill.lastWrite.then(retry, retry);
    }
    return records.length > 0;
  }

  /** Whether less than half the memory window is used: time to read spilled messages back. */
  private belowHalfWindow(window: QueueWindow): boolean {
    const inMemory = this.queue.length - this.queueHead;
    const inMemoryBytes = this.queuedBytes - (this.spill?.bytes ?? 0);
    return inMemory < window.messages / 2 && inMemoryBytes < window.bytes / 2;
  }

  /** The identifiers of this session's subscriptions that match `topic` now (for messages read back). */
  private subscriptionIdsFor(topic: string): number[] | undefined {
    let ids: number[] | undefined;
    for (const sub of this.subscriptions.values()) {
      if (sub.subscriptionId === undefined) continue;
      const shared = parseSharedFilter(sub.filter);
      const filter = shared === undefined ? sub.filter : shared === 'invalid' ? undefined : shared.filter;
      if (filter !== undefined && topicMatches(filter, topic)) (ids ??= []).push(sub.subscriptionId);
    }
    return ids;
  }

  private pump(): void {
    const link = this.link;
    if (!link) return;
    const window = this.window;
    for (;;) {
      if (this.queueHead === this.queue.length && !this.refill()) break;
      if (this.inflight.size >= window) break;
      const d = this.queue[this.queueHead];
      this.queue[this.queueHead++] = undefined as unknown as Delivery;
      this.queuedBytes -= d.msg.payload.length;
      if (isExpired(d.msg)) {
        this.forget(d);
        this.settings.events.dropped('expired', d.msg);
        continue;
      }
      // Queued under the rules of its arrival (or restored from the store): the rules of now decide.
      if (!this.mayRead(d.msg.topic)) {
        this.forget(d);
        this.settings.events.dropped('not_authorized', d.msg);
        continue;
      }
      this.sendNew(link, d, undefined);
    }
    // Read the next chunk back before the queue runs dry, but after this turn's writes went out: the read then
    // overlaps the client's round trip instead of delaying the messages it releases.
    const spill = this.spill;
    if (spill && !spill.scheduled && this.settings.memoryWindow && this.belowHalfWindow(this.settings.memoryWindow)) {
      spill.scheduled = true;
      setImmediate(() => {
        spill.scheduled = false;
        if (this.spill === spill && this.link && this.refill()) this.pump();
      });
    }
    if (this.highSinceMs !== undefined && this.queuedCount <= this.settings.lowWater) this.relieve();
    // Compact the array once the consumed head dominates it, keeping shift() O(1) amortized.
    if (this.queueHead > 1024 && this.queueHead * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.queueHead);
      this.queueHead = 0;
    }
  }

  private sendNew(link: ClientLink, d: Delivery, encodings: PublishEncodings | undefined): void {
    const packetId = this.allocatePacketId();
    if (!link.sendPublish(d, packetId, false, encodings)) {
      // Too large for this client: not sent, and not kept [MQTT-3.1.2-25].
      this.forget(d);
      this.settings.events.dropped('too_large', d.msg);
      return;
    }
    if (this.inflight === NO_FLOWS) this.inflight = new IdTable();
    this.inflight.set(packetId, d);
    this.settings.events.sent(d.qos);
    if (d.qos === 2) void this.recordFlight(d, packetId); // catches its own failure
  }

  /**
   * QoS 2 to a persistent session: the packet id and state are stored with the queued message, so a restart
   * resumes the flow instead of sending it again as a new message, which the client would deliver twice.
   * (QoS 1 needs none: a resend under a new id is the duplicate QoS 1 allows.)
   */
  private recordFlight(d: Delivery, packetId: number): Promise<void> | undefined {
    const store = this.store;
    if (!d.stored || !store) return undefined;
    const flight = { packetId, released: d.state === 'pubrel' };
    const msg = asDelivered(d.msg, d.qos, d.retain);
    return d.stored.then((seq) => store.markInFlight(this.id, seq, msg, flight)).catch(this.writeFailed);
  }

  /** The delivery is done with (acknowledged, dropped, or handed to another session): remove its stored copy. */
  private forget(d: Delivery): void {
    const store = this.store;
    if (!d.stored || !store) return;
    d.stored.then((seq) => store.ack(this.id, seq)).catch(this.writeFailed);
  }

  private allocatePacketId(): number {
    // The window is far below 65535, so a free id is always found quickly.
    while (this.inflight.has(this.nextPacketId)) this.nextPacketId = (this.nextPacketId % 65535) + 1;
    const id = this.nextPacketId;
    this.nextPacketId = (this.nextPacketId % 65535) + 1;
    return id;
  }
}

function releaseAll(holders: PressureHolder[]): void {
  for (const holder of holders) holder.released();
}

/** A delivery of a message read from the store (stored as delivered: its QoS and retain flag). */
function storedDelivery(seq: number, msg: Message, subscriptionIds: readonly number[] | undefined, state: Delivery['state']): Delivery {
  return { msg, qos: msg.qos, retain: msg.retain, subscriptionIds, group: undefined, state, stored: Promise.resolve(seq) };
}

/** The message as this session gets it (granted QoS, retain flag), which is what its store keeps. */
function asDelivered(msg: Message, qos: QoS, retain: boolean): Message {
  return msg.qos === qos && msg.retain === retain ? msg : { ...msg, qos, retain };
}

/** The shared empty table of a session without flows in progress; replaced by its own at the first one. */
const NO_FLOWS: IdTable<Delivery> = new IdTable();
/** The shared empty queue of a session that has queued nothing yet; only read (`ownQueue` replaces it first). */
const NO_DELIVERIES: Delivery[] = [];
/** Shared by every session without subscriptions; only read, never written (`subscribe` replaces it first). */
const NO_SUBSCRIPTIONS: Map<string, SubscriptionRecord> = new Map();
