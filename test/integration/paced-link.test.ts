/**
 * The fault proxy as a slow link (`setRate`), which `bench:sizing` measures catch-up times through
 * (bench/README.md, "Sizing"): it passes bytes at its rate, within 10 %, counts them, and a cut (reset) drops
 * what waited on the link rather than making the next connection wait for it.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

/** A TCP server that counts what it receives. */
async function startSink(): Promise<{ port: number; received: () => number; stop(): Promise<void> }> {
  let received = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on('data', (chunk: Buffer) => (received += chunk.length));
    s.on('error', () => undefined);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    received: () => received,
    stop: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function dial(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ port, host: '127.0.0.1' }, () => resolve(s));
    s.once('error', reject);
  });
}

describe('fault proxy: a paced link', { timeout: 30_000 }, () => {
  it('passes bytes upstream at its rate, within 10 %, and counts them', async () => {
    const sink = d.add(await startSink());
    const proxy = d.add(await startFaultProxy(sink.port));
    const rate = 400_000;
    proxy.setRate(rate);
    const client = await dial(proxy.port);
    d.defer(() => void client.destroy());
    const bytes = 800_000;
    const started = performance.now();
    client.write(Buffer.alloc(bytes, 0x61));
    await waitFor(() => sink.received() === bytes, 10_000, { message: 'every byte through the link' });
    const seconds = (performance.now() - started) / 1000;
    expect(seconds).toBeGreaterThan(0.9 * (bytes / rate));
    expect(seconds).toBeLessThan(1.1 * (bytes / rate));
    expect(proxy.bytes).toEqual({ up: bytes, down: 0 });
  });

  it('a cut drops what waited on the link: the next connection gets the whole rate at once', async () => {
    const sink = d.add(await startSink());
    const proxy = d.add(await startFaultProxy(sink.port));
    const rate = 200_000;
    proxy.setRate(rate);
    const first = await dial(proxy.port);
    first.on('error', () => undefined);
    first.write(Buffer.alloc(1_000_000, 0x61)); // 5 s of link
    await waitFor(() => sink.received() > 0, 5000, { message: 'the first bytes through' });
    proxy.refuse();
    proxy.reset();
    proxy.restore();
    const atCut = proxy.bytes.up;
    const second = await dial(proxy.port);
    d.defer(() => void second.destroy());
    const started = performance.now();
    second.write(Buffer.alloc(40_000, 0x62)); // 0.2 s of link
    await waitFor(() => proxy.bytes.up === atCut + 40_000, 5000, { message: 'the second connection through' });
    expect((performance.now() - started) / 1000).toBeLessThan(1.1 * (40_000 / rate) + 0.1);
  });
});
