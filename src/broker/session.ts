/**
 * One client id's session: its subscriptions, outgoing QoS 1/2 flows, the queue of messages waiting for an
 * inflight slot or for the client to come back, and incoming QoS 2 packet ids awaiting PUBREL. Survives the
 * connection when the session is persistent; the connection is attached as a `ClientLink`.
 */
import type { Message, QoS } from '../protocol/message.js';
import { isExpired } from '../protocol/message.js';
import type { PublishEncodings, ProtocolVersion } from '../protocol/codec.js';
import { parseSharedFilter, topicMatches } from '../protocol/topics.js';
import type { QueuedRecord, QueueWindow, SessionStore, SubscriptionRecord } from '../store/types.js';
import { StoreError } from '../util/errors.js';
import { IdTable } from '../util/id-table.js';
import { sameOptions, type SharedGroup, type Subscriber } from './topic-tree.js';
import type { RetainedPace } from './retained-sender.js';
import type { ClientInfo } from './auth.js';
import { highWaterOf, type SessionLimits } from './session-limits.js';
import { PublisherHold, type HeldPublisher } from './publisher-hold.js';
import { SessionQueue, storedDelivery, type Delivery, type QueueOwner } from './session-queue.js';

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
  sendQoS0(
    msg: Message,
    retain: boolean,
    subscriptionIds: readonly number[] | undefined,
    encodings: PublishEncodings | undefined,
  ): boolean;
  /** Sends the PUBLISH of a QoS 1/2 delivery under `packetId` (`dup` when resent); false if it could not be sent. */
  sendPublish(d: Delivery, packetId: number, dup: boolean, encodings: PublishEncodings | undefined): boolean;
  sendPubrel(packetId: number): void;
}

/** `quota_exceeded`: the persistent sessions hold their share of the store (docs/reliability.md#sessions-share). */
export type DropReason =
  'queue_full' | 'expired' | 'too_large' | 'slow_client' | 'not_authorized' | 'session_taken_over' | 'quota_exceeded';

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

export class Session implements Subscriber, QueueOwner {
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
  /** Made at the first queued message: an idle client keeps no queue. */
  private queue: SessionQueue | undefined;
  private nextPacketId = 1;
  /** The latest retained-message walk of each filter, by serial number (see `retainedPace`). */
  private walks: Map<string, number> | undefined;
  private walkSerial = 0;
  /** Back-pressure on the publishers feeding it; made the first time the queue reaches the high-water mark. */
  private hold: PublisherHold | undefined;

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
    const held = this.subs.get(record.filter);
    // The same subscription again keeps the record held (as the topic tree keeps its own): a client re-subscribing
    // a thousand filters on every reconnect leaves no survivors for the collector to copy and later compact.
    if (held === undefined || !sameOptions(held, record)) this.subs.set(record.filter, record);
  }

  /** False if it had no such subscription. */
  unsubscribe(filter: string): boolean {
    this.walks?.delete(filter);
    return this.subs.delete(filter);
  }

  /** The ACL read check of the rules in force now, for this session's owner; every delivery passes it. */
  mayRead(topic: string): boolean {
    const check = this.settings.readGate.check;
    return (
      check === undefined ||
      this.owner === undefined ||
      check((this.reader ??= { clientId: this.id, username: this.owner ?? undefined }), topic)
    );
  }

  /** Whether part of the queue is in the store only (see `SessionQueue.addSpilled`). */
  get hasSpilled(): boolean {
    return this.queue?.hasSpilled ?? false;
  }

  /** Messages sent and not yet acknowledged. */
  get inflightCount(): number {
    return this.inflight.size;
  }

  /** Queued messages, in memory and spilled. */
  get queuedCount(): number {
    return this.queue === undefined ? 0 : this.queue.count;
  }

  /** Whether an incoming QoS 2 packet id is between PUBREC and PUBREL. */
  isAwaitingPubrel(packetId: number): boolean {
    return this.inboundQoS2?.has(packetId) ?? false;
  }

  awaitPubrel(packetId: number): void {
    (this.inboundQoS2 ??= new IdTable()).set(packetId, true);
  }

  /** PUBREL: returns whether the id was awaiting it. */
  handlePubrel(packetId: number): boolean {
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
    const filter = record.filter;
    // The record held: `record` itself, or an alike one kept by `subscribe`.
    const held = this.subs.get(filter);
    const walk = ++this.walkSerial;
    (this.walks ??= new Map()).set(filter, walk);
    return {
      // Stopped by a subscription with other options (another record), by an alike one (a later walk), and by
      // an unsubscribe or a clean start (no walk).
      wanted: () => this.link === link && this.subs.get(filter) === held && this.walks?.get(filter) === walk,
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
      const hold = (this.hold ??= new PublisherHold());
      if (hold.overflowing) return this.settings.events.dropped('slow_client', msg);
      hold.reachedHighWater(performance.now());
      this.settings.events.congested(this);
    }
    // A persistent session stores the message (as delivered: its QoS and retain flag) before the publisher is
    // acknowledged, so it survives a crash; the stored copy is removed when the flow completes. While the sessions
    // hold their share of the store it queues nothing: what it can send at once goes without a stored copy, the
    // rest is dropped for it alone, never refused to the publisher (docs/reliability.md#sessions-share).
    const store = this.store;
    const shareFull = store !== undefined && store.sessionsFull();
    if (shareFull && !(link && this.queuedCount === 0 && this.inflight.size < this.window))
      return this.settings.events.dropped('quota_exceeded', msg);
    const stored = shareFull ? undefined : store?.enqueue(this.id, asDelivered(msg, qos, retain));
    if (stored && this.ownQueue().spills(msg.payload.length)) {
      if (!this.ownQueue().addSpilled(msg, stored)) {
        this.removeStored(stored);
        this.settings.events.dropped('queue_full', msg);
      }
      return stored;
    }
    const delivery: Delivery = { msg, qos, retain, subscriptionIds, group, state: 'publish', stored };
    if (link && this.queuedCount === 0 && this.inflight.size < this.window) {
      this.sendNew(link, delivery, encodings);
    } else {
      const queue = this.ownQueue();
      if (!queue.add(delivery)) {
        this.forget(delivery);
        this.settings.events.dropped('queue_full', msg);
      }
      // Registered before the publisher's own handler, so a refused message has left the queue before the
      // refusal (0x97) goes out. One sent already cannot be called back: a live delivery does not wait for the disk.
      stored?.then(undefined, () => queue.unqueue(delivery));
    }
    return stored;
  }

  /**
   * Puts messages stored by an earlier run back, oldest first: QoS 2 flows that were under way in flight with
   * their packet ids (resent on attach: PUBLISH with DUP, or PUBREL), the rest in the queue. `tail`: the
   * messages after those, left in the store (a spilled queue).
   */
  restore(queue: readonly QueuedRecord[], tail?: { count: number; bytes: number }): void {
    if (tail !== undefined && tail.count > 0 && queue.length > 0)
      this.ownQueue().restoreSpill(tail.count, tail.bytes, queue[queue.length - 1].seq);
    for (const { seq, msg, flight } of queue) {
      const d = storedDelivery(seq, msg, undefined, flight?.released ? 'pubrel' : 'publish');
      if (flight !== undefined) {
        if (this.inflight === NO_FLOWS) this.inflight = new IdTable();
        this.inflight.set(flight.packetId, d);
      } else {
        this.ownQueue().putBack(d);
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
    this.sendQueued();
  }

  /**
   * Pauses `publisher` until the queue is down to the low-water mark, the client goes offline, or
   * `giveUpIfStuck` gives up on it (docs/architecture.md#back-pressure).
   */
  holdPublisher(publisher: HeldPublisher): void {
    (this.hold ??= new PublisherHold()).add(publisher);
  }

  /**
   * Asked by held publishers' timers: a session that has been at its high-water mark for `timeoutMs` without
   * draining to the low-water mark stops holding them, and overflows instead. True when that happened now.
   */
  giveUpIfStuck(nowMs: number, timeoutMs: number): boolean {
    return this.hold?.giveUpIfStuck(nowMs, timeoutMs) ?? false;
  }

  /** Detaches the connection. Unacknowledged shared-subscription messages go to another member of the group. */
  detach(): void {
    this.link = undefined;
    this.hold?.end();
    this.disconnectedAtMs = performance.now();
    this.inflight.forEach((f, packetId) => {
      if (f.group && f.state === 'publish') {
        this.inflight.delete(packetId);
        this.forget(f);
        this.settings.events.redeliverShared(f.group, f, this);
      }
    });
    const shared = this.queue?.takeShared();
    if (shared === undefined) return;
    for (const d of shared) {
      this.forget(d);
      this.settings.events.redeliverShared(d.group as SharedGroup, d, this);
    }
  }

  /** PUBACK: a QoS 1 flow is complete. Returns false for an unknown packet id. */
  handlePuback(packetId: number): boolean {
    return this.endFlow(packetId);
  }

  /** PUBCOMP: a QoS 2 flow is complete. Returns false for an unknown packet id. */
  handlePubcomp(packetId: number): boolean {
    return this.endFlow(packetId);
  }

  /** PUBREC: a QoS 2 message reached the client; an error reason (>= 0x80) ends the flow (MQTT 5 §4.3.3). */
  handlePubrec(packetId: number, reasonCode: number): boolean {
    const f = this.inflight.get(packetId);
    if (!f || f.qos !== 2) return false;
    if (reasonCode >= 0x80) return this.endFlow(packetId);
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
    this.walks = undefined;
    this.inboundQoS2 = undefined;
    this.inflight = NO_FLOWS;
    this.queue?.clear();
    this.hold?.end();
  }

  /** The identifiers of this session's subscriptions that match `topic` now (for messages read back). */
  subscriptionIdsFor(topic: string): number[] | undefined {
    let ids: number[] | undefined;
    for (const sub of this.subscriptions.values()) {
      if (sub.subscriptionId === undefined) continue;
      const shared = parseSharedFilter(sub.filter);
      const filter = shared === undefined ? sub.filter : shared === 'invalid' ? undefined : shared.filter;
      if (filter !== undefined && topicMatches(filter, topic)) (ids ??= []).push(sub.subscriptionId);
    }
    return ids;
  }

  /** Sends queued messages while the inflight window has room (and reads spilled ones back as it drains). */
  sendQueued(): void {
    const link = this.link;
    const queue = this.queue;
    if (!link || queue === undefined) return;
    const window = this.window;
    for (;;) {
      if (!queue.hasInMemory && !queue.refill()) break;
      if (this.inflight.size >= window) break;
      const d = queue.take();
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
    queue.afterSending();
    if (this.hold?.isHigh && queue.count <= this.settings.lowWater) this.hold.end();
  }

  /** A flow ended (PUBACK, PUBCOMP, or PUBREC with an error): its slot takes the next queued message. */
  private endFlow(packetId: number): boolean {
    const f = this.inflight.get(packetId);
    if (!f) return false;
    this.inflight.delete(packetId);
    this.forget(f);
    this.sendQueued();
    return true;
  }

  /** The queue, made at the first message that needs it. */
  private ownQueue(): SessionQueue {
    return (this.queue ??= new SessionQueue(this, this.settings.limits, this.settings.memoryWindow));
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
    if (d.stored) this.removeStored(d.stored);
  }

  private removeStored(stored: Promise<number>): void {
    const store = this.store;
    if (!store) return;
    stored.then((seq) => store.ack(this.id, seq)).catch(this.writeFailed);
  }

  private allocatePacketId(): number {
    // The window is far below 65535, so a free id is always found quickly.
    while (this.inflight.has(this.nextPacketId)) this.nextPacketId = (this.nextPacketId % 65535) + 1;
    const id = this.nextPacketId;
    this.nextPacketId = (this.nextPacketId % 65535) + 1;
    return id;
  }
}

/** The message as this session gets it (granted QoS, retain flag), which is what its store keeps. */
function asDelivered(msg: Message, qos: QoS, retain: boolean): Message {
  return msg.qos === qos && msg.retain === retain ? msg : { ...msg, qos, retain };
}

/** The shared empty table of a session without flows in progress; replaced by its own at the first one. */
const NO_FLOWS: IdTable<Delivery> = new IdTable();
/** Shared by every session without subscriptions; only read, never written (`subscribe` replaces it first). */
const NO_SUBSCRIPTIONS: Map<string, SubscriptionRecord> = new Map();
