/**
 * Test doubles for the edge node's unit tests: the real broker in process (recording what is published) and a
 * connector the test drives by hand.
 */
import type {
  Connector,
  ReadBack,
  TagDefinition,
  TagQuality,
  TagSample,
  TagSink,
  TagValue,
} from '../../connectors/contract.js';
import { ConnectorError } from '../../src/util/errors.js';
import type { Message, QoS } from '../../src/protocol/message.js';
import { createMessage } from '../../src/protocol/message.js';
import { Broker } from '../../src/broker/broker.js';
import type { Deliver, SubscribeOptions } from '../../src/broker/in-process-subscriber.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { silentLogger } from '../../src/util/logger.js';
import { decodePayload, encodePayload } from '../../src/sparkplug/payload.js';
import type { MetricDatatype, MetricOut, PayloadIn } from '../../src/sparkplug/payload.js';
import { parseTopic } from '../../src/sparkplug/topics.js';

/**
 * The real broker, in process with the memory store, plus a recorder of everything published through it: the edge
 * node under test talks to the same routing, retained and no-local logic as in the gateway.
 */
export class RecordingBroker {
  readonly published: Message[] = [];
  private readonly broker = new Broker({
    limits: { maxInflight: 20, maxQueuedMessages: 1000, maxQueuedBytes: 0 },
    store: createMemoryStore(),
    log: silentLogger,
  });
  constructor() {
    this.broker.subscribe('#', { qos: 2, origin: 'test-recorder', retainAsPublished: true }, (msg) => {
      this.published.push(msg);
    });
  }

  get clock(): Broker['clock'] {
    return this.broker.clock;
  }

  publish(msg: Message): Promise<unknown> {
    return this.broker.publish(msg);
  }

  subscribe(filter: string, opts: SubscribeOptions, deliver: Deliver): () => void {
    return this.broker.subscribe(filter, opts, deliver);
  }

  /** Sends a message as another client would. */
  inject(topic: string, payload: Buffer, options: { origin?: string; retain?: boolean; qos?: QoS } = {}): void {
    void this.publish(
      createMessage({ topic, payload, origin: options.origin ?? 'host-app', retain: options.retain, qos: options.qos }),
    );
  }

  /** Subscriptions made by the code under test (the recorder's own is not counted). */
  subscriptionCount(): number {
    const { normal, shared } = this.broker.subscriptionCount;
    return normal + shared - 1;
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
    this.tags = tags.map((t) => ({ writable: false, properties: {}, ...t }));
  }

  get running(): boolean {
    return this.sink !== undefined;
  }

  start(sink: TagSink): Promise<void> {
    this.starts++;
    if (!this.reachable)
      return Promise.reject(new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, 'connection refused'));
    this.sink = sink;
    return Promise.resolve();
  }

  emit(values: Record<string, TagValue | { value: TagValue; quality: TagQuality }>, timestamp = Date.now()): void {
    const samples: TagSample[] = Object.entries(values).map(([name, v]) =>
      typeof v === 'object' && 'quality' in v
        ? { name, value: v.value, quality: v.quality, timestamp }
        : { name, value: v as TagValue, quality: 'good' as const, timestamp },
    );
    this.sink?.data(samples);
  }

  lose(): void {
    this.sink?.lost(new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, 'timed out'));
  }

  /** What the device holds after a write of `value` (a PLC may clamp it); the value itself by default. */
  holds: (tag: string, value: TagValue) => TagValue = (_tag, value) => value;

  /** While set, a write is taken (recorded in `writes`) but answered only once this resolves: a slow device. */
  writeGate: Promise<void> | undefined;

  write(tag: string, value: TagValue): Promise<ReadBack | undefined> {
    if (this.writeError) return Promise.reject(this.writeError);
    this.writes.push({ tag, value });
    const held = this.holds(tag, value);
    const readBack = { value: held, timestamp: Date.now(), matches: held === value };
    return this.writeGate ? this.writeGate.then(() => readBack) : Promise.resolve(readBack);
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
