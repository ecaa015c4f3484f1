/**
 * Fakes for the edge node's unit tests: an in-process broker (publish/subscribe with MQTT wildcards) and a
 * connector the test drives by hand.
 */
import type { Connector, TagDefinition, TagSample, TagSink, TagValue } from '../../connectors/contract.js';
import { ConnectorError } from '../../src/util/errors.js';
import type { Message, QoS } from '../../src/protocol/message.js';
import { createMessage } from '../../src/protocol/message.js';
import type { Deliver, SubscribeOptions } from '../../src/broker/broker.js';
import { decodePayload, encodePayload } from '../../src/sparkplug/payload.js';
import type { MetricDatatype, MetricOut, PayloadIn } from '../../src/sparkplug/payload.js';
import { parseTopic } from '../../src/sparkplug/topics.js';

function matches(filter: string, topic: string): boolean {
  const f = filter.split('/');
  const t = topic.split('/');
  for (let i = 0; i < f.length; i++) {
    if (f[i] === '#') return true;
    if (i >= t.length) return false;
    if (f[i] !== '+' && f[i] !== t[i]) return false;
  }
  return f.length === t.length;
}

export class FakeBroker {
  readonly published: Message[] = [];
  private readonly subs: { filter: string; opts: SubscribeOptions; deliver: Deliver }[] = [];
  private readonly retained = new Map<string, Message>();

  publish(msg: Message): Promise<void> {
    this.published.push(msg);
    if (msg.retain) this.retained.set(msg.topic, msg);
    for (const s of [...this.subs]) {
      if (!matches(s.filter, msg.topic)) continue;
      if (s.opts.noLocal && s.opts.origin === msg.origin) continue;
      void s.deliver(msg);
    }
    return Promise.resolve();
  }

  subscribe(filter: string, opts: SubscribeOptions, deliver: Deliver): () => void {
    const sub = { filter, opts, deliver };
    this.subs.push(sub);
    for (const msg of this.retained.values()) if (matches(filter, msg.topic)) void deliver(msg);
    return () => {
      const i = this.subs.indexOf(sub);
      if (i >= 0) this.subs.splice(i, 1);
    };
  }

  /** Sends a message as another client would. */
  inject(topic: string, payload: Buffer, options: { origin?: string; retain?: boolean; qos?: QoS } = {}): void {
    void this.publish(createMessage({ topic, payload, origin: options.origin ?? 'host-app', retain: options.retain, qos: options.qos }));
  }

  subscriptionCount(): number {
    return this.subs.length;
  }
}

/** Decodes the edge node's messages as a host would: datatypes for data metrics come from the births. */
export class Decoder {
  private readonly types = new Map<number, MetricDatatype>();
  private readonly names = new Map<number, string>();

  decode(msg: Message): { type: string; deviceId?: string; payload: PayloadIn } {
    const topic = parseTopic(msg.topic);
    if (!topic) throw new Error(`not a Sparkplug topic: ${msg.topic}`);
    const payload = decodePayload(msg.payload, (m) => (m.alias !== undefined ? this.types.get(m.alias) : undefined));
    if (topic.type === 'NBIRTH' || topic.type === 'DBIRTH') {
      for (const m of payload.metrics) {
        if (m.alias !== undefined && m.datatype !== undefined) {
          this.types.set(m.alias, m.datatype);
          this.names.set(m.alias, m.name ?? '');
        }
      }
    }
    return { type: topic.type, deviceId: topic.deviceId, payload };
  }

  nameOf(alias: number | undefined): string | undefined {
    return alias === undefined ? undefined : this.names.get(alias);
  }
}

export class FakeConnector implements Connector {
  readonly tags: readonly TagDefinition[];
  reachable = true;
  starts = 0;
  stops = 0;
  readonly writes: { tag: string; value: TagValue }[] = [];
  writeError: Error | undefined;
  private sink: TagSink | undefined;

  constructor(
    readonly id: string,
    tags: readonly (Partial<TagDefinition> & Pick<TagDefinition, 'name' | 'datatype'>)[],
  ) {
    this.tags = tags.map((t) => ({ writable: false, ...t }));
  }

  get running(): boolean {
    return this.sink !== undefined;
  }

  start(sink: TagSink): Promise<void> {
    this.starts++;
    if (!this.reachable) return Promise.reject(new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, 'connection refused'));
    this.sink = sink;
    return Promise.resolve();
  }

  emit(values: Record<string, TagValue | { value: TagValue; good: boolean }>, timestamp = Date.now()): void {
    const samples: TagSample[] = Object.entries(values).map(([name, v]) =>
      typeof v === 'object' && v !== null && 'good' in v
        ? { name, value: v.value, good: v.good, timestamp }
        : { name, value: v as TagValue, good: true, timestamp },
    );
    this.sink?.data(samples);
  }

  lose(): void {
    this.sink?.lost(new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, 'timed out'));
  }

  write(tag: string, value: TagValue): Promise<void> {
    this.writes.push({ tag, value });
    return this.writeError ? Promise.reject(this.writeError) : Promise.resolve();
  }

  stop(): Promise<void> {
    this.stops++;
    this.sink = undefined;
    return Promise.resolve();
  }
}

export function command(metrics: MetricOut[]): Buffer {
  return encodePayload({ timestamp: Date.now(), metrics });
}
