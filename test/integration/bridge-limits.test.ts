/**
 * A bounded outbox. With drop-oldest the oldest messages are dropped (exactly as many as
 * exceed the limit) and the newest arrive; with reject-new, local MQTT 5 publishers get 0x97 Quota exceeded for
 * messages beyond the limit, and the accepted ones arrive. One warning per episode, not per message.
 */
import { describe, expect, it } from 'vitest';
import { checkSequence, collect, connectClient, sequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { bridgeGauge, bridgePatch, startGateway } from '../helpers/gateway.js';
import { freePort } from '../helpers/ports.js';
import { RawClient, type Packet } from '../helpers/raw-client.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { afterMarker, waitFor } from '../helpers/wait.js';

const d = useDisposer();

function warnings(output: string, text: string): number {
  return output.split('\n').filter((line) => line.includes(text)).length;
}

/** Until the bridge logged that its link is down: publishes from then on go to the outbox. */
const linkDown = (output: () => string) =>
  waitFor(() => /uplink (lost|offline)/.test(output()), 10_000, { message: 'the bridge to see its link down' });

describe('bridge: queue limits', { timeout: 120_000 }, () => {
  it('drops exactly the oldest messages beyond queue.maxMessages (drop-oldest), warns once, and recovers', async () => {
    const central = d.add(await startMosquitto());
    const proxy = d.add(await startFaultProxy(central.port));
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const gw = d.add(
      await startGateway(bridgePatch(proxy.url, { queue: { maxMessages: 100, overflow: 'drop-oldest' } })),
    );
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    proxy.refuse();
    proxy.reset();
    await linkDown(() => gw.output());
    for (let i = 0; i < 300; i++) await local.publishAsync('plant/limit', `d${i}`, { qos: 1 });
    proxy.restore();
    await waitFor(() => up.messages.length >= 100, 15_000);
    // After the episode the bridge works normally again, and its message goes up after the whole backlog: once
    // it is in, nothing more of the backlog can come.
    await afterMarker(
      () => local.publishAsync('plant/limit', 'after', { qos: 1 }),
      () => up.payloads().includes('after'),
    );
    // Exactly the newest 100 survive: 200 dropped, counted.
    expect(checkSequence(up.payloads(), [...sequence(100, 'd', 200), 'after'])).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
    expect(warnings(gw.output(), 'dropping oldest')).toBe(1);
  });

  it('answers 0x97 Quota exceeded beyond queue.maxMessages (reject-new) and delivers the accepted ones', async () => {
    const central = d.add(await startMosquitto());
    const proxy = d.add(await startFaultProxy(central.port));
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway({
        ...bridgePatch(proxy.url, { queue: { maxMessages: 100, overflow: 'reject-new' } }),
        metrics: { host: '127.0.0.1', port: metricsPort },
      }),
    );
    const local = await connectClient(gw.url, { protocolVersion: 5 });
    d.defer(() => local.endAsync(true));
    proxy.refuse();
    proxy.reset();
    await linkDown(() => gw.output());
    const accepted: string[] = [];
    const refused: number[] = [];
    for (let i = 0; i < 150; i++) {
      try {
        await local.publishAsync('plant/limit', `r${i}`, { qos: 1 });
        accepted.push(`r${i}`);
      } catch (err) {
        refused.push((err as { code?: number }).code ?? -1);
      }
    }
    expect(accepted).toEqual(sequence(100, 'r'));
    expect(refused).toEqual(new Array(50).fill(0x97));
    expect(warnings(gw.output(), 'refusing new')).toBe(1);
    proxy.restore();
    await waitFor(() => up.messages.length >= 100, 15_000);
    // Once the outbox is empty, a later message has room, and goes up after anything sent before it: once it is
    // in, nothing more of the backlog can come.
    await waitFor(async () => (await bridgeGauge(metricsPort, 'edgeferry_bridge_backlog_messages')) === 0, 10_000);
    await afterMarker(
      () => local.publishAsync('plant/limit', 'after', { qos: 1 }),
      () => up.payloads().includes('after'),
    );
    expect(checkSequence(up.payloads(), [...accepted, 'after'])).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
  });

  it('acknowledges pipelined publishes in their order, journaled or not, refused or not [MQTT-4.6.0-2]', async () => {
    // Link down, 10 messages of room: publishes alternate between a bridged topic (PUBACK after the commit; from
    // the 11th on refused) and an unbridged one (no store write, so it could be acknowledged at once).
    const nobody = `mqtt://127.0.0.1:${await freePort()}`; // the uplink stays down
    const gw = d.add(await startGateway(bridgePatch(nobody, { queue: { maxMessages: 10, overflow: 'reject-new' } })));
    const pipeline = (raw: RawClient, bridged: (id: number) => boolean): void => {
      for (let id = 1; id <= 40; id++)
        raw.publish(bridged(id) ? 'plant/order' : 'other/order', `m${id}`, { qos: 1, messageId: id });
    };
    const pubacks = (raw: RawClient): [number, number][] =>
      raw.packets('puback').map((p: Packet & { cmd: 'puback' }) => [p.messageId!, p.reasonCode ?? 0]);

    // MQTT 5: every publish gets its PUBACK in order; bridged ones 11 to 20 (ids 21, 23, ..., 39) with 0x97.
    const v5 = d.add(await RawClient.connect(gw.port, { clientId: 'order-v5' }, { protocolVersion: 5 }));
    pipeline(v5, (id) => id % 2 === 1);
    await v5.until(() => (v5.packets('puback').length >= 40 ? true : undefined), 10_000, '40 PUBACKs');
    expect(pubacks(v5)).toEqual(
      Array.from({ length: 40 }, (_, i) => [i + 1, i + 1 >= 21 && (i + 1) % 2 === 1 ? 0x97 : 0]),
    );

    // MQTT 3.1.1 cannot refuse: the connection closes at the first refused publish, after acknowledging exactly
    // the publishes before it, in order. The outbox is full now, so that is the first bridged one.
    const v3 = d.add(await RawClient.connect(gw.port, { clientId: 'order-v3' }, { protocolVersion: 4 }));
    pipeline(v3, (id) => id % 2 === 0);
    await v3.waitForClose(10_000);
    expect(pubacks(v3)).toEqual([[1, 0]]);
  });

  it('stores a message that a full reject-new outbox refuses nowhere else: no local subscriber, live or persistent, gets it', async () => {
    const nobody = `mqtt://127.0.0.1:${await freePort()}`; // the uplink stays down
    const gw = d.add(await startGateway(bridgePatch(nobody, { queue: { maxMessages: 5, overflow: 'reject-new' } })));
    const persistent = {
      clientId: 'historian',
      clean: false,
      protocolVersion: 5 as const,
      properties: { sessionExpiryInterval: 3600 },
    };
    const historian = await openClient(gw.url, persistent);
    await historian.subscribe('plant/#', { qos: 1 });
    await historian.disconnect();
    const hmi = d.add(await openClient(gw.url, { clientId: 'hmi', protocolVersion: 5 }));
    await hmi.subscribe('plant/#', { qos: 1 });

    // Pipelined: all 8 are routed before the first batch commits, so the outbox counts what it has not applied yet.
    const pub = d.add(await RawClient.connect(gw.port, { clientId: 'filler' }, { protocolVersion: 5 }));
    for (let id = 1; id <= 8; id++) pub.publish('plant/line', `m${id}`, { qos: 1, messageId: id });
    await pub.until(() => (pub.packets('puback').length >= 8 ? true : undefined), 10_000, '8 PUBACKs');
    expect(pub.packets('puback').map((p: Packet & { cmd: 'puback' }) => p.reasonCode ?? 0)).toEqual([
      0, 0, 0, 0, 0, 0x97, 0x97, 0x97,
    ]);

    // Deliveries happen before the PUBACK goes out: a round trip of the subscriber's own brings in all there is.
    await hmi.publish('probe/y', 'y', { qos: 1 });
    expect(hmi.payloads()).toEqual(['m1', 'm2', 'm3', 'm4', 'm5']);
    const back = d.add(await openClient(gw.url, persistent));
    await back.waitForMessages(5);
    await back.publish('probe/z', 'z', { qos: 1 });
    expect(back.payloads()).toEqual(['m1', 'm2', 'm3', 'm4', 'm5']);
  });
});
