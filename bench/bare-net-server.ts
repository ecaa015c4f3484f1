/**
 * The floor of a Node server, in its own process: `node dist/bench/bare-net-server.js <port> [--store DIR]`, for
 * three kinds of scenario (brokers.ts `runsScenario`, persistence.ts):
 * - `idle-rss`: what any Node broker pays per connection before doing anything of its own. It holds every socket
 *   and answers a CONNECT with a CONNACK (accepted), so the probe sees a connected client; an idle socket gets no
 *   state of its own: shared listener functions, no per-socket object.
 * - the latency scenarios: the least a Node process can do to pass a message on, so that the latency tail of the
 *   runtime on this machine is measured in the same run as the brokers'. A SUBSCRIBE is granted what it asks; every
 *   PUBLISH is written unchanged (same QoS and packet id) to every client that subscribed, one write per read, and
 *   answered with a PUBACK at QoS 1, written after the delivery (a write that wakes another process costs tens of
 *   µs on a VM: the delivery should not wait for it). No topic matching, sessions or retries; subscribers' PUBACKs
 *   are ignored; QoS 2 is not relayed. MQTT 3.1.1 only, one publisher and one subscriber, as in those scenarios:
 *   all it is meant for.
 * - with `--store DIR`, durable ingest (`npm run bench:persistence`, its `store-relay` row): the least a Node
 *   process can do to acknowledge a QoS 1 PUBLISH only once it is durable. Each one (QoS 0 is dropped) goes into the offline queue of
 *   one session in edgeferry's LMDB store in DIR (`storage.sync: full`), as the gateway queues for a persistent
 *   subscriber, and nowhere else; the PUBACKs of one read are written at once when all of its messages are
 *   durable. So the publishers' round trip (network, the generator, its system calls) is in the figure, and of the
 *   gateway's own work only the store's: what edgeferry adds to that is what it could still save.
 */
import net from 'node:net';
import { parseArgs } from 'node:util';
import { createMessage } from '../src/protocol/message.js';
import { openLmdbStore } from '../src/store/lmdb/open.js';
import type { Store } from '../src/store/types.js';
import { silentLogger } from '../src/util/logger.js';

const { positionals, values } = parseArgs({ allowPositionals: true, options: { store: { type: 'string' } } });
const port = Number(positionals[0]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  process.stderr.write(`usage: bare-net-server.js <port> [--store DIR] (got ${String(positionals[0])})\n`);
  process.exit(2);
}
/** The client whose offline queue every message goes into (one session: the persistence bench's subscriber). */
const QUEUE = 'bench-subscriber';
const store: Store | undefined =
  values.store === undefined
    ? undefined
    : await openLmdbStore({ path: values.store, sync: 'full', maxBytes: 0, log: silentLogger });
await store?.sessions.putSession(QUEUE, { expiryIntervalS: 3600 });

const CONNECT = 1;
const PUBLISH = 3;
const SUBSCRIBE = 8;
const PINGREQ = 12;
const DISCONNECT = 14;
const connack = Buffer.from([0x20, 0x02, 0x00, 0x00]);
const pingresp = Buffer.from([0xd0, 0x00]);

/** Sockets that subscribed; a closed one is dropped when it is next written to. */
const subscribers = new Set<net.Socket>();
/** The start of a packet that a read ended in, kept on the socket only then (never on an idle one). */
const kPartial = Symbol('partial');
type RelaySocket = net.Socket & { [kPartial]?: Buffer };

function onData(this: RelaySocket, chunk: Buffer): void {
  let buf = chunk;
  const partial = this[kPartial];
  if (partial !== undefined) {
    buf = Buffer.concat([partial, chunk]);
    this[kPartial] = undefined;
  }
  const forward: Buffer[] = [];
  const acks: number[] = [];
  const durable: Promise<number>[] = [];
  let at = 0;
  while (at < buf.length) {
    if (!readHeader(buf, at)) {
      this[kPartial] = buf.subarray(at);
      break;
    }
    handle(this, buf, at, header.body, header.end, forward, acks, durable);
    at = header.end;
  }
  if (forward.length > 0) {
    const out = forward.length === 1 ? forward[0] : Buffer.concat(forward);
    for (const sub of subscribers) {
      if (sub.destroyed) subscribers.delete(sub);
      else sub.write(out);
    }
  }
  if (acks.length === 0) return;
  const puback = Buffer.from(acks);
  if (durable.length === 0) this.write(puback);
  else
    void Promise.all(durable).then(
      () => this.write(puback),
      (err: unknown) => fail(err),
    );
}

/** Where the packet read by `readHeader` starts its body and ends; one object, reused. */
const header = { body: 0, end: 0 };

/** Reads the fixed header of the packet at `at` into `header`; false when the buffer holds only part of it. */
function readHeader(buf: Buffer, at: number): boolean {
  let length = 0;
  let multiplier = 1;
  for (let i = at + 1; i < buf.length && i <= at + 4; i++) {
    const byte = buf[i];
    length += (byte & 0x7f) * multiplier;
    if ((byte & 0x80) === 0) {
      header.body = i + 1;
      header.end = i + 1 + length;
      return header.end <= buf.length;
    }
    multiplier *= 128;
  }
  return false;
}

/**
 * Answers or collects one packet: PUBLISHes to `forward` (or, with a store, their writes to `durable`), the bytes of
 * their PUBACKs to `acks`.
 */
function handle(
  socket: net.Socket,
  buf: Buffer,
  at: number,
  body: number,
  end: number,
  forward: Buffer[],
  acks: number[],
  durable: Promise<number>[],
): void {
  switch (buf[at] >> 4) {
    case CONNECT:
      socket.write(connack);
      return;
    case PUBLISH: {
      const qos = (buf[at] >> 1) & 3;
      const topicEnd = body + 2 + buf.readUInt16BE(body);
      if (store === undefined) forward.push(buf.subarray(at, end));
      else if (qos === 1) {
        const topic = buf.toString('utf8', body + 2, topicEnd);
        const payload = buf.subarray(topicEnd + 2, end); // after the packet id
        durable.push(store.sessions.enqueue(QUEUE, createMessage({ topic, payload, qos: 1, origin: 'bench' })));
      }
      if (qos === 1) acks.push(0x40, 0x02, buf[topicEnd], buf[topicEnd + 1]);
      return;
    }
    case SUBSCRIBE: {
      // Packet id, then (filter length, filter, options) per filter: one granted QoS per filter.
      const granted = [0x90, 0, buf[body], buf[body + 1]];
      for (let i = body + 2; i < end; i += 2 + buf.readUInt16BE(i) + 1)
        granted.push(buf[i + 2 + buf.readUInt16BE(i)] & 3);
      granted[1] = granted.length - 2;
      subscribers.add(socket);
      socket.write(Buffer.from(granted));
      return;
    }
    case PINGREQ:
      socket.write(pingresp);
      return;
    case DISCONNECT:
      socket.end();
      return;
    default:
      return; // PUBACK from a subscriber, and anything else: ignored
  }
}

function ignoreError(): void {}

/** A store write that failed ends the run: the bench must not read a rate from acknowledgements never sent. */
function fail(err: unknown): never {
  process.stderr.write(`bare-net-server: store write failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}

const server = net.createServer((socket) => {
  socket.setNoDelay(true);
  socket.on('data', onData);
  socket.on('error', ignoreError);
});
server.on('error', (err) => {
  process.stderr.write(`bare-net-server: ${err.message}\n`);
  process.exit(1);
});
server.listen(port, '127.0.0.1');

const stop = (): void => {
  if (store === undefined) process.exit(0);
  else void store.close().finally(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
