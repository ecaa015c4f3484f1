/**
 * Retained messages at scale: the retained messages of a new subscription are delivered paced, so others go on
 * meanwhile; payloads live in the store, not in memory, across a restart; broker.maxRetainedMessages and
 * maxRetainedBytes bound them (docs/security.md#clients-that-misbehave, "Retained messages"; docs/architecture.md#retained-messages).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { useDisposer } from '../helpers/disposer.js';
import { freePort } from '../helpers/ports.js';
import { openClient } from '../helpers/mqtt-client.js';
import { encode, RawClient } from '../helpers/raw-client.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

/** Stores `count` retained messages `r/<i>/x` (payload `<i>`) through one socket write; resolves once all are in. */
async function preload(gw: Gateway, count: number, qos: 0 | 1 = 0): Promise<void> {
  const loader = await RawClient.connect(gw.port, { clientId: 'loader' });
  const packets = Array.from({ length: count }, (_, i) =>
    encode(
      {
        cmd: 'publish',
        topic: `r/${i}/x`,
        payload: Buffer.from(String(i)),
        qos,
        messageId: qos === 0 ? undefined : i + 1,
        retain: true,
        dup: false,
      },
      4,
    ),
  );
  loader.write(Buffer.concat(packets));
  // Packets of one connection are handled in order: the PINGRESP comes after the last PUBLISH was.
  await loader.ping(60_000);
  loader.destroy();
}

/** Anonymous memory of a process (its heap and buffers, not the store's memory map), in bytes. */
function rssAnon(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith('RssAnon:'));
  return Number(/(\d+)/.exec(line!)![1]) * 1024;
}

describe('retained messages at scale', { timeout: 120_000 }, () => {
  it('delivers the retained messages of a # subscription paced: a live message published after the SUBACK arrives before the last of 50,000 [MQTT-3.3.1-6] [MQTT-3.8.4-3]', async () => {
    const count = 50_000;
    const gw = d.add(await startGateway({ broker: { sysIntervalS: 0 } }));
    await preload(gw, count);
    const all = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'all' }));
    const other = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'other' }));
    await all.subscribe('#', { qos: 0 });
    // Another client's round trip (PUBACK) completes while the delivery goes on, and its message is routed at once.
    await other.publish('live/now', 'live', { qos: 1 });
    const received = await all.waitForMessages(count + 1, { timeoutMs: 60_000 });
    const liveAt = received.findIndex((m) => m.topic === 'live/now');
    expect(liveAt).toBeGreaterThanOrEqual(0);
    expect(liveAt).toBeLessThan(count);
    // Every retained message once, with the retain flag [MQTT-3.3.1-8], none lost to the pacing.
    const retained = received.filter((m) => m.topic !== 'live/now');
    expect(retained.every((m) => m.retain)).toBe(true);
    expect(new Set(retained.map((m) => m.topic)).size).toBe(count);
    expect(retained.find((m) => m.topic === 'r/12345/x')?.payload).toBe('12345');
  });

  it('restarts the retained messages of a subscription made again alike, and stops the earlier delivery [MQTT-3.3.1-9]', async () => {
    const count = 20_000;
    const gw = d.add(await startGateway({ broker: { sysIntervalS: 0 } }));
    await preload(gw, count);
    const all = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'again' }));
    // Where each SUBACK came among the PUBLISHes on the wire (MQTT.js may emit later messages before it resolves).
    const subacks: number[] = [];
    all.client.on('packetreceive', (packet) => void (packet.cmd === 'suback' && subacks.push(all.wire.length)));
    await all.subscribe('#', { qos: 0 });
    await all.subscribe('#', { qos: 0 });
    // What came before the second SUBACK is from the first delivery; after it, all of them once, from the second.
    const before = subacks[1];
    expect(before).toBeLessThan(count);
    await waitFor(() => all.wire.length >= before + count, 60_000, {
      message: () => `${all.wire.length - before}/${count} after the second SUBACK`,
    });
    expect(new Set(all.wire.slice(before, before + count).map((p) => p.topic)).size).toBe(count);
  });

  it('sends a QoS 1 subscription as many retained messages as match, paced by its inflight window, none dropped for its queue limit [MQTT-3.3.1-6]', async () => {
    const count = 5000; // five times broker.maxQueuedMessages (1,000)
    const gw = d.add(await startGateway({ broker: { sysIntervalS: 0 } }));
    await preload(gw, count, 1);
    const sub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'qos1-all' }));
    await sub.subscribe('r/#', { qos: 1 });
    const received = await sub.waitForMessages(count, { timeoutMs: 30_000 });
    expect(new Set(received.map((m) => m.topic)).size).toBe(count);
    expect(received.every((m) => m.retain && m.qos === 1)).toBe(true);
  });

  it('keeps retained payloads in the store, not in memory: a restart loads only their index', async () => {
    const messages = 120;
    const payloadBytes = 1_000_000;
    const gw = d.add(await startGateway({ broker: { sysIntervalS: 0 } }));
    const before = rssAnon(gw.proc.pid!);
    const pub = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'big-pub' }));
    for (let i = 0; i < messages; i++) {
      await pub.publish(`big/${i}`, Buffer.alloc(payloadBytes, i % 256), { qos: 1, retain: true });
    }
    await pub.disconnect();
    await gw.restart();
    const after = rssAnon(gw.proc.pid!);
    // 120 MB of payloads; the index is far less.
    expect(after - before).toBeLessThan(32 * 1024 * 1024);
    const sub = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'big-sub' }));
    await sub.subscribe('big/77', { qos: 1 });
    const [m] = await sub.waitForMessages(1);
    expect(m.retain).toBe(true);
    expect(m.payload).toBe(Buffer.alloc(payloadBytes, 77).toString());
  });

  it('refuses retained messages beyond broker.maxRetainedMessages/maxRetainedBytes: MQTT 5 QoS 1 with 0x97, others delivered but not retained, counted', async () => {
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway({
        broker: { sysIntervalS: 0, maxRetainedMessages: 3, maxRetainedBytes: 1000 },
        metrics: { host: '127.0.0.1', port: metricsPort },
      }),
    );
    const watcher = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'watcher' }));
    await watcher.subscribe('r/#', { qos: 1 });
    const v5 = d.add(await RawClient.connect(gw.port, { clientId: 'v5-pub' }, { protocolVersion: 5 }));
    let id = 0;
    const publish = async (topic: string, payload: string | Buffer, qos: 1 | 2 = 1): Promise<number> => {
      const messageId = ++id;
      v5.publish(topic, payload, { qos, retain: true, messageId });
      const ack = await v5.expect((p) => (p.cmd === 'puback' || p.cmd === 'pubrec') && p.messageId === messageId);
      if (ack.cmd === 'pubrec' && (ack.reasonCode ?? 0) < 0x80) {
        v5.send({ cmd: 'pubrel', messageId });
        await v5.expect((p) => p.cmd === 'pubcomp' && p.messageId === messageId);
      }
      return (ack as { reasonCode?: number }).reasonCode ?? 0;
    };
    expect(await publish('r/1', 'one')).toBe(0);
    expect(await publish('r/2', 'two')).toBe(0);
    expect(await publish('r/3', 'three')).toBe(0);
    // A fourth topic: refused (0x97 Quota exceeded), and delivered to no one.
    expect(await publish('r/4', 'four')).toBe(0x97);
    expect(await publish('r/4', 'four', 2)).toBe(0x97);
    // Replacing a topic counts the difference in bytes, not a new message; past maxRetainedBytes it is refused.
    expect(await publish('r/1', 'uno')).toBe(0);
    expect(await publish('r/1', Buffer.alloc(995))).toBe(0x97);
    // An empty payload deletes, never refused; then there is room.
    expect(await publish('r/2', '')).toBe(0);
    expect(await publish('r/4', 'four')).toBe(0);

    // MQTT 3.1.1 cannot be told: delivered to the subscribers of now, not retained.
    const v4 = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'v4-pub' }));
    await v4.publish('r/5', 'five', { qos: 1, retain: true });
    await watcher.waitForMessages(1, { topic: 'r/5' });
    expect(watcher.payloads('r/4')).toEqual(['four']);
    expect(watcher.payloads('r/1').map((p) => p.length)).toEqual([3, 3]);

    const late = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'late' }));
    await late.subscribe('r/#', { qos: 1 });
    await v4.publish('r/marker', 'end', { qos: 1 });
    await late.waitForMessages(1, { topic: 'r/marker' });
    expect(
      late
        .received()
        .filter((m) => m.retain)
        .map((m) => `${m.topic}=${m.payload}`)
        .sort(),
    ).toEqual(['r/1=uno', 'r/3=three', 'r/4=four']);

    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^edgeferry_broker_retained_refused_total 4$/m);
    expect(metrics).toMatch(/^edgeferry_broker_retained_messages 3$/m);
    expect(metrics).toMatch(/^edgeferry_broker_retained_bytes 12$/m);
    // One warning per episode: the second after the deletion of r/2 took them below 90 % of the limits.
    expect(gw.output().match(/maxRetainedMessages or maxRetainedBytes/g)?.length).toBe(2);
  });
});
