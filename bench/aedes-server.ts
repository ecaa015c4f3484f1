/**
 * Aedes 1.x in its own process for the benchmark: `node dist/bench/aedes-server.js <port>`.
 * Default options (in-memory persistence, default mqemitter concurrency), plain TCP on 127.0.0.1.
 */
import net from 'node:net';
import { Aedes } from 'aedes';

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  process.stderr.write(`usage: aedes-server.js <port> (got ${String(process.argv[2])})\n`);
  process.exit(2);
}

const aedes = await Aedes.createBroker();
const server = net.createServer((socket) => aedes.handle(socket));
server.on('error', (err) => {
  process.stderr.write(`aedes-server: ${err.message}\n`);
  process.exit(1);
});
server.listen(port, '127.0.0.1');

const stop = (): void => {
  server.close();
  aedes.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
