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
 *   proxy.setRate(1_250_000);  // a 10 Mbit/s link: bytes/s each way, shared by all connections (0: unpaced)
 *   proxy.restore();    // new connections forward normally again
 *   proxy.bytes.up      // bytes forwarded client -> server so far (`down`: server -> client)
 *
 * Blackholed connections stay dead after `restore()`, as a real half-open connection would.
 *
 * The rate is a token bucket without burst, per direction: a chunk leaves once the link has sent every byte before
 * it, `length / rate` seconds after the previous one (plus the delay), so the average rate is exact and a chunk
 * leaves whole. While more than `LINK_BUFFER_BYTES` wait on a connection, the proxy stops reading it: the sender
 * feels the slow link through TCP flow control (its socket buffers fill), as behind a real router.
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

export type ProxyMode = 'forward' | 'blackhole' | 'refuse';

/** Bytes a paced or delayed connection may have waiting in the proxy, each way, before it stops reading. */
const LINK_BUFFER_BYTES = 64 * 1024;

/** One direction of the link: when it is free again (performance.now ms) and what crossed it. */
interface Link {
  freeAtMs: number;
  bytes: number;
}

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
  /** The link's rate in bytes/s each way (0: unpaced, the default). */
  setRate(bytesPerS: number): void;
  /** Bytes forwarded so far: `up` client -> server, `down` server -> client. */
  readonly bytes: { readonly up: number; readonly down: number };
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
  let rate = 0;
  let accepted = 0;
  const up: Link = { freeAtMs: 0, bytes: 0 };
  const down: Link = { freeAtMs: 0, bytes: 0 };
  const pairs = new Set<Pair>();

  const pipe = (pair: Pair, from: Socket, to: Socket, link: Link): void => {
    // Delayed or paced chunks wait in one queue per direction and one timer writes them in arrival order, also
    // across a delay change. (A timer per chunk reordered the stream: timers due at the same time in different
    // timer lists fire in no fixed order.)
    const queue: { dueMs: number; chunk: Buffer }[] = [];
    let queuedBytes = 0;
    let timer: NodeJS.Timeout | undefined;
    const forward = (chunk: Buffer): void => {
      if (pair.dead || to.destroyed) return;
      link.bytes += chunk.length;
      to.write(chunk);
    };
    const drain = (): void => {
      timer = undefined;
      const nowMs = performance.now();
      while (queue.length > 0 && queue[0].dueMs <= nowMs) {
        const { chunk } = queue.shift() as { chunk: Buffer };
        queuedBytes -= chunk.length;
        forward(chunk);
      }
      if (from.isPaused() && queuedBytes <= LINK_BUFFER_BYTES / 2) from.resume();
      if (queue.length > 0) timer = setTimeout(drain, queue[0].dueMs - nowMs);
    };
    from.on('data', (chunk: Buffer) => {
      if (pair.dead) return; // blackholed: the bytes vanish
      if (delayMs <= 0 && rate <= 0 && queue.length === 0) {
        forward(chunk);
        return;
      }
      const nowMs = performance.now();
      let dueMs = nowMs;
      if (rate > 0) {
        link.freeAtMs = Math.max(nowMs, link.freeAtMs) + (chunk.length * 1000) / rate;
        dueMs = link.freeAtMs;
      }
      queue.push({ dueMs: dueMs + delayMs, chunk });
      queuedBytes += chunk.length;
      if (queuedBytes > LINK_BUFFER_BYTES) from.pause();
      timer ??= setTimeout(drain, queue[0].dueMs - nowMs);
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
    pipe(pair, client, upstream, up);
    pipe(pair, upstream, client, down);
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
      // What waited on the link went with the connections.
      up.freeAtMs = down.freeAtMs = 0;
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
    setRate(bytesPerS: number) {
      rate = bytesPerS;
    },
    get bytes() {
      return { up: up.bytes, down: down.bytes };
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
