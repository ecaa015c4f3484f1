/**
 * Flow control through the gateway process: Receive Maximum in both directions, the broker's own
 * `maxInflight`, the client's Maximum Packet Size, and a subscriber that stops reading (bounded write buffer, QoS 0
 * shed for it, disconnected after `slowClientTimeoutMs`, nobody else slowed) [docs/reliability.md rules 18, 34].
 */
import { readFileSync } from 'node:fs';
import type { MqttClient } from 'mqtt';
import { describe, expect, it } from 'vitest';
import { connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { useGateway, type Gateway } from '../helpers/gateway.js';
import { encode, RawClient, type ConnectOptions } from '../helpers/raw-client.js';
import { delay, waitFor } from '../helpers/wait.js';

const RECEIVE_MAXIMUM = 3;
const MAX_INFLIGHT = 5;

const d = useDisposer();

async function client(gw: Gateway, options: Parameters<typeof connectClient>[1] = {}): Promise<MqttClient> {
  const c = await connectClient(gw.url, options);
  d.defer(() => c.endAsync(true));
  return c;
}

/**
 * A subscriber with a persistent session, so every acknowledgement to a publisher waits for the message to be
 * stored and lags a burst. Returns the payloads it receives, in order.
 */
async function persistentSubscriber(gw: Gateway, topic: string, qos: 1 | 2): Promise<string[]> {
  const sub = await client(gw, { clientId: `sub-${topic}`, clean: false, properties: { sessionExpiryInterval: 60 } });
  const received: string[] = [];
  sub.on('message', (_topic, payload) => received.push(payload.toString()));
  await sub.subscribeAsync(topic, { qos });
  return received;
}

async function raw5(gw: Gateway, connect: ConnectOptions = {}): Promise<RawClient> {
  return d.add(await RawClient.connect(gw.port, connect, { protocolVersion: 5 }));
}

describe('Receive Maximum and inflight windows', () => {
  const gw = useGateway({ broker: { receiveMaximum: RECEIVE_MAXIMUM, maxInflight: MAX_INFLIGHT } });

  it('lets a client have Receive Maximum QoS 2 PUBLISHes unreleased, and disconnects it with 0x93 on one more [MQTT-3.3.4-7] [docs/reliability.md rule 18]', async () => {
    const c = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
    const connack = await c.connect({ clientId: 'flow-rm-in' });
    expect(connack.properties?.receiveMaximum).toBe(RECEIVE_MAXIMUM);
    for (let id = 1; id <= RECEIVE_MAXIMUM; id++) c.publish('flow/in', `q${id}`, { qos: 2, messageId: id });
    await c.until(() => c.packets('pubrec').length >= RECEIVE_MAXIMUM, 5000, `${RECEIVE_MAXIMUM} PUBREC`);
    await c.ping(); // at the limit, not over it
    // PUBREL/PUBCOMP frees a slot, which the next PUBLISH may take.
    c.send({ cmd: 'pubrel', messageId: 1 });
    expect(await c.expect('pubcomp')).toMatchObject({ messageId: 1, reasonCode: 0 });
    c.publish('flow/in', 'q4', { qos: 2, messageId: 4 });
    expect(await c.expect((p) => p.cmd === 'pubrec' && p.messageId === 4)).toMatchObject({ reasonCode: 0 });
    // Three unreleased again; a fourth is over the limit.
    c.publish('flow/in', 'q5', { qos: 2, messageId: 5 });
    const disconnect = await c.expectDisconnect();
    expect(disconnect.reasonCode).toBe(0x93);
    await c.waitForClose(3000);
    expect(c.packets('pubrec').map((p) => p.messageId)).toEqual([1, 2, 3, 4]);
  });

  it('holds back a 3.1.1 client over Receive Maximum by not reading (it was never told the limit) instead of disconnecting it', async () => {
    // A device reconnecting with a backlog resends it in one burst. Disconnected for that, it would resend the
    // same burst after every reconnect, and each time the accepted part would be stored and forwarded once more
    // (found by the soak, bench/soak.ts).
    const received = await persistentSubscriber(gw, 'flow/v4', 1);
    const pub = d.add(await RawClient.connect(gw.port, { clientId: 'flow-v4-pub' }, { protocolVersion: 4 }));
    const count = 40 * RECEIVE_MAXIMUM;
    const burst = Array.from({ length: count }, (_, i) =>
      encode(
        {
          cmd: 'publish',
          topic: 'flow/v4',
          payload: Buffer.from(`b${i}`),
          qos: 1,
          messageId: i + 1,
          dup: false,
          retain: false,
        },
        4,
      ),
    );
    pub.write(Buffer.concat(burst));
    await pub.until(() => pub.packets('puback').length >= count || undefined, 10_000, `${count} PUBACK`, true);
    expect(pub.closed).toBe(false);
    expect(pub.packets('puback').map((p) => p.messageId)).toEqual(Array.from({ length: count }, (_, i) => i + 1));
    await waitFor(() => received.length >= count, 10_000, {
      message: () => `${received.length} of ${count} messages at the subscriber`,
    });
    expect(received).toEqual(Array.from({ length: count }, (_, i) => `b${i}`));
  });

  it('holds back a 3.1.1 QoS 2 burst the same way, and still reads its PUBRELs (flows awaiting PUBREL do not count)', async () => {
    const received = await persistentSubscriber(gw, 'flow/v4q2', 2);
    const pub = d.add(await RawClient.connect(gw.port, { clientId: 'flow-v4-pub2' }, { protocolVersion: 4 }));
    const count = 10 * RECEIVE_MAXIMUM;
    const ids = Array.from({ length: count }, (_, i) => i + 1);
    pub.write(
      Buffer.concat(
        ids.map((id) =>
          encode(
            {
              cmd: 'publish',
              topic: 'flow/v4q2',
              payload: Buffer.from(`c${id}`),
              qos: 2,
              messageId: id,
              dup: false,
              retain: false,
            },
            4,
          ),
        ),
      ),
    );
    await pub.until(() => pub.packets('pubrec').length >= count || undefined, 10_000, `${count} PUBREC`, true);
    expect(pub.packets('pubrec').map((p) => p.messageId)).toEqual(ids);
    pub.write(Buffer.concat(ids.map((id) => encode({ cmd: 'pubrel', messageId: id }, 4))));
    await pub.until(() => pub.packets('pubcomp').length >= count || undefined, 10_000, `${count} PUBCOMP`, true);
    expect(pub.packets('pubcomp').map((p) => p.messageId)).toEqual(ids);
    await waitFor(() => received.length >= count, 10_000, {
      message: () => `${received.length} of ${count} messages at the subscriber`,
    });
    expect(received).toEqual(ids.map((id) => `c${id}`));
  });

  it('never has more unacknowledged QoS 1 PUBLISHes in flight to a client than its Receive Maximum, and sends the rest in order as acks come [MQTT-3.3.4-9]', async () => {
    const sub = await raw5(gw, { clientId: 'flow-rm-out', properties: { receiveMaximum: 2 } });
    await sub.subscribe([{ topic: 'flow/out', qos: 1 }]);
    const pub = await client(gw);
    const sent = Array.from({ length: 10 }, (_, i) => `m${i}`);
    // Every PUBACK to the publisher means the broker has routed that message already.
    for (const p of sent) await pub.publishAsync('flow/out', p, { qos: 1 });
    await sub.ping();
    expect(sub.publishes).toHaveLength(2);
    let acked = 0;
    let maxUnacked = 0;
    while (acked < sent.length) {
      await sub.until(() => sub.publishes.length > acked, 5000, `message ${acked}`);
      await sub.ping();
      maxUnacked = Math.max(maxUnacked, sub.publishes.length - acked);
      sub.send({ cmd: 'puback', messageId: sub.publishes[acked].messageId });
      acked++;
    }
    expect(maxUnacked).toBe(2);
    expect(sub.publishes.map((p) => p.payload.toString())).toEqual(sent);
    expect(sub.publishes.filter((p) => p.dup)).toEqual([]);
  });

  it(`caps what is in flight to a client at broker.maxInflight (${MAX_INFLIGHT}) when its Receive Maximum is larger`, async () => {
    const sub = await raw5(gw, { clientId: 'flow-max-inflight' });
    await sub.subscribe([{ topic: 'flow/cap', qos: 1 }]);
    const pub = await client(gw);
    for (let i = 0; i < MAX_INFLIGHT + 4; i++) await pub.publishAsync('flow/cap', `c${i}`, { qos: 1 });
    await sub.ping();
    expect(sub.publishes).toHaveLength(MAX_INFLIGHT);
    for (const p of sub.publishes.slice()) sub.send({ cmd: 'puback', messageId: p.messageId });
    await sub.until(() => sub.publishes.length >= MAX_INFLIGHT + 4, 5000, 'the rest after the acks');
    expect(sub.publishes.map((p) => p.payload.toString())).toEqual(
      Array.from({ length: MAX_INFLIGHT + 4 }, (_, i) => `c${i}`),
    );
  });

  it('applies the same window to QoS 2, counting a flow until PUBCOMP', async () => {
    const sub = await raw5(gw, { clientId: 'flow-qos2', properties: { receiveMaximum: 1 } });
    await sub.subscribe([{ topic: 'flow/qos2', qos: 2 }]);
    const pub = await client(gw);
    for (const p of ['a', 'b']) await pub.publishAsync('flow/qos2', p, { qos: 2 });
    await sub.ping();
    expect(sub.publishes.map((p) => p.payload.toString())).toEqual(['a']);
    const first = sub.publishes[0];
    sub.send({ cmd: 'pubrec', messageId: first.messageId });
    expect(await sub.expect('pubrel')).toMatchObject({ messageId: first.messageId });
    await sub.ping();
    expect(sub.publishes).toHaveLength(1); // PUBREC alone does not free the slot
    sub.send({ cmd: 'pubcomp', messageId: first.messageId });
    await sub.until(() => sub.publishes.length >= 2, 5000, 'the second message after PUBCOMP');
    expect(sub.publishes[1].payload.toString()).toBe('b');
  });
});

describe('the client Maximum Packet Size', () => {
  const gw = useGateway();

  /** Size of the PUBLISH the broker sends a v5 client: no properties, QoS 1, topic `t`, payload of `n` bytes. */
  function outgoingSize(topic: string, payloadBytes: number, qos: 0 | 1): number {
    const remaining = 2 + Buffer.byteLength(topic) + (qos > 0 ? 2 : 0) + 1 + payloadBytes;
    return 1 + (remaining < 128 ? 1 : 2) + remaining;
  }

  it("does not send a PUBLISH larger than the client's Maximum Packet Size, and sends the next one that fits [MQTT-3.1.2-24] [MQTT-3.1.2-25]", async () => {
    const max = 128;
    const topic = 'flow/size';
    // receiveMaximum 1: a discarded message must not hold the only inflight slot either.
    const sub = await raw5(gw, { clientId: 'flow-size', properties: { maximumPacketSize: max, receiveMaximum: 1 } });
    await sub.subscribe([{ topic, qos: 1 }]);
    const pub = await client(gw, { protocolVersion: 5 });
    const fits = max - outgoingSize(topic, 0, 1); // payload bytes that make the packet exactly `max`
    const payloads: [string, number, 0 | 1][] = [
      ['big-qos1', fits + 1, 1],
      ['exact-qos1', fits, 1],
      ['big-qos0', fits + 3, 0],
      ['exact-qos0', fits + 2, 0],
      ['huge-qos1', 10_000, 1],
      ['small-qos1', 16, 1],
    ];
    for (const [label, size, qos] of payloads) {
      const body = Buffer.alloc(size, 'x');
      Buffer.from(label).copy(body, 0, 0, Math.min(label.length, size));
      await pub.publishAsync(topic, body, { qos });
    }
    const labels = (): string[] => sub.publishes.map((p) => p.payload.toString().replace(/x+$/, ''));
    const ackAll = (): void => {
      for (const p of sub.publishes) if (p.qos > 0) sub.send({ cmd: 'puback', messageId: p.messageId });
    };
    await sub.until(() => sub.publishes.length >= 1, 5000, 'the first message that fits');
    ackAll();
    await sub.until(() => labels().includes('small-qos1'), 5000, 'the last small message');
    ackAll();
    await sub.ping();
    expect(labels()).toEqual(['exact-qos1', 'exact-qos0', 'small-qos1']);
    for (const p of sub.received) {
      const remaining = p.length ?? 0;
      expect(1 + (remaining < 128 ? 1 : 2) + remaining).toBeLessThanOrEqual(max);
    }
  });
});

describe('a subscriber that stops reading', () => {
  const MAX_WRITE_BUFFER_BYTES = 256 * 1024;
  const SLOW_CLIENT_TIMEOUT_MS = 1500;
  const gw = useGateway({
    broker: {
      maxWriteBufferBytes: MAX_WRITE_BUFFER_BYTES,
      slowClientTimeoutMs: SLOW_CLIENT_TIMEOUT_MS,
      sysIntervalS: 1,
    },
  });

  it('keeps delivering every QoS 0 message to a healthy subscriber while another one never reads, and disconnects the stalled one after slowClientTimeoutMs [docs/reliability.md rule 34]', async () => {
    const connected: number[] = [];
    const watcher = await client(gw);
    watcher.on('message', (_t, payload) => connected.push(Number(payload.toString())));
    await watcher.subscribeAsync('$SYS/broker/clients/connected', { qos: 0 });

    const healthy = await client(gw);
    let healthyCount = 0;
    let healthyBytes = 0;
    let outOfOrder = 0;
    healthy.on('message', (_t, payload) => {
      if (payload.readUInt32BE(0) !== healthyCount) outOfOrder++;
      healthyCount++;
      healthyBytes += payload.length;
    });
    await healthy.subscribeAsync('flow/stream', { qos: 0 });

    const stalled = d.add(await RawClient.connect(gw.port, { clientId: 'flow-stalled' }, { protocolVersion: 4 }));
    await stalled.subscribe([{ topic: 'flow/stream', qos: 0 }]);
    stalled.pause();
    const pub = await client(gw);
    // watcher, healthy, stalled, publisher
    await waitFor(() => connected.at(-1) === 4, 5000, { message: () => `clients/connected: ${connected.join(',')}` });
    const count = 400;
    const size = 64 * 1024;
    const startedAt = performance.now();
    for (let i = 0; i < count; i++) {
      const payload = Buffer.alloc(size, i % 251);
      payload.writeUInt32BE(i, 0);
      pub.publish('flow/stream', payload, { qos: 0 });
      // Stay at most two messages ahead of the healthy subscriber: this measures it, not the publisher's buffer.
      if (i - healthyCount >= 2)
        await waitFor(() => i - healthyCount < 2, 5000, {
          intervalMs: 1,
          message: () => `healthy stuck at ${healthyCount}`,
        });
    }
    await waitFor(() => healthyCount >= count, 10_000, { message: () => `healthy got ${healthyCount} of ${count}` });
    const streamMs = performance.now() - startedAt;
    expect(healthyCount).toBe(count);
    expect(outOfOrder).toBe(0);
    expect(healthyBytes).toBe(count * size);

    // The stalled connection is gone (seen from the broker's own count), no earlier than the timeout allows.
    await waitFor(() => connected.at(-1) === 3, 10_000, { message: () => `clients/connected: ${connected.join(',')}` });
    const goneAfterMs = performance.now() - startedAt;
    expect(goneAfterMs).toBeGreaterThan(SLOW_CLIENT_TIMEOUT_MS);
    // Reading again drains what the kernel held, then the close: the broker shed most of the stream for it.
    stalled.resume();
    await stalled.waitForClose(10_000);
    expect(stalled.bytesReceived).toBeLessThan((count * size) / 2);
    expect(gw.proc.exitCode).toBeNull();
    // The healthy subscriber's 25 MB next to a stalled reader took bounded time.
    expect(streamMs).toBeLessThan(20_000);
  });
});

describe('subscribers that read a trickle', () => {
  const MAX_WRITE_BUFFER_BYTES = 128 * 1024;
  const SLOW_CLIENT_TIMEOUT_MS = 1500;
  const SLOW_READERS = 10;
  /** Each slow reader takes this much every TRICKLE_MS: 320 KB/s, well below the stream sent to it. */
  const TRICKLE_BYTES = 16 * 1024;
  const TRICKLE_MS = 50;
  const gw = useGateway({
    broker: { maxWriteBufferBytes: MAX_WRITE_BUFFER_BYTES, slowClientTimeoutMs: SLOW_CLIENT_TIMEOUT_MS },
  });

  /** The gateway process's resident memory, from the kernel. */
  function gatewayRssBytes(): number {
    const status = readFileSync(`/proc/${gw.proc.pid}/status`, 'utf8');
    return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
  }

  /** The client ids in the gateway's slow-reader warnings so far. */
  function warnedClientIds(): string[] {
    const lines = gw
      .output()
      .split('\n')
      .filter((line) => line.includes('disconnecting a client that does not read'));
    return lines.map((line) => (JSON.parse(line) as { clientId: string }).clientId);
  }

  /** A v5 subscriber that stops reading, then takes TRICKLE_BYTES every TRICKLE_MS: never drained, never quite stalled. */
  async function trickleReader(i: number): Promise<RawClient> {
    const c = await raw5(gw, { clientId: `trickle-${i}` });
    await c.subscribe([{ topic: 'trickle/stream', qos: 0 }]);
    c.pause();
    const timer = setInterval(() => {
      if (!c.closed && c.socket.isPaused())
        c.socket.read(Math.min(TRICKLE_BYTES, c.socket.readableLength) || undefined);
    }, TRICKLE_MS);
    d.defer(() => clearInterval(timer));
    return c;
  }

  it(`disconnects ${SLOW_READERS} readers that keep the write buffer just under maxWriteBufferBytes after slowClientTimeoutMs (v5: DISCONNECT 0x97), logged once each, while a fast one gets every message`, async () => {
    const fast = await client(gw, { protocolVersion: 5 });
    let fastCount = 0;
    let outOfOrder = 0;
    fast.on('message', (_t, payload) => {
      if (payload.readUInt32BE(0) !== fastCount) outOfOrder++;
      fastCount++;
    });
    await fast.subscribeAsync('trickle/stream', { qos: 0 });
    const slow: RawClient[] = [];
    for (let i = 0; i < SLOW_READERS; i++) slow.push(await trickleReader(i));
    const rssBefore = gatewayRssBytes();
    let rssPeak = rssBefore;

    // 1 KiB messages at about 2 MB/s, kept at most 64 ahead of the fast subscriber; the slow ones get ~320 KB/s.
    const pub = await client(gw, { protocolVersion: 5 });
    const startedAt = performance.now();
    const payload = Buffer.alloc(1024, 7);
    let sent = 0;
    while (slow.some((c) => !c.closed) && performance.now() - startedAt < 12_000) {
      for (let k = 0; k < 20; k++) {
        const p = Buffer.from(payload);
        p.writeUInt32BE(sent++, 0);
        pub.publish('trickle/stream', p, { qos: 0 });
      }
      await waitFor(() => sent - fastCount <= 64, 5000, {
        intervalMs: 1,
        message: () => `fast subscriber stuck at ${fastCount} of ${sent}`,
      });
      await delay(10);
      rssPeak = Math.max(rssPeak, gatewayRssBytes());
      // A reader the gateway gave up on reads at full speed from then on, to reach the DISCONNECT behind its backlog.
      for (const id of warnedClientIds()) slow[Number(id.slice('trickle-'.length))]?.resume();
    }
    const closedAfterMs = slow.map((c) => (c.closedAtMs ?? Infinity) - startedAt);
    expect(
      closedAfterMs.every((ms) => ms < 12_000),
      `slow readers still open after 12 s: ${slow.filter((c) => !c.closed).length}`,
    ).toBe(true);
    expect(Math.min(...closedAfterMs)).toBeGreaterThan(SLOW_CLIENT_TIMEOUT_MS);
    // The fast subscriber was not held back and lost nothing.
    await waitFor(() => fastCount >= sent, 5000, { message: () => `fast subscriber got ${fastCount} of ${sent}` });
    expect(outOfOrder).toBe(0);
    expect(fast.connected).toBe(true);
    // Each slow reader got DISCONNECT 0x97 Quota exceeded at the end of what it had not read (it read on, slowly).
    for (const c of slow)
      expect(
        c.packets('disconnect').map((p) => p.reasonCode),
        c.describe(),
      ).toEqual([0x97]);
    // One warning per slow reader, none for the fast one.
    expect(warnedClientIds().sort()).toEqual(slow.map((_, i) => `trickle-${i}`).sort());
    // Memory stayed within the write buffers of the slow readers plus a margin for the heap, not with the stream: a
    // gateway that kept what the slow readers did not take would hold up to 10 x the ~20 MB streamed. (The margin:
    // Node 24's heap grew by up to 75 MB here in a run, Node 20's less.)
    expect(rssPeak - rssBefore).toBeLessThan(SLOW_READERS * MAX_WRITE_BUFFER_BYTES * 4 + 96 * 1024 * 1024);
    expect(gw.proc.exitCode).toBeNull();
  }, 40_000);
});
