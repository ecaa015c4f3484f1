/**
 * The floor of a Node server, in its own process: `node dist/bench/bare-net-server.js <port>`, for two kinds of
 * scenario (brokers.ts `runsScenario`):
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
 */
import net from 'node:net';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  process.stderr.write(`usage: bare-net-server.js <port> (got ${String(process.argv[2])})\n`);
  process.exit(2);
}

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
  let at = 0;
  while (at < buf.length) {
    if (!readHeader(buf, at)) {
      this[kPartial] = buf.subarray(at);
      break;
    }
    handle(this, buf, at, header.body, header.end, forward, acks);
    at = header.end;
  }
  if (forward.length > 0) {
    const out = forward.length === 1 ? forward[0] : Buffer.concat(forward);
    for (const sub of subscribers) {
      if (sub.destroyed) subscribers.delete(sub);
      else sub.write(out);
    }
  }
  if (acks.length > 0) this.write(Buffer.from(acks));
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

/** Answers or collects one packet: PUBLISHes to `forward`, the bytes of their PUBACKs to `acks`. */
function handle(socket: net.Socket, buf: Buffer, at: number, body: number, end: number, forward: Buffer[], acks: number[]): void {
  switch (buf[at] >> 4) {
    case CONNECT:
      socket.write(connack);
      return;
    case PUBLISH: {
      forward.push(buf.subarray(at, end));
      if (((buf[at] >> 1) & 3) === 1) {
        const id = body + 2 + buf.readUInt16BE(body);
        acks.push(0x40, 0x02, buf[id], buf[id + 1]);
      }
      return;
    }
    case SUBSCRIBE: {
      // Packet id, then (filter length, filter, options) per filter: one granted QoS per filter.
      const granted = [0x90, 0, buf[body], buf[body + 1]];
      for (let i = body + 2; i < end; i += 2 + buf.readUInt16BE(i) + 1) granted.push(buf[i + 2 + buf.readUInt16BE(i)] & 3);
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

const stop = (): void => process.exit(0);
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
