/**
 * The gateway's status on a central broker (docs/architecture.md#fleet-status): one retained JSON message, QoS 1,
 * on the bridge's `status.topic` (default `edgeferry/<gateway.id>/status`), so that one subscription to
 * `edgeferry/+/status` at the central site shows every gateway of the fleet.
 *
 * It is about now, so it goes live on the current connection (`Bridge.publishNow`), never into the outbox behind a
 * backlog: at once when the uplink comes online, when something an operator acts on changes (a bridge up or down,
 * a device up or down, a new error; at most every `MIN_INTERVAL_MS`), and at least every `REFRESH_MS`. "offline"
 * is the connection's Will, and is published on a graceful stop (a normal DISCONNECT discards the Will).
 */
import { createMessage, type Message } from '../protocol/message.js';

/** The report's fields that matter for "something changed"; backlog counts and uptime only refresh. */
export interface StatusSnapshot {
  readonly report: object;
  /** Changes of this key publish at once (rate-limited); the rest waits for the next refresh. */
  readonly changeKey: string;
}

/** What the publisher needs of its bridge. */
export interface StatusLink {
  /** The bridge's origin: the status is the bridge's own message (it never enters the local broker). */
  readonly origin: string;
  readonly online: boolean;
  publishNow(messages: readonly Message[]): boolean;
}

const MIN_INTERVAL_MS = 5_000;
const REFRESH_MS = 60_000;
const CHECK_EVERY_MS = 1_000;

export class StatusPublisher {
  private timer: NodeJS.Timeout | undefined;
  private wasOnline = false;
  private lastKey = '';
  private lastAtMs = -Infinity;

  constructor(
    private readonly link: StatusLink,
    private readonly topic: string,
    private readonly snapshot: (online: boolean) => StatusSnapshot,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The Will to register on every CONNECT: the status as it will be when this connection is gone. */
  will(): Message {
    return this.message(this.snapshot(false).report);
  }

  start(): void {
    this.timer = setInterval(() => this.check(), CHECK_EVERY_MS);
    this.timer.unref();
  }

  /** Stops refreshing; returns the "offline" status for the bridge to send before it disconnects. */
  stop(): Message {
    clearInterval(this.timer);
    return this.will();
  }

  private check(): void {
    const online = this.link.online;
    const cameOnline = online && !this.wasOnline;
    this.wasOnline = online;
    if (!online) return;
    const nowMs = this.now();
    const { report, changeKey } = this.snapshot(true);
    const due =
      cameOnline ||
      nowMs - this.lastAtMs >= REFRESH_MS ||
      (changeKey !== this.lastKey && nowMs - this.lastAtMs >= MIN_INTERVAL_MS);
    if (!due) return;
    if (this.link.publishNow([this.message(report)])) {
      this.lastKey = changeKey;
      this.lastAtMs = nowMs;
    }
  }

  private message(report: object): Message {
    return createMessage({
      topic: this.topic,
      payload: Buffer.from(JSON.stringify(report)),
      qos: 1,
      retain: true,
      origin: this.link.origin,
    });
  }
}
