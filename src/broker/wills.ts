/**
 * Delayed will messages (MQTT 5 Will Delay Interval, §3.1.3.2.2): one pending will per client id.
 *
 * The will of a persistent session is also kept in the session store while its delay runs, so a restart (or a
 * crash) neither loses it nor publishes it early: the next run resumes it with the time spent down counted.
 */
import type { Message } from '../protocol/message.js';
import type { PendingWill, SessionStore } from '../store/types.js';
import type { SteadyClock } from '../util/clock.js';

interface Pending {
  readonly msg: Message;
  readonly dueAtMs: number;
  /** Where the will is stored until it is published or cancelled; undefined when it lives in memory only. */
  readonly store: SessionStore | undefined;
  timer: NodeJS.Timeout | undefined;
}

export class WillScheduler {
  private readonly pending = new Map<string, Pending>();

  constructor(
    /** Routes the will; resolves once it is durable wherever it had to go. */
    private readonly publish: (msg: Message) => Promise<unknown> | undefined,
    private readonly storeFailed: (err: unknown, clientId: string) => void,
    /** The store's timeline: due times are stored, so a restart resumes them. */
    private readonly clock: SteadyClock,
  ) {}

  get size(): number {
    return this.pending.size;
  }

  /**
   * Publishes `msg` after `delayS` seconds unless cancelled or fired earlier; 0 publishes now. With `store`
   * (a persistent session) the will is stored first, so a restart resumes it.
   */
  schedule(clientId: string, msg: Message, delayS: number, store?: SessionStore): void {
    this.disarm(clientId);
    if (delayS <= 0) {
      void this.publish(msg); // logs its own failure
      return;
    }
    const dueAtMs = this.clock.nowMs() + delayS * 1000;
    store?.putWill(clientId, { msg, dueAtMs }).catch((err: unknown) => this.storeFailed(err, clientId));
    this.arm(clientId, { msg, dueAtMs, store, timer: undefined });
  }

  /** A will stored by an earlier run: parked until `start()`, so that it reaches every in-process subscriber. */
  restore(clientId: string, will: PendingWill, store: SessionStore): void {
    this.pending.set(clientId, { msg: will.msg, dueAtMs: will.dueAtMs, store, timer: undefined });
  }

  /** Arms the restored wills; an overdue one goes out at once. */
  start(): void {
    for (const [clientId, p] of this.pending) if (p.timer === undefined) this.arm(clientId, p);
  }

  /** The client reconnected to its session: the will is not sent [MQTT-3.1.3-9]. */
  cancel(clientId: string): void {
    const p = this.disarm(clientId);
    p?.store?.deleteWill(clientId).catch((err: unknown) => this.storeFailed(err, clientId));
  }

  /** The delay passed, or the session ended before it did: the will goes out now. */
  fire(clientId: string): void {
    const p = this.disarm(clientId);
    if (!p) return;
    const routed = this.publish(p.msg);
    const store = p.store;
    if (!store) return;
    // Forgotten only once it is durable where it went: a crash in between sends it again, never loses it.
    (routed ?? Promise.resolve())
      .then(() => store.deleteWill(clientId))
      .catch((err: unknown) => this.storeFailed(err, clientId));
  }

  /**
   * Shutdown. A will kept in a durable store waits for the next run (its session outlives the process); the
   * others go out now, as their sessions end with the process.
   */
  close(storeIsDurable: boolean): void {
    for (const [clientId, p] of [...this.pending]) {
      if (storeIsDurable && p.store) this.disarm(clientId);
      else this.fire(clientId);
    }
  }

  private arm(clientId: string, p: Pending): void {
    const delayMs = Math.max(0, p.dueAtMs - this.clock.nowMs());
    // Timers stop at 2^31-1 ms (24.8 days); a longer delay is re-armed when that one ends.
    p.timer = setTimeout(
      () => (this.clock.nowMs() >= p.dueAtMs ? this.fire(clientId) : this.arm(clientId, p)),
      Math.min(delayMs, 2 ** 31 - 1),
    );
    p.timer.unref();
    this.pending.set(clientId, p);
  }

  private disarm(clientId: string): Pending | undefined {
    const p = this.pending.get(clientId);
    if (!p) return undefined;
    clearTimeout(p.timer);
    this.pending.delete(clientId);
    return p;
  }
}
