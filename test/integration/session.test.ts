/**
 * Sessions (MQTT 3.1.1 clean session, MQTT 5 clean start + session expiry): session present, subscriptions kept,
 * offline queueing of QoS 1/2, DUP resend of unacknowledged PUBLISH / PUBREL on resume, the per-session queue bound.
 */
import { describe, expect, it } from 'vitest';
import type { IConnectPacket, IDisconnectPacket, IPublishPacket, IPubrelPacket } from 'mqtt-packet';
import { useGateway } from '../helpers/gateway.js';
import { useDisposer } from '../helpers/disposer.js';
import { checkSequence, sequence } from '../helpers/collector.js';
import {
  openClient,
  RawClient,
  runToolOk,
  startMosquittoSub,
  type TestClient,
  VERSIONS,
} from '../helpers/mqtt-client.js';

const d = useDisposer();
const gw = useGateway();

/** MQTT.js options for a session that survives the connection, in either version. */
function persistent(
  v: 4 | 5,
  clientId: string,
  expiryS = 300,
): { protocolVersion: 4 | 5; clientId: string; clean: false; properties?: { sessionExpiryInterval: number } } {
  return v === 5
    ? { protocolVersion: 5, clientId, clean: false, properties: { sessionExpiryInterval: expiryS } }
    : { protocolVersion: 4, clientId, clean: false };
}

/** Raw CONNECT fields for a session that survives the connection. */
function rawPersistent(v: 4 | 5, clientId: string): Partial<IConnectPacket> {
  return v === 5 ? { clientId, clean: false, properties: { sessionExpiryInterval: 300 } } : { clientId, clean: false };
}

async function publisher(v: 4 | 5, name: string): Promise<TestClient> {
  return d.add(await openClient(gw.url, { protocolVersion: v, clientId: `${name}-pub` }));
}

describe.each(VERSIONS)('MQTT %s', (v) => {
  it('resumes a persistent session with session present 1 and its subscriptions [MQTT-3.1.2-4] [MQTT-3.2.2-2]', async () => {
    const id = `resume-${v}`;
    const first = d.add(await openClient(gw.url, persistent(v, id)));
    expect(first.connack.sessionPresent).toBe(false);
    await first.subscribe(`resume${v}/t`, { qos: 1 });
    await first.disconnect();
    const again = d.add(await openClient(gw.url, persistent(v, id)));
    expect(again.connack.sessionPresent).toBe(true);
    // No new SUBSCRIBE: the session's subscription delivers.
    const pub = await publisher(v, id);
    await pub.publish(`resume${v}/t`, 'still subscribed', { qos: 1 });
    expect((await again.waitForMessages(1))[0].payload).toBe('still subscribed');
  });

  it('discards the session on clean session / clean start: session present 0, subscriptions gone [MQTT-3.1.2-6] [MQTT-3.2.2-1]', async () => {
    const id = `discard-${v}`;
    const first = d.add(await openClient(gw.url, persistent(v, id)));
    await first.subscribe(`discard${v}/t`, { qos: 1 });
    await first.disconnect();
    const clean = d.add(await openClient(gw.url, { protocolVersion: v, clientId: id, clean: true }));
    expect(clean.connack.sessionPresent).toBe(false);
    const pub = await publisher(v, id);
    await pub.publish(`discard${v}/t`, 'nobody', { qos: 1 });
    await clean.subscribe(`discard${v}/barrier`, { qos: 1 });
    await pub.publish(`discard${v}/barrier`, 'barrier', { qos: 1 });
    await clean.waitForMessages(1);
    expect(clean.received().map((m) => m.topic)).toEqual([`discard${v}/barrier`]);
    await clean.disconnect();
    // The clean session ended with its connection: nothing to resume.
    const after = d.add(await openClient(gw.url, persistent(v, id)));
    expect(after.connack.sessionPresent).toBe(false);
  });

  it('queues QoS 1 and 2 messages while the client is offline and delivers them in order on resume [MQTT-3.1.2-5] [MQTT-4.6.0-6]', async () => {
    const id = `offline-${v}`;
    const topic = `offline${v}/t`;
    const sub = d.add(await openClient(gw.url, persistent(v, id)));
    await sub.subscribe(topic, { qos: 2 });
    await sub.disconnect();
    const pub = await publisher(v, id);
    const expected: string[] = [];
    for (let i = 0; i < 30; i++) {
      const qos = ([0, 1, 2] as const)[i % 3];
      await pub.publish(topic, `m${i}-q${qos}`, { qos });
      if (qos > 0) expected.push(`m${i}-q${qos}`);
    }
    const back = d.add(await openClient(gw.url, persistent(v, id)));
    expect(back.connack.sessionPresent).toBe(true);
    await back.waitForMessages(expected.length);
    // Order as sent by the broker (MQTT.js itself emits QoS 2 messages late, at PUBREL).
    const got = back.wire.filter((p) => p.qos > 0);
    expect(
      checkSequence(
        got.map((p) => p.payload.toString()),
        expected,
      ),
    ).toEqual({ missing: [], unexpected: [], duplicates: 0, outOfOrder: 0 });
    for (const p of got) expect(p.qos).toBe(Number(p.payload.toString().slice(-1)));
  });

  it('resends an unacknowledged QoS 1 PUBLISH on resume with DUP 1 and the same packet id, once acknowledged never again [MQTT-4.4.0-1] [MQTT-3.3.1-1]', async () => {
    const id = `dup1-${v}`;
    const topic = `dup1${v}/t`;
    const { raw } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    raw.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 1 }] });
    await raw.next('suback');
    const pub = await publisher(v, id);
    await pub.publish(topic, 'unacked', { qos: 1 });
    const first = (await raw.next('publish')) as IPublishPacket;
    expect(first).toMatchObject({ qos: 1, dup: false });
    raw.stop(); // no PUBACK

    const { raw: second, connack } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    d.add(second);
    expect(connack.sessionPresent).toBe(true);
    const resent = (await second.next('publish')) as IPublishPacket;
    expect(resent).toMatchObject({ topic, qos: 1, dup: true, messageId: first.messageId });
    expect(resent.payload.toString()).toBe('unacked');
    second.send({ cmd: 'puback', messageId: resent.messageId });
    // Once acknowledged it is done: the next resume brings only new messages.
    await pub.publish(topic, 'new', { qos: 1 });
    const fresh = (await second.next('publish')) as IPublishPacket;
    second.send({ cmd: 'puback', messageId: fresh.messageId });
    expect(fresh).toMatchObject({ dup: false });
    second.send({ cmd: 'disconnect' });
    await second.waitForClose();
    const { raw: third } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    d.add(third);
    await pub.publish(topic, 'after', { qos: 1 });
    const next = (await third.next('publish')) as IPublishPacket;
    expect([next.payload.toString(), next.dup]).toEqual(['after', false]);
  });

  it('resends an unacknowledged QoS 2 PUBLISH with DUP, and after PUBREC resends PUBREL instead [MQTT-4.4.0-1]', async () => {
    const id = `dup2-${v}`;
    const topic = `dup2${v}/t`;
    const { raw: r1 } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    r1.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic, qos: 2 }] });
    await r1.next('suback');
    const pub = await publisher(v, id);
    await pub.publish(topic, 'exactly once', { qos: 2 });
    const p1 = (await r1.next('publish')) as IPublishPacket;
    r1.stop(); // neither PUBREC nor anything else

    const { raw: r2 } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    const p2 = (await r2.next('publish')) as IPublishPacket;
    expect(p2).toMatchObject({ qos: 2, dup: true, messageId: p1.messageId });
    r2.send({ cmd: 'pubrec', messageId: p2.messageId });
    expect(((await r2.next('pubrel')) as IPubrelPacket).messageId).toBe(p1.messageId);
    r2.stop(); // PUBREL not completed

    const { raw: r3 } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    d.add(r3);
    const rel = (await r3.next('pubrel')) as IPubrelPacket;
    expect(rel.messageId).toBe(p1.messageId);
    r3.send({ cmd: 'pubcomp', messageId: rel.messageId });
    // The message itself is not sent again once PUBREC was received.
    await pub.publish(topic, 'sentinel', { qos: 2 });
    const next = (await r3.next('publish')) as IPublishPacket;
    expect(next.payload.toString()).toBe('sentinel');
    expect(r3.all('publish')).toHaveLength(1);
  });

  it('remembers an incoming QoS 2 packet id across a reconnect: the resent PUBLISH is not routed again [MQTT-4.3.3-2] [MQTT-4.4.0-1]', async () => {
    const id = `inq2-${v}`;
    const topic = `inq2${v}/t`;
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `${id}-sub` }));
    await sub.subscribe(topic, { qos: 2 });
    const { raw: first } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    first.send({
      cmd: 'publish',
      topic,
      payload: Buffer.from('once'),
      qos: 2,
      messageId: 5,
      retain: false,
      dup: false,
    });
    expect((await first.next('pubrec')).messageId).toBe(5);
    first.stop(); // the PUBREC may as well have been lost

    const { raw: second, connack } = await RawClient.connect(gw.port, v, rawPersistent(v, id));
    d.add(second);
    expect(connack.sessionPresent).toBe(true);
    second.send({
      cmd: 'publish',
      topic,
      payload: Buffer.from('once'),
      qos: 2,
      messageId: 5,
      retain: false,
      dup: true,
    });
    expect((await second.next('pubrec')).messageId).toBe(5);
    second.send({ cmd: 'pubrel', messageId: 5 } as IPubrelPacket);
    expect((await second.next('pubcomp')).messageId).toBe(5);
    second.send({
      cmd: 'publish',
      topic,
      payload: Buffer.from('sentinel'),
      qos: 1,
      messageId: 6,
      retain: false,
      dup: false,
    });
    await second.next('puback');
    await sub.waitForMessages(2);
    expect(sub.wire.map((p) => p.payload.toString())).toEqual(['once', 'sentinel']);
  });

  it('keeps a mosquitto_sub -c session and delivers what was published while it was away', async () => {
    const version = v === 5 ? 'mqttv5' : 'mqttv311';
    const topic = `tools/session${v}/t`;
    const clientId = `mosq-persistent-${v}`;
    const first = await startMosquittoSub(gw.port, ['-V', version, '-c', '-i', clientId, '-q', '2', '-t', topic]);
    await first.stop('SIGTERM'); // mosquitto_sub disconnects cleanly on SIGTERM
    for (const [i, qos] of ['1', '2', '1'].entries()) {
      await runToolOk('mosquitto_pub', [
        '-p',
        String(gw.port),
        '-V',
        version,
        '-q',
        qos,
        '-t',
        topic,
        '-m',
        `offline-${i}`,
      ]);
    }
    const back = await runToolOk('mosquitto_sub', [
      '-p',
      String(gw.port),
      '-V',
      version,
      '-c',
      '-i',
      clientId,
      '-q',
      '2',
      '-t',
      topic,
      '-C',
      '3',
      '-W',
      '5',
    ]);
    // mosquitto_sub prints a QoS 2 message at PUBREL, after a QoS 1 message sent behind it: compare as a set.
    expect(back.stdout.trim().split('\n').sort()).toEqual(['offline-0', 'offline-1', 'offline-2']);
  });
});

describe('MQTT 5 session expiry', () => {
  it('ends a session with expiry 0 when the connection closes, even with clean start 0 [MQTT-3.1.2-23]', async () => {
    const first = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'expiry-zero',
        clean: false,
        properties: { sessionExpiryInterval: 0 },
      }),
    );
    await first.subscribe('expiry0/t', { qos: 1 });
    await first.disconnect();
    const again = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'expiry-zero', clean: false }));
    expect(again.connack.sessionPresent).toBe(false);
  });

  it('ends the session after its expiry interval; its delayed will marks the moment [MQTT-3.1.2-23]', async () => {
    const watcher = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'expiry-watch' }));
    await watcher.subscribe('expiry1/ended', { qos: 1 });
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'expiry-one',
      clean: false,
      properties: { sessionExpiryInterval: 1 },
      will: {
        topic: 'expiry1/ended',
        payload: Buffer.from('session over'),
        qos: 1,
        retain: false,
        properties: { willDelayInterval: 3600 },
      },
    });
    raw.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'expiry1/t', qos: 1 }] });
    await raw.next('suback');
    const droppedAt = Date.now();
    raw.stop();
    await watcher.waitForMessages(1, { timeoutMs: 6000 });
    expect(Date.now() - droppedAt).toBeGreaterThanOrEqual(900);
    const again = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'expiry-one',
        clean: false,
        properties: { sessionExpiryInterval: 1 },
      }),
    );
    expect(again.connack.sessionPresent).toBe(false);
  });

  it('keeps a session with expiry N across a reconnect within N seconds', async () => {
    const first = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'expiry-n',
        clean: false,
        properties: { sessionExpiryInterval: 30 },
      }),
    );
    await first.subscribe('expiryn/t', { qos: 1 });
    first.drop();
    await first.waitForClose();
    const again = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'expiry-n',
        clean: false,
        properties: { sessionExpiryInterval: 30 },
      }),
    );
    expect(again.connack.sessionPresent).toBe(true);
  });

  it('lets DISCONNECT shorten the session expiry to 0, ending the session [MQTT-3.14.2-2]', async () => {
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'expiry-shorten',
      clean: false,
      properties: { sessionExpiryInterval: 300 },
    });
    raw.send({ cmd: 'disconnect', reasonCode: 0, properties: { sessionExpiryInterval: 0 } } as IDisconnectPacket);
    await raw.waitForClose();
    const again = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'expiry-shorten',
        clean: false,
        properties: { sessionExpiryInterval: 300 },
      }),
    );
    expect(again.connack.sessionPresent).toBe(false);
  });

  it('answers DISCONNECT that sets a non-zero expiry after 0 at CONNECT with DISCONNECT 0x82 [MQTT-3.14.2-2]', async () => {
    const { raw } = await RawClient.connect(gw.port, 5, {
      clientId: 'expiry-extend',
      properties: { sessionExpiryInterval: 0 },
    });
    d.add(raw);
    raw.send({ cmd: 'disconnect', reasonCode: 0, properties: { sessionExpiryInterval: 60 } } as IDisconnectPacket);
    const disconnect = (await raw.next('disconnect')) as IDisconnectPacket;
    expect(disconnect.reasonCode).toBe(0x82);
    await raw.waitForClose();
  });

  it('discards an existing session on clean start 1 [MQTT-3.1.2-4] [MQTT-3.2.2-2]', async () => {
    const first = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'cleanstart',
        clean: false,
        properties: { sessionExpiryInterval: 300 },
      }),
    );
    await first.subscribe('cleanstart/t', { qos: 1 });
    await first.disconnect();
    const fresh = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'cleanstart',
        clean: true,
        properties: { sessionExpiryInterval: 300 },
      }),
    );
    expect(fresh.connack.sessionPresent).toBe(false);
    const pub = await publisher(5, 'cleanstart');
    await pub.publish('cleanstart/t', 'gone', { qos: 1 });
    await fresh.subscribe('cleanstart/barrier', { qos: 1 });
    await pub.publish('cleanstart/barrier', 'barrier', { qos: 1 });
    await fresh.waitForMessages(1);
    expect(fresh.payloads()).toEqual(['barrier']);
  });
});

describe('session limits (broker.maxQueuedMessages: 5, maxSessionExpiryS: 100, receiveMaximum: 2)', () => {
  const limited = useGateway({ broker: { maxQueuedMessages: 5, maxSessionExpiryS: 100, receiveMaximum: 2 } });

  it.each(VERSIONS)(
    'keeps at most maxQueuedMessages for an offline MQTT %s session, dropping the newest beyond it',
    async (v) => {
      const id = `bounded-${v}`;
      const topic = `bounded${v}/t`;
      const sub = d.add(await openClient(limited.url, persistent(v, id)));
      await sub.subscribe(topic, { qos: 1 });
      await sub.disconnect();
      const pub = d.add(await openClient(limited.url, { protocolVersion: v, clientId: `${id}-pub` }));
      for (const p of sequence(12, 'm')) await pub.publish(topic, p, { qos: 1 });
      const back = d.add(await openClient(limited.url, persistent(v, id)));
      await back.waitForMessages(5);
      // A live message after the queue drained: anything queued beyond 5 would have come before it.
      await pub.publish(topic, 'live', { qos: 1 });
      await back.waitForMessages(6);
      expect(back.payloads()).toEqual([...sequence(5, 'm'), 'live']);
    },
  );

  it('does not let a QoS 2 flow finished after a reconnect loosen the Receive Maximum of the new connection [MQTT-3.3.4-9]', async () => {
    const fields = { clientId: 'recvmax-resume', clean: false, properties: { sessionExpiryInterval: 60 } };
    const { raw: first } = await RawClient.connect(limited.port, 5, fields);
    first.send({
      cmd: 'publish',
      topic: 'recvmax/t',
      payload: Buffer.from('a'),
      qos: 2,
      messageId: 1,
      retain: false,
      dup: false,
    });
    await first.next('pubrec');
    first.stop();
    const { raw: second } = await RawClient.connect(limited.port, 5, fields);
    d.add(second);
    // Completes the flow of the previous connection: it never counted against this one.
    second.send({ cmd: 'pubrel', messageId: 1 } as IPubrelPacket);
    await second.next('pubcomp');
    // Three unreleased QoS 2 publishes against a Receive Maximum of 2: the third is one too many. (The PUBRECs of
    // a persistent session wait until the packet id is stored, so they are awaited before the third publish.)
    const publish = (id: number) =>
      second.send({
        cmd: 'publish',
        topic: 'recvmax/t',
        payload: Buffer.from('b'),
        qos: 2,
        messageId: id,
        retain: false,
        dup: false,
      });
    publish(2);
    publish(3);
    await second.next('pubrec');
    await second.next('pubrec');
    expect(second.all('pubrec').map((p) => p.messageId)).toEqual([2, 3]);
    publish(4);
    const disconnect = (await second.next('disconnect')) as IDisconnectPacket;
    expect(disconnect.reasonCode).toBe(0x93);
  });

  it('caps the MQTT 5 session expiry and announces the value it uses in CONNACK', async () => {
    const c = d.add(
      await openClient(limited.url, {
        protocolVersion: 5,
        clientId: 'capped',
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
      }),
    );
    expect(c.connack.properties?.sessionExpiryInterval).toBe(100);
    const ok = d.add(
      await openClient(limited.url, {
        protocolVersion: 5,
        clientId: 'uncapped',
        clean: false,
        properties: { sessionExpiryInterval: 50 },
      }),
    );
    expect(ok.connack.properties?.sessionExpiryInterval).toBeUndefined();
  });
});
