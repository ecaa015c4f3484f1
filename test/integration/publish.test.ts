/**
 * PUBLISH flows in both directions at QoS 0, 1 and 2 (MQTT 3.1.1 and 5.0): acknowledgements, exactly-once
 * reception, QoS downgrade, ordering, and interoperability with Debian's mosquitto_pub / mosquitto_sub / mosquitto_rr.
 */
import { describe, expect, it } from 'vitest';
import type { IPubackPacket, IPubcompPacket, IPublishPacket, IPubrecPacket, IPubrelPacket } from 'mqtt-packet';
import { useGateway } from '../helpers/gateway.js';
import { useDisposer } from '../helpers/disposer.js';
import { checkSequence, sequence } from '../helpers/collector.js';
import { openClient, RawClient, runToolOk, startMosquittoSub, toolVersion, VERSIONS } from '../helpers/mqtt-client.js';

const d = useDisposer();
const gw = useGateway();

function publishPacket(
  topic: string,
  payload: string,
  qos: 0 | 1 | 2,
  messageId?: number,
  dup = false,
): IPublishPacket {
  return { cmd: 'publish', topic, payload: Buffer.from(payload), qos, messageId, retain: false, dup };
}

describe.each(VERSIONS)('MQTT %s', (v) => {
  it('delivers at the minimum of the published QoS and the granted QoS [MQTT-3.8.4-6] [MQTT-3.8.4-8]', async () => {
    const subs = [];
    for (const subQos of [0, 1, 2] as const) {
      const s = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `matrix-${v}-sub${subQos}` }));
      expect(await s.subscribe(`matrix/${v}/#`, { qos: subQos })).toEqual([subQos]);
      subs.push(s);
    }
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `matrix-${v}-pub` }));
    for (const pubQos of [0, 1, 2] as const) await pub.publish(`matrix/${v}/q${pubQos}`, `q${pubQos}`, { qos: pubQos });
    for (const [subQos, s] of subs.entries()) {
      const got = await s.waitForMessages(3);
      expect(got.map((m) => [m.topic, m.qos]).sort(), `subscription QoS ${subQos}`).toEqual(
        [0, 1, 2].map((pubQos) => [`matrix/${v}/q${pubQos}`, Math.min(pubQos, subQos)]),
      );
      expect(got.every((m) => !m.retain && !m.dup)).toBe(true);
    }
  });

  it('acknowledges an incoming QoS 1 PUBLISH with a PUBACK carrying its packet id [MQTT-4.3.2-2]', async () => {
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `raw-q1-${v}` });
    d.add(raw);
    raw.send(publishPacket('q1/in', 'x', 1, 4711));
    const ack = (await raw.next('puback')) as IPubackPacket;
    expect(ack.messageId).toBe(4711);
    if (v === 5) expect(ack.reasonCode ?? 0).toBe(0);
  });

  it('answers PUBACKs in the order of the PUBLISHes [MQTT-4.6.0-2]', async () => {
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `raw-order-${v}` });
    d.add(raw);
    for (let id = 1; id <= 50; id++) raw.send(publishPacket('q1/order', `m${id}`, 1, id));
    const ids: number[] = [];
    for (let i = 0; i < 50; i++) ids.push(((await raw.next('puback')) as IPubackPacket).messageId!);
    expect(ids).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
  });

  it('routes an incoming QoS 2 message exactly once although its PUBLISH is resent before PUBREL [MQTT-4.3.3-2] [MQTT-4.3.3-9]', async () => {
    const topic = `q2/once/${v}`;
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `q2-once-sub-${v}` }));
    await sub.subscribe(topic, { qos: 2 });
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `q2-once-pub-${v}` });
    d.add(raw);

    raw.send(publishPacket(topic, 'first', 2, 7));
    expect(((await raw.next('pubrec')) as IPubrecPacket).messageId).toBe(7);
    // The PUBREC "got lost": the client resends the PUBLISH with DUP set, twice.
    raw.send(publishPacket(topic, 'first', 2, 7, true));
    expect(((await raw.next('pubrec')) as IPubrecPacket).messageId).toBe(7);
    raw.send(publishPacket(topic, 'first', 2, 7, true));
    expect(((await raw.next('pubrec')) as IPubrecPacket).messageId).toBe(7);
    raw.send({ cmd: 'pubrel', messageId: 7 } as IPubrelPacket);
    const comp = (await raw.next('pubcomp')) as IPubcompPacket;
    expect(comp.messageId).toBe(7);
    if (v === 5) expect(comp.reasonCode ?? 0).toBe(0);

    // After PUBCOMP the same id starts a new message [MQTT-4.3.3-12].
    raw.send(publishPacket(topic, 'second', 2, 7));
    await raw.next('pubrec');
    raw.send({ cmd: 'pubrel', messageId: 7 } as IPubrelPacket);
    await raw.next('pubcomp');
    // A sentinel behind everything: once it is in, any duplicate would have arrived before it.
    raw.send(publishPacket(topic, 'end', 2, 8));
    await raw.next('pubrec');
    raw.send({ cmd: 'pubrel', messageId: 8 } as IPubrelPacket);
    await raw.next('pubcomp');

    await sub.waitForMessages(3);
    expect(sub.payloads()).toEqual(['first', 'second', 'end']);
    // The outgoing DUP flag depends only on the outgoing retransmission [MQTT-3.3.1-3].
    expect(sub.messages.map((m) => [m.qos, m.dup])).toEqual([
      [2, false],
      [2, false],
      [2, false],
    ]);
  });

  it('answers a PUBREL for an unknown packet id with PUBCOMP (0x92 in MQTT 5) and stays connected', async () => {
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `raw-pubrel-${v}` });
    d.add(raw);
    raw.send({ cmd: 'pubrel', messageId: 999 } as IPubrelPacket);
    const comp = (await raw.next('pubcomp')) as IPubcompPacket;
    expect(comp.messageId).toBe(999);
    if (v === 5) expect(comp.reasonCode).toBe(0x92);
    raw.send({ cmd: 'pingreq' });
    await raw.next('pingresp');
  });

  it('sends QoS 1 to a subscriber with a packet id and DUP 0, and moves on after its PUBACK [MQTT-4.3.2-1]', async () => {
    const topic = `q1/out/${v}`;
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `raw-q1-out-${v}` });
    d.add(raw);
    raw.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 1 }] });
    await raw.next('suback');
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `q1-out-pub-${v}` }));
    await pub.publish(topic, 'one', { qos: 1 });
    const p1 = (await raw.next('publish')) as IPublishPacket;
    expect(p1).toMatchObject({ topic, qos: 1, dup: false, retain: false });
    expect(p1.messageId).toBeGreaterThan(0);
    raw.send({ cmd: 'puback', messageId: p1.messageId });
    await pub.publish(topic, 'two', { qos: 1 });
    const p2 = (await raw.next('publish')) as IPublishPacket;
    expect(p2.payload.toString()).toBe('two');
    expect(p2.messageId).toBeGreaterThan(0);
  });

  it('gives each QoS 1 subscriber of one message the packet id of its own session [MQTT-2.3.1-2]', async () => {
    const topic = `q1/shared/${v}`;
    const subs: RawClient[] = [];
    for (const name of ['a', 'b', 'c']) {
      const { raw } = await RawClient.connect(gw.port, v, { clientId: `raw-q1-shared-${name}-${v}` });
      d.add(raw);
      raw.send({
        cmd: 'subscribe',
        messageId: 1,
        subscriptions: [
          { topic, qos: 1 },
          { topic: `${topic}/warm/${name}`, qos: 1 },
        ],
      });
      await raw.next('suback');
      subs.push(raw);
    }
    const [a, b] = subs;
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `q1-shared-pub-${v}` }));
    // a gets two messages of its own first, b one, c none (none acknowledged): their sessions' next ids differ.
    await pub.publish(`${topic}/warm/a`, 'a1', { qos: 1 });
    await pub.publish(`${topic}/warm/a`, 'a2', { qos: 1 });
    await pub.publish(`${topic}/warm/b`, 'b1', { qos: 1 });
    await a.next('publish');
    await a.next('publish');
    await b.next('publish');
    // One message to all three: one encoding, each subscriber's PUBLISH with its own id, none overwritten by another's.
    await pub.publish(topic, 'the one', { qos: 1 });
    const got = await Promise.all(subs.map(async (raw) => (await raw.next('publish')) as IPublishPacket));
    for (const p of got)
      expect(p).toMatchObject({ topic, qos: 1, dup: false, retain: false, payload: Buffer.from('the one') });
    expect(got.map((p) => p.messageId)).toEqual([3, 2, 1]);
  });

  it('runs the QoS 2 sender flow to a subscriber: PUBLISH, PUBREC → PUBREL, PUBCOMP [MQTT-4.3.3-1]', async () => {
    const topic = `q2/out/${v}`;
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `raw-q2-out-${v}` });
    d.add(raw);
    raw.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 2 }] });
    await raw.next('suback');
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `q2-out-pub-${v}` }));
    await pub.publish(topic, 'exactly once', { qos: 2 });
    const p = (await raw.next('publish')) as IPublishPacket;
    expect(p).toMatchObject({ topic, qos: 2, dup: false });
    expect(p.payload.toString()).toBe('exactly once');
    raw.send({ cmd: 'pubrec', messageId: p.messageId } as IPubrecPacket);
    const rel = (await raw.next('pubrel')) as IPubrelPacket;
    expect(rel.messageId).toBe(p.messageId);
    raw.send({ cmd: 'pubcomp', messageId: p.messageId } as IPubcompPacket);
    // The flow is over: a second message flows normally and the first is not resent.
    await pub.publish(topic, 'next', { qos: 2 });
    const p2 = (await raw.next('publish')) as IPublishPacket;
    expect(p2.payload.toString()).toBe('next');
    expect(raw.all('publish')).toHaveLength(2);
    expect(raw.all('pubrel')).toHaveLength(1);
  });

  it('delivers 200 QoS 1 messages from one publisher in order, none lost or duplicated [MQTT-4.6.0-6]', async () => {
    const topic = `order/${v}`;
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `order-sub-${v}` }));
    await sub.subscribe(topic, { qos: 1 });
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `order-pub-${v}` }));
    const expected = sequence(200, 'm');
    await Promise.all(expected.map((p) => pub.publish(topic, p, { qos: 1 })));
    await sub.waitForMessages(200);
    expect(checkSequence(sub.payloads(), expected)).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
  });

  it('carries QoS 2 between mosquitto_pub and mosquitto_sub with the full four-packet flow on both sides', async () => {
    const topic = `tools/q2/${v}`;
    const sub = d.add(
      await startMosquittoSub(gw.port, ['-V', toolVersion(v), '-q', '2', '-t', topic, '-i', `mosq-sub-${v}`]),
    );
    expect(sub.lines.some((l) => l.startsWith('Subscribed') && l.trim().endsWith(': 2'))).toBe(true);
    const pub = await runToolOk('mosquitto_pub', [
      '-p',
      String(gw.port),
      '-V',
      toolVersion(v),
      '-q',
      '2',
      '-t',
      topic,
      '-m',
      'hello q2',
      '-d',
    ]);
    expect(pub.stdout).toMatch(/received PUBREC/);
    expect(pub.stdout).toMatch(/received PUBCOMP/);
    const [m] = await sub.waitForMessages(1);
    expect(m).toEqual({ retain: false, qos: 2, topic, payload: 'hello q2' });
    await sub.waitForLine((l) => l.includes('sending PUBCOMP'), 5000, 'the subscriber to complete the QoS 2 flow');
    expect(sub.lines.filter((l) => l.includes('received PUBLISH')).length).toBe(1);
    expect(sub.lines.some((l) => /received PUBLISH \(d0, q2, r0/.test(l))).toBe(true);
    expect(sub.lines.some((l) => l.includes('received PUBREL'))).toBe(true);
  });

  it('downgrades a mosquitto_pub QoS 2 message for a QoS 1 mosquitto_sub subscription', async () => {
    const topic = `tools/down/${v}`;
    const sub = d.add(await startMosquittoSub(gw.port, ['-V', toolVersion(v), '-q', '1', '-t', topic]));
    await runToolOk('mosquitto_pub', [
      '-p',
      String(gw.port),
      '-V',
      toolVersion(v),
      '-q',
      '2',
      '-t',
      topic,
      '-m',
      'down',
    ]);
    const [m] = await sub.waitForMessages(1);
    expect(m.qos).toBe(1);
    expect(sub.lines.some((l) => l.includes('sending PUBACK'))).toBe(true);
  });
});

describe('request / response', () => {
  it('answers mosquitto_rr through an MQTT 5 responder using the response topic and correlation data', async () => {
    const responder = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'rr-responder' }));
    await responder.subscribe('rr/request', { qos: 1 });
    responder.client.on('message', (_topic, payload, packet) => {
      const props = packet.properties;
      if (!props?.responseTopic) return;
      responder.client.publish(props.responseTopic, `pong:${payload.toString()}`, {
        qos: 1,
        properties: { correlationData: props.correlationData },
      });
    });
    const rr = await runToolOk(
      'mosquitto_rr',
      [
        '-p',
        String(gw.port),
        '-V',
        'mqttv5',
        '-t',
        'rr/request',
        '-e',
        'rr/response',
        '-m',
        'ping',
        '-q',
        '1',
        '-W',
        '5',
      ],
      10_000,
    );
    expect(rr.stdout.trim()).toBe('pong:ping');
    const request = responder.received('rr/request')[0];
    expect(request.properties?.responseTopic).toBe('rr/response');
  });
});
