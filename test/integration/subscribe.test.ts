/**
 * SUBSCRIBE / UNSUBSCRIBE (MQTT 3.1.1 and 5.0): granted QoS, per-filter refusal of invalid filters, wildcards,
 * `$` topics, overlapping subscriptions with subscription identifiers, replacement, no-local, UNSUBACK codes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IPublishPacket, ISubackPacket, IUnsubackPacket } from 'mqtt-packet';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { useDisposer } from '../helpers/disposer.js';
import { barrier, openClient, RawClient, type TestClient, VERSIONS } from '../helpers/mqtt-client.js';
import { encode, RawClient as Raw } from '../helpers/raw-client.js';

const d = useDisposer();
let gw: Gateway;

beforeAll(async () => {
  gw = await startGateway();
});

afterAll(async () => {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
  await gw?.dispose();
});

describe.each(VERSIONS)('MQTT %s', (v) => {
  const fail = v === 5 ? 0x8f : 0x80;

  it('answers one return code per filter, in order, with the granted QoS [MQTT-3.8.4-5] [MQTT-3.9.3-1]', async () => {
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `grant-${v}` });
    d.add(raw);
    raw.send({
      cmd: 'subscribe',
      messageId: 42,
      subscriptions: [
        { topic: 'grant/a', qos: 2 },
        { topic: 'grant/+/b', qos: 0 },
        { topic: 'grant/#', qos: 1 },
      ],
    });
    const suback = (await raw.next('suback')) as ISubackPacket;
    expect(suback.messageId).toBe(42);
    expect(suback.granted).toEqual([2, 0, 1]);
  });

  it(`refuses invalid filters one by one with 0x${fail.toString(16)} and keeps the valid ones and the connection [docs/reliability.md rule 23]`, async () => {
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `badfilter-${v}` });
    d.add(raw);
    raw.send({
      cmd: 'subscribe',
      messageId: 7,
      subscriptions: [
        { topic: 'valid/one', qos: 1 },
        { topic: 'a/#/b', qos: 1 },
        { topic: 'a+', qos: 0 },
        { topic: 'x/y#', qos: 2 },
        { topic: 'valid/+', qos: 2 },
      ],
    });
    const suback = (await raw.next('suback')) as ISubackPacket;
    expect(suback.granted).toEqual([1, fail, fail, fail, 2]);
    // Still connected, and the valid subscriptions work.
    raw.send({ cmd: 'publish', topic: 'valid/one', payload: Buffer.from('ok'), qos: 0, retain: false, dup: false });
    const p = (await raw.next('publish')) as IPublishPacket;
    expect(p.topic).toBe('valid/one');
    expect(p.qos).toBe(0);
    expect(raw.isClosed).toBe(false);
  });

  it('matches `+` one whole level and `#` any number of levels including the parent [MQTT-4.7.1-2] [MQTT-4.7.1-3]', async () => {
    const base = `wild${v}`;
    const done = `wild-end/${v}`;
    const filters = [`${base}/+/player1`, `${base}/#`, `${base}/tennis/+`, `+/tennis/#`, `${base}/tennis`, `${base}/+`];
    const subs = new Map<string, TestClient>();
    for (const [i, f] of filters.entries()) {
      const s = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `wild-${v}-${i}` }));
      await s.subscribe([f, done], { qos: 1 });
      subs.set(f, s);
    }
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `wild-${v}-pub` }));
    const topics = [
      base,
      `${base}/tennis`,
      `${base}/tennis/player1`,
      `${base}/tennis/player1/ranking`,
      `${base}/golf/player1`,
      `${base}/tennis/`,
    ];
    for (const t of topics) await pub.publish(t, t, { qos: 1 });
    await pub.publish(done, 'end', { qos: 1 });
    const expected: Record<string, string[]> = {
      [`${base}/+/player1`]: [`${base}/tennis/player1`, `${base}/golf/player1`],
      [`${base}/#`]: topics,
      [`${base}/tennis/+`]: [`${base}/tennis/player1`, `${base}/tennis/`],
      ['+/tennis/#']: [`${base}/tennis`, `${base}/tennis/player1`, `${base}/tennis/player1/ranking`, `${base}/tennis/`],
      [`${base}/tennis`]: [`${base}/tennis`],
      [`${base}/+`]: [`${base}/tennis`],
    };
    for (const [f, s] of subs) {
      // Everything published before `done` has reached this subscriber once `done` has (ordered topic delivery).
      await s.waitForMessages(1, { topic: done });
      const got = s.messages.filter((m) => m.topic !== done).map((m) => m.topic);
      expect(got.sort(), `filter ${f}`).toEqual([...expected[f]].sort());
    }
  });

  it('does not match topics beginning with `$` by filters starting with a wildcard [MQTT-4.7.2-1]', async () => {
    const hash = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `dollar-hash-${v}` }));
    await hash.subscribe('#', { qos: 1 });
    const plus = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `dollar-plus-${v}` }));
    await plus.subscribe(`+/dollar${v}`, { qos: 1 });
    const explicit = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `dollar-explicit-${v}` }));
    await explicit.subscribe(`$app/+`, { qos: 1 });
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `dollar-pub-${v}` }));
    await pub.publish(`$app/dollar${v}`, 'dollar', { qos: 1 });
    await pub.publish(`plain/dollar${v}`, 'plain', { qos: 1 });
    await explicit.waitForMessages(1);
    expect(explicit.received().map((m) => m.topic)).toEqual([`$app/dollar${v}`]);
    await hash.waitForMessages(1, { topic: `plain/dollar${v}` });
    await plus.waitForMessages(1, { topic: `plain/dollar${v}` });
    expect(hash.received().filter((m) => m.topic.startsWith('$'))).toEqual([]);
    expect(plus.received().map((m) => m.topic)).toEqual([`plain/dollar${v}`]);
  });

  it('sends one copy at the highest QoS of overlapping subscriptions [MQTT-3.3.5-1] [MQTT-3.3.4-2]', async () => {
    const topic = `overlap${v}/a`;
    const filters = [`overlap${v}/#`, `overlap${v}/+`, topic];
    // Every assignment of QoS 0/1/2 to the three filters (rotated), so the highest is not always visited first.
    const subs: TestClient[] = [];
    for (let r = 0; r < 3; r++) {
      const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `overlap-${v}-${r}` }));
      for (const [i, f] of filters.entries()) await sub.subscribe(f, { qos: ((i + r) % 3) as 0 | 1 | 2 });
      subs.push(sub);
    }
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `overlap-pub-${v}` }));
    await pub.publish(topic, 'one', { qos: 2 });
    await pub.publish(topic, 'two', { qos: 1 });
    for (const [r, sub] of subs.entries()) {
      await barrier(pub, sub, `overlap${v}/end`);
      // On the wire (MQTT.js emits the QoS 2 one only at PUBREL, possibly after the QoS 1 one).
      expect(
        sub.wire.filter((p) => p.topic === topic).map((p) => [p.payload.toString(), p.qos]),
        `rotation ${r}`,
      ).toEqual([
        ['one', 2],
        ['two', 1],
      ]);
    }
  });

  it('replaces a subscription to the same filter, with the new QoS, and keeps one copy [MQTT-3.8.4-3]', async () => {
    const topic = `replace${v}/t`;
    const sub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `replace-${v}` }));
    expect(await sub.subscribe(topic, { qos: 2 })).toEqual([2]);
    expect(await sub.subscribe(topic, { qos: 0 })).toEqual([0]);
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `replace-pub-${v}` }));
    await pub.publish(topic, 'after', { qos: 2 });
    await pub.publish(topic, 'last', { qos: 2 });
    await sub.waitForMessages(2);
    await barrier(pub, sub, topic);
    expect(sub.received(topic).map((m) => [m.payload, m.qos])).toEqual([
      ['after', 0],
      ['last', 0],
      ['barrier', 0],
    ]);
  });

  it('stops delivering after UNSUBSCRIBE and answers UNSUBACK even when nothing matched [MQTT-3.10.4-2] [MQTT-3.10.4-5]', async () => {
    const { raw } = await RawClient.connect(gw.port, v, { clientId: `unsub-${v}` });
    d.add(raw);
    raw.send({
      cmd: 'subscribe',
      messageId: 1,
      subscriptions: [
        { topic: `unsub${v}/a`, qos: 1 },
        { topic: `unsub${v}/+`, qos: 0 },
        { topic: `unsub${v}/end`, qos: 1 },
      ],
    });
    await raw.next('suback');
    // `unsub/a` removed; `unsub/b` never subscribed; `unsub/+` is not removed by unsubscribing `unsub/x` [MQTT-3.10.4-1].
    raw.send({ cmd: 'unsubscribe', messageId: 2, unsubscriptions: [`unsub${v}/a`, `unsub${v}/b`, `unsub${v}/x`] });
    const unsuback = (await raw.next('unsuback')) as IUnsubackPacket;
    expect(unsuback.messageId).toBe(2);
    if (v === 5) expect(unsuback.granted).toEqual([0x00, 0x11, 0x11]);
    const pub = d.add(await openClient(gw.url, { protocolVersion: v, clientId: `unsub-pub-${v}` }));
    await pub.publish(`unsub${v}/a`, 'via plus only', { qos: 1 });
    await pub.publish(`unsub${v}/end`, 'end', { qos: 1 });
    const first = (await raw.next('publish')) as IPublishPacket;
    // `unsub/a` now arrives only through `unsub/+`, at its QoS 0.
    expect([first.topic, first.payload.toString(), first.qos]).toEqual([`unsub${v}/a`, 'via plus only', 0]);
    const end = (await raw.next('publish')) as IPublishPacket;
    expect(end.topic).toBe(`unsub${v}/end`);
    expect(raw.all('publish')).toHaveLength(2);
  });
});

describe('MQTT 5 subscription options', () => {
  it('carries every matching subscription identifier in the one copy it sends [MQTT-3.3.4-3] [MQTT-3.3.4-4]', async () => {
    const sub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'subid' }));
    await sub.subscribe('subid/+', { qos: 0, properties: { subscriptionIdentifier: 11 } });
    await sub.subscribe('subid/#', { qos: 1, properties: { subscriptionIdentifier: 268435455 } });
    await sub.subscribe('subid/a', { qos: 1 }); // no identifier
    await sub.subscribe('subid/only/#', { qos: 1, properties: { subscriptionIdentifier: 5 } });
    const pub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'subid-pub' }));
    await pub.publish('subid/a', 'a', { qos: 1 });
    await pub.publish('subid/b', 'b', { qos: 1 });
    await pub.publish('subid/only/x/y', 'only', { qos: 1 });
    await sub.waitForMessages(3);
    await barrier(pub, sub, 'subid/end');
    const byPayload = new Map(sub.received().map((m) => [m.payload, m]));
    expect(sub.received()).toHaveLength(4);
    const ids = (p: string): number[] => {
      const raw = byPayload.get(p)?.properties?.subscriptionIdentifier;
      return (raw === undefined ? [] : Array.isArray(raw) ? raw : [raw]).sort((x, y) => x - y);
    };
    expect(ids('a')).toEqual([11, 268435455]);
    expect(byPayload.get('a')!.qos).toBe(1);
    expect(ids('b')).toEqual([11, 268435455]);
    expect(ids('only')).toEqual([5, 268435455]);
  });

  it('sends no subscription identifier for a subscription made without one', async () => {
    const sub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'no-subid' }));
    await sub.subscribe('nosubid/t', { qos: 1 });
    const pub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'no-subid-pub' }));
    await pub.publish('nosubid/t', 'x', { qos: 1 });
    const [m] = await sub.waitForMessages(1);
    expect(m.properties?.subscriptionIdentifier).toBeUndefined();
  });

  it('replaces the subscription identifier together with the subscription', async () => {
    const sub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'subid-replace' }));
    await sub.subscribe('subidrep/t', { qos: 1, properties: { subscriptionIdentifier: 1 } });
    await sub.subscribe('subidrep/t', { qos: 1, properties: { subscriptionIdentifier: 2 } });
    const pub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'subid-replace-pub' }));
    await pub.publish('subidrep/t', 'x', { qos: 1 });
    const [m] = await sub.waitForMessages(1);
    expect(m.properties?.subscriptionIdentifier).toBe(2);
  });

  it('does not send a client its own messages on a no-local subscription, but others do arrive [MQTT-3.8.3-3]', async () => {
    const self = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'nolocal-self' }));
    await self.subscribe('nolocal/t', { qos: 1, nl: true });
    await self.subscribe('nolocal/echo', { qos: 1 }); // without no-local for contrast
    const other = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'nolocal-other' }));
    await self.publish('nolocal/t', 'mine', { qos: 1 });
    await self.publish('nolocal/echo', 'mine echo', { qos: 1 });
    await other.publish('nolocal/t', 'theirs', { qos: 1 });
    await self.waitForMessages(2);
    await barrier(other, self, 'nolocal/echo');
    expect(self.payloads('nolocal/t')).toEqual(['theirs']);
    expect(self.payloads('nolocal/echo')).toEqual(['mine echo', 'barrier']);
  });
});

describe('a SUBSCRIBE of many filters', () => {
  it('is worked on a slice per turn: another client is served meanwhile, the first filters live before the SUBACK, later packets of the client after it [MQTT-3.8.4-3] [MQTT-3.8.4-5]', async () => {
    const many = d.add(await startGateway({ broker: { sysIntervalS: 0, maxSubscriptionsPerClient: 20_000 } }));
    const big = d.add(await Raw.connect(many.port, { clientId: 'big' }));
    const other = d.add(await Raw.connect(many.port, { clientId: 'other' }));
    const filters = [
      { topic: 'first/live', qos: 0 as const },
      ...Array.from({ length: 19_999 }, (_, i) => ({ topic: `f/${i}/+`, qos: 0 as const })),
    ];
    // The SUBSCRIBE and a PINGREQ in one write: the PINGREQ waits for the whole SUBSCRIBE (packet order).
    big.write(
      Buffer.concat([encode({ cmd: 'subscribe', messageId: 9, subscriptions: filters }, 4), Buffer.from([0xc0, 0x00])]),
    );
    // Another client publishes to the first filter, round trip after round trip, until the SUBACK is there. Worked on
    // in one piece, the SUBSCRIBE would make its filters and send its SUBACK in one turn: no such message before it.
    for (let n = 0; big.packets('suback').length === 0; n++) {
      other.publish('first/live', String(n));
      await other.ping();
    }
    await big.expect('pingresp');
    const order = big.received.map((p) => (p.cmd === 'publish' ? p.topic : p.cmd));
    const subackAt = order.indexOf('suback');
    // A subscription may deliver before its SUBACK (MQTT 3.1.1 and 5 §3.8.4); here it did, as other turns ran between.
    expect(order.indexOf('first/live')).toBeGreaterThanOrEqual(0);
    expect(order.indexOf('first/live')).toBeLessThan(subackAt);
    expect(order.indexOf('pingresp')).toBeGreaterThan(subackAt);
    expect(big.packets('suback')[0].granted).toEqual(filters.map(() => 0));
  });
});
