/**
 * The QoS 1 clients that `persistence.ts` and `bridge.ts` share, all in the bench process over raw sockets with
 * pre-encoded packets (`mqtt-wire.ts`):
 *
 * - `ingest`: N publishers publish M QoS 1 messages, each with a PUBACK-driven window;
 * - `SequenceCounter` + `waitForDelivery`: a QoS 1 subscriber that PUBACKs everything and counts distinct
 *   messages (publisher index and sequence number in the payload), duplicates and when they arrived;
 * - `openConnection`, `subscribeAndWait`, and the small timing helpers.
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

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `condition` every `pollMs` until it holds (true) or `timeoutMs` passed (false). */
export async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  pollMs = 10,
): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) return false;
    await sleep(pollMs);
  }
  return true;
}
export const nowNs = (): bigint => process.hrtime.bigint();
export const secondsBetween = (fromNs: bigint, toNs: bigint): number => Number(toNs - fromNs) / 1e9;
export const errorText = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/** CONNACK and SUBACK deadline. */
const answerTimeoutMs = 20_000;
/** Payload layout (the rest is filler): [0, 4) sequence number per publisher, [4, 6) publisher index. */
const seqOffset = 0;
const publisherIndexOffset = 4;
/** The smallest payload that holds the layout above. */
export const minPayloadBytes = 8;

// ---- connections ----------------------------------------------------------------------------------------

export interface Connection {
  readonly sock: net.Socket;
  readonly sessionPresent: boolean;
  /** Set when the socket failed or the broker closed it before we did. */
  problem(): string | null;
  /** DISCONNECT, then wait for the broker to close the socket (destroyed after 2 s at the latest). */
  close(): Promise<void>;
  /** Drop the socket without DISCONNECT (the broker is gone anyway). */
  destroy(): void;
}

/**
 * TCP connect + CONNECT (MQTT 3.1.1), resolved on CONNACK 0. Every later packet goes to `onPacket`, including
 * those in the CONNACK's own chunk (a broker sends the queued messages right behind it); `afterChunk` runs after
 * each received chunk, to batch PUBACKs into one write.
 */
export function openConnection(
  port: number,
  clientId: string,
  cleanSession: boolean,
  onPacket: PacketHandler,
  afterChunk: () => void = () => {},
): Promise<Connection> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: '127.0.0.1', noDelay: true });
    let problem: string | null = null;
    let closing = false;
    let connected = false;
    const closed = new Promise<void>((done) => sock.on('close', () => done()));
    const timer = setTimeout(() => fail(`no CONNACK for ${clientId} in ${answerTimeoutMs} ms`), answerTimeoutMs);
    const fail = (message: string): void => {
      clearTimeout(timer);
      sock.destroy();
      reject(new Error(message));
    };
    let handler: PacketHandler = (type, _flags, buf, start) => {
      if (type !== PacketType.connack) return fail(`expected CONNACK for ${clientId}, got packet type ${type}`);
      const code = buf[start + 1];
      if (code !== 0) return fail(`CONNACK return code ${code} for ${clientId}`);
      clearTimeout(timer);
      connected = true;
      handler = onPacket; // synchronously, so the rest of this chunk already goes to the caller
      resolve({
        sock,
        sessionPresent: (buf[start] & 0x01) === 1,
        problem: () => problem,
        close: () => {
          if (!closing) {
            closing = true;
            if (sock.writable) sock.end(disconnectPacket);
            // A broker that keeps the socket open after DISCONNECT must not stall the benchmark.
            setTimeout(() => sock.destroy(), 2000).unref();
          }
          return closed;
        },
        destroy: () => {
          closing = true;
          sock.destroy();
        },
      });
    };
    const reader = new PacketReader((type, flags, buf, start, end) => handler(type, flags, buf, start, end));
    sock.on('connect', () => sock.write(encodeConnect(clientId, 0, cleanSession)));
    sock.on('data', (chunk: Buffer) => {
      reader.push(chunk);
      if (connected) afterChunk();
    });
    // Recorded and reported with the run; a refused connection before CONNACK fails the open.
    sock.on('error', (err) => {
      problem ??= err.message;
      if (!connected) fail(`${clientId}: ${err.message}`);
    });
    sock.on('close', () => {
      if (!closing) problem ??= `${clientId}: connection closed by the broker`;
      if (!connected) fail(`${clientId}: connection closed before CONNACK`);
    });
  });
}

/**
 * Sends SUBSCRIBE `filter` at QoS 1 on `conn` and resolves once it was granted QoS 1; `subacks` resolves with
 * the granted QoS (see `subackWaiter`).
 */
export async function subscribeAndWait(conn: Connection, filter: string, subacks: Promise<number>): Promise<void> {
  conn.sock.write(encodeSubscribe(1, filter, 1));
  const granted = await Promise.race([subacks, sleep(answerTimeoutMs).then(() => -1)]);
  if (granted === -1) throw new Error(`no SUBACK in ${answerTimeoutMs} ms`);
  if (granted !== 1) throw new Error(`SUBSCRIBE ${filter} at QoS 1 granted ${granted}`);
}

/** A promise for the granted QoS of the next SUBACK, and the packet-handler piece that settles it. */
export function subackWaiter(): { granted: Promise<number>; onPacket: PacketHandler } {
  let settle: (granted: number) => void = () => {};
  const granted = new Promise<number>((resolve) => {
    settle = resolve;
  });
  return { granted, onPacket: (type, _flags, buf, _start, end) => type === PacketType.suback && settle(buf[end - 1]) };
}

// ---- publishers -----------------------------------------------------------------------------------------

export interface IngestOptions {
  messages: number;
  publishers: number;
  window: number;
  payloadBytes: number;
}

/** How many messages each publisher sends: M split as evenly as possible. */
export function quotas(messages: number, publishers: number): number[] {
  return Array.from(
    { length: publishers },
    (_, i) => Math.floor(messages / publishers) + (i < messages % publishers ? 1 : 0),
  );
}

export interface IngestResult {
  sent: number;
  acked: number;
  /** Per publisher, 1 for each sequence number the broker acknowledged. */
  ackedSeqs: Uint8Array[];
  complete: boolean;
  startNs: bigint;
  lastAckNs: bigint;
  problem: string | null;
  connections: Connection[];
}

/**
 * N publishers (`bench/p<index>`), each with at most `window` QoS 1 PUBLISHes unacknowledged: every PUBACK
 * releases the next message under the same packet id. Packets are copies of one pre-encoded template per
 * publisher with the packet id and sequence number patched in; the PUBLISHes released by one chunk of PUBACKs go
 * out in one write. Resolves when every message was acknowledged (or on the deadline / a lost connection).
 */
export async function ingest(
  port: number,
  runTag: string,
  opts: IngestOptions,
  deadlineMs = 120_000,
): Promise<IngestResult> {
  const counts = quotas(opts.messages, opts.publishers);
  const connections: Connection[] = [];
  const ackedSeqs = counts.map((n) => new Uint8Array(n));
  let sent = 0;
  let acked = 0;
  let lastAckNs = 0n;
  let finished = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    allDone = resolve;
  });
  const starters: (() => void)[] = [];

  await Promise.all(
    counts.map(async (count, index) => {
      const topic = `bench/p${index}`;
      const payload = Buffer.alloc(opts.payloadBytes, 0x61);
      payload.writeUInt16BE(index, publisherIndexOffset);
      const template = encodePublish(topic, payload, 1, 1);
      const payloadAt = publishPayloadOffset(topic, opts.payloadBytes, 1);
      const idAt = payloadAt - 2;
      const build = (id: number, seq: number): Buffer => {
        const packet = Buffer.allocUnsafe(template.length);
        template.copy(packet);
        packet.writeUInt16BE(id, idAt);
        packet.writeUInt32BE(seq, payloadAt + seqOffset);
        return packet;
      };
      const seqOfId = new Int32Array(opts.window + 1).fill(-1); // packet id -> sequence number in flight
      let next = 0;
      let ackedHere = 0;
      const ready: Buffer[] = [];
      const conn = await openConnection(
        port,
        `${runTag}-pub-${index}`,
        true,
        (type, _flags, buf, start) => {
          if (type !== PacketType.puback) return;
          const id = buf.readUInt16BE(start);
          const seq = id <= opts.window ? seqOfId[id] : -1;
          if (seq < 0) return; // not ours or a duplicate PUBACK: nothing in flight under that id
          seqOfId[id] = -1;
          ackedSeqs[index][seq] = 1;
          ackedHere++;
          acked++;
          if (next < count) {
            seqOfId[id] = next;
            ready.push(build(id, next++));
          }
        },
        () => {
          if (ready.length > 0) {
            sent += ready.length;
            conn.sock.write(ready.length === 1 ? ready[0] : Buffer.concat(ready));
            ready.length = 0;
          }
          if (count > 0 && ackedHere === count) {
            ackedHere = -1; // count this publisher once
            lastAckNs = nowNs();
            if (++finished === counts.length) allDone();
          }
        },
      );
      connections.push(conn);
      starters.push(() => {
        if (count === 0) {
          if (++finished === counts.length) allDone();
          return;
        }
        conn.sock.cork();
        for (let id = 1; id <= opts.window && next < count; id++) {
          seqOfId[id] = next;
          sent++;
          conn.sock.write(build(id, next++));
        }
        conn.sock.uncork();
      });
    }),
  );

  const startNs = nowNs();
  for (const start of starters) start();
  const problemOf = (): string | null => connections.map((c) => c.problem()).find((p) => p !== null) ?? null;
  const deadline = Date.now() + deadlineMs;
  let complete = false;
  for (;;) {
    const outcome = await Promise.race([done.then(() => 'done' as const), sleep(50).then(() => 'tick' as const)]);
    if (outcome === 'done') {
      complete = true;
      break;
    }
    if (problemOf() !== null || Date.now() > deadline) break;
  }
  return {
    sent,
    acked,
    ackedSeqs,
    complete,
    startNs,
    lastAckNs: complete ? lastAckNs : nowNs(),
    problem: problemOf(),
    connections,
  };
}

// ---- subscriber -----------------------------------------------------------------------------------------

/**
 * The counting side of a QoS 1 subscriber: `onPacket` takes PUBLISHes (from any of the publishers of `ingest`),
 * `afterChunk` PUBACKs the QoS 1 ones of each received chunk in one write on the attached socket.
 */
export class SequenceCounter {
  /** PUBLISH packets, duplicates included. */
  received = 0;
  /** Distinct (publisher, sequence number) seen. */
  unique = 0;
  /** Distinct acknowledged messages seen (see `expect`). */
  delivered = 0;
  /** The first and the last chunk that carried a PUBLISH (0n while none). */
  firstNs = 0n;
  lastNs = 0n;
  private readonly seen: Uint8Array[];
  private acked: Uint8Array[];
  private inChunk = 0;
  private readonly acks: number[] = [];
  private sock: net.Socket | null = null;

  /** `ackedSeqs`: per publisher, 1 for each sequence number the broker acknowledged (its length = the quota). */
  constructor(ackedSeqs: Uint8Array[]) {
    this.acked = ackedSeqs;
    this.seen = ackedSeqs.map((a) => new Uint8Array(a.length));
  }

  get duplicates(): number {
    return this.received - this.unique;
  }

  /** Counts `delivered` against these acknowledgements from now on, the messages seen so far included. */
  expect(ackedSeqs: Uint8Array[]): void {
    this.acked = ackedSeqs;
    this.delivered = 0;
    this.seen.forEach((marks, p) => marks.forEach((m, seq) => (this.delivered += m & ackedSeqs[p][seq])));
  }

  /** The socket the PUBACKs go to (PUBLISHes counted before this are acknowledged by the next `afterChunk`). */
  attach(sock: net.Socket): void {
    this.sock = sock;
  }

  readonly onPacket: PacketHandler = (type, flags, buf, start, end) => {
    if (type !== PacketType.publish) return;
    this.received++;
    this.inChunk++;
    let pos = start + 2 + buf.readUInt16BE(start);
    if (((flags >> 1) & 3) > 0) {
      this.acks.push(buf.readUInt16BE(pos));
      pos += 2;
    }
    if (end - pos < publisherIndexOffset + 2) return;
    const publisher = buf.readUInt16BE(pos + publisherIndexOffset);
    const seq = buf.readUInt32BE(pos + seqOffset);
    const marks = this.seen[publisher] as Uint8Array | undefined; // the index comes off the wire
    if (marks === undefined || seq >= marks.length || marks[seq] === 1) return;
    marks[seq] = 1;
    this.unique++;
    if (this.acked[publisher][seq] === 1) this.delivered++;
  };

  readonly afterChunk = (): void => {
    if (this.inChunk > 0) {
      this.inChunk = 0;
      this.lastNs = nowNs();
      if (this.firstNs === 0n) this.firstNs = this.lastNs;
    }
    if (this.acks.length === 0 || this.sock === null) return;
    const out = Buffer.allocUnsafe(4 * this.acks.length);
    for (let i = 0; i < this.acks.length; i++) {
      out[4 * i] = 0x40;
      out[4 * i + 1] = 0x02;
      out.writeUInt16BE(this.acks[i], 4 * i + 2);
    }
    this.acks.length = 0;
    this.sock.write(out);
  };
}

export interface DeliveryWait {
  /** Stop once this many acknowledged messages arrived. */
  expected: number;
  /** ... or after this long without a new PUBLISH (counted from the call), */
  quietMs: number;
  /** ... or at this deadline (then `truncated`), */
  deadlineMs: number;
  /** ... or when this returns a problem (a lost connection). */
  problem: () => string | null;
  /** Called on each 20 ms poll that saw new PUBLISHes. */
  onProgress?: () => void;
}

/** Waits until the counter has everything, went quiet, hit the deadline or its connection failed; true if truncated. */
export async function waitForDelivery(counter: SequenceCounter, w: DeliveryWait): Promise<boolean> {
  const startedMs = Date.now();
  let lastSeen = -1;
  let lastChangeMs = startedMs;
  for (;;) {
    if (counter.delivered >= w.expected) return false;
    const now = Date.now();
    if (counter.received !== lastSeen) {
      if (counter.received > 0) w.onProgress?.();
      lastSeen = counter.received;
      lastChangeMs = now;
    } else if (now - lastChangeMs >= w.quietMs) {
      return false;
    }
    if (now - startedMs >= w.deadlineMs) return true;
    if (w.problem() !== null) return false;
    await sleep(20);
  }
}
