/**
 * `$SYS/broker/...` (Mosquitto's tree, published periodically) against the real gateway process with
 * `sysIntervalS: 1`: the values appear, are retained, and follow what clients do; wildcards do not see them
 * [MQTT-4.7.2-1]; clients cannot write them [docs/reliability.md rule 27].
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { RawClient } from '../helpers/raw-client.js';
import { waitFor } from '../helpers/wait.js';

const run = promisify(execFile);
const { version: VERSION } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

let gw: Gateway;
beforeAll(async () => {
  gw = await startGateway({ broker: { sysIntervalS: 1 } });
});
afterAll(async () => {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
  await gw?.dispose();
});
const d = useDisposer();

interface SysWatcher {
  readonly client: MqttClient;
  /** Latest value per topic. */
  readonly values: Map<string, string>;
  /** Every (topic, value, retain) received, in order. */
  readonly history: { topic: string; value: string; retain: boolean }[];
  number(suffix: string): number;
}

/** An MQTT.js client subscribed to `$SYS/broker/#`, keeping the latest value of every topic. */
async function watchSys(): Promise<SysWatcher> {
  const client = await connectClient(gw.url);
  d.defer(() => client.endAsync(true));
  const values = new Map<string, string>();
  const history: SysWatcher['history'] = [];
  client.on('message', (topic, payload, packet) => {
    values.set(topic, payload.toString());
    history.push({ topic, value: payload.toString(), retain: packet.retain });
  });
  await client.subscribeAsync('$SYS/broker/#', { qos: 0 });
  return {
    client,
    values,
    history,
    number(suffix) {
      const text = values.get(`$SYS/broker/${suffix}`);
      return text === undefined ? NaN : Number.parseInt(text, 10);
    },
  };
}

async function client(options: Parameters<typeof connectClient>[1] = {}): Promise<MqttClient> {
  const c = await connectClient(gw.url, options);
  d.defer(() => c.endAsync(true));
  return c;
}

describe('$SYS/broker tree', () => {
  it('publishes version, uptime, clients/connected, messages/received, subscriptions/count and retained messages/count, retained so a new subscriber gets them at once', async () => {
    const sys = await watchSys();
    const topics = [
      'version',
      'uptime',
      'clients/connected',
      'messages/received',
      'subscriptions/count',
      'retained messages/count',
    ];
    await waitFor(() => topics.every((t) => sys.values.has(`$SYS/broker/${t}`)), 5000, {
      message: () => `missing: ${topics.filter((t) => !sys.values.has(`$SYS/broker/${t}`)).join(', ')}`,
    });
    expect(sys.values.get('$SYS/broker/version')).toBe(`edgeferry version ${VERSION}`);
    expect(sys.values.get('$SYS/broker/uptime')).toMatch(/^\d+ seconds$/);
    for (const t of topics.slice(2)) expect(sys.values.get(`$SYS/broker/${t}`), t).toMatch(/^\d+$/);
    // The first copy of each came from the retained store, flagged retained [MQTT-3.3.1-9].
    const firstVersion = sys.history.find((h) => h.topic === '$SYS/broker/version');
    expect(firstVersion?.retain).toBe(true);
  });

  it('advances uptime at least once a second with sysIntervalS: 1', async () => {
    const sys = await watchSys();
    await waitFor(() => !Number.isNaN(sys.number('uptime')), 5000, { message: 'no uptime' });
    const first = sys.number('uptime');
    await waitFor(() => sys.number('uptime') >= first + 2, 5000, {
      message: () => `uptime stuck at ${sys.number('uptime')}`,
    });
  });

  it('counts clients/connected up and down as clients come and go', async () => {
    const sys = await watchSys();
    await waitFor(() => !Number.isNaN(sys.number('clients/connected')), 5000, { message: 'no clients/connected' });
    const before = sys.number('clients/connected');
    expect(before).toBeGreaterThanOrEqual(1); // the watcher itself
    const extra = await connectClient(gw.url);
    await waitFor(() => sys.number('clients/connected') === before + 1, 5000, {
      message: () => `clients/connected is ${sys.number('clients/connected')}, expected ${before + 1}`,
    });
    await extra.endAsync();
    await waitFor(() => sys.number('clients/connected') === before, 5000, {
      message: () => `clients/connected is ${sys.number('clients/connected')}, expected ${before}`,
    });
  });

  it('counts messages/received for every PUBLISH a client sends', async () => {
    const sys = await watchSys();
    await waitFor(() => !Number.isNaN(sys.number('messages/received')), 5000, { message: 'no messages/received' });
    const before = sys.number('messages/received');
    const pub = await client();
    for (let i = 0; i < 5; i++) await pub.publishAsync('sys/count', `m${i}`, { qos: 1 });
    await waitFor(() => sys.number('messages/received') >= before + 5, 5000, {
      message: () => `messages/received is ${sys.number('messages/received')}, expected >= ${before + 5}`,
    });
  });

  it('counts subscriptions/count up on SUBSCRIBE and down on UNSUBSCRIBE', async () => {
    const sys = await watchSys();
    await waitFor(() => !Number.isNaN(sys.number('subscriptions/count')), 5000, { message: 'no subscriptions/count' });
    const before = sys.number('subscriptions/count');
    const sub = await client();
    await sub.subscribeAsync(['sys/sub/a', 'sys/sub/b/#'], { qos: 1 });
    await waitFor(() => sys.number('subscriptions/count') === before + 2, 5000, {
      message: () => `subscriptions/count is ${sys.number('subscriptions/count')}, expected ${before + 2}`,
    });
    await sub.unsubscribeAsync(['sys/sub/a', 'sys/sub/b/#']);
    await waitFor(() => sys.number('subscriptions/count') === before, 5000, {
      message: () => `subscriptions/count is ${sys.number('subscriptions/count')}, expected ${before}`,
    });
  });

  it('counts retained messages/count up on a retained PUBLISH and down when an empty payload deletes it', async () => {
    const sys = await watchSys();
    await waitFor(() => !Number.isNaN(sys.number('retained messages/count')), 5000, {
      message: 'no retained messages/count',
    });
    const before = sys.number('retained messages/count');
    const pub = await client();
    await pub.publishAsync('sys/retained/one', 'kept', { qos: 1, retain: true });
    await waitFor(() => sys.number('retained messages/count') === before + 1, 5000, {
      message: () => `retained messages/count is ${sys.number('retained messages/count')}, expected ${before + 1}`,
    });
    await pub.publishAsync('sys/retained/one', '', { qos: 1, retain: true });
    await waitFor(() => sys.number('retained messages/count') === before, 5000, {
      message: () => `retained messages/count is ${sys.number('retained messages/count')}, expected ${before}`,
    });
  });

  it('serves $SYS/broker/version to mosquitto_sub (MQTT 3.1.1), as dashboards written for Mosquitto expect', async () => {
    const { stdout } = await run(
      'mosquitto_sub',
      ['-V', 'mqttv311', '-h', '127.0.0.1', '-p', String(gw.port), '-t', '$SYS/broker/version', '-C', '1', '-W', '5'],
      { timeout: 10_000 },
    );
    expect(stdout.trim()).toBe(`edgeferry version ${VERSION}`);
  });
});

describe('$SYS isolation', () => {
  it('does not deliver $SYS topics to subscribers of # or +/broker/#, retained or live [MQTT-4.7.2-1] [docs/reliability.md rule 26]', async () => {
    const sys = await watchSys();
    const wild = await client({ protocolVersion: 5 });
    const seen: string[] = [];
    wild.on('message', (topic) => seen.push(topic));
    await wild.subscribeAsync(['#', '+/broker/#', '+/+/uptime'], { qos: 0 });
    // Two more $SYS publication rounds happen while the wildcards are in place.
    await waitFor(() => !Number.isNaN(sys.number('uptime')), 5000, { message: 'no uptime' });
    const uptime = sys.number('uptime');
    await waitFor(() => sys.number('uptime') >= uptime + 2, 6000, { message: 'uptime did not advance' });
    // The wildcards do work for ordinary topics (so the negative result below means something).
    const pub = await client();
    await pub.publishAsync('sys/plain', 'x', { qos: 1 });
    await waitFor(() => seen.includes('sys/plain'), 5000, { message: () => `# saw ${JSON.stringify(seen)}` });
    expect(seen.filter((t) => t.startsWith('$'))).toEqual([]);
  });

  it('refuses a client PUBLISH to $SYS: MQTT 5 QoS 1 gets PUBACK 0x87, nothing is delivered or retained [docs/reliability.md rule 27]', async () => {
    const sys = await watchSys();
    await waitFor(() => sys.values.has('$SYS/broker/version'), 5000, { message: 'no version' });
    const raw = d.add(await RawClient.connect(gw.port, {}, { protocolVersion: 5 }));
    raw.publish('$SYS/broker/version', 'forged', { qos: 1, messageId: 7, retain: true });
    const puback = await raw.expect('puback');
    expect(puback).toMatchObject({ messageId: 7, reasonCode: 0x87 });
    raw.publish('$SYS/broker/forged/qos0', 'forged', { qos: 0, retain: true });
    await raw.ping(); // still connected: a refused QoS 0 publish is dropped, not fatal
    // A fresh subscriber sees the broker's own retained version, and nothing under the forged topic.
    const fresh = await client();
    const got: { topic: string; value: string }[] = [];
    fresh.on('message', (topic, payload) => got.push({ topic, value: payload.toString() }));
    await fresh.subscribeAsync(['$SYS/broker/version', '$SYS/broker/forged/#'], { qos: 0 });
    await waitFor(() => got.some((m) => m.topic === '$SYS/broker/version'), 5000, { message: 'no retained version' });
    expect(got).toEqual([{ topic: '$SYS/broker/version', value: `edgeferry version ${VERSION}` }]);
    expect(sys.history.filter((h) => h.value === 'forged')).toEqual([]);
  });

  it('acknowledges but drops a MQTT 3.1.1 QoS 1 PUBLISH to $SYS (3.1.1 cannot refuse a publish) [docs/reliability.md rule 27]', async () => {
    const sys = await watchSys();
    await waitFor(() => sys.values.has('$SYS/broker/version'), 5000, { message: 'no version' });
    const raw = d.add(await RawClient.connect(gw.port, {}, { protocolVersion: 4 }));
    raw.publish('$SYS/broker/forged311', 'forged', { qos: 1, messageId: 9 });
    expect(await raw.expect('puback')).toMatchObject({ messageId: 9 });
    const ok = await client();
    await ok.publishAsync('sys/after-forge', 'x', { qos: 1 });
    // The watcher's subscription ($SYS/broker/#) would match the forged topic; a later round shows it never came.
    const uptime = sys.number('uptime');
    await waitFor(() => sys.number('uptime') >= uptime + 1, 5000, { message: 'uptime did not advance' });
    expect(sys.values.has('$SYS/broker/forged311')).toBe(false);
  });
});
