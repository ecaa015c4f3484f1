/**
 * MQTT 5 properties end to end through the gateway process ("MQTT 5"): CONNACK announcements, message
 * expiry, topic aliases both ways, user properties, content type, response topic and correlation data (with
 * mosquitto_rr), payload format indicator, subscription identifiers, reason strings vs request problem
 * information, and AUTH with an unknown method.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { IPublishPacket } from 'mqtt-packet';
import type { MqttClient } from 'mqtt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { RawClient, type ConnectOptions } from '../helpers/raw-client.js';
import { delay, waitFor } from '../helpers/wait.js';

const run = promisify(execFile);

const TOPIC_ALIAS_MAXIMUM = 10;
const RECEIVE_MAXIMUM = 7;
const MAX_PACKET_BYTES = 65_536;

let gw: Gateway;
beforeAll(async () => {
  gw = await startGateway({
    broker: {
      topicAliasMaximum: TOPIC_ALIAS_MAXIMUM,
      receiveMaximum: RECEIVE_MAXIMUM,
      maxPacketBytes: MAX_PACKET_BYTES,
    },
  });
});
afterAll(async () => {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
  await gw?.dispose();
});
const d = useDisposer();

async function client(options: Parameters<typeof connectClient>[1] = {}): Promise<MqttClient> {
  const c = await connectClient(gw.url, { protocolVersion: 5, ...options });
  d.defer(() => c.endAsync(true));
  return c;
}

async function raw5(connect: ConnectOptions = {}): Promise<RawClient> {
  return d.add(await RawClient.connect(gw.port, connect, { protocolVersion: 5 }));
}

/** A raw v5 subscriber on `filter` (QoS 1 unless given). */
async function rawSubscriber(filter: string, connect: ConnectOptions = {}, qos: 0 | 1 | 2 = 1): Promise<RawClient> {
  const c = await raw5(connect);
  const suback = await c.subscribe([{ topic: filter, qos }]);
  expect(suback.granted).toEqual([qos]);
  return c;
}

async function expectDisconnectedWith(c: RawClient, reasonCode: number): Promise<void> {
  const packet = await c.expectDisconnect();
  expect(packet.reasonCode, `DISCONNECT reason, got ${c.describe()}`).toBe(reasonCode);
  await c.waitForClose(3000);
}

/** The gateway still routes messages after a connection was thrown out. */
async function expectBrokerServing(): Promise<void> {
  const sub = await rawSubscriber('v5/health');
  const pub = await client();
  await pub.publishAsync('v5/health', 'ok', { qos: 1 });
  await sub.until(() => sub.publishes.length > 0, 5000, 'health message');
  expect(gw.proc.exitCode).toBeNull();
}

describe('CONNACK announcements', () => {
  it('announces Receive Maximum, Maximum Packet Size and Topic Alias Maximum from the config, and the features it has (MQTT 5 §3.2.2.3)', async () => {
    const c = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    const connack = await c.connect({ clientId: 'v5-connack' });
    expect(connack.reasonCode).toBe(0);
    expect(connack.properties).toMatchObject({
      receiveMaximum: RECEIVE_MAXIMUM,
      maximumPacketSize: MAX_PACKET_BYTES,
      topicAliasMaximum: TOPIC_ALIAS_MAXIMUM,
      retainAvailable: true,
      wildcardSubscriptionAvailable: true,
      subscriptionIdentifiersAvailable: true,
      sharedSubscriptionAvailable: true,
    });
  });

  it('refuses CONNECT with an authentication method it does not support: CONNACK 0x8C, then close [MQTT-4.12.0-1]', async () => {
    const c = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    const connack = await c.connect({
      clientId: 'v5-auth',
      properties: { authenticationMethod: 'SCRAM-SHA-256', authenticationData: Buffer.from('n,,n=user,r=abc') },
    });
    expect(connack.reasonCode).toBe(0x8c);
    await c.waitForClose(3000);
    expect(c.received.map((p) => p.cmd)).toEqual(['connack']);
  });

  it('treats an AUTH packet without a CONNECT authentication method as a protocol error: DISCONNECT 0x82 (MQTT 5 §4.12)', async () => {
    const c = await raw5();
    c.send({ cmd: 'auth', reasonCode: 0x19, properties: { authenticationMethod: 'SCRAM-SHA-256' } });
    await expectDisconnectedWith(c, 0x82);
    await expectBrokerServing();
  });
});

describe('message expiry', () => {
  it('decrements the Message Expiry Interval by the time spent queued and drops messages that expired while the subscriber was offline [MQTT-3.3.2-5] [MQTT-3.3.2-6]', async () => {
    const session = { clientId: 'v5-expiry', properties: { sessionExpiryInterval: 300 } };
    const first = await rawSubscriber('v5/expiry', session);
    first.destroy();
    await first.waitForClose(3000);
    const pub = await client();
    await pub.publishAsync('v5/expiry', 'short', { qos: 1, properties: { messageExpiryInterval: 1 } });
    await pub.publishAsync('v5/expiry', 'long', { qos: 1, properties: { messageExpiryInterval: 30 } });
    await pub.publishAsync('v5/expiry', 'forever', { qos: 1 });
    const queuedAt = performance.now();
    // Pacing, not an assertion: let the 1 s message expire and the 30 s one age by 2 s.
    await delay(2200);
    const again = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    const connack = await again.connect({ ...session, clean: false });
    expect(connack.sessionPresent).toBe(true);
    await again.until(() => again.publishes.length >= 2, 5000, 'the queued messages');
    await again.ping(); // anything else queued would have come before the PINGRESP
    const waitedS = (performance.now() - queuedAt) / 1000;
    expect(again.publishes.map((p) => p.payload.toString())).toEqual(['long', 'forever']);
    const [long, forever] = again.publishes;
    const remaining = long.properties?.messageExpiryInterval as number;
    expect(remaining).toBeLessThanOrEqual(30 - 2);
    expect(remaining).toBeGreaterThanOrEqual(Math.floor(30 - waitedS) - 1);
    expect(forever.properties?.messageExpiryInterval).toBeUndefined();
    for (const p of again.publishes) again.send({ cmd: 'puback', messageId: p.messageId });
  });

  it('forwards the Message Expiry Interval to an online subscriber without waiting time counted against it', async () => {
    const sub = await rawSubscriber('v5/expiry/online');
    const pub = await client();
    await pub.publishAsync('v5/expiry/online', 'x', { qos: 1, properties: { messageExpiryInterval: 120 } });
    const p = (await sub.expect('publish')) as IPublishPacket;
    expect(p.properties?.messageExpiryInterval).toBe(120);
  });
});

describe('topic aliases, client to broker', () => {
  it('maps a topic alias set by the client and resolves later PUBLISHes that carry only the alias [MQTT-3.3.2-12]', async () => {
    const sub = await rawSubscriber('v5/alias/in/+');
    const pub = await raw5();
    pub.publish('v5/alias/in/a', 'first', { qos: 1, messageId: 1, properties: { topicAlias: 3 } });
    pub.publish('', 'second', { qos: 1, messageId: 2, properties: { topicAlias: 3 } });
    pub.publish('v5/alias/in/b', 'rebound', { qos: 1, messageId: 3, properties: { topicAlias: 3 } });
    pub.publish('', 'third', { qos: 1, messageId: 4, properties: { topicAlias: TOPIC_ALIAS_MAXIMUM } });
    // Alias 10 was never set: that last PUBLISH is a protocol error (checked below); the first three are fine.
    await sub.until(() => sub.publishes.length >= 3, 5000, 'three aliased messages');
    expect(sub.publishes.map((p) => [p.topic, p.payload.toString()])).toEqual([
      ['v5/alias/in/a', 'first'],
      ['v5/alias/in/a', 'second'],
      ['v5/alias/in/b', 'rebound'],
    ]);
    // The PUBACKs left with those deliveries, but the publisher's socket may be read after the subscriber's.
    await pub.until(() => pub.packets('puback').length >= 3, 5000, 'three PUBACKs');
    expect(pub.packets('puback').map((p) => [p.messageId, p.reasonCode])).toEqual([
      [1, 0],
      [2, 0],
      [3, 0],
    ]);
    await expectDisconnectedWith(pub, 0x94);
  });

  it.each([
    ['alias 0', 0, 'v5/alias/zero'],
    [
      `alias ${TOPIC_ALIAS_MAXIMUM + 1}, above the announced Topic Alias Maximum`,
      TOPIC_ALIAS_MAXIMUM + 1,
      'v5/alias/big',
    ],
    ['an alias never set, with an empty topic', 2, ''],
  ])(
    'disconnects with 0x94 Topic Alias invalid on %s [MQTT-3.3.2-8] [MQTT-3.3.2-9] [docs/reliability.md rule 16]',
    async (_what, alias, topic) => {
      const sub = await rawSubscriber('v5/alias/#');
      const pub = await raw5();
      pub.publish(topic, 'bad', { qos: 1, messageId: 5, properties: { topicAlias: alias } });
      await expectDisconnectedWith(pub, 0x94);
      expect(pub.packets('puback')).toEqual([]);
      await sub.ping();
      expect(sub.publishes).toEqual([]);
      await expectBrokerServing();
    },
  );

  it('does not carry topic aliases from one connection to the next [MQTT-3.3.2-7]', async () => {
    const first = await raw5({ clientId: 'v5-alias-carry' });
    first.publish('v5/alias/carry', 'x', { qos: 1, properties: { topicAlias: 4 } });
    await first.expect('puback');
    first.send({ cmd: 'disconnect', reasonCode: 0 });
    await first.waitForClose(3000);
    const second = await raw5({ clientId: 'v5-alias-carry' });
    second.publish('', 'y', { qos: 1, properties: { topicAlias: 4 } });
    await expectDisconnectedWith(second, 0x94);
  });
});

describe('topic aliases, broker to client', () => {
  it('sends aliases to a client that announced a Topic Alias Maximum, topic once then alias only, never above its maximum [MQTT-3.1.2-26] [MQTT-3.3.2-11]', async () => {
    const sub = await rawSubscriber('v5/alias/out/#', { properties: { topicAliasMaximum: 2 } }, 0);
    const pub = await client();
    const order = ['a', 'a', 'b', 'a', 'b', 'c', 'c'];
    for (const [i, t] of order.entries()) await pub.publishAsync(`v5/alias/out/${t}`, `${t}${i}`, { qos: 1 });
    await sub.until(() => sub.publishes.length >= order.length, 5000, 'all messages');
    const seen = sub.publishes.map((p) => ({
      topic: p.topic,
      alias: p.properties?.topicAlias,
      payload: p.payload.toString(),
    }));
    expect(seen).toEqual([
      { topic: 'v5/alias/out/a', alias: 1, payload: 'a0' },
      { topic: '', alias: 1, payload: 'a1' },
      { topic: 'v5/alias/out/b', alias: 2, payload: 'b2' },
      { topic: '', alias: 1, payload: 'a3' },
      { topic: '', alias: 2, payload: 'b4' },
      // The client allows two aliases: a third topic goes out in full, without an alias.
      { topic: 'v5/alias/out/c', alias: undefined, payload: 'c5' },
      { topic: 'v5/alias/out/c', alias: undefined, payload: 'c6' },
    ]);
  });

  it('never sends a topic alias to a client that did not announce a Topic Alias Maximum [MQTT-3.1.2-27]', async () => {
    const sub = await rawSubscriber('v5/alias/none/#', {}, 0);
    const pub = await client();
    for (let i = 0; i < 3; i++) await pub.publishAsync('v5/alias/none/x', `n${i}`, { qos: 1 });
    await sub.until(() => sub.publishes.length >= 3, 5000, 'all messages');
    expect(sub.publishes.map((p) => [p.topic, p.properties?.topicAlias])).toEqual([
      ['v5/alias/none/x', undefined],
      ['v5/alias/none/x', undefined],
      ['v5/alias/none/x', undefined],
    ]);
  });

  it('delivers correct topics to MQTT.js when it accepts aliases (interoperability)', async () => {
    const sub = await client({ properties: { topicAliasMaximum: 5 } });
    const got: string[] = [];
    sub.on('message', (topic, payload) => got.push(`${topic}=${payload.toString()}`));
    await sub.subscribeAsync('v5/alias/mqttjs/+', { qos: 1 });
    const pub = await client();
    for (const [i, t] of ['x', 'x', 'y', 'x'].entries())
      await pub.publishAsync(`v5/alias/mqttjs/${t}`, String(i), { qos: 1 });
    await waitFor(() => got.length >= 4, 5000, { message: () => JSON.stringify(got) });
    expect(got).toEqual(['v5/alias/mqttjs/x=0', 'v5/alias/mqttjs/x=1', 'v5/alias/mqttjs/y=2', 'v5/alias/mqttjs/x=3']);
  });
});

describe('application message properties', () => {
  it('forwards user properties unaltered and in order, repeated names included [MQTT-3.3.2-17] [MQTT-3.3.2-18]', async () => {
    const sub = await rawSubscriber('v5/userprops');
    const pub = await client();
    await pub.publishAsync('v5/userprops', 'x', {
      qos: 1,
      properties: { userProperties: { a: '1', b: ['x', 'y', 'z'], 'ü-name': 'välue' } },
    });
    const p = (await sub.expect('publish')) as IPublishPacket;
    expect(p.properties?.userProperties).toEqual({ a: '1', b: ['x', 'y', 'z'], 'ü-name': 'välue' });
    expect(Object.keys(p.properties?.userProperties ?? {})).toEqual(['a', 'b', 'ü-name']);
  });

  it('forwards content type and user properties set by mosquitto_pub -D (MQTT 5) [MQTT-3.3.2-20]', async () => {
    const sub = await rawSubscriber('v5/mosquitto/props');
    await run(
      'mosquitto_pub',
      [
        '-V',
        'mqttv5',
        '-h',
        '127.0.0.1',
        '-p',
        String(gw.port),
        '-q',
        '1',
        '-t',
        'v5/mosquitto/props',
        '-m',
        '{"t":21.5}',
        '-D',
        'publish',
        'content-type',
        'application/json',
        '-D',
        'publish',
        'user-property',
        'site',
        'line4',
        '-D',
        'publish',
        'payload-format-indicator',
        '1',
      ],
      { timeout: 10_000 },
    );
    const p = (await sub.expect('publish')) as IPublishPacket;
    expect(p.payload.toString()).toBe('{"t":21.5}');
    expect(p.properties).toMatchObject({
      contentType: 'application/json',
      userProperties: { site: 'line4' },
      payloadFormatIndicator: true,
    });
  });

  it('passes response topic and correlation data through a request/response with mosquitto_rr [MQTT-3.3.2-15] [MQTT-3.3.2-16]', async () => {
    const responder = await client();
    const requests: { responseTopic?: string; correlationData?: string }[] = [];
    responder.on('message', (_topic, payload, packet) => {
      const props = packet.properties ?? {};
      requests.push({ responseTopic: props.responseTopic, correlationData: props.correlationData?.toString() });
      if (props.responseTopic) {
        responder.publish(props.responseTopic, `pong:${payload.toString()}`, {
          qos: 1,
          properties: { correlationData: props.correlationData },
        });
      }
    });
    await responder.subscribeAsync('v5/rr/request', { qos: 1 });
    const { stdout } = await run(
      'mosquitto_rr',
      [
        '-V',
        'mqttv5',
        '-h',
        '127.0.0.1',
        '-p',
        String(gw.port),
        '-q',
        '1',
        '-t',
        'v5/rr/request',
        '-e',
        'v5/rr/response',
        '-m',
        'ping',
        '-D',
        'publish',
        'correlation-data',
        'req-42',
        '-W',
        '5',
      ],
      { timeout: 10_000 },
    );
    expect(stdout.trim()).toBe('pong:ping');
    expect(requests).toEqual([{ responseTopic: 'v5/rr/response', correlationData: 'req-42' }]);
  });

  it('forwards a valid UTF-8 payload with Payload Format Indicator 1 with the indicator unaltered [MQTT-3.3.2-4]', async () => {
    const sub = await rawSubscriber('v5/pfi');
    const pub = await raw5();
    pub.publish('v5/pfi', 'grüße', { qos: 1, properties: { payloadFormatIndicator: true } });
    expect(await pub.expect('puback')).toMatchObject({ reasonCode: 0 });
    const p = (await sub.expect('publish')) as IPublishPacket;
    expect(p.payload.toString()).toBe('grüße');
    expect(p.properties?.payloadFormatIndicator).toBe(true);
  });

  it('refuses a QoS 1/2 PUBLISH whose payload is not UTF-8 despite Payload Format Indicator 1 with 0x99, delivering nothing', async () => {
    const sub = await rawSubscriber('v5/pfi/bad');
    const pub = await raw5();
    const notUtf8 = Buffer.from([0x68, 0x69, 0xff, 0xfe, 0xc0, 0xaf]);
    pub.publish('v5/pfi/bad', notUtf8, { qos: 1, messageId: 11, properties: { payloadFormatIndicator: true } });
    expect(await pub.expect('puback')).toMatchObject({ messageId: 11, reasonCode: 0x99 });
    pub.publish('v5/pfi/bad', notUtf8, { qos: 2, messageId: 12, properties: { payloadFormatIndicator: true } });
    expect(await pub.expect('pubrec')).toMatchObject({ messageId: 12, reasonCode: 0x99 });
    // Without the indicator the same bytes are an ordinary binary payload.
    pub.publish('v5/pfi/bad', notUtf8, { qos: 1, messageId: 13 });
    expect(await pub.expect('puback')).toMatchObject({ messageId: 13, reasonCode: 0 });
    const p = (await sub.expect('publish')) as IPublishPacket;
    expect(p.payload).toEqual(notUtf8);
    await sub.ping();
    expect(sub.publishes).toHaveLength(1);
  });

  it('disconnects a QoS 0 PUBLISH with an invalid UTF-8 payload and Payload Format Indicator 1 with 0x99', async () => {
    const pub = await raw5();
    pub.publish('v5/pfi/bad0', Buffer.from([0xff]), { qos: 0, properties: { payloadFormatIndicator: true } });
    await expectDisconnectedWith(pub, 0x99);
    await expectBrokerServing();
  });
});

describe('subscription identifiers', () => {
  it('carries the identifier of every matching subscription in one PUBLISH, and none for a subscription without one [MQTT-3.3.4-3]', async () => {
    const sub = await raw5();
    await sub.subscribe([{ topic: 'v5/sid/+', qos: 1 }], { messageId: 1, properties: { subscriptionIdentifier: 7 } });
    await sub.subscribe([{ topic: 'v5/sid/#', qos: 1 }], {
      messageId: 2,
      properties: { subscriptionIdentifier: 268_435_455 },
    });
    await sub.subscribe([{ topic: 'v5/sid/plain/#', qos: 1 }], { messageId: 3 });
    const pub = await client();
    await pub.publishAsync('v5/sid/x', 'both', { qos: 1 });
    await pub.publishAsync('v5/sid/x/y', 'hash-only', { qos: 1 });
    await pub.publishAsync('v5/sid/plain/z', 'hash-and-plain', { qos: 1 });
    await sub.until(() => sub.publishes.length >= 3, 5000, 'three messages');
    await sub.ping();
    const ids = (p: IPublishPacket): number[] => {
      const v = p.properties?.subscriptionIdentifier as number | number[] | undefined;
      return v === undefined ? [] : (Array.isArray(v) ? v : [v]).sort((a, b) => a - b);
    };
    expect(sub.publishes.map((p) => [p.payload.toString(), ids(p)])).toEqual([
      ['both', [7, 268_435_455]],
      ['hash-only', [268_435_455]],
      // One copy for the two overlapping subscriptions [MQTT-3.3.4-2], with the one identifier there is.
      ['hash-and-plain', [268_435_455]],
    ]);
  });

  it('treats Subscription Identifier 0 as a protocol error: DISCONNECT 0x82 (MQTT 5 §3.8.2.1.2)', async () => {
    const c = await raw5();
    // SUBSCRIBE id 1, properties [0x0B 0x00] (identifier 0), filter "a", options QoS 0. Hand-made: mqtt-packet
    // refuses to encode identifier 0.
    c.write('82 09 0001 02 0b00 0001 61 00');
    await expectDisconnectedWith(c, 0x82);
  });
});

describe('reason strings and Request Problem Information', () => {
  it('adds a Reason String to its DISCONNECT when the client did not turn problem information off', async () => {
    const c = await raw5();
    c.publish('v5/rs', 'x', { properties: { topicAlias: 0 } });
    const disconnect = await c.expectDisconnect();
    expect(disconnect.reasonCode).toBe(0x94);
    expect(disconnect.properties?.reasonString).toEqual(expect.any(String));
    expect(disconnect.properties?.reasonString?.length).toBeGreaterThan(0);
  });

  it('sends no Reason String when the client set Request Problem Information to 0 (on PUBACK: [MQTT-3.1.2-29])', async () => {
    const c = await raw5({ properties: { requestProblemInformation: false } });
    c.publish('v5/rs', Buffer.from([0xff]), { qos: 1, messageId: 21, properties: { payloadFormatIndicator: true } });
    const puback = await c.expect('puback');
    expect(puback).toMatchObject({ messageId: 21, reasonCode: 0x99 });
    expect((puback as { properties?: { reasonString?: string } }).properties?.reasonString).toBeUndefined();
    c.publish('v5/rs', 'x', { properties: { topicAlias: 0 } });
    const disconnect = await c.expectDisconnect();
    expect(disconnect.reasonCode).toBe(0x94);
    expect(disconnect.properties?.reasonString).toBeUndefined();
  });
});
