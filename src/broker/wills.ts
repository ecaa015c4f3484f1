/** Delayed will messages (MQTT 5 Will Delay Interval, §3.1.3.2.2): one pending timer per client id. */
import type { Message } from '../protocol/message.js';

export class WillScheduler {
  private readonly pending = new Map<string, { msg: Message; timer: NodeJS.Timeout }>();

  constructor(private readonly publish: (msg: Message) => void) {}

  get size(): number {
    return this.pending.size;
  }

  /** Publishes `msg` after `delayS` seconds unless cancelled or fired earlier; 0 publishes now. */
  schedule(clientId: string, msg: Message, delayS: number): void {
    this.cancel(clientId);
    if (delayS <= 0) return this.publish(msg);
    const timer = setTimeout(() => this.fire(clientId), Math.min(delayS * 1000, 2 ** 31 - 1));
    timer.unref();
    this.pending.set(clientId, { msg, timer });
  }

  /** The client reconnected to its session: the will is not sent [MQTT-3.1.3-9]. */
  cancel(clientId: string): void {
    const p = this.pending.get(clientId);
    if (!p) return;
    clearTimeout(p.timer);
    this.pending.delete(clientId);
  }

  /** The session ended before the delay passed: the will goes out now. */
  fire(clientId: string): void {
    const p = this.pending.get(clientId);
    if (!p) return;
    clearTimeout(p.timer);
    this.pending.delete(clientId);
    this.publish(p.msg);
  }

  /** Shutdown: every pending will goes out, as the sessions end with the process. */
  fireAll(): void {
    for (const clientId of [...this.pending.keys()]) this.fire(clientId);
  }
}
