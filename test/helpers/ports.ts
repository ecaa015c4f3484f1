/**
 * Free TCP ports on 127.0.0.1, for processes whose port 0 would not be discoverable from outside (a gateway's
 * metrics endpoint, a Mosquitto).
 *
 * A port the kernel picks for port 0 comes from its ephemeral range, the range every outgoing connection also takes
 * its local port from: between the check here and the child's bind, any client socket of any test may take it, and
 * the child fails with EADDRINUSE. So the ports come from below that range, where no outgoing connection lands,
 * each vitest worker (VITEST_POOL_ID, unique among the workers running at once) from its own slice, one after the
 * other from a random start, each checked by binding it.
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

const LOWEST = 10_000;

/** The first port of the kernel's ephemeral range (Linux default 32768). */
function ephemeralStart(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(first) && first > LOWEST + 1000 ? first : 32_768;
  } catch {
    return 32_768;
  }
}

const SLICES = 8;
const sliceSize = Math.floor((ephemeralStart() - LOWEST) / SLICES);
const slice = (Number(process.env.VITEST_POOL_ID ?? process.pid) - 1) % SLICES;
const sliceStart = LOWEST + Math.max(0, slice) * sliceSize;
let next = Math.floor(Math.random() * sliceSize); // a fresh worker does not start on the last one's ports

/** Whether the port can be bound on 127.0.0.1 now (the probe is closed again before this resolves). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => server.close(() => resolve(true)));
  });
}

/** A port below the ephemeral range that nothing listens on now, never the same twice in a row from this worker. */
export async function freePort(): Promise<number> {
  for (let tries = 0; tries < sliceSize; tries++) {
    const port = sliceStart + (next++ % sliceSize);
    if (await bindable(port)) return port;
  }
  throw new Error(`no free port in ${sliceStart}-${sliceStart + sliceSize - 1}`);
}
