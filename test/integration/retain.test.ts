/**
 * Retained messages (MQTT 3.1.1 and 5.0): store, replace, delete by empty payload, delivery on subscribe with the
 * retain flag, MQTT 5 retain handling 0/1/2 and retain-as-published; mosquitto_pub -r / mosquitto_sub.
 */
import { describe, expect, it } from 'vitest';
import { useGateway } from '../helpers/gateway.js';
import { useDisposer } from '../helpers/disposer.js';
import {
  barrier,
  openClient,
  runToolOk,
  startMosquittoSub,
  toolVersion,
  type TestClient,
  VERSIONS,
} from '../helpers/mqtt-client.js';

const d = useDisposer();
const gw = useGateway();

// `barrier` publishes a live (non-retained) message: retained messages for a new subscription are sent right after
// its SUBACK, so whatever was due has arrived once the barrier has.

describe.each(VERSIONS)('MQTT %s', (v) => {
  it('stores a retained message and sends it to a new subscriber with the retain flag set [MQTT-3.3.1-5] [MQTT-3.3.1-6] [MQTT-3.3.1-8]', async () => {
    const topic = `ret${v}/store`;
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-store-pub-${v}` }));
    await pub.publish(topic, 'kept', { qos: 1, retain: true });
    await pub.disconnect();
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-store-sub-${v}` }));
    await sub.subscribe(topic, { qos: 1 });
    const [m] = await sub.waitForMessages(1);
    expect(m).toMatchObject({ topic, payload: 'kept', retain: true, qos: 1 });
  });

  it('forwards a retained publish to existing subscribers with the retain flag cleared [MQTT-3.3.1-9] [MQTT-3.3.1-12]', async () => {
    const topic = `ret${v}/live`;
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-live-sub-${v}` }));
    await sub.subscribe(topic, { qos: 1 });
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-live-pub-${v}` }));
    await pub.publish(topic, 'live', { qos: 1, retain: true });
    const [m] = await sub.waitForMessages(1);
    expect(m).toMatchObject({ payload: 'live', retain: false });
  });

  it('replaces the retained message of a topic with the newest one [MQTT-3.3.1-7] [MQTT-3.3.1-5]', async () => {
    const topic = `ret${v}/replace`;
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-replace-pub-${v}` }));
    await pub.publish(topic, 'v1', { qos: 1, retain: true });
    await pub.publish(topic, 'v2', { qos: 0, retain: true }); // a QoS 0 retained message replaces too
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-replace-sub-${v}` }));
    await sub.subscribe(topic, { qos: 2 });
    await barrier(pub, sub, topic);
    expect(sub.received(topic).map((m) => [m.payload, m.retain, m.qos])).toEqual([
      ['v2', true, 0],
      ['barrier', false, 1],
    ]);
  });

  it('deletes the retained message on an empty retained payload, which is still forwarded live [MQTT-3.3.1-10] [MQTT-3.3.1-11]', async () => {
    const topic = `ret${v}/delete/gone`;
    const keep = `ret${v}/delete/keep`;
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-delete-pub-${v}` }));
    await pub.publish(topic, 'doomed', { qos: 1, retain: true });
    await pub.publish(keep, 'stays', { qos: 1, retain: true });
    const live = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-delete-live-${v}` }));
    await live.subscribe(topic, { qos: 1 });
    await live.waitForMessages(1);
    await pub.publish(topic, '', { qos: 1, retain: true });
    await live.waitForMessages(2);
    expect(live.received().map((m) => [m.payload, m.retain])).toEqual([
      ['doomed', true],
      ['', false],
    ]);
    const later = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-delete-sub-${v}` }));
    await later.subscribe(`ret${v}/delete/#`, { qos: 1 });
    await barrier(pub, later, `ret${v}/delete/barrier`);
    expect(later.received().map((m) => [m.topic, m.payload, m.retain])).toEqual([
      [keep, 'stays', true],
      [`ret${v}/delete/barrier`, 'barrier', false],
    ]);
  });

  it('neither stores nor replaces on a PUBLISH without the retain flag [MQTT-3.3.1-12] [MQTT-3.3.1-8]', async () => {
    const topic = `ret${v}/plain`;
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-plain-pub-${v}` }));
    await pub.publish(topic, 'retained', { qos: 1, retain: true });
    await pub.publish(topic, 'not retained', { qos: 1 });
    await pub.publish(`ret${v}/never`, 'never retained', { qos: 1 });
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-plain-sub-${v}` }));
    await sub.subscribe([topic, `ret${v}/never`], { qos: 1 });
    await barrier(pub, sub, topic);
    expect(sub.received().map((m) => [m.topic, m.payload, m.retain])).toEqual([
      [topic, 'retained', true],
      [topic, 'barrier', false],
    ]);
  });

  it('sends every matching retained message to a wildcard subscription, at the lower of both QoS [MQTT-3.8.4-6] [MQTT-3.8.4-8]', async () => {
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-wild-pub-${v}` }));
    await pub.publish(`ret${v}/wild/a`, 'a', { qos: 2, retain: true });
    await pub.publish(`ret${v}/wild/b/c`, 'bc', { qos: 0, retain: true });
    await pub.publish(`ret${v}/wild/d`, 'd', { qos: 1, retain: true });
    await pub.publish(`ret${v}/other`, 'other', { qos: 1, retain: true });
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `ret-wild-sub-${v}` }));
    await sub.subscribe(`ret${v}/wild/#`, { qos: 1 });
    await sub.waitForMessages(3);
    await barrier(pub, sub, `ret${v}/wild/barrier`);
    const got = sub
      .received()
      .filter((m) => m.retain)
      .map((m) => [m.topic, m.qos]);
    expect(got.sort()).toEqual([
      [`ret${v}/wild/a`, 1],
      [`ret${v}/wild/b/c`, 0],
      [`ret${v}/wild/d`, 1],
    ]);
  });

  it('stores a mosquitto_pub -r message (QoS 2) and mosquitto_sub receives it retained; -n deletes it', async () => {
    const topic = `tools/ret${v}/t`;
    const port = String(gw.port);
    await runToolOk('mosquitto_pub', [
      '-p',
      port,
      '-V',
      toolVersion(v),
      '-q',
      '2',
      '-r',
      '-t',
      topic,
      '-m',
      'from mosquitto_pub',
    ]);
    const got = await runToolOk('mosquitto_sub', [
      '-p',
      port,
      '-V',
      toolVersion(v),
      '-q',
      '2',
      '-t',
      topic,
      '-C',
      '1',
      '-W',
      '5',
      '-F',
      '%r %q %t %p',
    ]);
    expect(got.stdout.trim()).toBe(`1 2 ${topic} from mosquitto_pub`);

    await runToolOk('mosquitto_pub', ['-p', port, '-V', toolVersion(v), '-q', '1', '-r', '-n', '-t', topic]);
    // --retained-only prints retained messages and exits at the first live one, our barrier.
    const sub = d.add(
      await startMosquittoSub(gw.port, ['-V', toolVersion(v), '-q', '1', '-t', `tools/ret${v}/#`, '--retained-only']),
    );
    await runToolOk('mosquitto_pub', [
      '-p',
      port,
      '-V',
      toolVersion(v),
      '-q',
      '1',
      '-t',
      `tools/ret${v}/barrier`,
      '-m',
      'live',
    ]);
    await sub.waitForLine((l) => l.includes(`'tools/ret${v}/barrier'`), 5000, 'the live barrier message');
    expect(sub.messages()).toEqual([]);
  });
});

describe('MQTT 5 retain handling and retain as published', () => {
  async function retainedPair(name: string): Promise<{ pub: TestClient; topic: string }> {
    const topic = `rh/${name}`;
    const pub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: `rh-${name}-pub` }));
    await pub.publish(topic, 'retained', { qos: 1, retain: true });
    return { pub, topic };
  }

  it('retain handling 0 sends retained messages on every subscribe, also a repeated one [MQTT-3.3.1-9]', async () => {
    const { pub, topic } = await retainedPair('zero');
    const sub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'rh-zero-sub' }));
    await sub.subscribe(topic, { qos: 1, rh: 0 });
    await sub.waitForMessages(1);
    await sub.subscribe(topic, { qos: 1, rh: 0 });
    await sub.waitForMessages(2);
    await barrier(pub, sub, topic);
    expect(sub.received().map((m) => [m.payload, m.retain])).toEqual([
      ['retained', true],
      ['retained', true],
      ['barrier', false],
    ]);
  });

  it('retain handling 1 sends retained messages only if the subscription did not exist [MQTT-3.3.1-10]', async () => {
    const { pub, topic } = await retainedPair('one');
    const sub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'rh-one-sub' }));
    await sub.subscribe(topic, { qos: 1, rh: 1 });
    await sub.waitForMessages(1);
    await sub.subscribe(topic, { qos: 1, rh: 1 });
    await barrier(pub, sub, topic);
    expect(sub.received().map((m) => [m.payload, m.retain])).toEqual([
      ['retained', true],
      ['barrier', false],
    ]);
  });

  it('retain handling 2 never sends retained messages at subscribe [MQTT-3.3.1-11]', async () => {
    const { pub, topic } = await retainedPair('two');
    const sub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'rh-two-sub' }));
    await sub.subscribe(topic, { qos: 1, rh: 2 });
    await barrier(pub, sub, topic);
    expect(sub.received().map((m) => [m.payload, m.retain])).toEqual([['barrier', false]]);
  });

  it('retain as published keeps the retain flag on live forwarding; without it the flag is cleared [MQTT-3.3.1-12] [MQTT-3.3.1-13]', async () => {
    const rap = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'rap-on' }));
    await rap.subscribe('rap/t', { qos: 1, rap: true, rh: 2 });
    const plain = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'rap-off' }));
    await plain.subscribe('rap/t', { qos: 1, rap: false, rh: 2 });
    const pub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'rap-pub' }));
    await pub.publish('rap/t', 'retained live', { qos: 1, retain: true });
    await pub.publish('rap/t', 'plain live', { qos: 1 });
    await rap.waitForMessages(2);
    await plain.waitForMessages(2);
    expect(rap.received().map((m) => [m.payload, m.retain])).toEqual([
      ['retained live', true],
      ['plain live', false],
    ]);
    expect(plain.received().map((m) => [m.payload, m.retain])).toEqual([
      ['retained live', false],
      ['plain live', false],
    ]);
  });

  it('keeps the MQTT 5 properties of a retained message and serves it to a 3.1.1 subscriber too', async () => {
    const pub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'ret-props-pub' }));
    await pub.publish('retprops/t', '{"v":1}', {
      qos: 1,
      retain: true,
      properties: {
        contentType: 'application/json',
        userProperties: { unit: 'degC' },
        responseTopic: 'retprops/reply',
        correlationData: Buffer.from('c1'),
      },
    });
    const sub5 = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'ret-props-sub5' }));
    await sub5.subscribe('retprops/t', { qos: 1, properties: { subscriptionIdentifier: 9 } });
    const [m5] = await sub5.waitForMessages(1);
    expect(m5.retain).toBe(true);
    expect(m5.properties?.subscriptionIdentifier).toBe(9);
    expect(m5.properties?.contentType).toBe('application/json');
    expect(m5.properties?.responseTopic).toBe('retprops/reply');
    expect(m5.properties?.correlationData?.toString()).toBe('c1');
    expect({ ...m5.properties?.userProperties }).toEqual({ unit: 'degC' });
    const sub4 = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'ret-props-sub4' }));
    await sub4.subscribe('retprops/t', { qos: 1 });
    const [m4] = await sub4.waitForMessages(1);
    expect(m4).toMatchObject({ payload: '{"v":1}', retain: true });
  });
});
