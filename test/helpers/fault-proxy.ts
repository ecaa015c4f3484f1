/**
 * A TCP proxy on 127.0.0.1 that sits between a client (the gateway's uplink) and a server (the central
 * Mosquitto) and injects link faults (docs/reliability.md#fault-scenarios):
 *
 *   const proxy = d.add(await startFaultProxy(central.port));
 *   proxy.blackhole();  // half-open: sockets stay open, bytes vanish both ways, no FIN/RST
 *   proxy.refuse();     // link down: new connections are reset at once
 *   proxy.reset();      // RST every open connection
 *   proxy.fin();        // FIN every open connection (graceful close)
 *   proxy.setDelayMs(200);  // latency per chunk, both ways, order kept
 *   proxy.restore();    // new connections forward normally again
 *
 * Blackholed connections stay dead after `restore()`, as a real half-open connection would.
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

export type ProxyMode = 'forward' | 'blackhole' | 'refuse';

export interface FaultProxy {
  readonly port: number;
  /** `mqtt://127.0.0.1:<port>` */
  readonly url: string;
  readonly mode: ProxyMode;
  /** Connections accepted so far (a reconnect shows up here). */
  readonly accepted: number;
  /** Connections currently open on the client side. */
  readonly open: number;
  /** Points new connections at another upstream port. */
  setTarget(port: number): void;
  blackhole(): void;
  refuse(): void;
  restore(): void;
  reset(): void;
  fin(): void;
  setDelayMs(ms: number): void;
  stop(): Promise<void>;
}

interface Pair {
  readonly client: Socket;
  readonly server: Socket;
  dead: boolean;
}

export async function startFaultProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<FaultProxy> {
  let target = targetPort;
  let mode: ProxyMode = 'forward';
  let delayMs = 0;
  let accepted = 0;
  const pairs = new Set<Pair>();

  const pipe = (pair: Pair, from: Socket, to: Socket): void => {
    // Delayed chunks wait in one queue per direction and one timer writes them in arrival order, also across a
    // delay change. (A timer per chunk reordered the stream: timers due at the same time in different timer
    // lists fire in no fixed order.)
    const queue: { dueMs: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | undefined;
    const drain = (): void => {
      timer = undefined;
      const nowMs = performance.now();
      while (queue.length > 0 && queue[0].dueMs <= nowMs) {
        const { chunk } = queue.shift() as { chunk: Buffer };
        if (!pair.dead && !to.destroyed) to.write(chunk);
      }
      if (queue.length > 0) timer = setTimeout(drain, queue[0].dueMs - nowMs);
    };
    from.on('data', (chunk: Buffer) => {
      if (pair.dead) return; // blackholed: the bytes vanish
      if (delayMs <= 0 && queue.length === 0) {
        to.write(chunk);
        return;
      }
      queue.push({ dueMs: performance.now() + delayMs, chunk });
      timer ??= setTimeout(drain, queue[0].dueMs - performance.now());
    });
  };

  const server: Server = createServer((client) => {
    accepted++;
    client.on('error', () => undefined);
    if (mode === 'refuse') {
      client.resetAndDestroy();
      return;
    }
    // A proxy must not add Nagle delays of its own: it forwards each chunk as it comes.
    client.setNoDelay(true);
    const upstream = tcpConnect({ port: target, host: targetHost, noDelay: true });
    const pair: Pair = { client, server: upstream, dead: mode === 'blackhole' };
    pairs.add(pair);
    upstream.on('error', () => client.destroy());
    const close = (): void => {
      pairs.delete(pair);
      // A blackholed peer's close never reaches the other side.
      if (pair.dead) {
        client.destroy();
        upstream.destroy();
        return;
      }
      client.end();
      upstream.end();
    };
    client.on('close', close);
    upstream.on('close', close);
    client.on('end', () => !pair.dead && upstream.end());
    upstream.on('end', () => !pair.dead && client.end());
    pipe(pair, client, upstream);
    pipe(pair, upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;

  return {
    port,
    url: `mqtt://127.0.0.1:${port}`,
    get mode() {
      return mode;
    },
    get accepted() {
      return accepted;
    },
    get open() {
      return pairs.size;
    },
    setTarget(p: number) {
      target = p;
    },
    blackhole() {
      mode = 'blackhole';
      for (const pair of pairs) pair.dead = true;
    },
    refuse() {
      mode = 'refuse';
    },
    restore() {
      mode = 'forward';
    },
    reset() {
      for (const pair of pairs) {
        pair.client.resetAndDestroy();
        pair.server.resetAndDestroy();
      }
      pairs.clear();
    },
    fin() {
      for (const pair of pairs) {
        pair.client.end();
        pair.server.end();
      }
    },
    setDelayMs(ms: number) {
      delayMs = ms;
    },
    async stop() {
      for (const pair of pairs) {
        pair.client.destroy();
        pair.server.destroy();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
