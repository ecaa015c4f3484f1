/**
 * One journal for many upstreams (docs/architecture.md#one-journal): three bridges take the same messages; each
 * message is stored once, with a cursor per bridge. Each upstream gets everything once and in order when it
 * comes back; a bridge past its own limits drops for itself only and stops holding the journal; SIGKILL during
 * the fan-out and during a replay loses nothing PUBACKed on any bridge. Real gateway processes, three Mosquittos
 * behind fault proxies (refused: the upstream is down), `edgeferry store list` for what is on disk.
 */
import { describe, expect, it } from 'vitest';
import { checkSequence, collect, connectClient, publishSequence, type Collector } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { bridgePatch, runCli, startGateway, type Gateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

interface Upstream {
  readonly name: string;
  readonly proxy: FaultProxy;
  readonly up: Collector;
}

/** A Mosquitto behind a fault proxy, with a subscriber on it, and the bridge entry `name` to it. */
async function upstream(name: string): Promise<Upstream> {
  const central = d.add(await startMosquitto());
  const proxy = d.add(await startFaultProxy(central.port));
  const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
  return { name, proxy, up };
}

function bridges(
  ups: readonly Upstream[],
  extra: Record<string, Record<string, unknown>> = {},
): { bridges: Record<string, unknown>[] } {
  return {
    bridges: ups.map(
      ({ name, proxy }) =>
        bridgePatch(proxy.url, { name, remote: { clientId: `ef-${name}` }, ...extra[name] }).bridges[0],
    ),
  };
}

/** Waits until bridge `name`'s outbox is empty (its last PUBACK can come after the subscriber got the message). */
async function emptied(metricsPort: number, name: string): Promise<void> {
  const backlog = async (): Promise<string | undefined> => {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    return new RegExp(`^edgeferry_bridge_backlog_messages\\{bridge="${name}"\\} (\\S+)$`, 'm').exec(text)?.[1];
  };
  await waitFor(async () => (await backlog()) === '0', 10_000, { message: () => `bridge ${name}: backlog not empty` });
}

function down(u: Upstream): void {
  u.proxy.refuse();
  u.proxy.reset();
}

/** `edgeferry store list` of the stopped gateway: per outbox messages and bytes, and the journal's entries and bytes. */
async function storeList(gw: Gateway): Promise<{
  outboxes: Map<string, { messages: number; bytes: number; dropped: string }>;
  journal: { entries: number; bytes: number };
}> {
  const listed = await runCli(['store', 'list', '-c', gw.configFile]);
  expect(listed, listed.stderr).toMatchObject({ code: 0 });
  const outboxes = new Map<string, { messages: number; bytes: number; dropped: string }>();
  for (const m of listed.stdout.matchAll(
    /^outbox (\S+): (\d+) messages, (\d+) bytes, oldest \S+(?: s)?, dropped ([^;]+);/gm,
  )) {
    outboxes.set(m[1], { messages: Number(m[2]), bytes: Number(m[3]), dropped: m[4] });
  }
  const j = /^journal \(shared by the outboxes\): (\d+) entries in \d+ chunks, (\d+) bytes/m.exec(listed.stdout);
  expect(j, listed.stdout).not.toBeNull();
  return { outboxes, journal: { entries: Number(j![1]), bytes: Number(j![2]) } };
}

describe('bridge: one journal for many upstreams', { timeout: 180_000 }, () => {
  it('stores a message bound for three upstreams once, and each gets everything once, in order, when it returns', async () => {
    const ups = [await upstream('a'), await upstream('b'), await upstream('c')];
    for (const u of ups) down(u);
    const metricsPort = await freePort();
    const gw = d.add(await startGateway({ ...bridges(ups), metrics: { host: '127.0.0.1', port: metricsPort } }));
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    const n = 3000;
    const acked = await publishSequence(local, 'plant/line1/temp', n, { qos: 1, prefix: 'j', concurrency: 50 });
    expect(acked).toHaveLength(n);
    acked.sort((x, y) => Number(x.slice(1)) - Number(y.slice(1)));
    await local.endAsync();
    await gw.stop();

    // Every outbox holds all of them; the journal holds them once (chunk headers aside), not three times.
    const held = await storeList(gw);
    for (const { name } of ups) expect(held.outboxes.get(name)).toMatchObject({ messages: n, dropped: 'none' });
    const perOutbox = held.outboxes.get('a')!.bytes;
    expect(held.journal.entries).toBe(n);
    expect(held.journal.bytes).toBeLessThan(1.5 * perOutbox);
    console.info(
      `[bridge-journal] ${n} messages for 3 bridges: journal ${held.journal.bytes} bytes, ${perOutbox} bytes per outbox`,
    );

    // a and b come back; c stays down and keeps the journal's entries for itself.
    ups[0].proxy.restore();
    ups[1].proxy.restore();
    await gw.restart();
    for (const u of ups.slice(0, 2)) {
      await waitFor(() => new Set(u.up.payloads()).size >= n, 60_000, {
        message: () => `${u.name}: ${u.up.messages.length}/${n}`,
      });
      expect(checkSequence(u.up.payloads(), acked)).toEqual({
        missing: [],
        unexpected: [],
        duplicates: 0,
        outOfOrder: 0,
      });
    }
    expect(ups[2].up.messages).toHaveLength(0);
    await emptied(metricsPort, 'a');
    await emptied(metricsPort, 'b');
    await gw.stop();
    const drained = await storeList(gw);
    expect(drained.outboxes.get('a')?.messages).toBe(0);
    expect(drained.outboxes.get('b')?.messages).toBe(0);
    expect(drained.outboxes.get('c')?.messages).toBe(n);
    expect(drained.journal.entries).toBe(n);

    ups[2].proxy.restore();
    await gw.restart();
    await waitFor(() => new Set(ups[2].up.payloads()).size >= n, 60_000, {
      message: () => `c: ${ups[2].up.messages.length}/${n}`,
    });
    expect(checkSequence(ups[2].up.payloads(), acked)).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
    await emptied(metricsPort, 'c');
    await gw.stop();
    const empty = await storeList(gw);
    expect(empty.journal).toEqual({ entries: 0, bytes: 0 });
  });

  it('lets a bridge past its own queue.maxMessages drop for itself only (counted) and free the journal', async () => {
    const ups = [await upstream('a'), await upstream('c')];
    down(ups[1]);
    const queue = { queue: { maxMessages: 100, overflow: 'drop-oldest' } };
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway({ ...bridges(ups, { c: queue }), metrics: { host: '127.0.0.1', port: metricsPort } }),
    );
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    const n = 2000;
    // One at a time: many small journal chunks, so that c's moving floor frees them as it goes.
    const acked = await publishSequence(local, 'plant/line2/temp', n, { qos: 1, prefix: 'q' });
    expect(acked).toHaveLength(n);
    await waitFor(() => new Set(ups[0].up.payloads()).size >= n, 60_000, {
      message: () => `a: ${ups[0].up.messages.length}/${n}`,
    });
    expect(checkSequence(ups[0].up.payloads(), acked)).toMatchObject({ missing: [], duplicates: 0, outOfOrder: 0 });
    await emptied(metricsPort, 'a');
    await local.endAsync();
    await gw.stop();

    const listed = await storeList(gw);
    expect(listed.outboxes.get('c')).toMatchObject({ messages: 100, dropped: `queue_full ${n - 100}` });
    expect(listed.outboxes.get('a')?.messages).toBe(0);
    // What c dropped and a has acknowledged is gone from the journal: a chunk's worth at most besides c's 100.
    expect(listed.journal.entries).toBeLessThan(100 + 128);

    ups[1].proxy.restore();
    await gw.restart();
    const last = acked.slice(n - 100);
    await waitFor(() => new Set(ups[1].up.payloads()).size >= 100, 60_000, {
      message: () => `c: ${ups[1].up.messages.length}/100`,
    });
    expect(checkSequence(ups[1].up.payloads(), last)).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
  });

  it('loses nothing PUBACKed on any bridge through SIGKILL during the fan-out and during a replay', async () => {
    const ups = [await upstream('a'), await upstream('b'), await upstream('c')];
    down(ups[2]);
    const gw = d.add(await startGateway(bridges(ups, { c: { replay: { messagesPerS: 2000, bytesPerS: 0 } } })));
    const local = await connectClient(gw.url, { clientId: 'publisher' });
    const concurrency = 50;
    const acked: string[] = [];
    const publishing = publishSequence(local, 'plant/line3/temp', 1_000_000, {
      qos: 1,
      prefix: 'k',
      concurrency,
      ledger: acked,
    });
    await waitFor(() => acked.length >= 4000, 60_000);
    await gw.kill('SIGKILL'); // a and b are sending, c's share is only journaled
    await publishing;
    local.end(true);
    acked.sort((x, y) => Number(x.slice(1)) - Number(y.slice(1)));

    await gw.restart();
    ups[2].proxy.restore();
    // c replays at 2000 msg/s: killed again about a second into it.
    await waitFor(() => ups[2].up.messages.length >= 1500, 60_000, { intervalMs: 5 });
    await gw.kill('SIGKILL');
    await gw.restart();
    for (const u of ups) {
      await waitFor(() => (([got]) => acked.every((p) => got.has(p)))([new Set(u.up.payloads())]), 60_000, {
        message: () => `${u.name}: ${new Set(u.up.payloads()).size}/${acked.length}`,
      });
      const check = checkSequence(u.up.payloads(), acked);
      expect(check.missing).toEqual([]);
      expect(check.outOfOrder).toBe(0);
      // Published but not PUBACKed at the kill: may have been journaled.
      expect(check.unexpected.length).toBeLessThanOrEqual(concurrency);
    }
  });
});
