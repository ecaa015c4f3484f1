/**
 * The Sparkplug uplink catches up live-first by default (docs/architecture.md#live-first): after an outage the
 * node births, a value read after the reconnect reaches the central host at once while the data stored during the
 * outage still drains, each stored value once, flagged historical, in its order, with seqs valid for the session.
 * Fed by a pymodbus server; a host on the gateway's own broker sees what was stored, one on the central Mosquitto
 * what went up. A device that dies while its stored data drains has its DDEATH upstream at once; the rest of its
 * stored data follows, historical, so no host shows it live meanwhile. Run `npm run build` first.
 */
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { startGateway } from '../helpers/gateway.js';
import { modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import {
  hostsMayCommand,
  startSparkplugHost,
  type HostMessage,
  type SparkplugHost,
} from '../helpers/sparkplug-host.js';

const d = useDisposer();
const GROUP = 'plant1';
const NODE = 'line4-gw';
const LIVE = 60_000;

/** The `count` values in the DDATA of press-1, with when they arrived and whether they were flagged historical. */
function counts(host: SparkplugHost, from = 0): { value: number; atMs: number; historical: boolean }[] {
  return host.messages
    .slice(from)
    .filter((m: HostMessage) => m.type === 'DDATA' && m.deviceId === 'press-1')
    .flatMap((m) =>
      m.payload.metrics
        .filter((x) => host.nameOf(NODE, x) === 'count')
        .map((x) => ({ value: Number(x.value), atMs: m.receivedAtMs, historical: x.isHistorical === true })),
    );
}

/**
 * A node with press-1 on a central Mosquitto behind a fault proxy, then an outage during which 80 values of the
 * press's `count` are stored. The backlog drains at 10 msg/s (half of 20: live-first), so for seconds.
 */
async function outageWithBacklog() {
  const central = d.add(await startMosquitto());
  const proxy = d.add(await startFaultProxy(central.port));
  const sim = d.add(await startModbusSim());
  await sim.set(1, 'hr', 2, [0, 1]);
  const upstream = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-central' }));
  const press = modbusPress(sim, [{ name: 'count', table: 'holding', address: 2, datatype: 'uint32' }]);
  const gw = d.add(
    await startGateway({
      bridges: [
        {
          name: 'central',
          remote: { urls: [proxy.url], clientId: NODE, keepaliveS: 5 },
          reconnect: { minDelayMs: 100, maxDelayMs: 300 },
          // No replay.order: the Sparkplug uplink's default is live-first. The backlog gets half of 20 msg/s.
          replay: { messagesPerS: 20, bytesPerS: 0 },
          topics: [
            { filter: 'spBv1.0/#', direction: 'out' },
            { filter: `spBv1.0/${GROUP}/NCMD/${NODE}`, direction: 'in' },
            { filter: `spBv1.0/${GROUP}/DCMD/${NODE}/#`, direction: 'in' },
          ],
        },
      ],
      sparkplug: {
        groupId: GROUP,
        edgeNodeId: NODE,
        uplink: 'central',
        deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 },
      },
      connectors: [press],
      auth: hostsMayCommand(d.tempDir()),
    }),
  );
  const local = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'scada-local' }));
  await local.rebirth(NODE);
  await upstream.waitFor((h) => h.births('DBIRTH', 'press-1').length >= 1, 15_000, 'upstream births');

  proxy.refuse();
  proxy.reset();
  await upstream.waitFor((h) => h.of('NDEATH').length === 1, 15_000, 'NDEATH via the Will at the outage');
  const localMark = local.messages.length;
  // Each value kept until the local host has it: read, and stored for the uplink.
  for (let v = 1000; v < 1080; v++) {
    await sim.set(1, 'hr', 2, [0, v]);
    await local.waitFor((h) => h.value(NODE, 'press-1', 'count') === v, 5000, `the stored value ${v} read`);
  }
  const stored = counts(local, localMark).map((c) => c.value);
  expect(stored.length).toBeGreaterThan(40); // seconds of drain at 10 msg/s

  const upstreamMark = upstream.messages.length;
  // The local host's rebirth request may or may not have made a second NBIRTH before the outage: count from here.
  const birthsBefore = upstream.births('NBIRTH').length;
  proxy.restore();
  await upstream.waitFor(
    (h) => h.births('NBIRTH').length > birthsBefore && counts(h, upstreamMark).length > 0,
    15_000,
    'births and the drain after the outage',
  );
  return { sim, upstream, local, stored, upstreamMark };
}

/**
 * Nothing more of the backlog can follow: the node reports its backlog empty in an NDATA (at most every 10 s), which
 * it sends once the outbox is empty, so behind everything sent from it.
 */
function drained(upstream: SparkplugHost, from: number): Promise<unknown> {
  return upstream.waitFor(
    (h) =>
      h.messages
        .slice(from)
        .some(
          (m) =>
            m.type === 'NDATA' &&
            m.payload.metrics.some((x) => h.nameOf(NODE, x) === 'Node Info/Backlog Messages' && Number(x.value) === 0),
        ),
    20_000,
    'an NDATA reporting the backlog empty',
  );
}

describe('Sparkplug uplink: live-first catch-up', { timeout: 120_000 }, () => {
  it('after an outage, a new DDATA reaches the central host ahead of the stored data still draining: each stored value once, historical, in order', async () => {
    const { sim, upstream, local, stored, upstreamMark } = await outageWithBacklog();
    await sim.set(1, 'hr', 2, [0, LIVE]);
    await local.waitFor((h) => h.value(NODE, 'press-1', 'count') === LIVE, 5000, 'the live value read');
    await upstream.waitFor(
      (h) => counts(h, upstreamMark).some((c) => c.value === LIVE),
      5000,
      'the live value upstream',
    );
    const readAt = (counts(local).find((c) => c.value === LIVE) as { atMs: number }).atMs;
    const after = counts(upstream, upstreamMark);
    const live = after.find((c) => c.value === LIVE) as { atMs: number; historical: boolean };
    const drainedBefore = after.filter((c) => c.historical).length;
    expect(live.historical).toBe(false);
    expect(drainedBefore).toBeLessThan(stored.length); // the backlog was still draining

    await upstream.waitFor(
      (h) => counts(h, upstreamMark).filter((c) => c.historical).length >= stored.length,
      30_000,
      'the whole backlog upstream',
    );
    await drained(upstream, upstreamMark);
    const historical = counts(upstream, upstreamMark).filter((c) => c.historical);
    expect(historical.map((c) => c.value)).toEqual(stored);
    expect(upstream.violations).toEqual([]);
    console.info(
      `[sparkplug-live-first] live DDATA upstream ${live.atMs - readAt} ms after it was read, ${drainedBefore}/${stored.length} stored values drained then`,
    );
  });

  /** The DDEATHs of press-1 a host received since `from` (index into its messages). */
  const deaths = (host: SparkplugHost, from: number) =>
    host.messages.slice(from).filter((m) => m.type === 'DDEATH' && m.deviceId === 'press-1');

  it('a device that dies while its stored data drains: its DDEATH reaches the central host ahead of the rest of its stored data, and the rest of its stored data follows it, historical, in order, once', async () => {
    const { sim, upstream, local, stored, upstreamMark } = await outageWithBacklog();
    await sim.kill();
    const [localDeath] = await local.waitFor(
      (h) => (h.of('DDEATH', 'press-1').length > 0 ? h.of('DDEATH', 'press-1') : undefined),
      10_000,
      'the live DDEATH',
    );
    const [upstreamDeath] = await upstream.waitFor(
      (h) => (deaths(h, upstreamMark).length > 0 ? deaths(h, upstreamMark) : undefined),
      5000,
      'the DDEATH upstream',
    );
    // The host marks the device offline and its metrics stale now, with the DDEATH's timestamp
    // [tck-id-operational-behavior-edge-node-termination-host-action-ddeath-devices-offline]
    // [tck-id-operational-behavior-edge-node-termination-host-action-ddeath-devices-tags-stale].
    const lagMs = upstreamDeath.receivedAtMs - localDeath.receivedAtMs;
    expect(upstreamDeath.payload.timestamp).toBe(localDeath.payload.timestamp);
    expect(upstream.isDeviceOnline(NODE, 'press-1')).toBe(false);
    const drainedAtDeath = counts(upstream, upstreamMark).length;
    expect(drainedAtDeath).toBeLessThan(stored.length); // it died during the drain

    await upstream.waitFor(
      (h) => counts(h, upstreamMark).length >= stored.length,
      30_000,
      'the whole backlog upstream',
    );
    await drained(upstream, upstreamMark);
    const deathAt = upstream.messages.indexOf(upstreamDeath);
    // Every stored value, each once, in order, flagged historical: those after the death too. A historical value is
    // no current value [is_historical, Sparkplug 3.0 §6.4.7], so the host keeps the device offline.
    const data = counts(upstream, upstreamMark);
    expect(data.map((c) => c.value)).toEqual(stored);
    expect(data.every((c) => c.historical)).toBe(true);
    expect(counts(upstream, deathAt).length).toBeGreaterThan(0);
    expect(deaths(upstream, upstreamMark)).toHaveLength(1);
    expect(upstream.isDeviceOnline(NODE, 'press-1')).toBe(false);
    // Seqs +1 per message across the DDEATH [tck-id-topics-ddeath-seq-num] [tck-id-payloads-sequence-num-incrementing];
    // after it only historical data of the device, whose aliases its DBIRTH of this session gave.
    expect(upstream.violations).toEqual([]);
    console.info(
      `[sparkplug-live-first] device died with ${drainedAtDeath}/${stored.length} stored values drained; its DDEATH upstream ${lagMs} ms after the local one`,
    );
  });

  it('a device that dies and comes back while its stored data drains: DDEATH at once, then its new DBIRTH, and every stored value still goes up', async () => {
    const { sim, upstream, local, stored, upstreamMark } = await outageWithBacklog();
    await sim.mute(1);
    await local.waitFor((h) => h.of('DDEATH', 'press-1').length > 0, 10_000, 'the live DDEATH');
    const [upstreamDeath] = await upstream.waitFor(
      (h) => (deaths(h, upstreamMark).length > 0 ? deaths(h, upstreamMark) : undefined),
      5000,
      'the DDEATH upstream',
    );
    await sim.unmute(1);
    const upstreamSince = (h: SparkplugHost) => h.messages.slice(upstreamMark);
    // The prologue's DBIRTH is the first after the reconnect; the device's new life brings a second one.
    await upstream.waitFor(
      (h) => upstreamSince(h).filter((m) => m.type === 'DBIRTH' && m.deviceId === 'press-1').length === 2,
      15_000,
      'the new DBIRTH upstream',
    );
    const drainedAtRebirth = counts(upstream, upstreamMark).length;
    expect(drainedAtRebirth).toBeLessThan(stored.length); // it came back during the drain
    const after = upstreamSince(upstream);
    const deathAt = after.indexOf(upstreamDeath);
    const rebirthAt = after.findIndex((m, i) => i > deathAt && m.type === 'DBIRTH' && m.deviceId === 'press-1');
    expect(deathAt).toBeGreaterThan(0);
    expect(rebirthAt).toBeGreaterThan(deathAt);
    expect(upstream.isDeviceOnline(NODE, 'press-1')).toBe(true);

    await upstream.waitFor(
      (h) => counts(h, upstreamMark).filter((c) => c.historical).length >= stored.length,
      30_000,
      'the whole backlog upstream',
    );
    await drained(upstream, upstreamMark);
    expect(
      counts(upstream, upstreamMark)
        .filter((c) => c.historical)
        .map((c) => c.value),
    ).toEqual(stored);
    expect(upstream.violations).toEqual([]);
    console.info(
      `[sparkplug-live-first] device reborn with ${drainedAtRebirth}/${stored.length} stored values drained; DDEATH upstream at once, before its DBIRTH`,
    );
  });
});
