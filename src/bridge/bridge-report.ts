/**
 * What an operator reads of one bridge (metrics, the web console, the fleet status): its state, counters and rates,
 * and the warnings it logs once per episode rather than once per message. The drain engine (bridge.ts) counts
 * into `counts` and `sample` in place, fields it increments on the hot path (docs/architecture.md#hot-path); this
 * class turns them into rates once a second and into `BridgeStats` when asked.
 */
import type { Broker } from '../broker/broker.js';
import type { BridgeConfig } from '../config/schema.js';
import { createMessage } from '../protocol/message.js';
import type { DropReason, Outbox } from '../store/types.js';
import { StoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { DeadLetters } from './dead-letters.js';
import { OutageLog } from './outage-log.js';

export type UplinkStatus =
  | { type: 'connecting'; attempt: number }
  | { type: 'online'; backlog: number }
  | { type: 'offline'; error: string; retryInMs: number }
  | { type: 'paused'; reason: string };

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

/** What the drain engine counts as it goes (see `BridgeStats` for each). */
export interface BridgeCounts {
  sent: number;
  resent: number;
  acked: number;
  reconnects: number;
  received: number;
  receivedFailed: number;
}

/** What the drain engine records for the rates of the current sample (about a second), reset by `tick`. */
export interface RateSample {
  replaySent: number;
  /** The longest journal-to-acknowledgement time of a live entry. */
  liveLatencyMaxMs: number;
}

/** The drain engine's state that the report shows, read when the stats are asked for. */
export interface DrainState {
  readonly running: boolean;
  readonly connected: boolean;
  readonly inflight: number;
  /** Backlog entries still to send on this connection. */
  readonly replayRemaining: number;
  /** Why draining is held back (`Bridge.pause`), if it is. */
  readonly pausedReason: string | undefined;
}

export interface BridgeReportOptions {
  readonly name: string;
  /** The bridge's origin, of its state messages. */
  readonly origin: string;
  /** `remote.clientId`: the state topic is `$SYS/broker/connection/<clientId>/state`, as Mosquitto's bridges have it. */
  readonly clientId: string;
  readonly broker: Broker;
  readonly outbox: Outbox;
  readonly deadLetters: DeadLetters;
  readonly queue: BridgeConfig['queue'];
  readonly log: Logger;
}

export class BridgeReport {
  readonly counts: BridgeCounts = { sent: 0, resent: 0, acked: 0, reconnects: 0, received: 0, receivedFailed: 0 };
  readonly sample: RateSample = { replaySent: 0, liveLatencyMaxMs: 0 };
  private readonly outbox: Outbox;
  private readonly log: Logger;
  private readonly stateTopic: string;
  private readonly outages: OutageLog;
  private uplinkStatus: UplinkStatus = { type: 'connecting', attempt: 0 };
  private everOnline = false;
  private lastError: BridgeStats['lastError'];
  private sampleStartMs = 0;
  private sentAtSampleStart = 0;
  private sendPerS = 0;
  private replayPerS = 0;
  private liveLatencyMs = 0;
  /** Warnings logged once per episode; an episode ends when its condition does. */
  private readonly episodes = new Set<string>();
  /** The outbox's `queue_full` drops already warned of. */
  private queueFullSeen: number;

  constructor(private readonly options: BridgeReportOptions) {
    this.outbox = options.outbox;
    this.log = options.log;
    this.stateTopic = `$SYS/broker/connection/${options.clientId}/state`;
    this.outages = new OutageLog(options.log);
    this.queueFullSeen = options.outbox.depth.dropped.queue_full;
  }

  /** The uplink's state; `pausedReason` (the engine's) wins over it. */
  status(pausedReason: string | undefined): UplinkStatus {
    if (pausedReason !== undefined) return { type: 'paused', reason: pausedReason };
    if (this.uplinkStatus.type === 'online') return { type: 'online', backlog: this.outbox.depth.messages };
    return this.uplinkStatus;
  }

  stats(drain: DrainState): BridgeStats {
    const depth = this.outbox.depth;
    const { counts } = this;
    return {
      state: drain.running ? this.status(drain.pausedReason).type : 'stopped',
      connected: drain.connected,
      backlogMessages: depth.messages,
      backlogBytes: depth.bytes,
      deadLetterMessages: this.options.deadLetters.messages,
      oldestAgeS:
        depth.oldestAppendedAtMs === undefined
          ? 0
          : Math.max(0, (this.options.broker.clock.nowMs() - depth.oldestAppendedAtMs) / 1000),
      inflight: drain.inflight,
      sent: counts.sent,
      resent: counts.resent,
      acked: counts.acked,
      dropped: { ...depth.dropped },
      sendRatePerS: this.sendPerS,
      replayRatePerS: this.replayPerS,
      drainEtaS: drain.replayRemaining === 0 ? 0 : this.replayPerS > 0 ? drain.replayRemaining / this.replayPerS : NaN,
      liveLatencyS: this.liveLatencyMs / 1000,
      reconnects: counts.reconnects,
      sessionTaken: this.outages.sessionTaken,
      lastError: this.lastError,
      received: counts.received,
      receivedFailed: counts.receivedFailed,
    };
  }

  /** The first rate sample starts now. */
  started(): void {
    this.sampleStartMs = performance.now();
  }

  connecting(attempt: number): void {
    this.outages.attempting(attempt);
    this.uplinkStatus = { type: 'connecting', attempt };
  }

  /** A CONNACK accepted the uplink, with `backlog` entries in the outbox. */
  online(url: string, sessionPresent: boolean, backlog: number): void {
    if (this.everOnline) this.counts.reconnects++;
    this.everOnline = true;
    // The rates' next sample starts now, so the first one after an outage is not averaged over the outage.
    this.sample.replaySent = 0;
    this.sentAtSampleStart = this.counts.sent;
    this.sampleStartMs = performance.now();
    this.uplinkStatus = { type: 'online', backlog };
    this.outages.online({ url, sessionPresent, backlog });
  }

  /**
   * The uplink went down or an attempt failed, the next attempt in `retryInMs` (undefined: stopped on purpose, no
   * warning). True when a connection that was online is lost.
   */
  offline(error: Error, retryInMs: number | undefined): boolean {
    const wasOnline = this.uplinkStatus.type === 'online';
    if (retryInMs === undefined) {
      this.uplinkStatus = { type: 'offline', error: 'stopped', retryInMs: 0 };
      return false;
    }
    this.uplinkStatus = { type: 'offline', error: error.message, retryInMs };
    this.lastError = { message: error.message, at: new Date().toISOString() };
    this.outages.offline(error, retryInMs, this.outbox.depth.messages, wasOnline);
    return wasOnline;
  }

  /** Called once a second: closes the rate sample, with `replayRemaining` backlog entries still to send. */
  tick(replayRemaining: number): void {
    const nowMs = performance.now();
    const elapsedS = (nowMs - this.sampleStartMs) / 1000;
    const { counts, sample } = this;
    if (elapsedS > 0) {
      this.sendPerS = Math.round((counts.sent - this.sentAtSampleStart) / elapsedS);
      this.replayPerS = replayRemaining > 0 || sample.replaySent > 0 ? Math.round(sample.replaySent / elapsedS) : 0;
    }
    this.sentAtSampleStart = counts.sent;
    sample.replaySent = 0;
    this.liveLatencyMs = sample.liveLatencyMaxMs;
    sample.liveLatencyMaxMs = 0;
    this.sampleStartMs = nowMs;
    this.outages.tick();
    this.checkQueueFull();
  }

  /** The connection's state, retained locally on `$SYS/broker/connection/<clientId>/state`: "1" up, "0" down. */
  async publishState(up: boolean): Promise<void> {
    try {
      await this.options.broker.publish(
        createMessage({
          topic: this.stateTopic,
          payload: Buffer.from(up ? '1' : '0'),
          qos: 0,
          retain: true,
          origin: this.options.origin,
        }),
      );
    } catch (err) {
      this.log.warn({ err, topic: this.stateTopic }, 'bridge state could not be published');
    }
  }

  warnOnce(episode: string, fields: object, msg: string): void {
    if (this.episodes.has(episode)) return;
    this.episodes.add(episode);
    this.log.warn(fields, msg);
  }

  /** The condition of `episode` is over: its warning may come again. True when it was running. */
  episodeOver(episode: string): boolean {
    return this.episodes.delete(episode);
  }

  /** The outbox took a message. */
  appended(): void {
    if (this.episodes.delete('reject-new'))
      this.log.info({ bridge: this.options.name }, 'outbox accepts messages again');
    this.checkQueueFull();
  }

  /** The outbox refused a message, or would (`Bridge.refusal`). */
  appendFailed(err: unknown): void {
    if (err instanceof StoreError && err.code === 'EF_STORE_FULL') {
      const { messages, bytes } = this.outbox.depth;
      this.warnOnce('reject-new', { depth: messages, bytes }, 'outbox full, refusing new messages');
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
        { dropped: dropped - this.queueFullSeen, policy: this.options.queue.overflow },
        'outbox full, dropping oldest messages',
      );
      this.queueFullSeen = dropped;
      return;
    }
    const { messages, bytes } = this.outbox.depth;
    const { maxMessages, maxBytes } = this.options.queue;
    if (this.episodes.has('queue-full') && messages < maxMessages * 0.9 && bytes < maxBytes * 0.9) {
      this.episodes.delete('queue-full');
      this.log.info({ messages, bytes }, 'outbox below its limits again');
    }
  }
}
