/**
 * Mosquitto's `$SYS/broker/...` tree (mosquitto(8), "BROKER STATUS"), published retained every `intervalS`, so
 * existing dashboards and mosquitto-exporter work unchanged. Values that did not change are not re-published.
 */
import type { BrokerStats } from '../broker/stats.js';

export interface SysSource {
  readonly stats: BrokerStats;
  readonly version: string;
  retainedCount(): number;
  subscriptionCount(): number;
  sessionCount(): number;
}

export type SysPublish = (topic: string, value: string) => void;

export class SysTopics {
  private timer: NodeJS.Timeout | undefined;
  private readonly last = new Map<string, string>();

  constructor(
    private readonly source: SysSource,
    private readonly publish: SysPublish,
  ) {}

  start(intervalS: number): void {
    if (intervalS <= 0) return;
    this.publishAll();
    this.timer = setInterval(() => this.publishAll(), intervalS * 1000);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  publishAll(): void {
    const s = this.source.stats;
    const sent = s.messagesSent[0] + s.messagesSent[1] + s.messagesSent[2];
    const received = s.messagesReceived[0] + s.messagesReceived[1] + s.messagesReceived[2];
    const dropped = Object.values(s.dropped).reduce((a, b) => a + b, 0);
    const values: [string, string | number][] = [
      ['version', `edgeferry version ${this.source.version}`],
      ['uptime', `${Math.floor((performance.now() - s.startedAtMs) / 1000)} seconds`],
      ['clients/connected', s.clientsConnected],
      ['clients/active', s.clientsConnected],
      ['clients/maximum', s.clientsMaximum],
      ['clients/total', this.source.sessionCount()],
      ['clients/disconnected', Math.max(0, this.source.sessionCount() - s.clientsConnected)],
      ['messages/received', received],
      ['messages/sent', sent],
      ['publish/messages/received', received],
      ['publish/messages/sent', sent],
      ['publish/messages/dropped', dropped],
      ['bytes/received', s.bytesReceived],
      ['bytes/sent', s.bytesSent],
      ['subscriptions/count', this.source.subscriptionCount()],
      ['retained messages/count', this.source.retainedCount()],
    ];
    for (const [suffix, value] of values) {
      const topic = `$SYS/broker/${suffix}`;
      const text = String(value);
      if (this.last.get(topic) === text) continue;
      this.last.set(topic, text);
      this.publish(topic, text);
    }
  }
}
