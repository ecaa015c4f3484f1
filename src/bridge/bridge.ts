/**
 * One store-and-forward bridge: local messages matched by out-filters are journaled in the bridge's
 * LMDB outbox before anything else happens, and leave it only when the central broker acknowledged them.
 *
 * - Journal first: a local QoS 1/2 publisher's PUBACK waits for the outbox write to be on disk (the Deliver
 *   callback returns the append promise); QoS 0 is journaled the same way without making the publisher wait.
 * - `replay.order: in-order`: one FIFO, the uplink sends from the head of the outbox, oldest first, so live
 *   traffic queues behind the backlog. `live-first` (docs/architecture.md#live-first): what is journaled after
 *   the connection came up goes at once, the backlog drains beside it within `replay.share` of the window and
 *   of the replay rate, flagged historical. At most `inflight` messages are unacknowledged; the backlog is paced
 *   by token buckets.
 * - QoS 0 upstream is never acknowledged by the protocol, so a sent QoS 0 entry stays in the outbox until a
 *   later PINGRESP or PUBACK proves that the broker read past it (one TCP stream, processed in order). The
 *   uplink pings when such entries wait, so this takes about one round trip; after an ungraceful loss (or
 *   a half-open link, detected within 1.5x keepalive or `ackTimeoutS`) the unconfirmed ones are sent again.
 *   A duplicate beats a gap.
 * - Inbound: in/both filters are subscribed upstream and published locally with origin `bridge:<name>`; the
 *   out subscriptions use no-local with that origin, so nothing bridged in is bridged back out.
 */
import { hostname } from 'node:os';
import type { Broker } from '../broker/broker.js';
import type { BridgeConfig } from '../config/schema.js';
import type { Message } from '../protocol/message.js';
import { Origins, createMessage, isExpired } from '../protocol/message.js';
import { reasonName } from '../protocol/reason-codes.js';
import { deleteDeadLetters, requeueDeadLetters } from './dead-letters.js';
import type { DropReason, Outbox, OutboxEntry } from '../store/types.js';
import { asError, StoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { OutageLog } from './outage-log.js';
import { StatusPublisher, type StatusSnapshot } from './status.js';
import { ReplayPacer } from './token-bucket.js';
import { TopicMap } from './topic-map.js';
import type { TopicRule } from './topic-map.js';
import { SendWindow, type FlightOwner, type Inflight } from './send-window.js';
import { UplinkStamp } from './stamp.js';
import { Uplink } from './uplink.js';
import type { InboundPublish, PublishResult, UplinkSession } from './uplink.js';

export type UplinkStatus =
  | { type: 'connecting'; attempt: number }
  | { type: 'online'; backlog: number }
  | { type: 'offline'; error: string; retryInMs: number }
  | { type: 'paused'; reason: string };

/** The seam for Sparkplug (docs/architecture.md#sparkplug-session): the bridge never decodes payloads itself. */
export interface UplinkHooks {
  /** The Will to register on every connect (NDEATH with the next bdSeq). */
  will?(): Message;
  /** A CONNECT carrying the last `will()` is about to leave (see `UplinkOptions.connectSending`). */
  connectSending?(): void;
  /** Sent first after every CONNACK, outside the outbox (NBIRTH, DBIRTHs). */
  prologue?(): Message[];
  /**
   * Called as an entry is sent: returns the message to send, or null to drop the entry (superseded BIRTH/DEATH).
   * `backlog` is true for entries journaled before the current upstream session began.
   */
  rewrite?(entry: OutboxEntry, backlog: boolean): Message | null;
  /**
   * A topic whose messages from the central broker come here instead of the local broker; subscribed on MQTT 5
   * uplinks only, with no-local, so none of them is our own: the Sparkplug node's NBIRTH, to tell of a twin.
   */
  readonly watch?: { readonly topic: string; received(msg: InboundPublish): void };
}

export interface BridgeStats {
  readonly state: UplinkStatus['type'] | 'stopped';
  readonly connected: boolean;
  readonly backlogMessages: number;
  readonly backlogBytes: number;
  /** Refused messages kept in the dead-letter outbox (0 when it is off). */
  readonly deadLetterMessages: number;
  /** Age of the oldest journaled entry, 0 when empty. */
  readonly oldestAgeS: number;
  readonly inflight: number;
  /** PUBLISH packets written upstream, re-sends included. */
  readonly sent: number;
  /** Of those, re-sends after a reconnect or restart. */
  readonly resent: number;
  /** Entries that left the outbox because the central broker has them (PUBACK, PUBCOMP, or QoS 0 confirmed). */
  readonly acked: number;
  readonly dropped: Readonly<Record<DropReason, number>>;
  /** Messages sent per second over the last sampling period (about 1 s). */
  readonly sendRatePerS: number;
  /** Send rate while replaying a backlog, last sample (0 when not replaying). */
  readonly replayRatePerS: number;
  /** Backlog entries still to send on this connection over the replay rate; 0 when none, NaN while unknown. */
  readonly drainEtaS: number;
  /** The longest journal-to-acknowledgement time of a message that was not backlog, over the last sample. */
  readonly liveLatencyS: number;
  readonly reconnects: number;
  /** Connections the central broker gave to another client with the same client id (DISCONNECT 0x8E, or inferred). */
  readonly sessionTaken: number;
  /** The last reason the uplink went down or an attempt failed (and when, ISO 8601); undefined before any. */
  readonly lastError: { readonly message: string; readonly at: string } | undefined;
  /** Messages from the central broker published locally. */
  readonly received: number;
  /** Inbound messages the local broker refused. */
  readonly receivedFailed: number;
}

export interface BridgeOptions {
  readonly config: BridgeConfig;
  readonly broker: Broker;
  readonly outbox: Outbox;
  readonly log: Logger;
  readonly hooks?: UplinkHooks;
  /** The local broker's maximum packet size: announced upstream, as inbound messages are published locally. */
  readonly maxPacketBytes?: number;
  /** Where messages the central broker refuses are kept (`deadLetterOutbox(name)`); without it they are dropped. */
  readonly deadLetter?: Outbox;
  /** The gateway's id in message ids (`gateway.id`); without it, the host name. */
  readonly gatewayId?: string;
  /** The gateway's status report (`status.enabled`): published on `status.topic`, "offline" as the Will. */
  readonly status?: (online: boolean) => StatusSnapshot;
}

/** Bytes of fixed header, packet id and property overhead assumed when checking Maximum Packet Size. */
const PACKET_OVERHEAD_BYTES = 16;

export class Bridge {
  readonly name: string;
  /** Origin of messages this bridge publishes locally; its out subscriptions never receive them. */
  readonly origin: string;
  private readonly config: BridgeConfig;
  private readonly broker: Broker;
  private readonly outbox: Outbox;
  private readonly deadLetter: Outbox | undefined;
  private readonly log: Logger;
  private readonly hooks: UplinkHooks;
  private readonly topics: TopicMap;
  private readonly uplink: Uplink;
  private readonly stateTopic: string;
  /** `hooks.watch`'s topic upstream (with the out rule's prefix), subscribed on MQTT 5 uplinks. */
  private readonly watchTopic: string | undefined;

  private running = false;
  private currentStatus: UplinkStatus = { type: 'connecting', attempt: 0 };
  private pausedReason: string | undefined;
  private unsubscribers: (() => void)[] = [];
  private session: UplinkSession | undefined;
  private sessionStartMs = 0;
  private everOnline = false;

  /** Acknowledged seqs of this turn, passed to the outbox together (it hides them from `peek` from then on). */
  private removeBatch: number[] = [];
  /** Highest seq this process has sent. */
  private highestSentSeq = -Infinity;
  /** Highest seq sent on earlier connections: anything at or below it going up again is a re-send. */
  private sentBefore = -Infinity;
  private readonly window: SendWindow;
  /** The message id (MQTT 5 uplinks): undefined when it adds nothing. */
  private readonly stamp: UplinkStamp | undefined;
  /** Backlog entries still to send on this connection (in order: before traffic counts as live, paced until then). */
  private replayRemaining = 0;
  private pacer: ReplayPacer;
  /** `replay.order` is live-first. */
  private readonly liveFirst: boolean;
  /** The backlog's replay limits: `replay`, scaled by `replay.share` when live-first. */
  private readonly paceLimits: { messagesPerS: number; bytesPerS: number };
  /** Live-first: the message id with `edgeferry-historical: true`, for backlog entries. */
  private readonly historicalStamp: UplinkStamp | undefined;

  private pumpScheduled = false;
  private paceTimer: NodeJS.Timeout | undefined;
  private tickTimer: NodeJS.Timeout | undefined;

  private readonly counters = { sent: 0, resent: 0, acked: 0, reconnects: 0, received: 0, receivedFailed: 0 };
  private readonly rate = {
    lastSent: 0,
    lastAtMs: 0,
    sendPerS: 0,
    replayPerS: 0,
    replaySent: 0,
    liveLatencyMs: 0,
    liveLatencyMaxMs: 0,
  };
  /** Warnings logged once per episode; cleared when the condition ends. */
  private readonly episodes = new Set<string>();
  private readonly outages: OutageLog;
  private readonly statusPublisher: StatusPublisher | undefined;
  private lastError: BridgeStats['lastError'];
  private queueFullSeen = 0;
  /** The dead-letter requeue or delete under way: one at a time, so that both never take the same letters. */
  private deadLetterWork: Promise<unknown> = Promise.resolve();

  constructor(options: BridgeOptions) {
    this.config = options.config;
    this.name = options.config.name;
    this.origin = `${Origins.bridgePrefix}${this.name}`;
    this.broker = options.broker;
    this.outbox = options.outbox;
    this.deadLetter = options.deadLetter;
    this.log = options.log;
    this.outages = new OutageLog(options.log);
    this.hooks = options.hooks ?? {};
    this.topics = new TopicMap(options.config.topics);
    const { replay } = options.config;
    // The Sparkplug uplink (the only bridge with hooks) catches up live-first unless told otherwise.
    this.liveFirst = (replay.order ?? (options.hooks ? 'live-first' : 'in-order')) === 'live-first';
    const share = this.liveFirst ? replay.share : 1;
    this.paceLimits = { messagesPerS: replay.messagesPerS * share, bytesPerS: replay.bytesPerS * share };
    this.pacer = new ReplayPacer(this.paceLimits);
    this.stateTopic = `$SYS/broker/connection/${options.config.remote.clientId}/state`;
    const watched = this.hooks.watch?.topic;
    const watchRule =
      watched === undefined || options.config.remote.protocolVersion !== 5 ? undefined : this.topics.matchOut(watched);
    this.watchTopic = watched !== undefined && watchRule ? this.topics.toRemote(watchRule, watched) : undefined;
    const watchSubscription = this.watchTopic === undefined ? [] : [{ filter: this.watchTopic, qos: 0 as const }];
    this.queueFullSeen = this.outbox.depth.dropped.queue_full;
    const { status } = options.config;
    this.statusPublisher =
      status.enabled && options.status ? new StatusPublisher(this, status.topic, options.status) : undefined;
    // A connection has one Will: the Sparkplug uplink's is the NDEATH; its status says "offline" on a graceful stop.
    const statusWill = this.statusPublisher ? () => this.statusPublisher?.will() : undefined;
    this.uplink = new Uplink({
      config: options.config,
      log: this.log,
      will: this.hooks.will ? () => this.hooks.will?.() : statusWill,
      connectSending: this.hooks.connectSending ? () => this.hooks.connectSending?.() : undefined,
      subscriptions: [
        ...this.topics.inRules.map((r) => ({ filter: r.remoteFilter, qos: r.qos ?? 1 })),
        ...watchSubscription,
      ],
      // The Sparkplug uplink (the only bridge with hooks) subscribes on every connection, as an edge node on a clean
      // session would: a primary host's retained STATE must arrive on each one (docs/architecture.md#sparkplug-session).
      subscribeEveryConnection: options.hooks !== undefined,
      maxPacketBytes: options.maxPacketBytes,
      events: {
        connecting: (attempt) => {
          this.outages.attempting(attempt);
          this.setStatus({ type: 'connecting', attempt });
        },
        online: (session) => this.onOnline(session),
        offline: (error, retryInMs) => this.onOffline(error, retryInMs),
        confirmed: (sendIndex) => this.onConfirmed(sendIndex),
        inbound: (msg) => this.onInbound(msg),
      },
    });
    const flightOwner: FlightOwner = {
      onResult: (flight, result) => this.onResult(flight, result),
      markReleased: (seq) => this.outbox.markReleased(seq),
      onConfirmed: (flight) => {
        this.counters.acked++;
        this.delivered(flight);
      },
    };
    this.window = new SendWindow(this.outbox, this.uplink, flightOwner, Math.max(1, options.config.inflight));
    const { messageId, remote } = options.config;
    const idProperty = messageId.enabled && remote.protocolVersion === 5 ? messageId.property : undefined;
    const gatewayId = options.gatewayId ?? hostname();
    const stamp = new UplinkStamp(idProperty, gatewayId, false);
    this.stamp = stamp.empty ? undefined : stamp;
    this.historicalStamp =
      this.liveFirst && remote.protocolVersion === 5 ? new UplinkStamp(idProperty, gatewayId, true) : undefined;
  }

  get status(): UplinkStatus {
    if (this.pausedReason !== undefined) return { type: 'paused', reason: this.pausedReason };
    if (this.currentStatus.type === 'online') return { type: 'online', backlog: this.outbox.depth.messages };
    return this.currentStatus;
  }

  get stats(): BridgeStats {
    const depth = this.outbox.depth;
    return {
      state: this.running ? this.status.type : 'stopped',
      connected: this.uplink.online,
      backlogMessages: depth.messages,
      backlogBytes: depth.bytes,
      deadLetterMessages: this.deadLetter?.depth.messages ?? 0,
      oldestAgeS:
        depth.oldestAppendedAtMs === undefined
          ? 0
          : Math.max(0, (this.broker.clock.nowMs() - depth.oldestAppendedAtMs) / 1000),
      inflight: this.window.size,
      sent: this.counters.sent,
      resent: this.counters.resent,
      acked: this.counters.acked,
      dropped: { ...depth.dropped },
      sendRatePerS: this.rate.sendPerS,
      replayRatePerS: this.rate.replayPerS,
      drainEtaS:
        this.replayRemaining === 0 ? 0 : this.rate.replayPerS > 0 ? this.replayRemaining / this.rate.replayPerS : NaN,
      liveLatencyS: this.rate.liveLatencyMs / 1000,
      reconnects: this.counters.reconnects,
      sessionTaken: this.outages.sessionTaken,
      lastError: this.lastError,
      received: this.counters.received,
      receivedFailed: this.counters.receivedFailed,
    };
  }

  /**
   * Subscribes to the out filters and starts the uplink. Never rejects because the central broker is down:
   * the uplink retries with backoff while the outbox buffers.
   */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    for (const rule of this.topics.outRules) {
      this.unsubscribers.push(
        this.broker.subscribe(
          rule.localFilter,
          // QoS 2: deliver each message at its own QoS; the rule's QoS applies upstream.
          // Retain handling 2: retained messages were journaled when published; re-sending them at every start
          // would duplicate them upstream.
          {
            qos: 2,
            origin: this.origin,
            noLocal: true,
            retainAsPublished: true,
            retainHandling: 2,
            refusal: (msg) => this.refusal(rule, msg),
          },
          (msg) => this.journal(rule, msg),
        ),
      );
    }
    await this.publishState(false);
    this.rate.lastAtMs = performance.now();
    this.tickTimer = setInterval(() => this.tick(), 1000);
    this.tickTimer.unref();
    this.uplink.start();
    this.statusPublisher?.start();
  }

  /** Stops sending and closes the uplink; the outbox stays on disk and resumes on the next start. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    for (const unsubscribe of this.unsubscribers) unsubscribe();
    this.unsubscribers = [];
    clearInterval(this.tickTimer);
    clearTimeout(this.paceTimer);
    const offline = this.statusPublisher?.stop();
    if (offline && this.uplink.online) {
      this.uplink.publish(offline, undefined, false);
      await new Promise(setImmediate); // it leaves before our DISCONNECT, which discards the Will
    }
    await this.uplink.stop();
    this.resetConnectionState();
    this.flushRemovals();
    await this.publishState(false);
  }

  /** Whether the uplink is connected now. */
  get online(): boolean {
    return this.uplink.online;
  }

  /**
   * Publishes upstream at once on the current connection, outside the outbox (Sparkplug births after a late
   * primary-host STATE). Returns false, sending nothing, when the uplink is offline.
   */
  publishNow(messages: readonly Message[]): boolean {
    if (!this.running || !this.uplink.online) return false;
    for (const msg of messages) {
      this.uplink.publish(msg, undefined, false, {
        result: (result) => {
          if (!result.ok)
            this.log.warn(
              { topic: msg.topic, reasonCode: result.reasonCode },
              'central broker refused a message sent outside the outbox',
            );
        },
      });
    }
    return true;
  }

  /** Ends the uplink's MQTT session (normal DISCONNECT) and starts a new one; the outbox keeps what is journaled. */
  reconnect(reason: string): void {
    this.uplink.reconnect(reason);
  }

  /** Holds back draining (e.g. until the Sparkplug primary host is online); journaling continues. */
  pause(reason: string): void {
    this.pausedReason = reason;
  }

  resume(): void {
    this.pausedReason = undefined;
    this.schedulePump();
  }

  /**
   * Sends the dead letters again once the cause of the refusal is fixed: moved to the end of the outbox in order,
   * crash-safe (dead-letters.ts), then sent like any entry. `left`: those still dead letters (the outbox
   * was full, or the central broker refused them again meanwhile).
   */
  requeueDeadLetters(): Promise<{ moved: number; left: number }> {
    return this.deadLetterTurn(
      async (dead) => {
        const moved = await requeueDeadLetters(dead, this.outbox);
        this.schedulePump();
        return { moved, left: dead.depth.messages };
      },
      { moved: 0, left: 0 },
    );
  }

  /** Deletes the dead letters, counted as dropped (`dead_letter_deleted`); resolves with how many. */
  deleteDeadLetters(): Promise<number> {
    return this.deadLetterTurn(async (dead) => {
      const deleted = await deleteDeadLetters(dead);
      // The operator's answer and the card after it show the drop.
      if (deleted > 0) await this.outbox.countDropped('dead_letter_deleted', deleted);
      return deleted;
    }, 0);
  }

  /** Runs `work` after the one under way; a bridge without dead letters (none kept) has nothing to do. */
  private deadLetterTurn<T>(work: (dead: Outbox) => Promise<T>, nothing: T): Promise<T> {
    const dead = this.deadLetter;
    if (dead === undefined) return Promise.resolve(nothing);
    const turn = this.deadLetterWork.then(() => work(dead));
    this.deadLetterWork = turn.catch(() => undefined);
    return turn;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Journal

  private journal(rule: TopicRule, msg: Message): void | Promise<void> {
    const upstream = this.upstreamMessage(rule, msg);
    if (upstream === undefined) return;
    const appended = this.outbox.append(upstream).then(
      () => this.onAppended(),
      (err: unknown) => {
        this.onAppendFailed(err);
        throw err;
      },
    );
    if (msg.qos > 0) return appended; // the publisher's PUBACK waits; a refusal becomes 0x97 for it
    appended.catch((err: unknown) => {
      // Nobody answers a QoS 0 publisher, so a refused QoS 0 message is a drop: count it.
      if (err instanceof StoreError && err.code === 'EF_STORE_FULL') void this.outbox.countDropped('queue_full', 1);
      this.log.trace({ err, topic: msg.topic }, 'QoS 0 message not journaled');
    });
    return undefined;
  }

  /** What the outbox journals for `msg` delivered by `rule`: undefined for our own, or when another rule journals it. */
  private upstreamMessage(rule: TopicRule, msg: Message): Message | undefined {
    if (msg.origin === this.origin) return undefined; // defensive: no-local already filters our own messages
    // Overlapping filters each deliver the message; only the first matching rule journals it.
    if (this.topics.matchOut(msg.topic) !== rule) return undefined;
    return { ...msg, topic: this.topics.toRemote(rule, msg.topic), qos: rule.qos ?? msg.qos };
  }

  /**
   * Why the outbox would refuse `msg` now (routing asks before anyone stores it), warned once per episode: a full
   * `reject-new` outbox, an entry larger than its `maxBytes`, a store at `storage.maxBytes` that a `drop-oldest`
   * outbox cannot make room in.
   */
  private refusal(rule: TopicRule, msg: Message): Error | undefined {
    const upstream = this.upstreamMessage(rule, msg);
    const refused = upstream === undefined ? undefined : this.outbox.refusal(upstream);
    if (refused !== undefined) this.onAppendFailed(refused);
    return refused;
  }

  private onAppended(): void {
    if (this.episodes.delete('reject-new')) this.log.info({ bridge: this.name }, 'outbox accepts messages again');
    this.checkQueueFull();
    this.schedulePump();
  }

  private onAppendFailed(err: unknown): void {
    if (err instanceof StoreError && err.code === 'EF_STORE_FULL') {
      this.warnOnce(
        'reject-new',
        { depth: this.outbox.depth.messages, bytes: this.outbox.depth.bytes },
        'outbox full, refusing new messages',
      );
      return;
    }
    // A failed commit is logged by the store, once until commits succeed again; this would repeat it per message.
    if (!(err instanceof StoreError)) this.log.error({ err }, 'outbox append failed');
  }

  /** Drop-oldest happens inside the outbox; warn once per episode when its counter moves. */
  private checkQueueFull(): void {
    const dropped = this.outbox.depth.dropped.queue_full;
    if (dropped > this.queueFullSeen) {
      this.warnOnce(
        'queue-full',
        { dropped: dropped - this.queueFullSeen, policy: this.config.queue.overflow },
        'outbox full, dropping oldest messages',
      );
      this.queueFullSeen = dropped;
      return;
    }
    const { messages, bytes } = this.outbox.depth;
    const { maxMessages, maxBytes } = this.config.queue;
    if (this.episodes.has('queue-full') && messages < maxMessages * 0.9 && bytes < maxBytes * 0.9) {
      this.episodes.delete('queue-full');
      this.log.info({ messages, bytes }, 'outbox below its limits again');
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // Uplink events

  private onOnline(session: UplinkSession): void {
    if (!this.running) return;
    this.session = session;
    this.sessionStartMs = this.broker.clock.nowMs();
    if (this.everOnline) this.counters.reconnects++;
    this.everOnline = true;
    this.window.connected(session.sessionPresent);
    this.resetConnectionState();
    this.sentBefore = this.highestSentSeq;
    const depth = this.outbox.depth;
    this.replayRemaining = depth.messages;
    // The rates' next sample starts now, so the first one after an outage is not averaged over the outage.
    this.rate.replaySent = 0;
    this.rate.lastSent = this.counters.sent;
    this.rate.lastAtMs = performance.now();
    this.pacer = new ReplayPacer(this.paceLimits);
    this.setStatus({ type: 'online', backlog: depth.messages });
    this.outages.online({ url: session.url, sessionPresent: session.sessionPresent, backlog: depth.messages });
    this.sendPrologue();
    void this.publishState(true);
    this.schedulePump();
  }

  private onOffline(error: Error, retryInMs: number | undefined): void {
    const wasOnline = this.currentStatus.type === 'online';
    this.window.disconnected();
    this.resetConnectionState();
    this.session = undefined;
    if (retryInMs === undefined) {
      // Stopped on purpose: no warning, no retry.
      this.setStatus({ type: 'offline', error: 'stopped', retryInMs: 0 });
      return;
    }
    this.setStatus({ type: 'offline', error: error.message, retryInMs });
    this.lastError = { message: error.message, at: new Date().toISOString() };
    this.outages.offline(error, retryInMs, this.outbox.depth.messages, wasOnline);
    if (wasOnline) void this.publishState(false);
  }

  /** Every publish written before send index `upTo` reached the broker: release confirmed QoS 0 entries. */
  private onConfirmed(upTo: number): void {
    if (this.window.confirm(upTo)) this.schedulePump();
  }

  private onResult(rec: Inflight, result: PublishResult): void {
    if (!this.window.settle(rec)) return;
    if (rec.abandoned) return this.schedulePump();
    if (result.ok) {
      this.delivered(rec);
      this.counters.acked++;
      this.episodes.delete('rejected');
    } else {
      // Retrying a refused message would block the queue head forever: it leaves the queue.
      const reason = { reasonCode: result.reasonCode, reason: reasonName(result.reasonCode) };
      this.refuse(rec.seq, rec.msg, 'rejected', reason, 'central broker refused a message');
    }
    this.schedulePump();
  }

  private async onInbound(msg: InboundPublish): Promise<void> {
    if (msg.topic === this.watchTopic) return this.hooks.watch?.received(msg);
    const rule = this.topics.matchIn(msg.topic);
    if (!rule) {
      this.log.debug({ topic: msg.topic }, 'inbound message matches no in-filter; ignored');
      return;
    }
    const local = createMessage({
      topic: this.topics.toLocal(rule, msg.topic),
      payload: msg.payload,
      qos: msg.qos,
      retain: msg.retain,
      properties: msg.properties,
      origin: this.origin,
    });
    try {
      await this.broker.publish(local);
      this.counters.received++;
      this.episodes.delete('inbound');
    } catch (err) {
      this.counters.receivedFailed++;
      this.warnOnce(
        'inbound',
        { err: asError(err), topic: local.topic },
        'inbound message refused by the local broker',
      );
    }
  }

  // ---------------------------------------------------------------------------------------------------------
  // Sending

  private schedulePump(): void {
    if (this.pumpScheduled || !this.uplink.online) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /**
   * Sends while the window has room: in order from the outbox head, the backlog paced; live-first, what was
   * journaled since the connection came up at once, and the backlog in the room its share leaves.
   */
  private pump(): void {
    if (!this.running || !this.uplink.online || this.pausedReason !== undefined) return;
    if (this.paceTimer && !this.liveFirst) return;
    const receiveMaximum = this.session?.receiveMaximum ?? 65_535;
    const dropped = this.droppedTotal();
    const window = this.window;
    // send() may end the connection: `online` is read again on every round, whatever the narrowing above says.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
    while (!window.full && this.uplink.online) {
      if (window.resendPending && !window.releaseAbandoned(dropped, receiveMaximum)) break;
      let reader = window.live;
      let entry = reader.next(dropped);
      if (
        entry === undefined &&
        !this.paceTimer &&
        !window.backlog.done &&
        !window.backlogFull(this.config.replay.share, receiveMaximum)
      ) {
        reader = window.backlog;
        entry = reader.next(dropped);
      }
      if (entry === undefined) break;
      if (window.has(entry.seq)) {
        reader.advance(entry);
        continue;
      }
      if (entry.msg.qos > 0 && window.qosFull(receiveMaximum)) break;
      if (isExpired(entry.msg)) {
        reader.advance(entry);
        void this.outbox.countDropped('expired', 1);
        this.remove(entry.seq);
        continue;
      }
      const backlog = reader === window.backlog || (!this.liveFirst && this.replayRemaining > 0);
      if (backlog) {
        const waitMs = this.pacer.waitMs(entry.bytes);
        if (waitMs > 0) {
          this.paceTimer = setTimeout(() => {
            this.paceTimer = undefined;
            this.pump();
          }, waitMs);
          // Live-first: the live reader goes on; the backlog waits for the timer.
          if (this.liveFirst) continue;
          break;
        }
        this.pacer.take(entry.bytes);
      }
      reader.advance(entry);
      this.send(entry, backlog);
    }
    if (window.backlog.done && this.liveFirst) this.replayRemaining = 0;
    window.requestConfirmation();
  }

  private droppedTotal(): number {
    const d = this.outbox.depth.dropped;
    return d.queue_full + d.expired + d.rejected_upstream;
  }

  private send(entry: OutboxEntry, backlog: boolean): void {
    if (backlog) {
      if (this.replayRemaining > 0) this.replayRemaining--;
      this.rate.replaySent++;
    }
    if (entry.released) return this.sendRelease(entry);
    let msg: Message = entry.msg;
    if (this.hooks.rewrite) {
      const rewritten = this.hooks.rewrite(entry, entry.appendedAtMs < this.sessionStartMs);
      if (rewritten === null) {
        this.remove(entry.seq);
        return;
      }
      msg = rewritten;
    }
    const maxBytes = this.session?.maximumPacketSizeBytes;
    if (
      maxBytes !== undefined &&
      msg.payload.length + Buffer.byteLength(msg.topic) + PACKET_OVERHEAD_BYTES > maxBytes
    ) {
      const fields = { topic: msg.topic, bytes: msg.payload.length, maxBytes };
      this.refuse(entry.seq, entry.msg, 'too-large', fields, 'message larger than the central broker accepts');
      return;
    }
    this.window.send(entry, msg, backlog && this.liveFirst ? this.historicalStamp : this.stamp, backlog);
    this.counters.sent++;
    // An entry goes once per connection, so one at or below the highest seq of an earlier connection is a re-send.
    if (entry.seq <= this.sentBefore) this.counters.resent++;
    if (entry.seq > this.highestSentSeq) this.highestSentSeq = entry.seq;
  }

  /** A QoS 2 entry the broker received before a reconnect or restart (PUBREC): PUBREL, never PUBLISH again. */
  private sendRelease(entry: OutboxEntry): void {
    if (this.session?.sessionPresent !== true) {
      // The broker forgot the flow with the session, but it had the message: nothing left to do.
      this.counters.acked++;
      this.remove(entry.seq);
      return;
    }
    this.window.release(entry.seq);
  }

  private sendPrologue(): void {
    const messages = this.hooks.prologue?.() ?? [];
    if (messages.length > 0) this.publishNow(messages);
  }

  /**
   * The central broker refuses the entry: it leaves the outbox, into the dead-letter outbox when there is one (kept
   * for `edgeferry store requeue`), else dropped and counted. The dead-letter append is queued before the removal,
   * and store batches commit in order, so a crash never loses the entry between the two.
   */
  private refuse(seq: number, msg: Message | undefined, episode: string, fields: object, text: string): void {
    const kept = this.keepAsDeadLetter(msg);
    if (!kept) void this.outbox.countDropped('rejected_upstream', 1);
    this.remove(seq);
    this.warnOnce(episode, fields, kept ? `${text}; kept as a dead letter` : `${text}; dropped`);
  }

  /** Queues a refused message for the dead-letter outbox; false when there is none (or no message to keep). */
  private keepAsDeadLetter(msg: Message | undefined): boolean {
    if (msg === undefined || this.deadLetter === undefined) return false;
    this.deadLetter.append(msg).catch((err: unknown) => {
      void this.outbox.countDropped('rejected_upstream', 1);
      this.log.error({ err, topic: msg.topic }, 'a refused message could not be kept as a dead letter; dropped');
    });
    return true;
  }

  /** The central broker has the entry: it leaves the outbox; a live one's journal-to-ack time is sampled. */
  private delivered(flight: Inflight): void {
    if (!flight.backlog) {
      const latencyMs = this.broker.clock.nowMs() - flight.appendedAtMs;
      if (latencyMs > this.rate.liveLatencyMaxMs) this.rate.liveLatencyMaxMs = latencyMs;
    }
    this.remove(flight.seq);
  }

  private remove(seq: number): void {
    this.removeBatch.push(seq);
    if (this.removeBatch.length === 1) queueMicrotask(() => this.flushRemovals());
  }

  /**
   * One outbox call for all acknowledgements of this turn, before the next pump reads the outbox: from then on
   * `peek` no longer returns them, and the store commits them with the others of the next few ms.
   */
  private flushRemovals(): void {
    if (this.removeBatch.length === 0) return;
    const seqs = this.removeBatch;
    this.removeBatch = [];
    this.outbox.remove(seqs).catch((err: unknown) => {
      // The entries stay journaled and go up again after the next reconnect: a duplicate, not a loss.
      this.log.error({ err, count: seqs.length }, 'outbox removal failed');
    });
  }

  private resetConnectionState(): void {
    this.window.reset(this.liveFirst);
    this.replayRemaining = 0;
    clearTimeout(this.paceTimer);
    this.paceTimer = undefined;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Housekeeping

  private tick(): void {
    const nowMs = performance.now();
    const elapsedS = (nowMs - this.rate.lastAtMs) / 1000;
    if (elapsedS > 0) {
      this.rate.sendPerS = Math.round((this.counters.sent - this.rate.lastSent) / elapsedS);
      this.rate.replayPerS =
        this.replayRemaining > 0 || this.rate.replaySent > 0 ? Math.round(this.rate.replaySent / elapsedS) : 0;
    }
    this.rate.lastSent = this.counters.sent;
    this.rate.replaySent = 0;
    this.rate.liveLatencyMs = this.rate.liveLatencyMaxMs;
    this.rate.liveLatencyMaxMs = 0;
    this.rate.lastAtMs = nowMs;
    this.outages.tick();
    this.checkQueueFull();
    if (this.config.queue.maxAgeS > 0) {
      this.outbox.expire().catch((err: unknown) => this.log.error({ err }, 'outbox expiry failed'));
    }
  }

  private setStatus(status: UplinkStatus): void {
    this.currentStatus = status;
  }

  private async publishState(up: boolean): Promise<void> {
    try {
      await this.broker.publish(
        createMessage({
          topic: this.stateTopic,
          payload: Buffer.from(up ? '1' : '0'),
          qos: 0,
          retain: true,
          origin: this.origin,
        }),
      );
    } catch (err) {
      this.log.warn({ err, topic: this.stateTopic }, 'bridge state could not be published');
    }
  }

  private warnOnce(episode: string, fields: object, msg: string): void {
    if (this.episodes.has(episode)) return;
    this.episodes.add(episode);
    this.log.warn(fields, msg);
  }
}
