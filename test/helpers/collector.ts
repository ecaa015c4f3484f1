/**
 * The checker side of a test: an MQTT.js subscriber that records every message it receives, in order, plus
 * helpers to publish a numbered stream and to check a ledger (no loss, order, bounded duplicates).
 *
 *   const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
 *   await waitFor(() => up.messages.length >= 100, 10_000);
 *   expect(checkSequence(up.payloads(), 100)).toEqual({ missing: [], outOfOrder: 0, duplicates: 0 });
 */
import { connect, connectAsync, type IClientOptions, type MqttClient } from 'mqtt';

export interface Received {
  readonly topic: string;
  readonly payload: Buffer;
  readonly qos: number;
  readonly retain: boolean;
  readonly dup: boolean;
  /** MQTT 5 properties as MQTT.js decoded them (protocolVersion 5 only). */
  readonly properties?: Readonly<Record<string, unknown>>;
}

export interface Collector {
  readonly client: MqttClient;
  readonly messages: Received[];
  /** Payloads as strings. */
  payloads(): string[];
  stop(): Promise<void>;
}

export async function collect(
  url: string,
  filter: string | string[],
  options: { qos?: 0 | 1 | 2; clientId?: string; clean?: boolean; protocolVersion?: 4 | 5 } = {},
): Promise<Collector> {
  const client = connect(url, {
    reconnectPeriod: 0,
    connectTimeout: 5000,
    clientId: options.clientId,
    clean: options.clean ?? true,
    protocolVersion: options.protocolVersion ?? 4,
  });
  // Listening before CONNACK: a resumed session's queued messages can come in the same read as the CONNACK,
  // and MQTT.js would emit (and acknowledge) them before an await on the connection let us attach a listener.
  const messages: Received[] = [];
  client.on('message', (topic, payload, packet) => {
    messages.push({
      topic,
      payload,
      qos: packet.qos,
      retain: packet.retain,
      dup: packet.dup,
      properties: packet.properties,
    });
  });
  await new Promise<void>((resolve, reject) => {
    client.once('connect', () => resolve());
    client.once('error', (err) => {
      client.end(true);
      reject(err);
    });
    client.once('close', () => reject(new Error(`${url}: connection closed before CONNACK`)));
  });
  await client.subscribeAsync(filter, { qos: options.qos ?? 1 });
  return {
    client,
    messages,
    payloads: () => messages.map((m) => m.payload.toString()),
    stop: () => client.endAsync(true),
  };
}

/** An MQTT.js client that does not reconnect on its own (tests decide). */
export function connectClient(url: string, options: IClientOptions = {}): Promise<MqttClient> {
  return connectAsync(url, { reconnectPeriod: 0, connectTimeout: 5000, ...options });
}

/**
 * Publishes `count` messages `prefix0`..`prefix<count-1>` on `topic`, awaiting each PUBACK (QoS 1/2), and
 * returns the payloads that were acknowledged (the ledger for the no-loss check), in acknowledgement order.
 * With `concurrency` > 1 that many publishes are in flight at once (written in number order). Stops at the
 * first error (e.g. the gateway was killed); `ledger`, if given, is filled as acknowledgements arrive.
 */
export async function publishSequence(
  client: MqttClient,
  topic: string,
  count: number,
  options: { qos?: 0 | 1 | 2; prefix?: string; start?: number; concurrency?: number; ledger?: string[] } = {},
): Promise<string[]> {
  const qos = options.qos ?? 1;
  const prefix = options.prefix ?? '';
  const start = options.start ?? 0;
  const concurrency = options.concurrency ?? 1;
  const acked: string[] = options.ledger ?? [];
  let next = start;
  let failed: unknown;
  // MQTT.js never settles a pending QoS 1/2 publish when the socket just closes: stop on 'close'.
  const closed = new Promise<never>((_, reject) => client.once('close', () => reject(new Error('connection closed'))));
  closed.catch(() => undefined);
  const worker = async (): Promise<void> => {
    while (failed === undefined && next < start + count) {
      const payload = `${prefix}${next++}`;
      try {
        await Promise.race([client.publishAsync(topic, payload, { qos }), closed]);
        acked.push(payload);
      } catch (err) {
        failed = err;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (failed !== undefined && acked.length === 0) throw failed;
  return acked;
}

export interface SequenceCheck {
  /** Expected payloads never received. */
  readonly missing: string[];
  /** Received payloads not in the expected list. */
  readonly unexpected: string[];
  /** Receptions beyond the first of the same payload. */
  readonly duplicates: number;
  /** First receptions that came after a later-numbered one. */
  readonly outOfOrder: number;
}

/** Compares what arrived with the ledger of what must arrive (in this order). */
export function checkSequence(received: readonly string[], expected: readonly string[]): SequenceCheck {
  const rank = new Map(expected.map((p, i) => [p, i]));
  const seen = new Set<string>();
  const unexpected: string[] = [];
  let duplicates = 0;
  let outOfOrder = 0;
  let highest = -1;
  for (const p of received) {
    if (seen.has(p)) {
      duplicates++;
      continue;
    }
    seen.add(p);
    const r = rank.get(p);
    if (r === undefined) {
      unexpected.push(p);
      continue;
    }
    if (r < highest) outOfOrder++;
    else highest = r;
  }
  const missing = expected.filter((p) => !seen.has(p));
  return { missing, unexpected, duplicates, outOfOrder };
}

/** `['p0', 'p1', ...]` */
export function sequence(count: number, prefix = '', start = 0): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}${start + i}`);
}
