/**
 * The broker facade: routing through the topic tree, retained messages, sessions, wills, and the in-process
 * publish/subscribe API that connectors, the edge node and bridges use instead of TCP connections to themselves.
 */
import type { Message, QoS } from '../protocol/message.js';
import { isExpired } from '../protocol/message.js';
import { PublishEncodings } from '../protocol/codec.js';
import { parseSharedFilter } from '../protocol/topics.js';
import { Reason } from '../protocol/reason-codes.js';
import { ProtocolError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { QueueWindow, Store, SubscriptionRecord } from '../store/types.js';
import { RetainedIndex } from './retained.js';
import type { RetainedLimits } from './retained.js';
import { RetainedSender } from './retained-sender.js';
import type { RetainedMeta } from '../store/types.js';
import { NEVER_EXPIRES, Session, SessionSettings } from './session.js';
import type { ReadGate, SessionEvents, SessionOwner } from './session.js';
import { memoryWindow, type SessionLimits } from './session-limits.js';
import type { ClientInfo } from './auth.js';
import { TopicTree } from './topic-tree.js';
import type { SharedGroup, Subscriber, Subscription } from './topic-tree.js';
import { WillScheduler } from './wills.js';
import { BrokerStats } from './stats.js';
import { InProcessSubscriber, type Deliver, type SubscribeOptions } from './in-process-subscriber.js';
import { SessionExpiry } from './session-expiry.js';
import type { SteadyClock } from '../util/clock.js';

export interface BrokerOptions {
  readonly limits: SessionLimits;
  /** Counters to update; created when not given (the gateway creates them first, for the auth hooks). */
  readonly stats?: BrokerStats;
  readonly store: Store;
  readonly log: Logger;
  /** Where a discarded session of another identity is recorded (the audit log); default: `log`. */
  readonly audit?: Logger;
  /** `broker.maxRetainedMessages` and `maxRetainedBytes`; default: the configuration's defaults. */
  readonly retained?: RetainedLimits;
}

/** The defaults of `broker.maxRetainedMessages` and `maxRetainedBytes` (docs/security.md#clients-that-misbehave, "Retained messages"). */
export const DEFAULT_RETAINED_LIMITS: RetainedLimits = { maxMessages: 100_000, maxBytes: 256 * 1024 * 1024 };

export class Broker {
  readonly stats: BrokerStats;
  readonly sessions = new Map<string, Session>();
  readonly retained: RetainedIndex;
  /** Paces the retained messages of clients' new subscriptions across turns. */
  private readonly retainedSender: RetainedSender;
  readonly wills: WillScheduler;
  /** The store's steady timeline (util/clock.ts): session disconnect times, will due times. */
  readonly clock: SteadyClock;
  private readonly tree = new TopicTree();
  private readonly expiry = new SessionExpiry((session) => this.endSession(session));
  private readonly sessionEvents: SessionEvents;
  private routeGeneration = 0;
  /** Merge tables of `route`, one per nesting level (a delivery may publish again), reused by every message. */
  private readonly merges: RouteMerge[] = [];
  private routeDepth = 0;
  /**
   * Subscriptions and shared groups matched by `route` so far: the measure of routing work, by which a connection
   * bounds what one of its reads may cost before it lets other clients have the event loop.
   */
  routeWork = 0;
  /**
   * An online session the last `route` found at its queue's high-water mark, if any: the publisher of that message
   * is to stop reading until the session ends the hold (`Session.holdPublisher`; docs/architecture.md#back-pressure).
   */
  pressure: Session | undefined;
  private readonly log: Logger;
  /** Persistent sessions' queues go on in the store past this, when the store is durable; none: never. */
  private readonly memoryWindow: QueueWindow | undefined;
  private readonly readGate: ReadGate = { check: undefined };
  /** Limits, hooks and the read gate, one object for every session. */
  private readonly sessionSettings: SessionSettings;

  constructor(private readonly options: BrokerOptions) {
    this.stats = options.stats ?? new BrokerStats();
    this.memoryWindow = options.store.durable ? memoryWindow(options.limits) : undefined;
    this.log = options.log;
    this.clock = options.store.clock;
    this.retained = new RetainedIndex(options.store.retained, options.retained ?? DEFAULT_RETAINED_LIMITS, this.log);
    this.retainedSender = new RetainedSender(this.retained);
    this.wills = new WillScheduler(
      (msg) => this.publishWill(msg),
      (err, clientId) => this.sessionEvents.storeFailed(err, clientId),
      this.clock,
    );
    this.sessionEvents = {
      dropped: (reason) => {
        this.stats.dropped[reason]++;
      },
      sent: (qos) => {
        this.stats.messagesSent[qos]++;
      },
      congested: (session) => {
        this.pressure = session;
      },
      storeFailed: (err, clientId) => this.log.error({ err, clientId }, 'session store write failed'),
      redeliverShared: (group, d, from) => {
        const member = group.pick(from);
        if (!member) return;
        if (!mayRead(member.subscriber, d.msg.topic)) {
          this.stats.dropped.not_authorized++;
          return;
        }
        const wait = member.subscriber.deliver(
          d.msg,
          Math.min(d.qos, member.qos) as QoS,
          d.retain,
          undefined,
          undefined,
          group,
        );
        if (wait)
          wait.catch((err: unknown) =>
            this.log.warn({ err, topic: d.msg.topic }, 'shared subscription redelivery could not be stored'),
          );
      },
    };
    this.sessionSettings = new SessionSettings(options.limits, this.sessionEvents, this.readGate, this.memoryWindow);
  }

  /**
   * Who is behind a message origin (a client id), for the audit log: the session owner's user name, and while
   * connected its certificate identity and address. Nothing for in-process origins (`bridge:<name>`, ...).
   */
  identify(origin: string): { user?: string; certificate?: string; remote?: string } {
    const session = this.sessions.get(origin);
    if (!session) return {};
    const link = session.link;
    return { user: session.owner ?? undefined, certificate: link?.certificateIdentity, remote: link?.remoteAddress };
  }

  /** The ACL read check every session's deliveries pass from now on (at start and on reload). */
  setReadCheck(check: ((client: ClientInfo, topic: string) => boolean) | undefined): void {
    this.readGate.check = check;
  }

  get subscriptionCount(): { normal: number; shared: number } {
    return this.tree.count;
  }

  /** In-process publish: same routing, retained and durability path as a client's PUBLISH. */
  publish(msg: Message): Promise<unknown> {
    if (msg.origin !== '$SYS') this.stats.messagesPublishedLocally++;
    return this.route(msg) ?? Promise.resolve();
  }

  /**
   * Routes one message to every matching subscriber, once per subscriber at the highest matching QoS with every
   * matching subscription identifier [MQTT-3.3.4-2/3/5]. Returns a promise only when some subscriber (a bridge
   * outbox, a persistent session, the retained store) made the publisher wait, so the common path allocates no
   * promise. It rejects with the store's error when one of them could not store the message (EF_STORE_FULL:
   * a full outbox or store, which the publisher hears as 0x97 Quota exceeded).
   */
  route(msg: Message): Promise<unknown> | undefined {
    this.pressure = undefined;
    const { subscriptions, groups } = this.tree.match(msg.topic);
    this.routeWork += subscriptions.length + groups.length;
    if (msg.retain) {
      const refused = this.retained.refusal(msg);
      if (refused !== undefined) return Promise.reject(refused);
    }
    if (subscriptions.length === 0 && groups.length === 0) return msg.retain ? this.retained.set(msg) : undefined;
    // Overlapping subscriptions of one subscriber merge into one delivery. The marks on the subscriber only find
    // its slot; the merged values live in this nesting level's tables, so a delivery that publishes again cannot
    // disturb them.
    const generation = ++this.routeGeneration;
    const merge = (this.merges[this.routeDepth] ??= new RouteMerge());
    this.routeDepth++;
    try {
      return this.deliverMerged(msg, subscriptions, groups, generation, merge);
    } finally {
      this.routeDepth--;
      merge.release();
    }
  }

  private deliverMerged(
    msg: Message,
    subscriptions: readonly Subscription[],
    groups: readonly SharedGroup[],
    generation: number,
    merge: RouteMerge,
  ): Promise<unknown> | undefined {
    const { targets, qosOf, rapOf, idsOf } = merge;
    for (let i = 0; i < subscriptions.length; i++) {
      const sub = subscriptions[i];
      const s = sub.subscriber;
      if (sub.noLocal && msg.origin === s.id) continue; // [MQTT-3.8.3-3]
      const qos = (sub.qos < msg.qos ? sub.qos : msg.qos) as QoS;
      if (s.routeMark !== generation) {
        s.routeMark = generation;
        // The ACL read check once per subscriber, not per matching subscription; a refused one gets no slot.
        if (!mayRead(s, msg.topic)) {
          s.routeSlot = NO_SLOT;
          continue;
        }
        s.routeSlot = merge.add(
          s,
          qos,
          sub.retainAsPublished,
          sub.subscriptionId === undefined ? undefined : [sub.subscriptionId],
        );
      } else {
        const slot = s.routeSlot;
        if (slot === NO_SLOT) continue;
        if (qos > qosOf[slot]) qosOf[slot] = qos;
        if (sub.retainAsPublished) rapOf[slot] = true;
        if (sub.subscriptionId !== undefined) (idsOf[slot] ??= []).push(sub.subscriptionId);
      }
    }
    const count = merge.count;
    // A subscriber that would refuse the message (a full `reject-new` outbox, a store at `storage.maxBytes`) refuses
    // it for all, before anyone stores it: a publisher that retries after 0x97 then creates no duplicate. The
    // store's answer holds until this synchronous pass ends, so the writes below hear the same
    // (docs/reliability.md#full-disk).
    for (let i = 0; i < count; i++) {
      const refused = qosOf[i] > 0 ? targets[i]!.refusal?.(msg) : undefined;
      if (refused !== undefined) return Promise.reject(refused);
    }
    // Each shared group's member is picked first, so that it is asked too (an array only when there are groups).
    const members = groups.length === 0 ? undefined : groups.map((group) => this.pickMember(group, msg));
    if (members !== undefined && msg.qos > 0) {
      for (const member of members) {
        const refused = member !== undefined && member.qos > 0 ? member.subscriber.refusal?.(msg) : undefined;
        if (refused !== undefined) return Promise.reject(refused);
      }
    }
    let waits: Promise<unknown>[] | undefined;
    const retained = msg.retain ? this.retained.set(msg) : undefined;
    if (retained) (waits ??= []).push(retained);
    const encodings = new PublishEncodings(msg);
    for (let i = 0; i < count; i++) {
      // Without Retain As Published the retain flag is cleared on normal delivery [MQTT-3.3.1-12].
      const wait = targets[i]!.deliver(msg, qosOf[i], rapOf[i] && msg.retain, idsOf[i], encodings);
      if (wait) (waits ??= []).push(wait);
    }
    for (let i = 0; i < groups.length; i++) {
      const member = members![i];
      if (member === undefined) continue;
      const qos = (member.qos < msg.qos ? member.qos : msg.qos) as QoS;
      const ids = member.subscriptionId === undefined ? undefined : [member.subscriptionId];
      const wait = member.subscriber.deliver(
        msg,
        qos,
        member.retainAsPublished && msg.retain,
        ids,
        encodings,
        groups[i],
      );
      if (wait) (waits ??= []).push(wait);
    }
    return settle(waits);
  }

  /** The member of `group` that gets `msg` (round robin), or undefined when it goes to none of them. */
  private pickMember(group: SharedGroup, msg: Message): Subscription | undefined {
    const member = group.pick();
    if (!member) return undefined;
    if (member.noLocal && msg.origin === member.subscriber.id) return undefined;
    return mayRead(member.subscriber, msg.topic) ? member : undefined;
  }

  /** In-process subscription; returns its unsubscribe function. */
  subscribe(filter: string, opts: SubscribeOptions, deliver: Deliver): () => void {
    const subscriber = new InProcessSubscriber(opts.origin, deliver, opts.refusal);
    const record: SubscriptionRecord = {
      filter,
      qos: opts.qos,
      noLocal: opts.noLocal ?? false,
      retainAsPublished: opts.retainAsPublished ?? false,
      retainHandling: opts.retainHandling ?? 0,
    };
    this.addSubscription(subscriber, record);
    return () => this.removeSubscription(subscriber, filter);
  }

  /**
   * Adds a subscription for a session or in-process subscriber and sends matching retained messages as the
   * retain handling option says [MQTT-3.3.1-9/10/11]. Returns true if it replaced an existing one.
   */
  addSubscription(subscriber: Subscriber, record: SubscriptionRecord): boolean {
    const replaced = this.index(subscriber, record);
    this.startRetained(subscriber, record, replaced);
    return replaced;
  }

  /**
   * Sends the retained messages of a subscription just indexed (`replaced`: it replaced one of the same filter) as
   * its retain handling option says [MQTT-3.3.1-9/10/11].
   */
  startRetained(subscriber: Subscriber, record: SubscriptionRecord, replaced: boolean): void {
    // No retained messages for shared subscriptions (MQTT 5 §4.8.2); retain handling 1: only for new ones.
    const sendRetained = record.retainHandling === 0 || (record.retainHandling === 1 && !replaced);
    if (!sendRetained || parseSharedFilter(record.filter) !== undefined) return;
    const filter = record.filter;
    // A filter without wildcards matches one topic: with nothing retained there, no walk is scheduled (a SCADA
    // client's thousand exact filters cost a thousand lookups, not a thousand paced jobs).
    if (!filter.includes('+') && !filter.includes('#') && !this.retained.holds(filter)) return;
    this.sendMatching(subscriber, record);
  }

  /**
   * `startRetained`'s sending, a method of its own: the closure's captured variables would otherwise be allocated
   * on every entry to `startRetained`, also for the thousand filters of a SUBSCRIBE that have nothing retained.
   */
  private sendMatching(subscriber: Subscriber, record: SubscriptionRecord): void {
    const send = (entry: RetainedMeta): number => this.sendRetained(subscriber, record, entry);
    // A client's are paced across turns, after its SUBACK; an in-process subscriber's arrive now.
    const pace = subscriber.retainedPace?.(record);
    if (pace !== undefined) this.retainedSender.start(record.filter, pace, send);
    else for (const entry of this.retained.matching(record.filter)) if (entry !== undefined) send(entry);
  }

  /**
   * Delivers one retained message for a new subscription, retain flag set [MQTT-3.3.1-8], at the subscription's
   * QoS at most, if no-local and the ACL read check let it; returns the payload bytes sent.
   */
  private sendRetained(subscriber: Subscriber, record: SubscriptionRecord, entry: RetainedMeta): number {
    if (record.noLocal && entry.origin === subscriber.id) return 0;
    if (!mayRead(subscriber, entry.topic)) return 0;
    const msg = this.retained.message(entry);
    if (msg === undefined) return 0;
    const qos = (record.qos < msg.qos ? record.qos : msg.qos) as QoS;
    const ids = record.subscriptionId === undefined ? undefined : [record.subscriptionId];
    const wait = subscriber.deliver(msg, qos, true, ids, undefined);
    if (wait)
      wait.catch((err: unknown) => this.log.warn({ err, topic: msg.topic }, 'retained delivery could not be stored'));
    return msg.payload.length;
  }

  /** Puts a subscription into the topic tree; true if it replaced one of the same subscriber and filter. */
  private index(subscriber: Subscriber, record: SubscriptionRecord): boolean {
    const shared = parseSharedFilter(record.filter);
    if (shared === 'invalid')
      throw new ProtocolError(Reason.TopicFilterInvalid, `invalid shared filter ${record.filter}`);
    return shared
      ? this.tree.add(subscriber, shared.filter, record, shared.group)
      : this.tree.add(subscriber, record.filter, record);
  }

  removeSubscription(subscriber: Subscriber, filter: string): boolean {
    const shared = parseSharedFilter(filter);
    if (shared === 'invalid') return false;
    return shared ? this.tree.remove(subscriber, shared.filter, shared.group) : this.tree.remove(subscriber, filter);
  }

  /**
   * Finds or creates the session for a connecting client. With clean start an existing session is discarded
   * (its pending will fires) [MQTT-3.1.2-4]. Returns whether a session was present [MQTT-3.2.2-2/3].
   * A session with an expiry interval is persistent: it is written to the store and survives restarts.
   * A session belongs to the identity that made it: another identity (a user name, or anonymous against named)
   * gets a new, empty session, and the old one is discarded, its queued messages counted as dropped.
   */
  openSession(
    clientId: string,
    owner: SessionOwner,
    cleanStart: boolean,
    expiryIntervalS: number,
  ): { session: Session; present: boolean } {
    this.expiry.cancel(clientId);
    let existing = this.sessions.get(clientId);
    if (existing && existing.owner !== undefined && existing.owner !== owner) {
      this.discardForeign(existing, owner);
      existing = undefined;
    }
    let session: Session;
    let present = false;
    if (existing && !cleanStart) {
      this.wills.cancel(clientId);
      if (existing.owner === undefined) {
        existing.adopt(owner);
        this.log.info(
          { clientId, owner: owner ?? '<anonymous>' },
          'a session stored without its owner was resumed: its owner is now the client that resumed it',
        );
      }
      session = existing;
      present = true;
    } else {
      if (existing) this.endSession(existing);
      session = new Session(clientId, owner, this.sessionSettings);
      this.sessions.set(clientId, session);
    }
    session.expiryIntervalS = expiryIntervalS;
    this.persistSession(session);
    return { session, present };
  }

  /**
   * Stores the subscriptions of a persistent session; resolves once durable, so that SUBACK promises what
   * a restart keeps. Undefined for a session that ends with its connection.
   */
  persistSubscriptions(session: Session, records: readonly SubscriptionRecord[]): Promise<void> | undefined {
    const store = session.store;
    if (!store || records.length === 0) return undefined;
    return Promise.all(records.map((record) => store.putSubscription(session.id, record))).then(() => undefined);
  }

  /**
   * Subscribes a client session (SUBSCRIBE) after `persistSubscriptions`; true if it replaced a subscription of
   * the same filter. Its retained messages follow the SUBACK: `startRetained`. A session that ended meanwhile (its
   * client went while the SUBSCRIBE was worked on) gets none: nothing would remove them from the tree.
   */
  subscribeSession(session: Session, record: SubscriptionRecord): boolean {
    if (this.sessions.get(session.id) !== session) return false;
    // The very record the session holds (the same subscription again): the topic tree has it as well, unchanged.
    if (session.subscriptions.get(record.filter) === record) return true;
    session.subscribe(record);
    return this.index(session, record);
  }

  /** Unsubscribes a client session (UNSUBSCRIBE); false if it had no such subscription. */
  unsubscribeSession(session: Session, filter: string): boolean {
    if (!session.unsubscribe(filter)) return false;
    this.removeSubscription(session, filter);
    session.store
      ?.deleteSubscription(session.id, filter)
      .catch((err: unknown) => this.sessionEvents.storeFailed(err, session.id));
    return true;
  }

  /**
   * Loads the persistent sessions of an earlier run: subscriptions back in the tree (no retained messages are
   * sent: nothing was subscribed anew), queued messages back in their queues, expiry counting the time spent down.
   * Delayed wills are restored parked: `wills.start()` arms them once every in-process subscriber is in place.
   */
  restoreSessions(): number {
    const sessions = this.options.store.sessions;
    let restored = 0;
    for (const record of sessions.loadAll(this.memoryWindow)) {
      // Stored under a higher cap (or none, by an older release), it gets the cap of now.
      const expiryS = Math.min(record.expiryIntervalS, this.options.limits.maxSessionExpiryS ?? NEVER_EXPIRES);
      const downS =
        record.disconnectedAtMs === undefined ? 0 : Math.max(0, (this.clock.nowMs() - record.disconnectedAtMs) / 1000);
      const leftS = expiryS === NEVER_EXPIRES ? NEVER_EXPIRES : expiryS - downS;
      // A session that ended while the gateway was down takes its will along: due now [MQTT-3.1.3-9].
      if (record.will) {
        this.wills.restore(record.clientId, leftS <= 0 ? { msg: record.will.msg, dueAtMs: 0 } : record.will, sessions);
      }
      if (leftS <= 0) {
        sessions.drop(record.clientId).catch((err: unknown) => this.sessionEvents.storeFailed(err, record.clientId));
        continue;
      }
      const session = new Session(record.clientId, record.owner, this.sessionSettings);
      session.expiryIntervalS = expiryS;
      session.store = sessions;
      this.sessions.set(record.clientId, session);
      for (const sub of record.subscriptions) {
        session.subscribe(sub);
        this.index(session, sub);
      }
      session.restore(record.queue, record.queueTail);
      for (const packetId of record.awaitingRelease) session.awaitPubrel(packetId);
      this.expiry.schedule(session, leftS);
      restored++;
    }
    return restored;
  }

  /** Ends the session of another identity under the client id `owner` connects with; said in the audit log. */
  private discardForeign(session: Session, owner: SessionOwner): void {
    const queued = session.queuedCount + session.inflightCount;
    this.stats.dropped.session_taken_over += queued;
    (this.options.audit ?? this.log).warn(
      {
        clientId: session.id,
        owner: session.owner ?? '<anonymous>',
        by: owner ?? '<anonymous>',
        droppedMessages: queued,
      },
      'session discarded: a client of another identity connected with its client id',
    );
    this.endSession(session);
  }

  /** The connection of `session` closed: keep the session for its expiry interval, or end it now. */
  sessionDisconnected(session: Session): void {
    session.detach();
    if (this.sessions.get(session.id) !== session) return;
    const expiryS = session.expiryIntervalS;
    if (expiryS === 0) return this.endSession(session);
    this.persistSession(session, this.clock.nowMs());
    this.expiry.schedule(session, expiryS);
  }

  /** The session ends: subscriptions go, and a delayed will still pending is published now [MQTT-3.1.3-9]. */
  endSession(session: Session): void {
    this.expiry.cancel(session.id);
    if (session.store) {
      session.store.drop(session.id).catch((err: unknown) => this.sessionEvents.storeFailed(err, session.id));
      session.store = undefined;
    }
    for (const filter of session.subscriptions.keys()) this.removeSubscription(session, filter);
    session.detach();
    session.clear();
    if (this.sessions.get(session.id) === session) this.sessions.delete(session.id);
    this.wills.fire(session.id);
  }

  /**
   * Shutdown. Delayed wills of sessions in a durable store wait for the next run; the others go out now, as
   * their sessions end with the process.
   */
  close(): void {
    this.expiry.close();
    this.retainedSender.close();
    this.wills.close(this.options.store.durable);
  }

  /** Writes (or, at expiry 0, removes) the session's own record in the store. */
  private persistSession(session: Session, disconnectedAtMs?: number): void {
    const sessions = this.options.store.sessions;
    const fail = (err: unknown): void => this.sessionEvents.storeFailed(err, session.id);
    if (session.expiryIntervalS === 0) {
      // A resumed persistent session that the client now wants to end with the connection. If part of its
      // queue is in the store only, the store stays until the session ends (`endSession` drops it then).
      if (session.hasSpilled) return;
      if (session.store) sessions.drop(session.id).catch(fail);
      session.store = undefined;
      return;
    }
    if (!session.store) {
      session.store = sessions;
      // A session turning persistent: its subscriptions so far must be stored too.
      for (const sub of session.subscriptions.values()) sessions.putSubscription(session.id, sub).catch(fail);
    }
    sessions
      .putSession(session.id, { expiryIntervalS: session.expiryIntervalS, disconnectedAtMs, owner: session.owner })
      .catch(fail);
  }

  private publishWill(msg: Message): Promise<unknown> | undefined {
    if (isExpired(msg)) return undefined;
    this.stats.messagesReceived[msg.qos]++;
    const routed = this.route(msg);
    routed?.catch((err: unknown) => this.log.warn({ err, topic: msg.topic }, 'will message could not be stored'));
    return routed;
  }
}

/** The subscriber's ACL read check; in-process subscribers have none. */
function mayRead(subscriber: Subscriber, topic: string): boolean {
  return subscriber.mayRead === undefined || subscriber.mayRead(topic);
}

/** `routeSlot` of a subscriber that matched but may not read the message (route). */
const NO_SLOT = -1;

/**
 * One route call's merge of overlapping subscriptions per subscriber (a slot each), kept between calls so that
 * routing allocates no arrays per message; `count` slots are in use. The tables keep the room of the largest
 * fan-out seen, not its subscribers.
 */
class RouteMerge {
  count = 0;
  readonly targets: (Subscriber | undefined)[] = [];
  readonly qosOf: QoS[] = [];
  readonly rapOf: boolean[] = [];
  readonly idsOf: (number[] | undefined)[] = [];

  /** Returns the new slot. */
  add(s: Subscriber, qos: QoS, retainAsPublished: boolean, ids: number[] | undefined): number {
    const slot = this.count++;
    this.targets[slot] = s;
    this.qosOf[slot] = qos;
    this.rapOf[slot] = retainAsPublished;
    this.idsOf[slot] = ids;
    return slot;
  }

  release(): void {
    for (let i = 0; i < this.count; i++) {
      this.targets[i] = undefined;
      this.idsOf[i] = undefined;
    }
    this.count = 0;
  }
}

/** Waits for every subscriber that asked to be waited for (one promise, not a new one, for the common single wait). */
function settle(waits: Promise<unknown>[] | undefined): Promise<unknown> | undefined {
  if (!waits) return undefined;
  return waits.length === 1 ? waits[0] : Promise.all(waits);
}
