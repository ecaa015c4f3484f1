/**
 * The bridge against a scriptable fake central broker built on mqtt-packet (docs/reliability.md#fault-scenarios harness): Receive
 * Maximum, session resume with original packet ids and DUP, unknown PUBACK ids, DISCONNECT 0x93, reconnect storms.
 */
import { createServer, type Server, type Socket } from 'node:net';
import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { Bridge } from '../../src/bridge/bridge.js';
import { createMessage, type Message, type QoS } from '../../src/protocol/message.js';
import { openLmdbStore } from '../../src/store/lmdb/open.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { deadLetterOutbox, type Outbox } from '../../src/store/types.js';
import type { BridgeConfig } from '../../src/config/schema.js';
import { silentLogger } from '../../src/util/logger.js';
import { useDisposer } from '../helpers/disposer.js';
import { afterMarker, waitFor } from '../helpers/wait.js';
import { bridgeConfig, testBroker } from '../helpers/bridge-setup.js';

const d = useDisposer();

interface FakeConnection {
  readonly socket: Socket;
  readonly packets: Packet[];
  send(packet: Packet): void;
}

interface FakeUpstream {
  readonly url: string;
  readonly connections: FakeConnection[];
  /** Called for every packet after CONNECT; default: nothing (the test answers). */
  onPacket: (conn: FakeConnection, packet: Packet) => void;
  /** CONNACK to answer the next CONNECTs with. */
  connack: { sessionPresent: boolean; properties?: Record<string, unknown> };
  /** While true, every CONNECT is recorded in `refused` and its connection closed unanswered (an overloaded broker). */
  refuse: boolean;
  /** While false, PINGREQs go unanswered (a broker that stopped reading, or a half-open link). */
  answerPings: boolean;
  readonly refused: { clientId: string; atMs: number }[];
  stop(): Promise<void>;
}

async function startFakeUpstream(): Promise<FakeUpstream> {
  const connections: FakeConnection[] = [];
  const sockets = new Set<Socket>();
  const fake: FakeUpstream = {
    url: '',
    connections,
    onPacket: () => undefined,
    connack: { sessionPresent: false },
    refuse: false,
    answerPings: true,
    refused: [],
    stop: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    const conn: FakeConnection = {
      socket,
      packets: [],
      send: (packet) => {
        if (!socket.destroyed) socket.write(mqttPacket.generate(packet, { protocolVersion: 5 }));
      },
    };
    parser.on('packet', (packet: Packet) => {
      conn.packets.push(packet);
      if (packet.cmd === 'connect' && fake.refuse) {
        fake.refused.push({ clientId: packet.clientId, atMs: performance.now() });
        socket.destroy();
        return;
      }
      if (packet.cmd === 'connect') {
        connections.push(conn);
        conn.send({
          cmd: 'connack',
          returnCode: 0,
          reasonCode: 0,
          sessionPresent: fake.connack.sessionPresent,
          properties: fake.connack.properties,
        } as Packet);
        return;
      }
      if (packet.cmd === 'pingreq') {
        if (fake.answerPings) conn.send({ cmd: 'pingresp' });
        return;
      }
      fake.onPacket(conn, packet);
    });
    socket.on('data', (chunk) => parser.parse(chunk));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  (fake as { url: string }).url = `mqtt://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  return fake;
}

function publishes(conn: FakeConnection): (Packet & { cmd: 'publish' })[] {
  return conn.packets.filter((p): p is Packet & { cmd: 'publish' } => p.cmd === 'publish');
}

/** A bridge on the real broker; its outbox is the memory store's unless one is given (LMDB for restarts). */
async function setup(url: string, patch: Parameters<typeof bridgeConfig>[1] = {}, qos: QoS = 1, givenOutbox?: Outbox) {
  const { broker, store } = testBroker();
  const config = bridgeConfig([url], patch);
  const outbox = givenOutbox ?? store.outbox(config.name, config.queue);
  const bridge = d.add(new Bridge({ config, broker, outbox, log: silentLogger }));
  const publish = (payload: string) =>
    broker.publish(createMessage({ topic: 'plant/x', payload: Buffer.from(payload), qos, origin: 'local' }));
  return { bridge, outbox, publish };
}

/** The packets of a connection after CONNECT, as [cmd, payload or '', packet id]. */
function flows(conn: FakeConnection): [string, string, number | undefined][] {
  return conn.packets
    .filter((p) => p.cmd === 'publish' || p.cmd === 'pubrel')
    .map((p) => [p.cmd, p.cmd === 'publish' ? p.payload.toString() : '', p.messageId]);
}

/**
 * The marker for "the bridge sent nothing more" on a fake connection: a QoS 1 PUBLISH from the upstream, which the
 * bridge acknowledges once it has read it; the PUBACK follows on the socket whatever the bridge wrote before.
 */
async function roundTrip(conn: FakeConnection): Promise<void> {
  const messageId = 65_535;
  await afterMarker(
    () =>
      conn.send({
        cmd: 'publish',
        topic: 'marker/round-trip',
        payload: Buffer.from('marker'),
        qos: 1,
        messageId,
        retain: false,
        dup: false,
      } as Packet),
    () => conn.packets.some((p) => p.cmd === 'puback' && p.messageId === messageId),
    5000,
    'the PUBACK of the marker PUBLISH',
  );
}

/** Answers every QoS 2 PUBLISH with PUBREC (except payloads in `withhold`) and, if `complete`, PUBREL with PUBCOMP. */
function answerQoS2(up: FakeUpstream, opts: { complete: boolean; withhold?: string[] }): void {
  up.onPacket = (c, p) => {
    if (p.cmd === 'publish' && !opts.withhold?.includes(p.payload.toString()))
      c.send({ cmd: 'pubrec', messageId: p.messageId, reasonCode: 0 } as Packet);
    if (p.cmd === 'pubrel' && opts.complete)
      c.send({ cmd: 'pubcomp', messageId: p.messageId, reasonCode: 0 } as Packet);
  };
}

describe('bridge against a scriptable fake upstream', () => {
  it('keeps refused messages as dead letters (PUBACK >= 0x80, above Maximum Packet Size) and goes on with the rest', async () => {
    const up = d.add(await startFakeUpstream());
    up.connack = { sessionPresent: false, properties: { maximumPacketSize: 200 } };
    up.onPacket = (c, p) => {
      if (p.cmd !== 'publish') return;
      const reasonCode = p.payload.toString() === 'refuse-me' ? 0x97 : 0; // 0x97 Quota exceeded
      c.send({ cmd: 'puback', messageId: p.messageId, reasonCode } as Packet);
    };
    const { broker, store } = testBroker();
    const config = bridgeConfig([up.url]);
    const outbox = store.outbox(config.name, config.queue);
    const limits = { maxMessages: 10, maxBytes: 1 << 20, maxAgeS: 0, overflow: 'drop-oldest' } as const;
    const deadLetter = store.outbox(deadLetterOutbox(config.name), limits);
    const bridge = d.add(new Bridge({ config, broker, outbox, deadLetter, log: silentLogger }));
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    for (const payload of ['a', 'refuse-me', 'x'.repeat(500), 'b']) {
      await broker.publish(createMessage({ topic: 'plant/x', payload: Buffer.from(payload), qos: 1, origin: 'local' }));
    }
    await waitFor(() => outbox.depth.messages === 0 && deadLetter.depth.messages === 2, 5000);
    expect(publishes(up.connections[0]).map((p) => p.payload.toString())).toEqual(['a', 'refuse-me', 'b']);
    // In the order refused: the large one at its send, 'refuse-me' when its PUBACK came.
    expect(deadLetter.peek(10).map((e) => [e.msg.topic, e.msg.qos, e.msg.payload.toString().slice(0, 9)])).toEqual([
      ['plant/x', 1, 'xxxxxxxxx'],
      ['plant/x', 1, 'refuse-me'],
    ]);
    expect(bridge.stats.deadLetterMessages).toBe(2);
    expect(outbox.depth.dropped.rejected_upstream).toBe(0);
  });

  it('sends its SUBSCRIBE before the births and the backlog, so the broker has the command subscription before a host sees a birth [tck-id-message-flow-edge-node-ncmd-subscribe]', async () => {
    const up = d.add(await startFakeUpstream());
    const { broker, store } = testBroker();
    const config = bridgeConfig([up.url], {
      topics: [
        { filter: 'plant/#', direction: 'out', localPrefix: '', remotePrefix: '' },
        { filter: 'cmd/#', direction: 'in', qos: 1, localPrefix: '', remotePrefix: '' },
      ] as typeof config.topics,
    });
    const outbox = store.outbox(config.name, config.queue);
    const prologue = () => [
      createMessage({ topic: 'plant/birth', payload: Buffer.from('birth'), qos: 0, origin: 'sparkplug' }),
    ];
    const bridge = d.add(new Bridge({ config, broker, outbox, hooks: { prologue }, log: silentLogger }));
    up.refuse = true;
    await bridge.start();
    await broker.publish(createMessage({ topic: 'plant/x', payload: Buffer.from('backlog'), qos: 1, origin: 'local' }));
    up.refuse = false;
    await waitFor(() => up.connections.length === 1 && publishes(up.connections[0]).length === 2, 5000);
    const order = up.connections[0].packets.filter((p) => p.cmd !== 'pingreq');
    expect(order.map((p) => (p.cmd === 'publish' ? p.payload.toString() : p.cmd))).toEqual([
      'connect',
      'subscribe',
      'birth',
      'backlog',
    ]);
  });

  it('never has more QoS 1 messages unacknowledged than the CONNACK Receive Maximum', async () => {
    const up = d.add(await startFakeUpstream());
    up.connack = { sessionPresent: false, properties: { receiveMaximum: 5 } };
    const { bridge, outbox, publish } = await setup(up.url, { inflight: 100 });
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    await Promise.all(Array.from({ length: 40 }, (_, i) => publish(`m${i}`)));
    const conn = up.connections[0];
    await waitFor(() => publishes(conn).length === 5, 5000);
    await roundTrip(conn);
    expect(publishes(conn).length).toBe(5); // held back until acknowledged
    let maxOutstanding = 0;
    const outstanding = new Set<number>();
    up.onPacket = (c, p) => {
      if (p.cmd !== 'publish') return;
      outstanding.add(p.messageId as number);
      maxOutstanding = Math.max(maxOutstanding, outstanding.size);
      setTimeout(() => {
        outstanding.delete(p.messageId as number);
        c.send({ cmd: 'puback', messageId: p.messageId, reasonCode: 0 } as Packet);
      }, 2);
    };
    for (const p of publishes(conn)) {
      conn.send({ cmd: 'puback', messageId: p.messageId, reasonCode: 0 } as Packet);
    }
    await waitFor(() => outbox.depth.messages === 0, 5000);
    expect(maxOutstanding).toBeLessThanOrEqual(5);
    expect(publishes(conn).map((p) => p.payload.toString())).toEqual(Array.from({ length: 40 }, (_, i) => `m${i}`));
  });

  it('re-sends unacknowledged messages with their original packet ids and DUP when the session is resumed [MQTT-4.4.0-1]', async () => {
    const up = d.add(await startFakeUpstream());
    const { bridge, outbox, publish } = await setup(up.url);
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    await Promise.all(['a', 'b', 'c'].map(publish));
    const first = up.connections[0];
    await waitFor(() => publishes(first).length === 3, 5000);
    // Acknowledge only 'a'; then the link dies.
    const [a, b, c] = publishes(first);
    first.send({ cmd: 'puback', messageId: a.messageId, reasonCode: 0 } as Packet);
    await waitFor(() => outbox.depth.messages === 2, 5000);
    up.connack = { sessionPresent: true };
    first.socket.destroy();
    await waitFor(() => up.connections.length === 2 && publishes(up.connections[1]).length === 2, 5000);
    const again = publishes(up.connections[1]);
    expect(again.map((p) => [p.payload.toString(), p.messageId, p.dup])).toEqual([
      ['b', b.messageId, true],
      ['c', c.messageId, true],
    ]);
    // New messages never take an id that the resumed session may still hold.
    await publish('d');
    await waitFor(() => publishes(up.connections[1]).length === 3, 5000);
    const dId = publishes(up.connections[1])[2].messageId;
    expect([b.messageId, c.messageId]).not.toContain(dId);
  });

  it('re-sends unacknowledged messages as new ones (no DUP) when the broker lost the session', async () => {
    const up = d.add(await startFakeUpstream());
    const { bridge, publish } = await setup(up.url);
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    await Promise.all(['a', 'b'].map(publish));
    await waitFor(() => publishes(up.connections[0]).length === 2, 5000);
    up.connack = { sessionPresent: false };
    up.connections[0].socket.destroy();
    await waitFor(() => up.connections.length === 2 && publishes(up.connections[1]).length === 2, 5000);
    expect(publishes(up.connections[1]).map((p) => [p.payload.toString(), p.dup])).toEqual([
      ['a', false],
      ['b', false],
    ]);
  });

  it('ignores a PUBACK for an unknown packet id: nothing leaves the outbox early', async () => {
    const up = d.add(await startFakeUpstream());
    const { bridge, outbox, publish } = await setup(up.url);
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    await publish('a');
    const conn = up.connections[0];
    await waitFor(() => publishes(conn).length === 1, 5000);
    const id = publishes(conn)[0].messageId as number;
    conn.send({ cmd: 'puback', messageId: id === 1 ? 2 : id - 1, reasonCode: 0 } as Packet);
    await roundTrip(conn); // read after the stray PUBACK
    expect(outbox.depth.messages).toBe(1);
    conn.send({ cmd: 'puback', messageId: id, reasonCode: 0 } as Packet);
    await waitFor(() => outbox.depth.messages === 0, 5000);
  });

  it('reconnects when a socket stays open but acknowledges nothing for ackTimeoutS (stalled upstream)', async () => {
    const up = d.add(await startFakeUpstream());
    const { bridge, outbox, publish } = await setup(up.url, { ackTimeoutS: 0.5 });
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    await publish('a'); // never acknowledged on the first connection
    await waitFor(() => up.connections.length === 2, 5000);
    up.onPacket = (c, p) => {
      if (p.cmd === 'publish') c.send({ cmd: 'puback', messageId: p.messageId, reasonCode: 0 } as Packet);
    };
    for (const p of publishes(up.connections[1]))
      up.connections[1].send({ cmd: 'puback', messageId: p.messageId, reasonCode: 0 } as Packet);
    await waitFor(() => outbox.depth.messages === 0, 5000);
  });

  it('spreads the reconnects of many gateways while the upstream refuses them (decorrelated jitter, docs/reliability.md#fault-scenarios reconnect storm)', async () => {
    const up = d.add(await startFakeUpstream());
    up.refuse = true;
    const gateways = 20;
    const attempts = 5;
    for (let i = 0; i < gateways; i++) {
      const { bridge } = await setup(up.url, {
        reconnect: { minDelayMs: 50, maxDelayMs: 2000 },
        remote: { clientId: `gw-${i}` },
      });
      void bridge.start();
    }
    const nth = (clientId: string): number | undefined =>
      up.refused.filter((c) => c.clientId === clientId)[attempts - 1]?.atMs;
    const ids = Array.from({ length: gateways }, (_, i) => `gw-${i}`);
    await waitFor(() => ids.every((id) => nth(id) !== undefined), 30_000);
    // All started within a few ms; a backoff without jitter would keep them in lockstep, each attempt a burst.
    const times = ids.map((id) => nth(id)!).sort((a, b) => a - b);
    expect(times[times.length - 1] - times[0]).toBeGreaterThan(250);
    const busiest = Math.max(...times.map((t) => times.filter((u) => u >= t && u < t + 20).length));
    expect(busiest).toBeLessThanOrEqual(gateways / 2);
  });

  it('halves its window after DISCONNECT 0x93 Receive Maximum exceeded', async () => {
    const up = d.add(await startFakeUpstream());
    const { bridge, publish } = await setup(up.url, { inflight: 16 });
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    await Promise.all(Array.from({ length: 40 }, (_, i) => publish(`m${i}`)));
    await waitFor(() => publishes(up.connections[0]).length === 16, 5000);
    up.connections[0].send({ cmd: 'disconnect', reasonCode: 0x93 } as Packet);
    up.connections[0].socket.end();
    await waitFor(() => up.connections.length === 2 && publishes(up.connections[1]).length === 8, 5000);
    await roundTrip(up.connections[1]);
    expect(publishes(up.connections[1]).length).toBe(8);
  });

  it('drops a connection whose broker sends a malformed packet, reconnects, and loses nothing (docs/reliability.md rule 38)', async () => {
    const up = d.add(await startFakeUpstream());
    up.connack = { sessionPresent: true };
    // First connection: a PUBACK too short for a packet id (remaining length 1), which mqtt-packet reads as id -1.
    // Second: a PUBACK with reserved flag bits set [MQTT-2.2.2-2]. Then a well-behaved broker.
    const garbage = [Buffer.from([0x40, 0x01, 0x00]), Buffer.from([0x41, 0x02, 0x00, 0x01])];
    up.onPacket = (c, p) => {
      if (p.cmd !== 'publish') return;
      const n = up.connections.indexOf(c);
      if (n < garbage.length) c.socket.write(garbage[n]);
      else c.send({ cmd: 'puback', messageId: p.messageId, reasonCode: 0 } as Packet);
    };
    const { bridge, outbox, publish } = await setup(up.url);
    await bridge.start();
    await waitFor(() => up.connections.length === 1, 5000);
    await publish('a');
    await waitFor(() => up.connections.length === 3 && outbox.depth.messages === 0, 5000);
    // MQTT 5: the first violation is answered with DISCONNECT 0x81 Malformed Packet before the close.
    await waitFor(() => up.connections[0].packets.some((p) => p.cmd === 'disconnect'), 5000);
    expect(up.connections[0].packets.find((p) => p.cmd === 'disconnect')).toMatchObject({ reasonCode: 0x81 });
    expect(publishes(up.connections[2]).map((p) => [p.payload.toString(), p.dup])).toEqual([['a', true]]);
    expect(bridge.stats.acked).toBe(1);
  });

  /** An online bridge with one in filter `cmd/#` to a fake upstream that grants subscriptions; `local` collects what it publishes here. */
  async function inboundBridge(maxPacketBytes?: number) {
    const up = d.add(await startFakeUpstream());
    up.onPacket = (c, p) => {
      if (p.cmd === 'subscribe')
        c.send({ cmd: 'suback', messageId: p.messageId, granted: [1], reasonCode: 0 } as unknown as Packet);
    };
    const { broker } = testBroker();
    const local: Message[] = [];
    broker.subscribe('cmd/#', { qos: 1, origin: 'observer' }, (msg) => {
      local.push(msg);
    });
    const config = bridgeConfig([up.url], {
      topics: [{ filter: 'cmd/#', direction: 'in', localPrefix: '', remotePrefix: '' }] as BridgeConfig['topics'],
    });
    const bridge = d.add(
      new Bridge({
        config,
        broker,
        outbox: createMemoryStore().outbox(config.name, config.queue),
        log: silentLogger,
        maxPacketBytes,
      }),
    );
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    return { up, bridge, local };
  }

  it('announces its Maximum Packet Size (MQTT 5) and drops a connection whose broker sends a larger packet, unpublished [MQTT-3.1.2-24]', async () => {
    const maxPacketBytes = 1024;
    const { up, bridge, local } = await inboundBridge(maxPacketBytes);
    const connect = up.connections[0].packets.find((p) => p.cmd === 'connect') as Packet & {
      properties?: { maximumPacketSize?: number };
    };
    expect(connect.properties?.maximumPacketSize).toBe(maxPacketBytes);
    up.connections[0].send({
      cmd: 'publish',
      topic: 'cmd/big',
      payload: Buffer.alloc(2000),
      qos: 0,
      retain: false,
      dup: false,
    } as Packet);
    await waitFor(() => up.connections.length === 2, 5000);
    // Dropped before it was handled: not published locally. What fits goes through on the next connection.
    await waitFor(() => bridge.status.type === 'online', 5000);
    up.connections[1].send({
      cmd: 'publish',
      topic: 'cmd/small',
      payload: Buffer.from('ok'),
      qos: 0,
      retain: false,
      dup: false,
    } as Packet);
    await waitFor(() => local.length === 1, 5000);
    expect(local.map((m) => m.payload.toString())).toEqual(['ok']);
    // Refused at its fixed header: a PUBLISH declaring 10 MB is not waited for, the connection drops at once.
    up.connections[1].socket.write(Buffer.from([0x30, 0x80, 0xad, 0xe2, 0x04]));
    await waitFor(() => up.connections.length === 3, 5000);
  });

  it('drops a connection whose broker uses a Topic Alias it was never allowed, with DISCONNECT 0x94, unpublished [MQTT-3.3.2-11]', async () => {
    const { up, local } = await inboundBridge();
    up.connections[0].send({
      cmd: 'publish',
      topic: 'cmd/a',
      payload: Buffer.from('x'),
      qos: 0,
      retain: false,
      dup: false,
      properties: { topicAlias: 1 },
    } as Packet);
    await waitFor(() => up.connections[0].packets.some((p) => p.cmd === 'disconnect'), 5000);
    expect(up.connections[0].packets.find((p) => p.cmd === 'disconnect')).toMatchObject({ reasonCode: 0x94 });
    await waitFor(() => up.connections.length === 2, 5000);
    expect(local).toEqual([]);
  });

  describe('QoS 2 upstream: exactly once across reconnects and restarts', () => {
    /** A QoS 2 bridge whose message 'a' the broker received (PUBREC) and never completed (no PUBCOMP). */
    async function receivedNotCompleted() {
      const up = d.add(await startFakeUpstream());
      answerQoS2(up, { complete: false });
      const { bridge, outbox, publish } = await setup(up.url, {}, 2);
      await bridge.start();
      await waitFor(() => up.connections.length === 1, 5000);
      await publish('a');
      const first = up.connections[0];
      await waitFor(() => flows(first).length === 2, 5000);
      return { up, bridge, outbox, first };
    }

    it('completes a message the broker received (PUBREC) with PUBREL only on a resumed session, under the same packet id [MQTT-4.4.0-1]', async () => {
      const { up, outbox, first } = await receivedNotCompleted();
      const [[, , id]] = flows(first);
      expect(flows(first)).toEqual([
        ['publish', 'a', id],
        ['pubrel', '', id],
      ]);
      up.connack = { sessionPresent: true };
      first.socket.destroy();
      await waitFor(() => up.connections.length === 2 && flows(up.connections[1]).length === 1, 5000);
      expect(flows(up.connections[1])).toEqual([['pubrel', '', id]]);
      expect(outbox.depth.messages).toBe(1);
      up.connections[1].send({ cmd: 'pubcomp', messageId: id, reasonCode: 0 } as Packet);
      await waitFor(() => outbox.depth.messages === 0, 5000);
    });

    it('after a restart, releases what the broker received and publishes the rest under their former packet ids, from the LMDB outbox', async () => {
      const up = d.add(await startFakeUpstream());
      answerQoS2(up, { complete: false, withhold: ['b'] });
      const dir = d.tempDir();
      const config = bridgeConfig([up.url]);
      const firstStore = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger });
      const first = await setup(up.url, {}, 2, firstStore.outbox(config.name, config.queue));
      await first.bridge.start();
      await waitFor(() => up.connections.length === 1, 5000);
      await first.publish('a');
      await first.publish('b');
      // PUBREL goes out only once the receipt of 'a' is durable; 'b' never got a PUBREC.
      await waitFor(() => flows(up.connections[0]).length === 3, 5000);
      const before = flows(up.connections[0]);
      expect(before.map(([cmd, payload]) => [cmd, payload])).toEqual([
        ['publish', 'a'],
        ['publish', 'b'],
        ['pubrel', ''],
      ]);
      const [idA, idB] = [before[0][2], before[1][2]];
      await first.bridge.stop();
      await firstStore.close();

      up.connack = { sessionPresent: true };
      answerQoS2(up, { complete: true });
      const store = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger });
      d.defer(() => store.close());
      const second = await setup(up.url, {}, 2, store.outbox(config.name, config.queue));
      await second.bridge.start();
      await waitFor(() => second.outbox.depth.messages === 0, 5000);
      const after = flows(up.connections[1]);
      // 'a' is never published again: the broker has it and only waits for PUBREL [MQTT-4.3.3-10].
      expect(after.slice(0, 2)).toEqual([
        ['pubrel', '', idA],
        ['publish', 'b', idB],
      ]);
      expect(after.filter(([cmd]) => cmd === 'publish')).toHaveLength(1);
    });

    it('counts a received message as delivered when the broker lost the session, without sending it again', async () => {
      const { up, bridge, outbox, first } = await receivedNotCompleted();
      up.connack = { sessionPresent: false };
      first.socket.destroy();
      await waitFor(() => up.connections.length === 2 && outbox.depth.messages === 0, 5000);
      expect(flows(up.connections[1])).toEqual([]);
      expect(bridge.stats.acked).toBe(1);
    });

    it('frees the packet id of an unacknowledged message dropped by the outbox limits: PUBREL on the resumed session, no PUBLISH [MQTT-4.3.3-10]', async () => {
      const up = d.add(await startFakeUpstream());
      // The first connection acknowledges nothing: 'a' and then 'b' stay in flight.
      const { bridge, outbox, publish } = await setup(
        up.url,
        {
          queue: {
            maxBytes: 1 << 30,
            maxMessages: 1,
            maxAgeS: 0,
            overflow: 'drop-oldest',
            deadLetter: { maxMessages: 0, maxBytes: 1 },
          },
        },
        2,
      );
      await bridge.start();
      await waitFor(() => up.connections.length === 1, 5000);
      await publish('a');
      const first = up.connections[0];
      await waitFor(() => flows(first).length === 1, 5000);
      const [[, , idA]] = flows(first);
      await publish('b'); // the outbox holds one message: 'a' is dropped while the broker may hold its id
      await waitFor(() => flows(first).length === 2, 5000);
      const [, [, , idB]] = flows(first);
      expect(outbox.depth.dropped.queue_full).toBe(1);

      up.connack = { sessionPresent: true };
      answerQoS2(up, { complete: true });
      up.onPacket = ((answer) => (c: FakeConnection, p: Packet) => {
        answer(c, p);
        if (p.cmd === 'pubrel' && p.messageId === idA)
          c.send({ cmd: 'pubcomp', messageId: idA, reasonCode: 0 } as Packet);
      })(up.onPacket);
      first.socket.destroy();
      await waitFor(() => up.connections.length === 2 && outbox.depth.messages === 0, 5000);
      await waitFor(() => flows(up.connections[1]).length === 3, 5000);
      // 'a' is released under its id and never published again; 'b' goes again with DUP, then completes.
      expect(flows(up.connections[1])).toEqual([
        ['pubrel', '', idA],
        ['publish', 'b', idB],
        ['pubrel', '', idB],
      ]);
      expect(publishes(up.connections[1])[0].dup).toBe(true);
      expect(bridge.stats.acked).toBe(1);
      expect(outbox.depth.dropped.queue_full).toBe(1);
    });

    it('publishes an inbound QoS 2 message locally before its PUBREC, so a restart before PUBREL loses nothing and PUBREL completes it [MQTT-4.3.3-9]', async () => {
      const up = d.add(await startFakeUpstream());
      up.connack = { sessionPresent: true };
      const received: { cmd: string; at: number }[] = [];
      up.onPacket = (c, p) => {
        if (p.cmd === 'subscribe')
          c.send({ cmd: 'suback', messageId: p.messageId, granted: [2], reasonCode: 0 } as unknown as Packet);
        if (p.cmd === 'pubrec' || p.cmd === 'pubcomp') received.push({ cmd: p.cmd, at: local.length });
      };
      const { broker } = testBroker();
      const local: string[] = [];
      broker.subscribe('cmd/#', { qos: 2, origin: 'observer' }, (msg) => {
        local.push(msg.payload.toString());
      });
      const config = bridgeConfig([up.url], {
        topics: [{ filter: 'cmd/#', direction: 'in', localPrefix: '', remotePrefix: '' }],
      });
      const start = async () => {
        const bridge = new Bridge({
          config,
          broker,
          outbox: createMemoryStore().outbox(config.name, config.queue),
          log: silentLogger,
        });
        await bridge.start();
        await waitFor(() => bridge.status.type === 'online', 5000);
        return bridge;
      };
      const first = await start();
      const publish = {
        cmd: 'publish',
        topic: 'cmd/stop',
        payload: Buffer.from('now'),
        qos: 2,
        retain: false,
        dup: false,
        messageId: 7,
      } as Packet;
      up.connections[0].send(publish);
      await waitFor(() => received.length === 1, 5000);
      // Already in the local broker when PUBREC leaves: the central broker now only sends PUBREL.
      expect(received).toEqual([{ cmd: 'pubrec', at: 1 }]);
      // The same PUBLISH again (the PUBREC may not have arrived) is acknowledged, not published twice.
      up.connections[0].send({ ...publish, dup: true } as Packet);
      await waitFor(() => received.length === 2, 5000);
      expect(local).toEqual(['now']);

      // A restart before PUBREL: a new process knows nothing of id 7; the resumed session sends PUBREL.
      await first.stop();
      const second = d.add(await start());
      up.connections[1].send({ cmd: 'pubrel', messageId: 7 } as Packet);
      await waitFor(() => received.some((r) => r.cmd === 'pubcomp'), 5000);
      expect(local).toEqual(['now']);
      expect(second.status.type).toBe('online');
    });

    it('publishes an inbound QoS 2 message once when the broker sends it again while the first is still being published, and answers both with PUBREC after it [MQTT-4.3.3-9]', async () => {
      const up = d.add(await startFakeUpstream());
      const pubrecs: number[] = [];
      up.onPacket = (c, p) => {
        if (p.cmd === 'subscribe')
          c.send({ cmd: 'suback', messageId: p.messageId, granted: [2], reasonCode: 0 } as unknown as Packet);
        if (p.cmd === 'pubrec') pubrecs.push(local.length);
      };
      const { broker } = testBroker();
      const local: string[] = [];
      broker.subscribe('cmd/#', { qos: 2, origin: 'observer' }, (msg) => {
        local.push(msg.payload.toString());
      });
      const config = bridgeConfig([up.url], {
        topics: [{ filter: 'cmd/#', direction: 'in', localPrefix: '', remotePrefix: '' }],
      });
      const bridge = d.add(
        new Bridge({
          config,
          broker,
          outbox: createMemoryStore().outbox(config.name, config.queue),
          log: silentLogger,
        }),
      );
      await bridge.start();
      await waitFor(() => bridge.status.type === 'online', 5000);
      // Both in one read: the second arrives before the first is published locally.
      const publish = {
        cmd: 'publish',
        topic: 'cmd/open',
        payload: Buffer.from('valve'),
        qos: 2,
        retain: false,
        dup: false,
        messageId: 9,
      } as Packet;
      const generate = (packet: Packet) => mqttPacket.generate(packet, { protocolVersion: 5 });
      up.connections[0].socket.write(Buffer.concat([generate(publish), generate({ ...publish, dup: true } as Packet)]));
      await waitFor(() => pubrecs.length === 2, 5000);
      expect(local).toEqual(['valve']);
      expect(pubrecs).toEqual([1, 1]);
    });

    it('drops a message refused at PUBREC (reason >= 0x80) without PUBREL, counted as rejected_upstream', async () => {
      const up = d.add(await startFakeUpstream());
      up.onPacket = (c, p) => {
        if (p.cmd === 'publish') c.send({ cmd: 'pubrec', messageId: p.messageId, reasonCode: 0x87 } as Packet);
      };
      const { bridge, outbox, publish } = await setup(up.url, {}, 2);
      await bridge.start();
      await waitFor(() => up.connections.length === 1, 5000);
      await publish('a');
      await waitFor(() => outbox.depth.dropped.rejected_upstream === 1 && outbox.depth.messages === 0, 5000);
      await roundTrip(up.connections[0]);
      expect(flows(up.connections[0]).map(([cmd]) => cmd)).toEqual(['publish']);
    });
  });
  describe('the uplink engine: keepalive, CONNECT, DISCONNECT', () => {
    it('sends a PINGREQ every keepalive, and drops a link whose PINGRESP does not come within 1.5x keepalive, long before ackTimeoutS [MQTT-3.1.2-23]', async () => {
      const up = d.add(await startFakeUpstream());
      const { bridge } = await setup(up.url, { ackTimeoutS: 60, remote: { keepaliveS: 1 } });
      await bridge.start();
      await waitFor(() => up.connections.length === 1, 5000);
      const first = up.connections[0];
      const pings = (): number => first.packets.filter((p) => p.cmd === 'pingreq').length;
      // Answered: one PINGREQ a keepalive, never sooner (a lower bound), and the link stays through them.
      await waitFor(() => pings() >= 2, 5000);
      const secondPingAt = performance.now();
      await waitFor(() => pings() >= 4, 5000);
      expect(performance.now() - secondPingAt).toBeGreaterThanOrEqual(1500);
      expect(up.connections).toHaveLength(1);
      // Unanswered: dropped at the next keepalive timeout (1.5 s; the bound is far below ackTimeoutS, 60 s).
      up.answerPings = false;
      await waitFor(() => first.socket.destroyed || first.socket.readableEnded, 5000);
      up.answerPings = true;
      await waitFor(() => up.connections.length === 2 && bridge.status.type === 'online', 5000);
    });

    it('sends its CONNECT with the MQTT 5 properties, credentials and the Will (remaining expiry), and DISCONNECT 0x00 on stop so the broker discards the Will [MQTT-3.1.2-8]', async () => {
      const up = d.add(await startFakeUpstream());
      const { broker } = testBroker();
      const config = bridgeConfig([up.url], {
        remote: { username: 'gw', password: 'secret', keepaliveS: 15, sessionExpiryS: 600, cleanStart: true },
      });
      const deathMsg = createMessage({
        topic: 'plant/death',
        payload: Buffer.from('bye'),
        qos: 1,
        retain: true,
        origin: 'sparkplug',
        properties: { contentType: 'text/plain' },
      });
      const will = () => ({ ...deathMsg, expiresAt: performance.now() + 120_000 });
      const bridge = new Bridge({
        config,
        broker,
        outbox: createMemoryStore().outbox(config.name, config.queue),
        hooks: { will },
        log: silentLogger,
        maxPacketBytes: 4096,
      });
      await bridge.start();
      await waitFor(() => bridge.status.type === 'online', 5000);
      const connect = up.connections[0].packets[0] as Packet & { cmd: 'connect' };
      expect(connect).toMatchObject({
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: 5,
        clean: true,
        keepalive: 15,
        clientId: 'edgeferry-test',
        username: 'gw',
        properties: { sessionExpiryInterval: 600, maximumPacketSize: 4096 },
        will: { topic: 'plant/death', qos: 1, retain: true, properties: { contentType: 'text/plain' } },
      });
      expect(connect.password?.toString()).toBe('secret');
      expect(connect.will?.payload.toString()).toBe('bye');
      const expiryS = connect.will?.properties?.messageExpiryInterval ?? 0;
      expect(expiryS).toBeGreaterThan(110);
      expect(expiryS).toBeLessThanOrEqual(120);
      await bridge.stop();
      expect(up.connections[0].packets.at(-1)).toMatchObject({ cmd: 'disconnect', reasonCode: 0 });
    });

    it('answers a packet above its Maximum Packet Size with DISCONNECT 0x95 Packet too large before it closes [MQTT-3.1.2-25]', async () => {
      const up = d.add(await startFakeUpstream());
      const { broker } = testBroker();
      const config = bridgeConfig([up.url], {
        topics: [{ filter: 'cmd/#', direction: 'in', localPrefix: '', remotePrefix: '' }] as BridgeConfig['topics'],
      });
      const bridge = d.add(
        new Bridge({
          config,
          broker,
          outbox: createMemoryStore().outbox(config.name, config.queue),
          log: silentLogger,
          maxPacketBytes: 1024,
        }),
      );
      await bridge.start();
      await waitFor(() => bridge.status.type === 'online', 5000);
      up.connections[0].send({
        cmd: 'publish',
        topic: 'cmd/big',
        payload: Buffer.alloc(2000),
        qos: 0,
        retain: false,
        dup: false,
      } as Packet);
      await waitFor(() => up.connections[0].packets.some((p) => p.cmd === 'disconnect'), 5000);
      expect(up.connections[0].packets.find((p) => p.cmd === 'disconnect')).toMatchObject({ reasonCode: 0x95 });
    });
  });
});
