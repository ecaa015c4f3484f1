/**
 * One store-and-forward bridge: local messages matched by out-filters are journaled in the bridge's
 * LMDB outbox before anything else happens, and leave it only when the central broker acknowledged them.
 *
 * - Journal first: a local QoS 1/2 publisher's PUBACK waits for the outbox write to be on disk (the Deliver
 *   callback returns the append promise); QoS 0 is journaled the same way without making the publisher wait.
 * - One FIFO: the uplink sends from the head of the outbox, oldest first, so live traffic queues behind the
 *   backlog; at most `inflight` messages are unacknowledged; replay of the backlog is paced by token buckets.
 * - QoS 0 upstream is never acknowledged by the protocol, so a sent QoS 0 entry stays in the outbox until a
 *   later PINGRESP or PUBACK proves that the broker read past it (one TCP stream, processed in order). The
 *   uplink pings when such entries wait, so this takes about one round trip; after an ungraceful loss (or
 *   a half-open link, detected within 1.5x keepalive or `ackTimeoutS`) the unconfirmed ones are sent again.
 *   A duplicate beats a gap.
 * - Inbound: in/both filters are subscribed upstream and published locally with origin `bridge:<name>`; the
 *   out subscriptions use no-local with that origin, so nothing bridged in is bridged back out.
 */
import type { Broker } from '../broker/broker.js';
import type { BridgeConfig } from '../config/schema.js';
import type { Message, QoS } from '../protocol/message.js';
import { createMessage, isExpired } from '../protocol/message.js';
import { reasonName } from '../protocol/reason-codes.js';
import type { DropReason, Outbox, OutboxEntry } from '../store/types.js';
import { asError, StoreError, UplinkError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { ReplayPacer } from './token-bucket.js';
import { TopicMap } from './topic-map.js';
import type { TopicRule } from './topic-map.js';
import { outboxPacketId, Uplink } from './uplink.js';
import type { InboundPublish, PublishFlow, PublishResult, UplinkSession } from './uplink.js';
import { steadyNowMs } from '../util/clock.js';

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
  readonly reconnects: number;
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
}

/** What an in-flight entry reports to its bridge. */
interface FlightOwner {
  onResult(flight: Inflight, result: PublishResult): void;
  /** QoS 2: records that the broker received the entry (PUBREC) before the PUBREL goes. */
  markReleased(seq: number): Promise<void>;
}

/**
 * An outbox entry sent on the current connection and not yet acknowledged or confirmed; for QoS 1/2 it is also
 * the flow's sender that the uplink reports to (one object per message, no closures).
 */
class Inflight implements PublishFlow {
  /** Set once written: the uplink's send index of its PUBLISH or PUBREL. */
  sendIndex = 0;

  constructor(
    private readonly owner: FlightOwner,
    readonly seq: number,
    readonly qos: QoS,
    /** The entry's message as journaled (before any hook rewrote it): what a refusal keeps as a dead letter. */
    readonly msg: Message | undefined,
    /** A PUBREL that frees the packet id of an entry dropped unsent (see releaseAbandoned): nothing to count. */
    readonly abandoned = false,
  ) {}

  result(result: PublishResult): void {
    this.owner.onResult(this, result);
  }

  /** PUBREL only once the receipt is durable: from then on, also after a crash, the entry is only released. */
  received(): Promise<void> {
    return this.owner.markReleased(this.seq);
  }
}

/** How long unconfirmed QoS 0 entries may wait for a confirming ping when the window is not full. */
const QOS0_CONFIRM_DELAY_MS = 250;
/** Peek at most this many entries per outbox read. */
const PEEK_BATCH = 256;
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

  private running = false;
  private currentStatus: UplinkStatus = { type: 'connecting', attempt: 0 };
  private pausedReason: string | undefined;
  private unsubscribers: (() => void)[] = [];
  private session: UplinkSession | undefined;
  private sessionStartMs = 0;
  private everOnline = false;

  /** Sent and not yet acknowledged/confirmed, by seq, in send order. */
  private readonly inflight = new Map<number, Inflight>();
  private readonly flightOwner: FlightOwner = {
    onResult: (flight, result) => this.onResult(flight, result),
    markReleased: (seq) => this.outbox.markReleased(seq),
  };
  private qosInflight = 0;
  /** Unconfirmed QoS 0 sends in send order; `q0Head` is the first live one. */
  private q0: Inflight[] = [];
  private q0Head = 0;
  /** Last seq read from the outbox on this connection; undefined: start at the head. */
  private cursor: number | undefined;
  /** Entries after `cursor` read ahead from the outbox (see nextEntry). */
  private ahead: readonly OutboxEntry[] = [];
  private aheadHead = 0;
  /** The outbox's dropped total when `ahead` was read. */
  private aheadDropped = 0;
  /** Acknowledged seqs of this turn, passed to the outbox together (it hides them from `peek` from then on). */
  private removeBatch: number[] = [];
  /**
   * QoS 1/2 entries unacknowledged when a connection dropped, seq to QoS: re-sent with DUP on a resumed session.
   * One that leaves the outbox unsent meanwhile (limits, expiry) is released instead (see releaseAbandoned).
   */
  private readonly resending = new Map<number, QoS>();
  /** Highest seq this process has sent; anything at or below it going up again is a re-send. */
  private highestSentSeq = -Infinity;
  private window: number;
  /** Backlog entries still to send on this connection before traffic counts as live (paced until then). */
  private replayRemaining = 0;
  private pacer: ReplayPacer;

  private pumpScheduled = false;
  private paceTimer: NodeJS.Timeout | undefined;
  private confirmTimer: NodeJS.Timeout | undefined;
  private tickTimer: NodeJS.Timeout | undefined;

  private readonly counters = { sent: 0, resent: 0, acked: 0, reconnects: 0, received: 0, receivedFailed: 0 };
  private readonly rate = { lastSent: 0, lastAtMs: 0, sendPerS: 0, replayPerS: 0, replaySent: 0 };
  /** Warnings logged once per episode; cleared when the condition ends. */
  private readonly episodes = new Set<string>();
  private queueFullSeen = 0;

  constructor(options: BridgeOptions) {
    this.config = options.config;
    this.name = options.config.name;
    this.origin = `bridge:${this.name}`;
    this.broker = options.broker;
    this.outbox = options.outbox;
    this.deadLetter = options.deadLetter;
    this.log = options.log;
    this.hooks = options.hooks ?? {};
    this.topics = new TopicMap(options.config.topics);
    this.window = options.config.inflight;
    this.pacer = new ReplayPacer(options.config.replay);
    this.stateTopic = `$SYS/broker/connection/${options.config.remote.clientId}/state`;
    this.queueFullSeen = this.outbox.depth.dropped.queue_full;
    this.uplink = new Uplink({
      config: options.config,
      log: this.log,
      will: this.hooks.will ? () => this.hooks.will?.() : undefined,
      connectSending: this.hooks.connectSending ? () => this.hooks.connectSending?.() : undefined,
      subscriptions: this.topics.inRules.map((r) => ({ filter: r.remoteFilter, qos: r.qos ?? 1 })),
      maxPacketBytes: options.maxPacketBytes,
      events: {
        connecting: (attempt) => this.setStatus({ type: 'connecting', attempt }),
        online: (session) => this.onOnline(session),
        offline: (error, retryInMs) => this.onOffline(error, retryInMs),
        confirmed: (sendIndex) => this.onConfirmed(sendIndex),
        inbound: (msg) => this.onInbound(msg),
      },
    });
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
      oldestAgeS: depth.oldestAppendedAtMs === undefined ? 0 : Math.max(0, (steadyNowMs() - depth.oldestAppendedAtMs) / 1000),
      inflight: this.inflight.size,
      sent: this.counters.sent,
      resent: this.counters.resent,
      acked: this.counters.acked,
      dropped: { ...depth.dropped },
      sendRatePerS: this.rate.sendPerS,
      replayRatePerS: this.rate.replayPerS,
      reconnects: this.counters.reconnects,
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
          { qos: 2, origin: this.origin, noLocal: true, retainAsPublished: true, retainHandling: 2 },
          (msg) => this.journal(rule, msg),
        ),
      );
    }
    await this.publishState(false);
    this.rate.lastAtMs = performance.now();
    this.tickTimer = setInterval(() => this.tick(), 1000);
    this.tickTimer.unref();
    this.uplink.start();
  }

  /** Stops sending and closes the uplink; the outbox stays on disk and resumes on the next start. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    for (const unsubscribe of this.unsubscribers) unsubscribe();
    this.unsubscribers = [];
    clearInterval(this.tickTimer);
    clearTimeout(this.paceTimer);
    clearTimeout(this.confirmTimer);
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
          if (!result.ok) this.log.warn({ topic: msg.topic, reasonCode: result.reasonCode }, 'central broker refused a message sent outside the outbox');
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

  // ---------------------------------------------------------------------------------------------------------
  // Journal

  private journal(rule: TopicRule, msg: Message): void | Promise<void> {
    if (msg.origin === this.origin) return; // defensive: no-local already filters our own messages
    // Overlapping filters each deliver the message; only the first matching rule journals it.
    if (this.topics.matchOut(msg.topic) !== rule) return;
    const upstream: Message = { ...msg, topic: this.topics.toRemote(rule, msg.topic), qos: rule.qos ?? msg.qos };
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
      if (err instanceof StoreError && err.code === 'EF_STORE_FULL') this.outbox.countDropped('queue_full', 1);
      this.log.trace({ err, topic: msg.topic }, 'QoS 0 message not journaled');
    });
    return undefined;
  }

  private onAppended(): void {
    if (this.episodes.delete('reject-new')) this.log.info({ bridge: this.name }, 'outbox accepts messages again');
    this.checkQueueFull();
    this.schedulePump();
  }

  private onAppendFailed(err: unknown): void {
    if (err instanceof StoreError && err.code === 'EF_STORE_FULL') {
      this.warnOnce('reject-new', { depth: this.outbox.depth.messages, bytes: this.outbox.depth.bytes }, 'outbox full, refusing new messages');
      return;
    }
    // A failed commit is logged by the store, once until commits succeed again; this would repeat it per message.
    if (!(err instanceof StoreError)) this.log.error({ err }, 'outbox append failed');
  }

  /** Drop-oldest happens inside the outbox; warn once per episode when its counter moves. */
  private checkQueueFull(): void {
    const dropped = this.outbox.depth.dropped.queue_full;
    if (dropped > this.queueFullSeen) {
      this.warnOnce('queue-full', { dropped: dropped - this.queueFullSeen, policy: this.config.queue.overflow }, 'outbox full, dropping oldest messages');
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
    this.sessionStartMs = steadyNowMs();
    if (this.everOnline) this.counters.reconnects++;
    this.everOnline = true;
    if (!session.sessionPresent) this.resending.clear();
    this.resetConnectionState();
    this.window = Math.max(1, this.config.inflight);
    const depth = this.outbox.depth;
    this.replayRemaining = depth.messages;
    this.rate.replaySent = 0;
    this.pacer = new ReplayPacer(this.config.replay);
    this.setStatus({ type: 'online', backlog: depth.messages });
    const wasDown = this.episodes.delete('offline');
    this.log.info({ url: session.url, sessionPresent: session.sessionPresent, backlog: depth.messages, reconnected: wasDown }, 'uplink online');
    this.sendPrologue();
    void this.publishState(true);
    this.schedulePump();
  }

  private onOffline(error: Error, retryInMs: number | undefined): void {
    const wasOnline = this.currentStatus.type === 'online';
    // Unacknowledged QoS 1/2 may have reached the broker: if the session resumes, they go again with DUP.
    for (const rec of this.inflight.values()) if (rec.qos > 0) this.resending.set(rec.seq, rec.qos);
    this.resetConnectionState();
    this.session = undefined;
    if (retryInMs === undefined) {
      // Stopped on purpose: no warning, no retry.
      this.setStatus({ type: 'offline', error: 'stopped', retryInMs: 0 });
      return;
    }
    this.setStatus({ type: 'offline', error: error.message, retryInMs });
    const fields = { err: error, retryInMs, backlog: this.outbox.depth.messages };
    if (error instanceof UplinkError && error.code === 'EF_UPLINK_REJECTED') {
      if (!this.episodes.has('offline')) this.log.error(fields, 'central broker refused the uplink; buffering');
      this.episodes.add('offline');
    } else {
      this.warnOnce('offline', fields, wasOnline ? 'uplink lost; buffering' : 'uplink offline; buffering');
    }
    if (wasOnline) void this.publishState(false);
    this.log.debug({ err: error, retryInMs }, 'uplink attempt failed');
  }

  /** Every publish written before send index `upTo` reached the broker: release confirmed QoS 0 entries. */
  private onConfirmed(upTo: number): void {
    let released = false;
    while (this.q0Head < this.q0.length && this.q0[this.q0Head].sendIndex < upTo) {
      const rec = this.q0[this.q0Head++];
      if (this.inflight.get(rec.seq) === rec) {
        this.inflight.delete(rec.seq);
        this.counters.acked++;
        this.remove(rec.seq);
        released = true;
      }
    }
    if (this.q0Head > 1024 && this.q0Head * 2 > this.q0.length) {
      this.q0 = this.q0.slice(this.q0Head);
      this.q0Head = 0;
    }
    if (released) this.schedulePump();
  }

  private onResult(rec: Inflight, result: PublishResult): void {
    if (this.inflight.get(rec.seq) !== rec) return;
    this.inflight.delete(rec.seq);
    this.qosInflight--;
    if (rec.abandoned) return this.schedulePump();
    if (result.ok) {
      this.remove(rec.seq);
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
      this.warnOnce('inbound', { err: asError(err), topic: local.topic }, 'inbound message refused by the local broker');
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

  /** Sends from the outbox head while the window has room. */
  private pump(): void {
    if (!this.running || !this.uplink.online || this.pausedReason !== undefined || this.paceTimer) return;
    const receiveMaximum = this.session?.receiveMaximum ?? 65_535;
    const dropped = this.droppedTotal();
    while (this.inflight.size < this.window && this.uplink.online) {
      const entry = this.nextEntry(dropped);
      if (this.resending.size > 0 && !this.releaseAbandoned(entry?.seq ?? Infinity, receiveMaximum)) break;
      if (entry === undefined) break;
      if (this.inflight.has(entry.seq)) {
        this.advance(entry);
        continue;
      }
      if (entry.msg.qos > 0 && this.qosInflight >= receiveMaximum) break;
      if (isExpired(entry.msg)) {
        this.advance(entry);
        this.outbox.countDropped('expired', 1);
        this.remove(entry.seq);
        continue;
      }
      if (this.replayRemaining > 0) {
        const waitMs = this.pacer.waitMs(entry.bytes);
        if (waitMs > 0) {
          this.paceTimer = setTimeout(() => {
            this.paceTimer = undefined;
            this.pump();
          }, waitMs);
          break;
        }
        this.pacer.take(entry.bytes);
      }
      this.advance(entry);
      this.send(entry);
    }
    this.afterPump();
  }

  /**
   * The next outbox entry after the cursor, from entries read ahead in chunks: one LMDB read per chunk rather
   * than one per acknowledgement. Read again when the outbox dropped entries (limits, expiry), which are the
   * oldest, i.e. the ones read ahead.
   */
  private nextEntry(dropped: number): OutboxEntry | undefined {
    if (this.aheadHead >= this.ahead.length || dropped !== this.aheadDropped) {
      this.ahead = this.outbox.peek(PEEK_BATCH, this.cursor);
      this.aheadHead = 0;
      this.aheadDropped = dropped;
    }
    return this.ahead[this.aheadHead];
  }

  /** The entry was handled (sent, skipped or dropped): the cursor moves past it. */
  private advance(entry: OutboxEntry): void {
    this.cursor = entry.seq;
    this.aheadHead++;
  }

  private droppedTotal(): number {
    const d = this.outbox.depth.dropped;
    return d.queue_full + d.expired + d.rejected_upstream;
  }

  private send(entry: OutboxEntry): void {
    if (this.replayRemaining > 0) {
      this.replayRemaining--;
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
    if (maxBytes !== undefined && msg.payload.length + Buffer.byteLength(msg.topic) + PACKET_OVERHEAD_BYTES > maxBytes) {
      const fields = { topic: msg.topic, bytes: msg.payload.length, maxBytes };
      this.refuse(entry.seq, entry.msg, 'too-large', fields, 'message larger than the central broker accepts');
      return;
    }
    const dup = this.resending.delete(entry.seq);
    // QoS 1/2 records keep the journaled message: a refusal (PUBACK/PUBREC >= 0x80) keeps it as a dead letter.
    // QoS 0 ones wait up to 1.5x keepalive for a confirming ping and need none.
    const rec = new Inflight(this.flightOwner, entry.seq, msg.qos, msg.qos > 0 ? entry.msg : undefined);
    rec.sendIndex =
      msg.qos === 0 ? this.uplink.publish(msg, undefined, false) : this.uplink.publish(msg, outboxPacketId(entry.seq), dup, rec);
    this.inflight.set(entry.seq, rec);
    this.counters.sent++;
    // Sends go in seq order, so a seq at or below the highest one sent is a re-send.
    if (entry.seq <= this.highestSentSeq) this.counters.resent++;
    else this.highestSentSeq = entry.seq;
    if (msg.qos > 0) this.qosInflight++;
    else this.q0.push(rec);
  }

  /** A QoS 2 entry the broker received before a reconnect or restart (PUBREC): PUBREL, never PUBLISH again. */
  private sendRelease(entry: OutboxEntry): void {
    this.resending.delete(entry.seq);
    if (this.session?.sessionPresent !== true) {
      // The broker forgot the flow with the session, but it had the message: nothing left to do.
      this.counters.acked++;
      this.remove(entry.seq);
      return;
    }
    const rec = new Inflight(this.flightOwner, entry.seq, 2, undefined);
    rec.sendIndex = this.uplink.release(outboxPacketId(entry.seq), rec);
    this.inflight.set(entry.seq, rec);
    this.qosInflight++;
  }

  /**
   * Entries below `nextSeq` still waiting to be re-sent left the outbox unsent (dropped by its limits or expiry
   * while the link was down). The broker may hold a QoS 2 one under its packet id, awaiting PUBREL: without one,
   * that id would stay taken until an entry 65,000 seqs later reuses it, and a broker that does not compare
   * content would discard that entry as a duplicate (EMQX answers 0x91). A PUBREL completes such a flow or, for
   * an id the broker does not know, draws PUBCOMP 0x92; either way the id is free again [MQTT-4.3.3-10].
   * QoS 1 holds nothing at the broker. Returns false when the window is full.
   */
  private releaseAbandoned(nextSeq: number, receiveMaximum: number): boolean {
    for (const [seq, qos] of this.resending) {
      if (seq >= nextSeq) continue;
      if (qos === 2) {
        if (this.inflight.size >= this.window || this.qosInflight >= receiveMaximum) return false;
        const rec = new Inflight(this.flightOwner, seq, 2, undefined, true);
        rec.sendIndex = this.uplink.release(outboxPacketId(seq), rec);
        this.inflight.set(seq, rec);
        this.qosInflight++;
      }
      this.resending.delete(seq);
    }
    return true;
  }

  /** QoS 0 entries wait for a PINGRESP that proves the broker read them; make sure one is coming. */
  private afterPump(): void {
    const last = this.q0.length > this.q0Head ? this.q0[this.q0.length - 1] : undefined;
    if (!last || this.uplink.pingCovers(last.sendIndex)) return;
    if (this.inflight.size >= this.window) {
      this.uplink.ping();
      return;
    }
    if (this.confirmTimer) return;
    this.confirmTimer = setTimeout(() => {
      this.confirmTimer = undefined;
      const tail = this.q0.length > this.q0Head ? this.q0[this.q0.length - 1] : undefined;
      if (tail && !this.uplink.pingCovers(tail.sendIndex)) this.uplink.ping();
    }, QOS0_CONFIRM_DELAY_MS);
    this.confirmTimer.unref();
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
    if (!kept) this.outbox.countDropped('rejected_upstream', 1);
    this.remove(seq);
    this.warnOnce(episode, fields, kept ? `${text}; kept as a dead letter` : `${text}; dropped`);
  }

  /** Queues a refused message for the dead-letter outbox; false when there is none (or no message to keep). */
  private keepAsDeadLetter(msg: Message | undefined): boolean {
    if (msg === undefined || this.deadLetter === undefined) return false;
    this.deadLetter.append(msg).catch((err: unknown) => {
      this.outbox.countDropped('rejected_upstream', 1);
      this.log.error({ err, topic: msg.topic }, 'a refused message could not be kept as a dead letter; dropped');
    });
    return true;
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
    this.inflight.clear();
    this.qosInflight = 0;
    this.q0 = [];
    this.q0Head = 0;
    this.cursor = undefined;
    this.ahead = [];
    this.aheadHead = 0;
    this.replayRemaining = 0;
    clearTimeout(this.paceTimer);
    this.paceTimer = undefined;
    clearTimeout(this.confirmTimer);
    this.confirmTimer = undefined;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Housekeeping

  private tick(): void {
    const nowMs = performance.now();
    const elapsedS = (nowMs - this.rate.lastAtMs) / 1000;
    if (elapsedS > 0) {
      this.rate.sendPerS = Math.round((this.counters.sent - this.rate.lastSent) / elapsedS);
      this.rate.replayPerS = this.replayRemaining > 0 || this.rate.replaySent > 0 ? Math.round(this.rate.replaySent / elapsedS) : 0;
    }
    this.rate.lastSent = this.counters.sent;
    this.rate.replaySent = 0;
    this.rate.lastAtMs = nowMs;
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
        createMessage({ topic: this.stateTopic, payload: Buffer.from(up ? '1' : '0'), qos: 0, retain: true, origin: this.origin }),
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
