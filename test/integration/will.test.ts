/**
 * Will messages (MQTT 3.1.1 and 5.0): published on an ungraceful close (socket loss, keep-alive timeout, protocol
 * error, take-over), discarded by DISCONNECT, sent by MQTT 5 DISCONNECT 0x04, the MQTT 5 will delay interval
 * (cancelled by a reconnect, cut short by the session's end) and will properties; mosquitto_sub --will-topic.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IConnectPacket } from 'mqtt-packet';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { useDisposer } from '../helpers/disposer.js';
import {
  barrier,
  openClient,
  RawClient,
  runToolOk,
  startMosquittoSub,
  type TestClient,
  VERSIONS,
} from '../helpers/mqtt-client.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();
let gw: Gateway;

beforeAll(async () => {
  gw = await startGateway();
});

afterAll(async () => {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
  await gw?.dispose();
});

type Will = NonNullable<IConnectPacket['will']>;

function will(topic: string, payload: string, extra: Partial<Will> = {}): Will {
  return { topic, payload: Buffer.from(payload), qos: 1, retain: false, ...extra };
}

/** A subscriber on `filter` (QoS 2) that records everything, including the will. */
async function watcher(filter: string, v: 4 | 5 = 5): Promise<TestClient> {
  const w = d.add(
    await openClient(gw.url, { protocolVersion: v, clientId: `watch-${filter.replace(/[/#+]/g, '_')}-${v}` }),
  );
  await w.subscribe(filter, { qos: 2 });
  return w;
}

/** `barrier` from a fresh client. */
async function barrierFrom(sub: TestClient, topic: string): Promise<void> {
  const pub = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: `barrier-${topic.replace(/\//g, '_')}` }));
  await barrier(pub, sub, topic);
}

describe.each(VERSIONS)('MQTT %s', (v) => {
  it('publishes the will when the connection is lost without DISCONNECT [MQTT-3.1.2-8]', async () => {
    const sub = await watcher(`will${v}/lost/#`);
    const c = d.add(
      await openClient(gw.url, {
        protocolVersion: v,
        clientId: `will-lost-${v}`,
        will: { topic: `will${v}/lost/t`, payload: Buffer.from('gone'), qos: 1, retain: false },
      }),
    );
    c.drop();
    const [m] = await sub.waitForMessages(1);
    expect(m).toMatchObject({ topic: `will${v}/lost/t`, payload: 'gone', qos: 1, retain: false });
  });

  it('discards the will on a normal DISCONNECT [MQTT-3.1.2-10]', async () => {
    const sub = await watcher(`will${v}/clean/#`);
    const { raw } = await RawClient.connect(gw.port, v, {
      clientId: `will-clean-${v}`,
      will: will(`will${v}/clean/t`, 'must not appear'),
    });
    d.add(raw);
    raw.send({ cmd: 'disconnect' });
    // The broker closes the socket after handling DISCONNECT; any will would be routed by then.
    await raw.waitForClose();
    await barrierFrom(sub, `will${v}/clean/barrier`);
    expect(sub.received(`will${v}/clean/t`)).toEqual([]);
  });

  it('publishes the will when the keep alive expires [MQTT-3.1.2-24] [docs/reliability.md rule 31]', async () => {
    const sub = await watcher(`will${v}/keepalive/#`);
    const { raw } = await RawClient.connect(gw.port, v, {
      clientId: `will-ka-${v}`,
      keepalive: 1,
      will: will(`will${v}/keepalive/t`, 'timed out'),
    });
    d.add(raw);
    const [m] = await sub.waitForMessages(1, { timeoutMs: 6000 });
    expect(m.payload).toBe('timed out');
    expect(raw.isClosed || (await raw.waitForClose()) > 0).toBe(true);
  });

  it('publishes the will when the broker closes the connection for a protocol error [MQTT-3.1.2-8]', async () => {
    const sub = await watcher(`will${v}/violation/#`);
    const { raw } = await RawClient.connect(gw.port, v, {
      clientId: `will-violation-${v}`,
      will: will(`will${v}/violation/t`, 'broke the rules'),
    });
    d.add(raw);
    // A second CONNECT is a protocol violation [MQTT-3.1.0-2].
    raw.send({
      cmd: 'connect',
      protocolId: 'MQTT',
      protocolVersion: v,
      clean: true,
      clientId: `will-violation-${v}`,
      keepalive: 0,
    } as IConnectPacket);
    await raw.waitForClose();
    const [m] = await sub.waitForMessages(1);
    expect(m.payload).toBe('broke the rules');
  });

  it('publishes the will of a connection that is taken over by the same client id [MQTT-3.1.4-2] [MQTT-3.1.4-3]', async () => {
    const sub = await watcher(`will${v}/takeover/#`);
    const old = d.add(
      await openClient(gw.url, {
        protocolVersion: v,
        clientId: `will-takeover-${v}`,
        will: { topic: `will${v}/takeover/t`, payload: Buffer.from('replaced'), qos: 1, retain: false },
      }),
    );
    d.add(await openClient(gw.url, { protocolVersion: v, clientId: `will-takeover-${v}` }));
    await old.waitForClose();
    const [m] = await sub.waitForMessages(1);
    expect(m.payload).toBe('replaced');
  });

  it('publishes a retained will as a retained message [MQTT-3.1.2-17]', async () => {
    const topic = `will${v}/retained/t`;
    const c = d.add(
      await openClient(gw.url, {
        protocolVersion: v,
        clientId: `will-retained-${v}`,
        will: { topic, payload: Buffer.from('last words'), qos: 1, retain: true },
      }),
    );
    const live = await watcher(topic);
    c.drop();
    const [m] = await live.waitForMessages(1);
    expect(m.retain).toBe(false); // live delivery clears the flag
    const later = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `will-retained-later-${v}` }));
    await later.subscribe(topic, { qos: 1 });
    const [r] = await later.waitForMessages(1);
    expect(r).toMatchObject({ payload: 'last words', retain: true });
  });

  it('delivers a QoS 2 will of mosquitto_sub killed with SIGKILL, retained, to mosquitto_sub and MQTT.js', async () => {
    const topic = `tools/will${v}/t`;
    const version = v === 5 ? 'mqttv5' : 'mqttv311';
    const observer = d.add(await startMosquittoSub(gw.port, ['-V', version, '-q', '2', '-t', topic]));
    const victim = d.add(
      await startMosquittoSub(gw.port, [
        '-V',
        version,
        '-t',
        `tools/will${v}/unrelated`,
        '--will-topic',
        topic,
        '--will-payload',
        'killed',
        '--will-qos',
        '2',
        '--will-retain',
      ]),
    );
    await victim.stop('SIGKILL');
    const [m] = await observer.waitForMessages(1);
    expect(m).toEqual({ retain: false, qos: 2, topic, payload: 'killed' });
    const late = await runToolOk('mosquitto_sub', [
      '-p',
      String(gw.port),
      '-V',
      version,
      '-q',
      '2',
      '-t',
      topic,
      '-C',
      '1',
      '-W',
      '5',
      '-F',
      '%r %q %p',
    ]);
    expect(late.stdout.trim()).toBe('1 2 killed');
  });

  it('sends no will for mosquitto_pub, which disconnects cleanly', async () => {
    const topic = `tools/will${v}/clean`;
    const sub = await watcher(`tools/will${v}/clean/#`);
    const version = v === 5 ? 'mqttv5' : 'mqttv311';
    await runToolOk('mosquitto_pub', [
      '-p',
      String(gw.port),
      '-V',
      version,
      '-t',
      `${topic}/data`,
      '-m',
      'x',
      '--will-topic',
      `${topic}/will`,
      '--will-payload',
      'no',
    ]);
    await barrierFrom(sub, `${topic}/barrier`);
    expect(sub.received(`${topic}/will`)).toEqual([]);
    expect(sub.payloads(`${topic}/data`)).toEqual(['x']);
  });
});

describe('MQTT 5 will specifics', () => {
  it('sends the will on DISCONNECT with reason code 0x04 [MQTT-3.14.4-3]', async () => {
    const sub = await watcher('will5x/with/#');
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'will-0x04',
      will: will('will5x/with/t', 'sent on purpose'),
    });
    d.add(raw);
    raw.send({ cmd: 'disconnect', reasonCode: 0x04 });
    const [m] = await sub.waitForMessages(1);
    expect(m.payload).toBe('sent on purpose');
  });

  it('keeps every will property: user properties in order, content type, response topic, correlation data, format, expiry [MQTT-3.1.3-10]', async () => {
    const sub = await watcher('will5x/props/#');
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'will-props',
      will: will('will5x/props/t', 'äöü', {
        properties: {
          payloadFormatIndicator: true,
          messageExpiryInterval: 300,
          contentType: 'text/plain',
          responseTopic: 'will5x/props/reply',
          correlationData: Buffer.from([1, 2, 3]),
          userProperties: { z: 'last', a: ['first', 'second'] },
        },
      }),
    });
    d.add(raw);
    raw.stop();
    const [m] = await sub.waitForMessages(1);
    const p = m.properties!;
    expect(m.payload).toBe('äöü');
    expect(p.payloadFormatIndicator).toBe(true);
    expect(p.contentType).toBe('text/plain');
    expect(p.responseTopic).toBe('will5x/props/reply');
    expect([...(p.correlationData ?? [])]).toEqual([1, 2, 3]);
    expect(p.messageExpiryInterval).toBeGreaterThan(290);
    expect(p.messageExpiryInterval).toBeLessThanOrEqual(300);
    expect(Object.entries(p.userProperties ?? {})).toEqual([
      ['z', 'last'],
      ['a', ['first', 'second']],
    ]);
  });

  it('waits the will delay interval before publishing the will [MQTT-3.1.3-9]', async () => {
    const sub = await watcher('will5x/delay/#');
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'will-delay',
      properties: { sessionExpiryInterval: 60 },
      will: will('will5x/delay/t', 'late', { properties: { willDelayInterval: 2 } }),
    });
    d.add(raw);
    const droppedAt = Date.now();
    raw.stop();
    await sub.waitForMessages(1, { timeoutMs: 6000 });
    expect(Date.now() - droppedAt).toBeGreaterThanOrEqual(1900); // not before the delay; the wait bounds it
  });

  it('does not publish the will when the client reconnects to its session within the will delay [MQTT-3.1.3-9]', async () => {
    const sub = await watcher('will5x/cancel/#');
    const connectWithWill = (clientId: string): Promise<{ raw: RawClient }> =>
      RawClient.connect(gw.port, 5, {
        clientId,
        clean: false,
        properties: { sessionExpiryInterval: 60 },
        will: will(`will5x/cancel/${clientId}`, clientId, { properties: { willDelayInterval: 1 } }),
      });
    // `returning` comes back; `control` does not. Both are dropped at the same time with the same delay, so
    // once the control will arrived the other one would have too.
    const { raw: returning } = await connectWithWill('returning');
    const { raw: control } = await connectWithWill('control');
    returning.stop();
    control.stop();
    const { raw: back, connack } = await RawClient.connect(gw.port, 5, {
      clientId: 'returning',
      clean: false,
      properties: { sessionExpiryInterval: 60 },
    });
    d.add(back);
    expect(connack.sessionPresent).toBe(true);
    await sub.waitForMessages(1, { topic: 'will5x/cancel/control', timeoutMs: 5000 });
    await barrierFrom(sub, 'will5x/cancel/barrier');
    expect(sub.received('will5x/cancel/returning')).toEqual([]);
  });

  it('publishes a delayed will when the session ends before the delay is over [MQTT-3.1.2-8] [MQTT-3.1.3-9]', async () => {
    const sub = await watcher('will5x/expiry/#');
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'will-expiry',
      properties: { sessionExpiryInterval: 1 },
      will: will('will5x/expiry/t', 'session over', { properties: { willDelayInterval: 3600 } }),
    });
    d.add(raw);
    const droppedAt = Date.now();
    raw.stop();
    await sub.waitForMessages(1, { timeoutMs: 6000 });
    expect(Date.now() - droppedAt).toBeGreaterThanOrEqual(900); // not before the session expiry; the wait bounds it
  });

  it('publishes a delayed will at once when the session expiry is 0 (the session ends with the connection)', async () => {
    const sub = await watcher('will5x/noexpiry/#');
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'will-noexpiry',
      will: will('will5x/noexpiry/t', 'immediately', { properties: { willDelayInterval: 3600 } }),
    });
    d.add(raw);
    raw.stop();
    const [m] = await sub.waitForMessages(1, { timeoutMs: 3000 });
    expect(m.payload).toBe('immediately');
  });

  it('publishes a pending delayed will when a new connection starts the session clean [MQTT-3.1.2-4]', async () => {
    const sub = await watcher('will5x/cleanstart/#');
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'will-cleanstart',
      properties: { sessionExpiryInterval: 60 },
      will: will('will5x/cleanstart/t', 'old session ended', { properties: { willDelayInterval: 3600 } }),
    });
    raw.stop();
    await waitFor(() => raw.isClosed, 2000);
    const { raw: fresh, connack } = await RawClient.connect(gw.port, 5, { clientId: 'will-cleanstart', clean: true });
    d.add(fresh);
    expect(connack.sessionPresent).toBe(false);
    const [m] = await sub.waitForMessages(1, { timeoutMs: 3000 });
    expect(m.payload).toBe('old session ended');
  });
});
