/**
 * The floor for the idle-rss scenario: a bare `node:net` server in its own process, what any Node broker pays
 * per connection before doing anything of its own. `node dist/bench/bare-net-server.js <port>`. It holds every
 * socket and answers each read that starts with a CONNECT with a CONNACK (accepted), so the probe and the load
 * generator see a connected client; it parses nothing else. One shared listener function, no per-socket state.
 */
import net from 'node:net';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  process.stderr.write(`usage: bare-net-server.js <port> (got ${String(process.argv[2])})\n`);
  process.exit(2);
}

const connack = Buffer.from([0x20, 0x02, 0x00, 0x00]);
const CONNECT_BYTE = 0x10;

function onData(this: net.Socket, chunk: Buffer): void {
  if (chunk[0] === CONNECT_BYTE) this.write(connack);
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
