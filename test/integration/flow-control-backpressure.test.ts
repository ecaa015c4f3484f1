/**
 * Back-pressure through the gateway process (docs/architecture.md#back-pressure): an online subscriber whose
 * QoS 1 queue reaches `broker.queueHighWater` makes the gateway stop reading the publishers that feed it (3.1.1 and
 * MQTT 5 alike) until it is down to half; one stuck there for `slowClientTimeoutMs` holds them no more and drops
 * what passes the mark instead (counted as slow_client); everyone else goes on meanwhile.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { freePort } from '../helpers/ports.js';
import { encode, RawClient, type ProtocolVersion } from '../helpers/raw-client.js';
import { waitFor } from '../helpers/wait.js';

const HIGH_WATER = 200;
const MAX_INFLIGHT = 5;

const d = useDisposer();

/** The gateway process's resident memory, from the kernel. */
function rssBytes(gw: Gateway): number {
  const status = readFileSync(`/proc/${gw.proc.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

async function droppedSlowClient(metricsPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const match = /^edgeferry_broker_messages_dropped_total\{reason="slow_client"\} (\d+)/m.exec(text);
  return match ? Number(match[1]) : 0;
}

/** Unlimited queues (maxQueuedMessages 0): only back-pressure bounds what the gateway holds for a slow subscriber. */
async function gateway(slowClientTimeoutMs: number): Promise<{ gw: Gateway; metricsPort: number }> {
  const metricsPort = await freePort();
  const gw = d.add(
    await startGateway({
      metrics: { host: '127.0.0.1', port: metricsPort },
      broker: {
        maxQueuedMessages: 0,
        queueHighWater: HIGH_WATER,
        maxInflight: MAX_INFLIGHT,
        slowClientTimeoutMs,
        sysIntervalS: 0,
      },
    }),
  );
  return { gw, metricsPort };
}

/**
 * A QoS 1 subscriber on `topic` that acknowledges nothing until `acking` is set, then everything it got and gets.
 * Keep alive 0: a subscriber that does not acknowledge is not idle for the gateway's timers either.
 */
async function slowSubscriber(gw: Gateway, clientId: string, topic: string): Promise<{ c: RawClient; ack(): void }> {
  const c = d.add(await RawClient.connect(gw.port, { clientId, keepalive: 0 }, { protocolVersion: 4 }));
  await c.subscribe([{ topic, qos: 1 }]);
  let acking = false;
  let acked = 0;
  const ackNew = (): void => {
    const publishes = c.publishes;
    for (; acked < publishes.length; acked++) c.send({ cmd: 'puback', messageId: publishes[acked].messageId });
  };
  // Registered after the client's own parser: each chunk is parsed before this sees it.
  c.socket.on('data', () => {
    if (acking) ackNew();
  });
  return {
    c,
    ack: () => {
      acking = true;
      ackNew();
    },
  };
}

/** `count` QoS 1 PUBLISHes of `size` bytes (first 4: the index) as one write: all offered at once. */
function burst(topic: string, count: number, size: number, version: ProtocolVersion): Buffer {
  const packets: Buffer[] = [];
  for (let i = 0; i < count; i++) {
    const payload = Buffer.alloc(size, i % 251);
    payload.writeUInt32BE(i, 0);
    packets.push(
      encode(
        { cmd: 'publish', topic, payload, qos: 1, messageId: (i % 65535) + 1, dup: false, retain: false },
        version,
      ),
    );
  }
  return Buffer.concat(packets);
}

/** Waits until `value()` has not changed for `quietMs` (checked every 50 ms), bounded by `timeoutMs`; returns it. */
async function settled(value: () => number, quietMs: number, timeoutMs: number, what: string): Promise<number> {
  let last = value();
  let since = performance.now();
  await waitFor(
    () => {
      const now = value();
      if (now !== last) {
        last = now;
        since = performance.now();
      }
      return performance.now() - since >= quietMs;
    },
    timeoutMs,
    { intervalMs: 50, message: () => `${what} still moving: ${last}` },
  );
  return last;
}

describe('back-pressure from a slow QoS 1 subscriber', { timeout: 90_000 }, () => {
  it("stops reading a 3.1.1 publisher while the subscriber's queue is at queueHighWater (its PUBACKs stop, RSS stays flat with unlimited queues), then resumes and delivers everything in order", async () => {
    const { gw } = await gateway(60_000);
    const sub = await slowSubscriber(gw, 'bp-slow', 'bp/a');
    const pub = d.add(await RawClient.connect(gw.port, { clientId: 'bp-pub', keepalive: 0 }, { protocolVersion: 4 }));
    // 10,000 × 4 KiB = 40 MiB offered at once: queued in the gateway, that is 40 MiB of payloads and more.
    const count = 10_000;
    const size = 4096;
    const data = burst('bp/a', count, size, 4);
    const rssBefore = rssBytes(gw);
    pub.write(data);

    // The subscriber got its inflight window and stopped; the publisher's acknowledgements stop near the mark.
    await sub.c.until(
      () => sub.c.publishes.length >= MAX_INFLIGHT || undefined,
      10_000,
      `${MAX_INFLIGHT} PUBLISH at the subscriber`,
    );
    const held = await settled(() => pub.packets('puback').length, 1000, 20_000, 'PUBACKs to the held publisher');
    const rssHeld = rssBytes(gw);
    expect(held).toBeGreaterThanOrEqual(HIGH_WATER);
    // The mark, plus at most what the gateway had already read from the socket when it paused.
    expect(held).toBeLessThan(count / 4);
    expect(sub.c.publishes.length).toBe(MAX_INFLIGHT);
    expect(pub.closed).toBe(false);
    // What was not read waits in the sockets, not in the gateway.
    expect(rssHeld - rssBefore).toBeLessThan(24 * 1024 * 1024);

    // The subscriber acknowledges: the publisher is read again, and every message arrives, once, in order.
    sub.ack();
    await pub.until(() => pub.packets('puback').length >= count || undefined, 60_000, `${count} PUBACK`, true);
    await sub.c.until(
      () => sub.c.publishes.length >= count || undefined,
      60_000,
      `${count} PUBLISH at the subscriber`,
      true,
    );
    const indexes = sub.c.publishes.map((p) => (p.payload as Buffer).readUInt32BE(0));
    expect(indexes).toEqual(Array.from({ length: count }, (_, i) => i));
  });

  it('lets an MQTT 5 publisher go on once the subscriber has been stuck at the mark for slowClientTimeoutMs: its queue overflows instead (counted as slow_client), logged once', async () => {
    const timeoutMs = 2000;
    const { gw, metricsPort } = await gateway(timeoutMs);
    const sub = await slowSubscriber(gw, 'bp-stuck', 'bp/b');
    const pub = d.add(await RawClient.connect(gw.port, { clientId: 'bp-pub5', keepalive: 0 }, { protocolVersion: 5 }));
    // Within the gateway's Receive Maximum (1,024 by default): the hold, not a quota, is what stops this publisher.
    const count = 1000;
    const startedAt = performance.now();
    pub.write(burst('bp/b', count, 64, 5));
    await pub.until(
      () => pub.packets('puback').length >= HIGH_WATER || undefined,
      10_000,
      `${HIGH_WATER} PUBACK`,
      true,
    );
    const held = pub.packets('puback').length;
    expect(held).toBeLessThan(count);

    // The subscriber never acknowledges; after the timeout the publisher is read again and gets every PUBACK.
    await pub.until(() => pub.packets('puback').length >= count || undefined, 15_000, `${count} PUBACK`, true);
    expect(performance.now() - startedAt).toBeGreaterThan(timeoutMs);
    expect(pub.packets('puback').every((p) => (p.reasonCode ?? 0) === 0)).toBe(true);
    // Only what passed the mark was dropped, and counted: the queue kept what it held.
    const dropped = await droppedSlowClient(metricsPort);
    expect(dropped).toBeGreaterThan(0);
    expect(dropped).toBeLessThanOrEqual(count - HIGH_WATER);
    const warnings = gw
      .output()
      .split('\n')
      .filter((line) => line.includes('holds them no more'));
    expect(warnings).toHaveLength(1);
    expect(JSON.parse(warnings[0])).toMatchObject({ clientId: 'bp-stuck' });

    // Acknowledging at last, the subscriber gets what its queue kept, in order, and nothing was lost twice over.
    sub.ack();
    await waitFor(() => sub.c.publishes.length + dropped >= count, 10_000, {
      message: () => `${sub.c.publishes.length} delivered + ${dropped} dropped of ${count}`,
    });
    expect(sub.c.publishes.length + dropped).toBe(count);
    const indexes = sub.c.publishes.map((p) => (p.payload as Buffer).readUInt32BE(0));
    expect(indexes).toEqual([...indexes].sort((a, b) => a - b));
    expect(indexes.slice(0, HIGH_WATER)).toEqual(Array.from({ length: HIGH_WATER }, (_, i) => i));
  });

  it('keeps other clients responsive while a publisher is held: another publisher and subscriber exchange QoS 1 messages, a new client connects and pings', async () => {
    const { gw } = await gateway(60_000);
    const sub = await slowSubscriber(gw, 'bp-slow-c', 'bp/c');
    const held = d.add(await RawClient.connect(gw.port, { clientId: 'bp-held', keepalive: 0 }, { protocolVersion: 4 }));
    const count = 5000;
    held.write(burst('bp/c', count, 64, 4));
    await settled(() => held.packets('puback').length, 500, 20_000, 'PUBACKs to the held publisher');
    expect(held.packets('puback').length).toBeLessThan(count);

    // Other traffic, on another topic, is not held: each QoS 1 publish is acknowledged and delivered.
    const other = await connectClient(gw.url, { clientId: 'bp-other-sub' });
    d.defer(() => other.endAsync(true));
    const got: string[] = [];
    other.on('message', (_t, payload) => got.push(payload.toString()));
    await other.subscribeAsync('bp/other', { qos: 1 });
    const freePub = await connectClient(gw.url, { clientId: 'bp-free-pub', protocolVersion: 5 });
    d.defer(() => freePub.endAsync(true));
    for (let i = 0; i < 50; i++) await freePub.publishAsync('bp/other', `m${i}`, { qos: 1 });
    await waitFor(() => got.length >= 50, 5000, { message: () => `${got.length} of 50 at the other subscriber` });
    expect(got).toEqual(Array.from({ length: 50 }, (_, i) => `m${i}`));
    const late = d.add(await RawClient.connect(gw.port, { clientId: 'bp-late' }, { protocolVersion: 4 }));
    await late.ping();

    // The held publisher was held all along, and goes on once the subscriber acknowledges.
    expect(held.packets('puback').length).toBeLessThan(count);
    sub.ack();
    await held.until(() => held.packets('puback').length >= count || undefined, 30_000, `${count} PUBACK`, true);
    await sub.c.until(
      () => sub.c.publishes.length >= count || undefined,
      30_000,
      `${count} PUBLISH at the subscriber`,
      true,
    );
  });
});

describe('the read budget per turn (delivery first)', { timeout: 30_000 }, () => {
  it('handles every packet a client sent before closing its socket, beyond what one turn takes: 2,000 QoS 0 PUBLISHes and a DISCONNECT that cancels the will [MQTT-3.1.2-10]', async () => {
    const { gw } = await gateway(60_000);
    const sub = d.add(await RawClient.connect(gw.port, { clientId: 'budget-sub' }, { protocolVersion: 4 }));
    await sub.subscribe([{ topic: 'budget/#', qos: 0 }]);
    const pub = d.add(
      await RawClient.connect(
        gw.port,
        { clientId: 'budget-pub', will: { topic: 'budget/will', payload: Buffer.from('gone'), qos: 0, retain: false } },
        { protocolVersion: 4 },
      ),
    );
    const count = 2000;
    const packets: Buffer[] = [];
    for (let i = 0; i < count; i++)
      packets.push(
        encode(
          { cmd: 'publish', topic: 'budget/data', payload: Buffer.from(`m${i}`), qos: 0, dup: false, retain: false },
          4,
        ),
      );
    packets.push(encode({ cmd: 'disconnect' }, 4));
    // One write, then the socket closes at once: the gateway sees the close while most of it is still unframed.
    pub.socket.end(Buffer.concat(packets));
    await sub.until(
      () => sub.publishes.length >= count || undefined,
      15_000,
      `${count} PUBLISH at the subscriber`,
      true,
    );
    expect(sub.publishes.map((p) => p.payload.toString())).toEqual(Array.from({ length: count }, (_, i) => `m${i}`));
    // The DISCONNECT at the end was read too: no will [MQTT-3.1.2-10].
    await sub.ping();
    expect(sub.publishes.filter((p) => p.topic === 'budget/will')).toEqual([]);
  });
});
