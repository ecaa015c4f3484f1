/**
 * Load generator worker, forked by `run.ts`. It speaks MQTT 3.1.1 over raw `net` sockets with pre-encoded
 * packets and is driven over IPC by small request/response messages (`LoadgenRequest` → `LoadgenResponse`).
 * One worker holds at most one subscriber group, one publisher group and one set of idle connections.
 */
import net from 'node:net';
import {
  PacketReader,
  PacketType,
  disconnectPacket,
  encodeConnect,
  encodePublish,
  encodeSubscribe,
  publishPayloadOffset,
  type PacketHandler,
} from './mqtt-wire.js';

export interface Endpoint {
  clientId: string;
  topic: string; // publish topic (publishers) or topic filter (subscribers)
}

export interface SubscribeArgs {
  port: number;
  clients: Endpoint[];
  qos: 0 | 1;
  latency: boolean; // read the send timestamp from each payload
  warmupSeq: number; // latency samples with a lower sequence number are discarded
  trackSeq: boolean; // read (sequence, publisher index) from each payload for the flood's flow control
}

export interface PublisherConnectArgs {
  port: number;
  clients: Endpoint[];
  qos: 0 | 1;
  payloadBytes: number;
}

export type PublishMode =
  // QoS 0: write as fast as the broker delivers, with at most `backlogMessages` per publisher not yet seen by
  // every subscriber (the subscribers must live in the same worker); 0: as fast as the broker reads (overload).
  // `stamp`: each packet carries its send time and sequence, for latency.
  | { type: 'flood'; durationMs: number; backlogMessages: number; stamp?: boolean }
  | { type: 'window'; durationMs: number; window: number; stamp?: boolean } // QoS 1: at most `window` unacknowledged
  | { type: 'rate'; durationMs: number; ratePerS: number }; // fixed rate across this worker's publishers

export interface PublishResult {
  sent: number;
  acked: number;
  startNs: string; // process.hrtime.bigint(): CLOCK_MONOTONIC, comparable across processes on one host
  endNs: string;
  drained: boolean; // every written byte left user space and (QoS 1) every PUBLISH was acknowledged
}

export interface CollectArgs {
  expected: number;
  quietMs: number;
  deadlineMs: number;
  /** process.hrtime.bigint() as a string: `deliveredByCutoff` counts what arrived up to then (the end of publishing). */
  cutoffNs?: string;
}

export interface CollectResult {
  delivered: number;
  firstNs: string;
  lastNs: string;
  latenciesMs: number[];
  truncated: boolean; // the deadline ended the wait while messages were still arriving
  deliveredByCutoff: number;
}

export interface IdleArgs {
  port: number;
  prefix: string;
  count: number;
  concurrency: number;
}

export interface IdleResult {
  connected: number;
  failed: number;
  firstError: string | null;
}

export interface ErrorReport {
  socketErrors: number;
  unexpectedCloses: number;
  firstError: string | null;
}

export type LoadgenRequest =
  | { id: number; op: 'subscribe'; args: SubscribeArgs }
  | { id: number; op: 'collect'; args: CollectArgs }
  | { id: number; op: 'pubConnect'; args: PublisherConnectArgs }
  | { id: number; op: 'pubRun'; args: PublishMode }
  | { id: number; op: 'connectIdle'; args: IdleArgs }
  | { id: number; op: 'closeAll'; args: Record<string, never> };

export type LoadgenResponse = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: string };

/**
 * Payload layout (the rest is filler): [0, 8) send time, process.hrtime.bigint() (rate mode);
 * [8, 12) sequence number (rate: per message; flood: per chunk); [12, 14) publisher index in its worker (flood).
 */
const stampOffset = 0;
const seqOffset = 8;
const publisherIndexOffset = 12;

const connectTimeoutMs = 30_000;

const errors: ErrorReport = { socketErrors: 0, unexpectedCloses: 0, firstError: null };
const openClients = new Set<Client>();

function noteError(message: string): void {
  errors.socketErrors++;
  errors.firstError ??= message;
}

class Client {
  readonly sock: net.Socket;
  /** hrtime of the chunk being parsed: every packet in one chunk arrived at the same moment for us. */
  chunkNs = 0n;
  onPacket: PacketHandler = () => {};
  /** Called after each chunk is parsed, e.g. to flush batched PUBACKs. */
  afterChunk: () => void = () => {};
  private closing = false;
  private readonly closed: Promise<void>;

  constructor(port: number) {
    this.sock = net.connect({ port, host: '127.0.0.1', noDelay: true });
    const reader = new PacketReader((type, flags, buf, start, end) => this.onPacket(type, flags, buf, start, end));
    this.sock.on('data', (chunk: Buffer) => {
      this.chunkNs = process.hrtime.bigint();
      reader.push(chunk);
      this.afterChunk();
    });
    this.sock.on('error', (err) => noteError(err.message));
    this.closed = new Promise((resolve) => {
      this.sock.on('close', () => {
        openClients.delete(this);
        if (!this.closing) errors.unexpectedCloses++;
        resolve();
      });
    });
    openClients.add(this);
  }

  /** CONNECT, then wait for a CONNACK with return code 0. */
  connect(clientId: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => fail(new Error(`no CONNACK for ${clientId} in ${connectTimeoutMs} ms`)),
        connectTimeoutMs,
      );
      const fail = (err: Error): void => {
        clearTimeout(timer);
        this.onPacket = () => {};
        void this.close(); // never rejects
        reject(err);
      };
      const onClose = (): void => fail(new Error(`connection closed before CONNACK (${clientId})`));
      this.sock.once('close', onClose);
      this.onPacket = (type, _flags, buf, start) => {
        if (type !== PacketType.connack) return fail(new Error(`expected CONNACK, got packet type ${type}`));
        const code = buf[start + 1];
        if (code !== 0) return fail(new Error(`CONNACK return code ${code} (${clientId})`));
        clearTimeout(timer);
        this.sock.off('close', onClose);
        this.onPacket = () => {};
        resolve();
      };
      this.sock.write(encodeConnect(clientId, 0));
    });
  }

  subscribe(filter: string, qos: 0 | 1): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no SUBACK for ${filter} in ${connectTimeoutMs} ms`)),
        connectTimeoutMs,
      );
      this.onPacket = (type, _flags, buf, _start, end) => {
        if (type !== PacketType.suback) return;
        clearTimeout(timer);
        const granted = buf[end - 1];
        if (granted === 0x80) return reject(new Error(`SUBSCRIBE ${filter} refused`));
        resolve();
      };
      this.sock.write(encodeSubscribe(1, filter, qos));
    });
  }

  close(): Promise<void> {
    if (!this.closing) {
      this.closing = true;
      if (this.sock.writable) this.sock.end(disconnectPacket);
      // A broker that keeps the socket open after DISCONNECT must not stall the benchmark.
      setTimeout(() => this.sock.destroy(), 2000).unref();
    }
    return this.closed;
  }
}

async function openClient(port: number, clientId: string): Promise<Client> {
  const client = new Client(port);
  await client.connect(clientId);
  return client;
}

// ---- subscribers ----------------------------------------------------------------------------------------

interface SubscriberGroup {
  clients: Client[];
  /** Per client: the highest flood sequence seen from each publisher of this worker (-1: none yet). */
  highest: Int32Array[];
  /** Called after a chunk that delivered something: wakes publishers waiting for the backlog to shrink. */
  onProgress: () => void;
  delivered: number;
  firstNs: bigint;
  lastNs: bigint;
  latenciesMs: number[];
  /** Per chunk that delivered something: when it was read, and the deliveries so far (for `deliveredByCutoff`). */
  progressNs: bigint[];
  progressCount: number[];
}

let subscribers: SubscriberGroup | null = null;
const maxPublishersPerWorker = 64;

async function subscribe(args: SubscribeArgs): Promise<{ ready: number }> {
  const group: SubscriberGroup = {
    clients: [],
    highest: [],
    onProgress: () => {},
    delivered: 0,
    firstNs: 0n,
    lastNs: 0n,
    latenciesMs: [],
    progressNs: [],
    progressCount: [],
  };
  subscribers = group;
  await Promise.all(
    args.clients.map(async (endpoint) => {
      const client = await openClient(args.port, endpoint.clientId);
      await client.subscribe(endpoint.topic, args.qos);
      group.clients.push(client);
      const highest = new Int32Array(maxPublishersPerWorker).fill(-1);
      group.highest.push(highest);
      const acks: number[] = [];
      let receivedInChunk = 0;
      client.onPacket = (type, flags, buf, start) => {
        if (type !== PacketType.publish) return;
        group.delivered++;
        receivedInChunk++;
        let pos = start + 2 + buf.readUInt16BE(start);
        if (((flags >> 1) & 3) > 0) {
          acks.push(buf.readUInt16BE(pos));
          pos += 2;
        }
        if (args.latency) {
          const sentNs = buf.readBigUInt64BE(pos + stampOffset);
          if (buf.readUInt32BE(pos + seqOffset) >= args.warmupSeq) {
            group.latenciesMs.push(Number(client.chunkNs - sentNs) / 1e6);
          }
        } else if (args.trackSeq) {
          const seq = buf.readUInt32BE(pos + seqOffset);
          const publisher = buf.readUInt16BE(pos + publisherIndexOffset);
          if (publisher < maxPublishersPerWorker && seq > highest[publisher]) highest[publisher] = seq;
        }
      };
      client.afterChunk = () => {
        if (receivedInChunk > 0) {
          receivedInChunk = 0;
          if (group.firstNs === 0n) group.firstNs = client.chunkNs;
          if (client.chunkNs > group.lastNs) group.lastNs = client.chunkNs;
          group.progressNs.push(client.chunkNs);
          group.progressCount.push(group.delivered);
          group.onProgress();
        }
        if (acks.length === 0) return;
        // One write for all PUBACKs of a chunk.
        const out = Buffer.allocUnsafe(4 * acks.length);
        for (let i = 0; i < acks.length; i++) {
          out[4 * i] = 0x40;
          out[4 * i + 1] = 0x02;
          out.writeUInt16BE(acks[i], 4 * i + 2);
        }
        acks.length = 0;
        client.sock.write(out);
      };
    }),
  );
  return { ready: group.clients.length };
}

async function collect(args: CollectArgs): Promise<CollectResult> {
  const group = subscribers;
  if (group === null) throw new Error('collect before subscribe');
  const startedMs = Date.now();
  let lastSeen = group.delivered;
  let lastChangeMs = Date.now();
  let truncated = false;
  for (;;) {
    if (group.delivered >= args.expected) break;
    const nowMs = Date.now();
    if (group.delivered !== lastSeen) {
      lastSeen = group.delivered;
      lastChangeMs = nowMs;
    } else if (nowMs - lastChangeMs >= args.quietMs) {
      break;
    }
    if (nowMs - startedMs >= args.deadlineMs) {
      truncated = true;
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  let deliveredByCutoff = group.delivered;
  if (args.cutoffNs !== undefined) {
    const cutoff = BigInt(args.cutoffNs);
    const after = group.progressNs.findIndex((ns) => ns > cutoff);
    if (after >= 0) deliveredByCutoff = after === 0 ? 0 : group.progressCount[after - 1];
  }
  return {
    delivered: group.delivered,
    firstNs: group.firstNs.toString(),
    lastNs: group.lastNs.toString(),
    latenciesMs: group.latenciesMs,
    truncated,
    deliveredByCutoff,
  };
}

// ---- publishers -----------------------------------------------------------------------------------------

interface Publisher {
  client: Client;
  topic: string;
  sent: number;
  acked: number;
}

interface PublisherGroup {
  publishers: Publisher[];
  qos: 0 | 1;
  payloadBytes: number;
}

let publishers: PublisherGroup | null = null;

async function pubConnect(args: PublisherConnectArgs): Promise<{ ready: number }> {
  const group: PublisherGroup = { publishers: [], qos: args.qos, payloadBytes: args.payloadBytes };
  publishers = group;
  await Promise.all(
    args.clients.map(async (endpoint) => {
      const client = await openClient(args.port, endpoint.clientId);
      group.publishers.push({ client, topic: endpoint.topic, sent: 0, acked: 0 });
    }),
  );
  return { ready: group.publishers.length };
}

/**
 * QoS 0 flood with a bounded backlog. An open-loop flood fills the loopback socket buffers (several MB per
 * connection) faster than any broker drains them, so a 3 s flood turns into a much longer drain and QoS 0
 * losses cannot be told from messages still queued. Here each publisher stops while more than
 * `backlogMessages` of its messages have not been seen by the slowest subscriber (tracked by sequence
 * number, so a broker that drops messages does not stall the loop); the broker always has work queued, and
 * the drain after the flood takes a fraction of a second.
 */
function runFlood(group: PublisherGroup, backlogMessages: number, stamp: boolean, isRunning: () => boolean): void {
  const subs = subscribers;
  const bounded = backlogMessages > 0;
  if (bounded && (subs === null || subs.clients.length === 0))
    throw new Error('a bounded flood needs its subscribers in the same worker');
  if (group.publishers.length > maxPublishersPerWorker)
    throw new Error(`at most ${maxPublishersPerWorker} publishers per worker`);
  const copies = 64; // packets per write: one syscall moves about 5 KB
  const maxChunks = Math.max(2, Math.ceil(backlogMessages / copies));
  const wakers: (() => void)[] = [];
  group.publishers.forEach((pub, index) => {
    const payload = Buffer.alloc(group.payloadBytes, 0x61);
    payload.writeUInt16BE(index, publisherIndexOffset);
    const one = encodePublish(pub.topic, payload, 0);
    const template = Buffer.concat(Array.from({ length: copies }, () => one));
    const payloadAt = publishPayloadOffset(pub.topic, group.payloadBytes, 0);
    const seqAt = payloadAt + seqOffset;
    let chunkSeq = 0;
    let state: 'scheduled' | 'drain' | 'backlog' | 'stopped' = 'scheduled';
    const slowestSeen = (): number => {
      let min = Number.MAX_SAFE_INTEGER;
      for (const highest of subs?.highest ?? []) if (highest[index] < min) min = highest[index];
      return min;
    };
    const pump = (): void => {
      state = 'scheduled';
      for (let i = 0; i < 8; i++) {
        if (!isRunning()) {
          state = 'stopped';
          return;
        }
        if (bounded && chunkSeq - 1 - slowestSeen() >= maxChunks) {
          state = 'backlog';
          return;
        }
        // A fresh copy per write: the socket may still hold the previous chunk, and only the sequence
        // numbers differ from the pre-encoded template.
        const chunk = Buffer.allocUnsafe(template.length);
        template.copy(chunk);
        for (let k = 0; k < copies; k++) chunk.writeUInt32BE(chunkSeq, k * one.length + seqAt);
        if (stamp) {
          const nowNs = process.hrtime.bigint();
          for (let k = 0; k < copies; k++) chunk.writeBigUInt64BE(nowNs, k * one.length + payloadAt + stampOffset);
        }
        chunkSeq++;
        pub.sent += copies;
        if (!pub.client.sock.write(chunk)) {
          state = 'drain';
          pub.client.sock.once('drain', pump);
          return;
        }
      }
      // Yield so timers and other sockets run even when the kernel accepts every write at once.
      setImmediate(pump);
    };
    wakers.push(() => {
      if (state === 'backlog') pump();
    });
    pump();
  });
  if (subs !== null) {
    subs.onProgress = () => {
      for (const wake of wakers) wake();
    };
  }
}

function runWindow(group: PublisherGroup, window: number, stamp: boolean, isRunning: () => boolean): void {
  for (const pub of group.publishers) {
    const payloadAt = publishPayloadOffset(pub.topic, group.payloadBytes, 1);
    /** The send time and sequence, written into a packet just before it goes out. */
    const stamped = (packet: Buffer, seq: number): Buffer => {
      if (stamp) {
        packet.writeBigUInt64BE(process.hrtime.bigint(), payloadAt + stampOffset);
        packet.writeUInt32BE(seq, payloadAt + seqOffset);
      }
      return packet;
    };
    // One pre-encoded packet per packet id; an id is written again only after its PUBACK, so reusing the
    // Buffer is safe.
    const payload = Buffer.alloc(group.payloadBytes, 0x61);
    const packets = Array.from({ length: window + 1 }, (_, id) =>
      id === 0 ? Buffer.alloc(0) : encodePublish(pub.topic, payload, 1, id),
    );
    const ready: Buffer[] = [];
    pub.client.onPacket = (type, _flags, buf, start) => {
      if (type !== PacketType.puback) return;
      pub.acked++;
      const id = buf.readUInt16BE(start);
      if (isRunning() && id > 0 && id <= window) ready.push(stamped(packets[id], pub.sent + ready.length));
    };
    // All PUBLISHes released by one chunk of PUBACKs go out in one write.
    pub.client.afterChunk = () => {
      if (ready.length === 0) return;
      pub.sent += ready.length;
      // One write per chunk of PUBACKs: a Node socket write costs far more than copying 80 bytes.
      pub.client.sock.write(ready.length === 1 ? ready[0] : Buffer.concat(ready));
      ready.length = 0;
    };
    pub.client.sock.cork();
    for (let id = 1; id <= window; id++) {
      pub.client.sock.write(stamped(packets[id], pub.sent));
      pub.sent++;
    }
    pub.client.sock.uncork();
  }
}

function runRate(group: PublisherGroup, ratePerS: number, isRunning: () => boolean, startNs: bigint): void {
  const perPublisherRate = ratePerS / group.publishers.length;
  const maxOutstanding = 60_000; // stays below the 65,535 packet ids
  for (const pub of group.publishers) {
    const template = encodePublish(pub.topic, Buffer.alloc(group.payloadBytes, 0x61), group.qos, 1);
    const payloadOffset = publishPayloadOffset(pub.topic, group.payloadBytes, group.qos);
    const idOffset = payloadOffset - 2;
    let nextId = 1;
    pub.client.onPacket = (type) => {
      if (type === PacketType.puback) pub.acked++;
    };
    const tick = (): void => {
      if (!isRunning()) return;
      const nowNs = process.hrtime.bigint();
      const due = Math.floor((Number(nowNs - startNs) / 1e9) * perPublisherRate) - pub.sent;
      if (due > 0) {
        pub.client.sock.cork();
        for (let i = 0; i < due; i++) {
          if (group.qos > 0 && pub.sent - pub.acked >= maxOutstanding) break;
          const packet = Buffer.from(template);
          if (group.qos > 0) {
            packet.writeUInt16BE(nextId, idOffset);
            nextId = nextId === 65535 ? 1 : nextId + 1;
          }
          packet.writeBigUInt64BE(process.hrtime.bigint(), payloadOffset + stampOffset);
          packet.writeUInt32BE(pub.sent, payloadOffset + seqOffset);
          pub.sent++;
          pub.client.sock.write(packet);
        }
        pub.client.sock.uncork();
      }
      setTimeout(tick, 1);
    };
    tick();
  }
}

async function pubRun(mode: PublishMode): Promise<PublishResult> {
  const group = publishers;
  if (group === null) throw new Error('pubRun before pubConnect');
  let running = true;
  const isRunning = (): boolean => running;
  const startNs = process.hrtime.bigint();
  if (mode.type === 'flood') runFlood(group, mode.backlogMessages, mode.stamp === true, isRunning);
  else if (mode.type === 'window') runWindow(group, mode.window, mode.stamp === true, isRunning);
  else runRate(group, mode.ratePerS, isRunning, startNs);
  await new Promise((resolve) => setTimeout(resolve, mode.durationMs));
  running = false;
  const endNs = process.hrtime.bigint();
  // Wait until every byte left user space and every QoS 1 PUBLISH was acknowledged (bounded).
  const deadline = Date.now() + 15_000;
  const settled = (): boolean =>
    group.publishers.every((p) => p.client.sock.writableLength === 0 && (group.qos === 0 || p.acked >= p.sent));
  while (!settled() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  return {
    sent: group.publishers.reduce((sum, p) => sum + p.sent, 0),
    acked: group.publishers.reduce((sum, p) => sum + p.acked, 0),
    startNs: startNs.toString(),
    endNs: endNs.toString(),
    drained: settled(),
  };
}

// ---- idle connections -----------------------------------------------------------------------------------

async function connectIdle(args: IdleArgs): Promise<IdleResult> {
  const result: IdleResult = { connected: 0, failed: 0, firstError: null };
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < args.count) {
      const index = next++;
      try {
        await openClient(args.port, `${args.prefix}-${index}`);
        result.connected++;
      } catch (err) {
        // Counted and reported: a refused connection is a result here, not a crash.
        result.failed++;
        result.firstError ??= err instanceof Error ? err.message : String(err);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(args.concurrency, args.count) }, lane));
  return result;
}

async function closeAll(): Promise<ErrorReport> {
  await Promise.all([...openClients].map((client) => client.close()));
  if (subscribers !== null) subscribers.onProgress = () => {};
  subscribers = null;
  publishers = null;
  const report = { ...errors };
  errors.socketErrors = 0;
  errors.unexpectedCloses = 0;
  errors.firstError = null;
  return report;
}

async function handle(request: LoadgenRequest): Promise<unknown> {
  switch (request.op) {
    case 'subscribe':
      return subscribe(request.args);
    case 'collect':
      return collect(request.args);
    case 'pubConnect':
      return pubConnect(request.args);
    case 'pubRun':
      return pubRun(request.args);
    case 'connectIdle':
      return connectIdle(request.args);
    case 'closeAll':
      return closeAll();
  }
}

process.on('message', (request: LoadgenRequest) => {
  handle(request).then(
    (result) => process.send?.({ id: request.id, ok: true, result } satisfies LoadgenResponse),
    (err: unknown) =>
      process.send?.({
        id: request.id,
        ok: false,
        error: err instanceof Error ? err.message : String(err),
      } satisfies LoadgenResponse),
  );
});
// The orchestrator died or closed the channel: nothing left to do.
process.on('disconnect', () => process.exit(0));
