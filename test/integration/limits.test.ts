/**
 * Configured limits ("Limits"; config `broker:`), each exercised just past its value against the gateway
 * process: maxConnections [docs/reliability.md rule 35], maxPacketBytes (0x95) [docs/reliability.md rule 5], maxTopicLevels,
 * maxQueuedMessages and maxQueuedBytes (drops counted in `$SYS/broker/publish/messages/dropped`).
 */
import { connect as netConnect, type Socket } from 'node:net';
import type { MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway, useGateway, type Gateway } from '../helpers/gateway.js';
import { RawClient, type ConnectOptions, type ProtocolVersion } from '../helpers/raw-client.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

async function mqttClient(gw: Gateway, options: Parameters<typeof connectClient>[1] = {}): Promise<MqttClient> {
  const c = await connectClient(gw.url, options);
  d.defer(() => c.endAsync(true));
  return c;
}

async function raw(gw: Gateway, version: ProtocolVersion, connect: ConnectOptions = {}): Promise<RawClient> {
  return d.add(await RawClient.connect(gw.port, connect, { protocolVersion: version }));
}

async function expectDisconnect(c: RawClient, reasonCode: number): Promise<void> {
  const disconnect = await c.expectDisconnect(3000);
  expect(disconnect.reasonCode, `received ${c.describe()}`).toBe(reasonCode);
  await c.waitForClose(3000);
}

async function expectSilentClose(c: RawClient): Promise<void> {
  await c.waitForClose(3000);
  expect(c.packets('disconnect')).toEqual([]);
}

describe('broker.maxConnections', () => {
  const MAX = 5;
  const gw = useGateway({ broker: { maxConnections: MAX } });

  const connectPacket = (clientId: string) =>
    ({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: true, keepalive: 30, clientId }) as const;

  /** An MQTT 5 connection, retried while an earlier test's sockets are still being closed by the broker. */
  async function connectWhenFree(clientId: string): Promise<RawClient> {
    return waitFor(() => raw(gw, 5, { clientId }), 5000, { message: `no free slot for ${clientId}` });
  }

  /** A connection attempt beyond the limit: closed at once, not a byte answered (not even a CONNACK). */
  async function expectRefusedAtAccept(clientId: string): Promise<void> {
    const refused = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    refused.send(connectPacket(clientId));
    await refused.waitForClose(1000);
    expect(refused.bytesReceived).toBe(0);
  }

  it(`accepts ${MAX} connections and closes the next one at once, before any MQTT exchange [docs/reliability.md rule 35]`, async () => {
    const held: RawClient[] = [];
    for (let i = 0; i < MAX; i++) held.push(await connectWhenFree(`limit-${i}`));
    await expectRefusedAtAccept('one-too-many');
    // The clients inside the limit are unaffected.
    await held[0].subscribe('limits/conn');
    held[1].publish('limits/conn', 'inside', { qos: 1, messageId: 1 });
    await held[0].until(() => held[0].publishes.length > 0, 5000, 'a delivery inside the limit');
    // A freed slot can be used again.
    held.pop()!.destroy();
    await connectWhenFree('after-free');
  });
});

/**
 * `count` TCP sockets from `localAddress` (any 127.0.0.0/8 address is this host) that never send a byte, opened in
 * batches so the listen backlog does not drop SYNs. Resolves once every one is connected; `closed` tells which the
 * gateway closed since.
 */
async function idleSockets(port: number, count: number, localAddress: string): Promise<Socket[]> {
  const sockets: Socket[] = [];
  d.defer(() => {
    for (const s of sockets) s.destroy();
  });
  for (let first = 0; first < count; first += 200) {
    const batch = Array.from(
      { length: Math.min(200, count - first) },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = netConnect({ port, host: '127.0.0.1', localAddress });
          s.once('connect', () => {
            s.on('error', () => {}); // a refused socket may see a reset
            s.resume(); // read, so the gateway's FIN is seen and `closed` set
            resolve(s);
          });
          s.once('error', reject);
        }),
    );
    sockets.push(...(await Promise.all(batch)));
  }
  return sockets;
}

const openCount = (sockets: readonly Socket[]): number => sockets.filter((s) => !s.closed).length;

describe(
  'listener maxPendingConnections, maxPendingPerAddress: a budget for connections without CONNECT',
  { timeout: 60_000 },
  () => {
    it('3,000 idle sockets from one address leave a real client from another connecting at once', async () => {
      // maxConnections below the flood: before the budget, the idle sockets took every slot for connectTimeoutMs.
      const gw = d.add(await startGateway({ broker: { maxConnections: 2000, connectTimeoutMs: 30_000 } }));
      const flood = await idleSockets(gw.port, 3000, '127.0.0.2');
      // The default per-address budget (100) holds: each socket past it closes that address's oldest.
      await waitFor(() => openCount(flood) === 100, 10_000, {
        message: () => `${openCount(flood)} idle sockets open, expected 100`,
      });
      const started = performance.now();
      const client = d.add(
        await RawClient.connect(gw.port, { clientId: 'after-flood' }, { protocolVersion: 5, openTimeoutMs: 2000 }),
      );
      expect(performance.now() - started).toBeLessThan(2000);
      await client.subscribe('flood/ok');
      client.publish('flood/ok', 'through', { qos: 1, messageId: 1 });
      await client.until(() => client.publishes.length > 0, 5000, 'its own message back');
    });

    it("lets a real client in from an address whose 200 idle sockets fill maxPendingPerAddress: that address's oldest one makes room", async () => {
      const gw = d.add(await startGateway({ broker: { connectTimeoutMs: 30_000 } }));
      // Every local program shares 127.0.0.1: idle sockets from one of them must not keep the others out.
      const idle = await idleSockets(gw.port, 200, '127.0.0.1');
      await waitFor(() => openCount(idle) === 100, 10_000, {
        message: () => `${openCount(idle)} idle sockets open, expected 100`,
      });
      expect(openCount(idle.slice(0, 100))).toBe(0);
      const client = d.add(await RawClient.connect(gw.port, { clientId: 'local-client' }, { protocolVersion: 5 }));
      await waitFor(() => idle[100].closed, 3000, { message: 'the oldest idle socket of 127.0.0.1 was not closed' });
      expect(openCount(idle)).toBe(99);
      await client.subscribe('local/ok');
      client.publish('local/ok', 'in', { qos: 1, messageId: 1 });
      await client.until(() => client.publishes.length > 0, 5000, 'its own message back');
    });

    it('lets a client that sends CONNECT in when idle sockets hold every slot of maxConnections: the oldest idle one makes room', async () => {
      const gw = d.add(await startGateway({ broker: { maxConnections: 5, connectTimeoutMs: 30_000 } }));
      const idle = await idleSockets(gw.port, 5, '127.0.0.2');
      const client = d.add(await RawClient.connect(gw.port, { clientId: 'behind-idle' }, { protocolVersion: 5 }));
      await waitFor(() => idle[0].closed, 3000, { message: 'the oldest idle socket was not closed' });
      expect(openCount(idle)).toBe(4);
      // Every slot holds a CONNECTed client or an idle socket that is now the oldest: the next client still gets in.
      expect(client.closed).toBe(false);
    });

    it('keeps at most maxPendingConnections per listener, closing the oldest, and never touches CONNECTed clients', async () => {
      const port = await freePort();
      const gw = d.add(
        await startGateway({
          listeners: [{ type: 'tcp', host: '127.0.0.1', port, maxPendingConnections: 200, maxPendingPerAddress: 50 }],
          broker: { connectTimeoutMs: 30_000 },
        }),
      );
      const early: Socket[] = [];
      for (let i = 2; i < 8; i++) early.push(...(await idleSockets(gw.port, 50, `127.0.0.${i}`)));
      // 300 from six addresses, 50 each (within the per-address budget): only 200 stay, and the first 100 went.
      await waitFor(() => openCount(early) === 200, 10_000, {
        message: () => `${openCount(early)} idle sockets open, expected 200`,
      });
      expect(openCount(early.slice(0, 100))).toBe(0);

      const client = d.add(await RawClient.connect(gw.port, { clientId: 'logged-in' }, { protocolVersion: 5 }));
      // Once CONNECTed it is out of the budget: another wave of idle sockets does not close it.
      const late: Socket[] = [];
      for (let i = 8; i < 14; i++) late.push(...(await idleSockets(gw.port, 50, `127.0.0.${i}`)));
      await waitFor(() => openCount([...early, ...late]) === 200, 10_000, {
        message: () => `${openCount([...early, ...late])} idle sockets open, expected 200`,
      });
      expect(client.closed).toBe(false);
      await client.subscribe('budget/ok');
      client.publish('budget/ok', 'still here', { qos: 1, messageId: 1 });
      await client.until(() => client.publishes.length > 0, 5000, 'its own message back');
    });
  },
);

describe('broker.maxPacketBytes, maxTopicLevels, maxQueuedMessages, maxQueuedBytes', () => {
  const MAX_PACKET_BYTES = 2048;
  const MAX_TOPIC_LEVELS = 4;
  const MAX_QUEUED_MESSAGES = 3;
  let gw: Gateway;
  let dropped: number[];
  let sys: MqttClient;

  beforeAll(async () => {
    gw = await startGateway({
      // queueHighWater 0: the queue limit on its own (with back-pressure the publisher would be held before it;
      // flow-control-backpressure.test.ts).
      broker: {
        maxPacketBytes: MAX_PACKET_BYTES,
        maxTopicLevels: MAX_TOPIC_LEVELS,
        maxQueuedMessages: MAX_QUEUED_MESSAGES,
        queueHighWater: 0,
        sysIntervalS: 1,
      },
    });
    dropped = [];
    sys = await connectClient(gw.url, { clientId: 'limits-sys' });
    sys.on('message', (topic, payload) => {
      if (topic === '$SYS/broker/publish/messages/dropped') dropped.push(Number(payload.toString()));
    });
    // The exact topic has 5 levels, more than this gateway's maxTopicLevels allows in a filter.
    await sys.subscribeAsync('$SYS/broker/#', { qos: 0 });
  });
  afterAll(async () => {
    /* eslint-disable @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed */
    await sys?.endAsync(true);
    await gw?.dispose();
    /* eslint-enable @typescript-eslint/no-unnecessary-condition */
  });

  /** A v5 QoS 0 PUBLISH on `lim/p` of exactly `total` bytes (remaining length < 16384). */
  function publishOfSize(total: number, version: 4 | 5): Buffer {
    const overhead = 1 + 2 + (2 + 5) + (version === 5 ? 1 : 0); // header, 2-byte length, topic, properties
    const bytes = mqttPacket.generate(
      {
        cmd: 'publish',
        topic: 'lim/p',
        payload: Buffer.alloc(total - overhead, 'q'),
        qos: 0,
        dup: false,
        retain: false,
      },
      { protocolVersion: version },
    );
    expect(bytes.length).toBe(total);
    return bytes;
  }

  async function currentDropped(): Promise<number> {
    await waitFor(() => dropped.length > 0, 5000, { message: 'no $SYS dropped count' });
    return dropped.at(-1) as number;
  }

  it(`announces Maximum Packet Size ${MAX_PACKET_BYTES} and accepts a PUBLISH of exactly that size (MQTT 5 §3.2.2.3.6)`, async () => {
    const sub = await raw(gw, 5);
    await sub.subscribe('lim/#');
    const c = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    const connack = await c.connect();
    expect(connack.properties?.maximumPacketSize).toBe(MAX_PACKET_BYTES);
    c.write(publishOfSize(MAX_PACKET_BYTES, 5));
    await sub.until(() => sub.publishes.length >= 1, 5000, 'the maximum-size message');
    await c.ping();
  });

  it('disconnects an MQTT 5 client that sends one byte more with 0x95 Packet too large, and delivers nothing of it [MQTT-3.2.2-15] [docs/reliability.md rule 5]', async () => {
    const sub = await raw(gw, 5);
    await sub.subscribe('lim/#');
    const c = await raw(gw, 5);
    c.write(publishOfSize(MAX_PACKET_BYTES + 1, 5)); // arrives whole, in one read
    await expectDisconnect(c, 0x95);
    await sub.ping();
    expect(sub.publishes).toEqual([]);
  });

  it('closes an MQTT 3.1.1 connection that sends a packet over the maximum', async () => {
    const c = await raw(gw, 4);
    c.write(publishOfSize(MAX_PACKET_BYTES + 100, 4));
    await expectSilentClose(c);
  });

  it(`accepts topics of ${MAX_TOPIC_LEVELS} levels and refuses ${MAX_TOPIC_LEVELS + 1}: PUBLISH gets DISCONNECT 0x90`, async () => {
    const sub = await raw(gw, 5);
    await sub.subscribe('lvl/#');
    const c = await raw(gw, 5);
    c.publish('lvl/b/c/d', 'ok', { qos: 1, messageId: 1 });
    expect(await c.expect('puback')).toMatchObject({ reasonCode: 0 });
    c.publish('lvl/b/c/d/e', 'deep', { qos: 1, messageId: 2 });
    await expectDisconnect(c, 0x90);
    await sub.ping();
    expect(sub.publishes.map((p) => p.topic)).toEqual(['lvl/b/c/d']);
    const v3 = await raw(gw, 4);
    v3.publish('lvl/b/c/d/e', 'deep', { qos: 0 });
    await expectSilentClose(v3);
  });

  it(`refuses subscriptions deeper than ${MAX_TOPIC_LEVELS} levels per filter: SUBACK 0x8F (MQTT 5) / 0x80 (3.1.1)`, async () => {
    const c5 = await raw(gw, 5);
    const s5 = await c5.subscribe([
      { topic: 'lvl/b/c/d/#', qos: 1 },
      { topic: 'lvl/b/c/#', qos: 1 },
      { topic: '$share/g/lvl/b/c/d/e', qos: 1 },
    ]);
    expect(s5.granted).toEqual([0x8f, 1, 0x8f]);
    const c4 = await raw(gw, 4);
    const s4 = await c4.subscribe([
      { topic: 'lvl/+/+/+/+', qos: 1 },
      { topic: 'lvl/+/+/+', qos: 1 },
    ]);
    expect(s4.granted).toEqual([0x80, 1]);
  });

  it(`keeps at most ${MAX_QUEUED_MESSAGES} messages for an offline session, drops the newer ones and counts them`, async () => {
    const session = { clientId: 'limits-offline', clean: false };
    const first = await raw(gw, 4, session);
    await first.subscribe('queue/offline');
    first.send({ cmd: 'disconnect' });
    await first.waitForClose(3000);
    const before = await currentDropped();
    const pub = await mqttClient(gw, { protocolVersion: 5 });
    for (let i = 0; i < 6; i++) await pub.publishAsync('queue/offline', `m${i}`, { qos: 1 });
    const again = await raw(gw, 4, session);
    await again.until(() => again.publishes.length >= MAX_QUEUED_MESSAGES, 5000, 'the queued messages');
    for (const p of again.publishes) again.send({ cmd: 'puback', messageId: p.messageId });
    await pub.publishAsync('queue/offline', 'live', { qos: 1 });
    await again.until(() => again.publishes.some((p) => p.payload.toString() === 'live'), 5000, 'the live message');
    expect(again.publishes.map((p) => p.payload.toString())).toEqual(['m0', 'm1', 'm2', 'live']);
    await waitFor(() => (dropped.at(-1) as number) >= before + 3, 5000, {
      message: () => `$SYS/broker/publish/messages/dropped went ${before} → ${dropped.at(-1)}, expected +3`,
    });
  });

  it('counts messages waiting for inflight room against the same limit for an online client', async () => {
    const sub = await raw(gw, 5, { clientId: 'limits-online', properties: { receiveMaximum: 1 } });
    await sub.subscribe('queue/online');
    const pub = await mqttClient(gw, { protocolVersion: 5 });
    for (let i = 0; i < 10; i++) await pub.publishAsync('queue/online', `o${i}`, { qos: 1 });
    // One in flight plus MAX_QUEUED_MESSAGES waiting; acking one at a time drains exactly those.
    for (let acked = 0; acked < 1 + MAX_QUEUED_MESSAGES; acked++) {
      await sub.until(() => sub.publishes.length > acked, 5000, `message ${acked}`);
      sub.send({ cmd: 'puback', messageId: sub.publishes[acked].messageId });
    }
    await pub.publishAsync('queue/online', 'sentinel', { qos: 1 });
    await sub.until(() => sub.publishes.some((p) => p.payload.toString() === 'sentinel'), 5000, 'the sentinel');
    expect(sub.publishes.map((p) => p.payload.toString())).toEqual(['o0', 'o1', 'o2', 'o3', 'sentinel']);
  });
});

describe('broker.maxQueuedBytes', () => {
  const gw = useGateway({ broker: { maxQueuedBytes: 1000, maxQueuedMessages: 0 } });

  it('keeps queued payload bytes of an offline session within the limit, still taking a later message that fits', async () => {
    const session = { clientId: 'limits-bytes', properties: { sessionExpiryInterval: 60 } };
    const first = await raw(gw, 5, session);
    await first.subscribe('queue/bytes');
    first.send({ cmd: 'disconnect', reasonCode: 0 });
    await first.waitForClose(3000);
    const pub = await mqttClient(gw, { protocolVersion: 5 });
    const payloads = [
      ['a', 400],
      ['b', 400],
      ['c', 400],
      ['d', 100],
    ] as const;
    for (const [label, size] of payloads) await pub.publishAsync('queue/bytes', Buffer.alloc(size, label), { qos: 1 });
    const again = await raw(gw, 5, { ...session, clean: false });
    await again.until(() => again.publishes.length >= 3, 5000, 'the queued messages');
    await again.ping();
    expect(again.publishes.map((p) => `${p.payload.toString()[0]}${p.payload.length}`)).toEqual([
      'a400',
      'b400',
      'd100',
    ]);
  });
});

describe('broker.maxSubscriptionsPerClient', () => {
  const MAX = 4;
  const gw = useGateway({ broker: { maxSubscriptionsPerClient: MAX } });

  const filters = (prefix: string, n: number) =>
    Array.from({ length: n }, (_, i) => ({ topic: `${prefix}/${i}`, qos: 1 as const }));

  it(`grants ${MAX} subscriptions and refuses each further filter with SUBACK 0x97 Quota exceeded (MQTT 5); replacing one still works`, async () => {
    const c = await raw(gw, 5);
    const first = await c.subscribe(filters('quota', 3), { messageId: 1 });
    expect(first.granted).toEqual([1, 1, 1]);
    // One more fits; the same filter twice in a packet is one subscription [MQTT-3.8.4-3]; then the quota is used up.
    const second = await c.subscribe(
      [
        { topic: 'quota/3', qos: 0 },
        { topic: 'quota/3', qos: 1 },
        { topic: 'quota/4', qos: 1 },
        { topic: 'quota/0', qos: 0 },
      ],
      { messageId: 2 },
    );
    expect(second.granted).toEqual([0, 1, 0x97, 0]);
    // Unsubscribing frees a place.
    c.send({ cmd: 'unsubscribe', messageId: 3, unsubscriptions: ['quota/1'] });
    await c.expect('unsuback');
    expect(
      (
        await c.subscribe(
          [
            { topic: 'quota/5', qos: 1 },
            { topic: 'quota/6', qos: 1 },
          ],
          { messageId: 4 },
        )
      ).granted,
    ).toEqual([1, 0x97]);
    // The refused filters deliver nothing, the granted ones do.
    const pub = await raw(gw, 5);
    for (const t of ['quota/4', 'quota/6', 'quota/5']) pub.publish(t, t, { qos: 0 });
    await c.until(() => c.publishes.length >= 1, 5000, 'the message on quota/5');
    await c.ping();
    expect(c.publishes.map((p) => p.topic)).toEqual(['quota/5']);
  });

  it('MQTT 3.1.1: refuses the filters over the limit with 0x80 [MQTT-3.9.3-2]', async () => {
    const c = await raw(gw, 4);
    expect((await c.subscribe(filters('quota4', MAX + 2))).granted).toEqual([1, 1, 1, 1, 0x80, 0x80]);
  });

  it('counts the subscriptions of a persistent session still being stored: SUBSCRIBEs sent without waiting cannot pass the limit together', async () => {
    const c = await raw(gw, 5, { clientId: 'quota-persistent', properties: { sessionExpiryInterval: 60 } });
    for (let id = 1; id <= 3; id++)
      c.send({ cmd: 'subscribe', messageId: id, subscriptions: filters(`pipelined${id}`, 2) } as never);
    const granted: number[] = [];
    for (let id = 1; id <= 3; id++)
      granted.push(
        ...((await c.expect((p) => p.cmd === 'suback' && p.messageId === id)) as { granted: number[] }).granted,
      );
    expect(granted).toEqual([1, 1, 1, 1, 0x97, 0x97]);
    // After a reconnect the session holds exactly MAX.
    c.send({ cmd: 'disconnect', reasonCode: 0 });
    await c.waitForClose(3000);
    const again = await raw(gw, 5, {
      clientId: 'quota-persistent',
      clean: false,
      properties: { sessionExpiryInterval: 60 },
    });
    expect((await again.subscribe([{ topic: 'pipelined3/9', qos: 1 }])).granted).toEqual([0x97]);
  });
});

describe('routing work is bounded per turn', () => {
  /** 2^14 filters, each a mix of `+` and `x` over 14 levels: every one matches the topic x/x/.../x. */
  const LEVELS = 14;
  const SUBSCRIPTIONS = 2 ** LEVELS;
  const TOPIC = Array.from({ length: LEVELS }, () => 'x').join('/');
  const MESSAGES = 3000;
  const gw = useGateway({ broker: { maxSubscriptionsPerClient: SUBSCRIPTIONS } });

  it(`keeps other clients' CONNECT fast while ${MESSAGES} messages each match ${SUBSCRIPTIONS} overlapping subscriptions of one client`, async () => {
    const amplifier = await raw(gw, 4, { clientId: 'amplifier' });
    for (let b = 0; b < SUBSCRIPTIONS / 256; b++) {
      const subscriptions = Array.from({ length: 256 }, (_, k) => {
        const i = b * 256 + k;
        return {
          topic: Array.from({ length: LEVELS }, (_, level) => ((i >> level) & 1 ? '+' : 'x')).join('/'),
          qos: 0 as const,
        };
      });
      const suback = await amplifier.subscribe(subscriptions, { messageId: b + 1, timeoutMs: 10_000 });
      expect(suback.granted.every((g) => g === 0)).toBe(true);
    }
    const one = mqttPacket.generate(
      { cmd: 'publish', topic: TOPIC, payload: Buffer.alloc(8), qos: 0, dup: false, retain: false },
      { protocolVersion: 4 },
    );
    const flooder = await raw(gw, 4, { clientId: 'flooder' });
    // Every message in one write: the gateway reads it in chunks of tens of kilobytes, a thousand messages each.
    flooder.write(Buffer.concat(Array.from({ length: MESSAGES }, () => one)));
    const latencies: number[] = [];
    while (amplifier.publishes.length < MESSAGES) {
      const started = performance.now();
      const probe = await RawClient.connect(gw.port, { clientId: `probe-${latencies.length}` }, { protocolVersion: 5 });
      latencies.push(performance.now() - started);
      probe.destroy();
      await waitFor(() => performance.now() - started > 20, 1000, { intervalMs: 5 });
      expect(performance.now() - started, `${amplifier.publishes.length} of ${MESSAGES} delivered`).toBeLessThan(
        60_000,
      );
    }
    // Overlapping subscriptions of one client give one delivery per message [MQTT-3.3.4-2].
    await amplifier.ping();
    expect(amplifier.publishes).toHaveLength(MESSAGES);
    // Without the bound, one read's thousand messages (16 million subscription matches) held the loop for seconds:
    // a single probe got through while all of them were routed.
    latencies.sort((a, b) => a - b);
    const figures = `CONNECT latencies (ms): ${latencies.map(Math.round).join(' ')}`;
    expect(latencies.length, figures).toBeGreaterThanOrEqual(5);
    expect(latencies[Math.floor(latencies.length / 2)], figures).toBeLessThan(150);
    expect(latencies.at(-1), figures).toBeLessThan(1000);
  }, 120_000);
});

describe('broker.maxUserProperties on every packet type, counted before parsing', () => {
  const MAX = 64;
  let gw: Gateway;
  beforeAll(async () => {
    // Default limits otherwise: maxPacketBytes 1 MiB holds 200,000 empty user properties.
    gw = await startGateway({ broker: { maxUserProperties: MAX } });
  });
  afterAll(async () => {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
    await gw?.dispose();
  });

  function vbi(n: number): Buffer {
    const out: number[] = [];
    do {
      let byte = n % 128;
      n = Math.floor(n / 128);
      if (n > 0) byte |= 0x80;
      out.push(byte);
    } while (n > 0);
    return Buffer.from(out);
  }
  const str = (s: string): Buffer => Buffer.concat([Buffer.from([0, Buffer.byteLength(s)]), Buffer.from(s)]);
  /** A property section of `n` user properties, all with the same name and value (default: both empty). */
  function userProperties(n: number, name = '', value = ''): Buffer {
    const one = Buffer.concat([Buffer.from([0x26]), str(name), str(value)]);
    const body = Buffer.alloc(one.length * n);
    for (let i = 0; i < n; i++) one.copy(body, i * one.length);
    return Buffer.concat([vbi(body.length), body]);
  }
  /** A packet from its first header byte and body parts. */
  function packet(first: number, ...parts: Buffer[]): Buffer {
    const body = Buffer.concat(parts);
    return Buffer.concat([Buffer.from([first]), vbi(body.length), body]);
  }
  function connect(clientId: string, properties: Buffer, will?: Buffer): Buffer {
    const flags = will ? 0x06 : 0x02; // clean start (+ will flag, will QoS 0)
    const willPart = will ? [will, str('up/will'), str('gone')] : [];
    return packet(0x10, str('MQTT'), Buffer.from([5, flags, 0, 30]), properties, str(clientId), ...willPart);
  }

  async function expectConnack95(c: RawClient): Promise<void> {
    const connack = (await c.expect('connack', 3000)) as {
      reasonCode?: number;
      properties?: { reasonString?: string };
    };
    expect(connack.reasonCode).toBe(0x95);
    expect(connack.properties?.reasonString).toMatch(/user properties, more than broker\.maxUserProperties \(64\)/);
    await c.waitForClose(3000);
  }

  async function expectDisconnect95(c: RawClient, count: number): Promise<void> {
    const disconnect = await c.expectDisconnect(3000);
    expect(disconnect.reasonCode, c.describe()).toBe(0x95);
    expect(disconnect.properties?.reasonString).toBe(
      `${count} user properties, more than broker.maxUserProperties (64)`,
    );
    await c.waitForClose(3000);
  }

  it('refuses a PUBLISH with 200,000 user properties of one empty name at once with DISCONNECT 0x95, forwarding nothing (CVE-2021-41039)', async () => {
    const sub = await raw(gw, 5);
    await sub.subscribe('up/#');
    const c = await raw(gw, 5);
    const flood = packet(0x32, str('up/flood'), Buffer.from([0, 1]), userProperties(200_000), Buffer.from('x'));
    expect(flood.length).toBeLessThan(1_048_576);
    c.write(flood);
    await expectDisconnect95(c, 200_000);
    await sub.ping();
    expect(sub.publishes).toEqual([]);
  });

  it('refuses a CONNECT with 200,000 user properties with CONNACK 0x95 and a reason string', async () => {
    const c = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    c.write(connect('up-connect-flood', userProperties(200_000)));
    await expectConnack95(c);
  });

  it(`counts a CONNECT's and its will's user properties together: ${MAX / 2 + 1} + ${MAX / 2} is refused, ${MAX / 2} + ${MAX / 2} accepted`, async () => {
    const over = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    over.write(connect('up-will-over', userProperties(MAX / 2 + 1, 'k', 'v'), userProperties(MAX / 2, 'k', 'v')));
    await expectConnack95(over);
    const within = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    within.write(connect('up-will-within', userProperties(MAX / 2, 'k', 'v'), userProperties(MAX / 2, 'k', 'v')));
    expect(((await within.expect('connack')) as { reasonCode: number }).reasonCode).toBe(0);
  });

  for (const [name, build] of [
    ['UNSUBSCRIBE', (p: Buffer) => packet(0xa2, Buffer.from([0, 7]), p, str('up/x'))],
    ['PUBREL', (p: Buffer) => packet(0x62, Buffer.from([0, 9, 0]), p)],
    ['PUBACK', (p: Buffer) => packet(0x40, Buffer.from([0, 9, 0]), p)],
    ['PUBREC', (p: Buffer) => packet(0x50, Buffer.from([0, 9, 0]), p)],
    ['PUBCOMP', (p: Buffer) => packet(0x70, Buffer.from([0, 9, 0]), p)],
    ['AUTH', (p: Buffer) => packet(0xf0, Buffer.from([0x18]), p)],
  ] as const) {
    it(`refuses ${name} with ${MAX + 1} user properties sharing one name with DISCONNECT 0x95`, async () => {
      const c = await raw(gw, 5);
      c.write(build(userProperties(MAX + 1, 'same', 'v')));
      await expectDisconnect95(c, MAX + 1);
    });
  }

  it(`treats a DISCONNECT with ${MAX + 1} user properties as a violation: DISCONNECT 0x95, and the will is published`, async () => {
    const sub = await raw(gw, 5);
    await sub.subscribe('up/will');
    const c = await raw(gw, 5, { will: { topic: 'up/will', payload: Buffer.from('gone'), qos: 0, retain: false } });
    c.write(packet(0xe0, Buffer.from([0]), userProperties(MAX + 1)));
    await expectDisconnect95(c, MAX + 1);
    await sub.until(() => sub.publishes.length > 0, 3000, 'the will');
  });

  it(`still takes ${MAX} user properties on a PUBREL and completes the flow`, async () => {
    const c = await raw(gw, 5);
    c.publish('up/ok', 'x', { qos: 2, messageId: 9 });
    await c.expect('pubrec');
    c.write(packet(0x62, Buffer.from([0, 9, 0]), userProperties(MAX, 'same', 'v')));
    expect(await c.expect('pubcomp')).toMatchObject({ messageId: 9, reasonCode: 0 });
  });
});
