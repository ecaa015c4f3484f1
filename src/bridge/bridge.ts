/**
 * One store-and-forward bridge (docs/architecture.md#the-bridge): the drain engine. Local messages matched by
 * out-filters are journaled in the bridge's outbox before anything else happens, and leave it only when the
 * central broker has them; the outbox is the one record of what still has to go up, so a crash, an outage or a
 * restart loses nothing journaled (a duplicate beats a gap). What an operator reads of it is bridge-report.ts's.
 */
import { hostname } from 'node:os';
import type { Broker } from '../broker/broker.js';
import type { BridgeConfig } from '../config/schema.js';
import type { Message } from '../protocol/message.js';
import { Origins, isExpired } from '../protocol/message.js';
import { reasonName } from '../protocol/reason-codes.js';
import type { Outbox, OutboxEntry } from '../store/types.js';
import { StoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import {
  BridgeReport,
  type BridgeCounts,
  type BridgeStats,
  type RateSample,
  type UplinkStatus,
} from './bridge-report.js';
import { DeadLetters } from './dead-letters.js';
import { Inbound, type InboundWatch } from './inbound.js';
import { StatusPublisher, type StatusSnapshot } from './status.js';
import { ReplayPacer } from './token-bucket.js';
import { TopicMap } from './topic-map.js';
import type { TopicRule } from './topic-map.js';
import { SendWindow, type FlightOwner, type Inflight } from './send-window.js';
import { UplinkStamp } from './stamp.js';
import { Uplink } from './uplink.js';
import type { PublishResult } from './uplink-connection.js';
import type { UplinkSession } from './uplink.js';

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
   * A topic whose messages from the central broker come here instead of the local broker: the Sparkplug node's
   * NBIRTH, to tell of a twin. Subscribed with no-local on MQTT 5; on 3.1.1 our own come back and the hook knows them.
   */
  readonly watch?: InboundWatch;
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
  private readonly deadLetters: DeadLetters;
  private readonly log: Logger;
  private readonly hooks: UplinkHooks;
  private readonly topics: TopicMap;
  private readonly uplink: Uplink;

  private running = false;
  private pausedReason: string | undefined;
  private unsubscribers: (() => void)[] = [];
  private session: UplinkSession | undefined;
  private sessionStartMs = 0;

  /** Acknowledged seqs of this turn, passed to the outbox together (it hides them from `peek` from then on). */
  private removeBatch: number[] = [];
  private highestSentSeq = -Infinity;
  /** Highest seq sent on earlier connections: anything at or below it going up again is a re-send. */
  private sentBefore = -Infinity;
  private readonly window: SendWindow;
  /** The message id (MQTT 5 uplinks): undefined when it adds nothing. */
  private readonly stamp: UplinkStamp | undefined;
  /** Backlog entries still to send on this connection (in order: before traffic counts as live, paced until then). */
  private replayRemaining = 0;
  private pacer: ReplayPacer;
  private readonly liveFirst: boolean;
  /** The backlog's replay limits: `replay`, scaled by `replay.share` when live-first. */
  private readonly paceLimits: { messagesPerS: number; bytesPerS: number };
  /** Live-first: the message id with `edgeferry-historical: true`, for backlog entries. */
  private readonly historicalStamp: UplinkStamp | undefined;

  private pumpScheduled = false;
  private paceTimer: NodeJS.Timeout | undefined;
  private tickTimer: NodeJS.Timeout | undefined;

  private readonly report: BridgeReport;
  /** The report's, counted into in place. */
  private readonly counts: BridgeCounts;
  private readonly sample: RateSample;
  private readonly statusPublisher: StatusPublisher | undefined;

  constructor(options: BridgeOptions) {
    this.config = options.config;
    this.name = options.config.name;
    this.origin = `${Origins.bridgePrefix}${this.name}`;
    this.broker = options.broker;
    this.outbox = options.outbox;
    this.deadLetters = new DeadLetters(options.deadLetter, options.outbox, options.log);
    this.log = options.log;
    this.report = new BridgeReport({
      name: this.name,
      origin: this.origin,
      clientId: options.config.remote.clientId,
      broker: options.broker,
      outbox: options.outbox,
      deadLetters: this.deadLetters,
      queue: options.config.queue,
      log: options.log,
    });
    this.counts = this.report.counts;
    this.sample = this.report.sample;
    this.hooks = options.hooks ?? {};
    this.topics = new TopicMap(options.config.topics);
    const { replay } = options.config;
    // The Sparkplug uplink (the only bridge with hooks) catches up live-first unless told otherwise.
    this.liveFirst = (replay.order ?? (options.hooks ? 'live-first' : 'in-order')) === 'live-first';
    const share = this.liveFirst ? replay.share : 1;
    this.paceLimits = { messagesPerS: replay.messagesPerS * share, bytesPerS: replay.bytesPerS * share };
    this.pacer = new ReplayPacer(this.paceLimits);
    const inbound = new Inbound({
      topics: this.topics,
      broker: this.broker,
      origin: this.origin,
      report: this.report,
      log: this.log,
      watch: this.hooks.watch,
    });
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
      subscriptions: inbound.subscriptions,
      // The Sparkplug uplink (the only bridge with hooks) subscribes on every connection, as an edge node on a clean
      // session would: a primary host's retained STATE must arrive on each one (docs/architecture.md#sparkplug-session).
      subscribeEveryConnection: options.hooks !== undefined,
      maxPacketBytes: options.maxPacketBytes,
      events: {
        connecting: (attempt) => this.report.connecting(attempt),
        online: (session) => this.onOnline(session),
        offline: (error, retryInMs) => this.onOffline(error, retryInMs),
        confirmed: (sendIndex) => this.onConfirmed(sendIndex),
        inbound: (msg) => inbound.publish(msg),
      },
    });
    const flightOwner: FlightOwner = {
      onResult: (flight, result) => this.onResult(flight, result),
      markReleased: (seq) => this.outbox.markReleased(seq),
      onConfirmed: (flight) => {
        this.counts.acked++;
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
    return this.report.status(this.pausedReason);
  }

  get stats(): BridgeStats {
    return this.report.stats({
      running: this.running,
      connected: this.uplink.online,
      inflight: this.window.size,
      replayRemaining: this.replayRemaining,
      pausedReason: this.pausedReason,
    });
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
    await this.report.publishState(false);
    this.report.started();
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
    await this.report.publishState(false);
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
   * then sent like any entry. `left`: those still dead letters.
   */
  requeueDeadLetters(): Promise<{ moved: number; left: number }> {
    return this.deadLetters.requeue(() => this.schedulePump());
  }

  /** Deletes the dead letters, counted as dropped (`dead_letter_deleted`); resolves with how many. */
  deleteDeadLetters(): Promise<number> {
    return this.deadLetters.delete();
  }

  // ---------------------------------------------------------------------------------------------------------
  // Journal

  private journal(rule: TopicRule, msg: Message): void | Promise<void> {
    const upstream = this.upstreamMessage(rule, msg);
    if (upstream === undefined) return;
    const appended = this.outbox.append(upstream).then(
      () => {
        this.report.appended();
        this.schedulePump();
      },
      (err: unknown) => {
        this.report.appendFailed(err);
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
    if (refused !== undefined) this.report.appendFailed(refused);
    return refused;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Uplink events

  private onOnline(session: UplinkSession): void {
    if (!this.running) return;
    this.session = session;
    this.sessionStartMs = this.broker.clock.nowMs();
    this.window.connected(session.sessionPresent);
    this.resetConnectionState();
    this.sentBefore = this.highestSentSeq;
    const depth = this.outbox.depth;
    this.replayRemaining = depth.messages;
    this.pacer = new ReplayPacer(this.paceLimits);
    this.report.online(session.url, session.sessionPresent, depth.messages);
    this.sendPrologue();
    void this.report.publishState(true);
    this.schedulePump();
  }

  private onOffline(error: Error, retryInMs: number | undefined): void {
    this.window.disconnected();
    this.resetConnectionState();
    this.session = undefined;
    if (this.report.offline(error, retryInMs)) void this.report.publishState(false);
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
      this.counts.acked++;
      this.report.episodeOver('rejected');
    } else {
      // Retrying a refused message would block the queue head forever: it leaves the queue.
      const reason = { reasonCode: result.reasonCode, reason: reasonName(result.reasonCode) };
      this.refuse(rec.seq, rec.msg, 'rejected', reason, 'central broker refused a message');
    }
    this.schedulePump();
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
      const share = this.config.replay.share;
      if (entry === undefined && !this.paceTimer && !window.backlog.done && !window.backlogFull(share)) {
        reader = window.backlog;
        entry = reader.next(dropped);
        if (entry !== undefined && entry.msg.qos > 0 && window.backlogQosFull(share, receiveMaximum)) break;
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
    window.requestConfirmation(this.liveFirst && !window.backlog.done ? this.config.replay.share : undefined);
  }

  private droppedTotal(): number {
    const d = this.outbox.depth.dropped;
    return d.queue_full + d.expired + d.rejected_upstream;
  }

  private send(entry: OutboxEntry, backlog: boolean): void {
    if (backlog) {
      if (this.replayRemaining > 0) this.replayRemaining--;
      this.sample.replaySent++;
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
    this.counts.sent++;
    // An entry goes once per connection, so one at or below the highest seq of an earlier connection is a re-send.
    if (entry.seq <= this.sentBefore) this.counts.resent++;
    if (entry.seq > this.highestSentSeq) this.highestSentSeq = entry.seq;
  }

  /** A QoS 2 entry the broker received before a reconnect or restart (PUBREC): PUBREL, never PUBLISH again. */
  private sendRelease(entry: OutboxEntry): void {
    if (this.session?.sessionPresent !== true) {
      // The broker forgot the flow with the session, but it had the message: nothing left to do.
      this.counts.acked++;
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
    const kept = this.deadLetters.keep(msg);
    if (!kept) void this.outbox.countDropped('rejected_upstream', 1);
    this.remove(seq);
    this.report.warnOnce(episode, fields, kept ? `${text}; kept as a dead letter` : `${text}; dropped`);
  }

  /** The central broker has the entry: it leaves the outbox; a live one's journal-to-ack time is sampled. */
  private delivered(flight: Inflight): void {
    if (!flight.backlog) {
      const latencyMs = this.broker.clock.nowMs() - flight.appendedAtMs;
      if (latencyMs > this.sample.liveLatencyMaxMs) this.sample.liveLatencyMaxMs = latencyMs;
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
    this.window.reset(this.liveFirst, this.config.replay.share);
    this.replayRemaining = 0;
    clearTimeout(this.paceTimer);
    this.paceTimer = undefined;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Housekeeping

  private tick(): void {
    this.report.tick(this.replayRemaining);
    if (this.config.queue.maxAgeS > 0) {
      this.outbox.expire().catch((err: unknown) => this.log.error({ err }, 'outbox expiry failed'));
    }
  }
}
