/**
 * Several gateways on one central broker (docs/architecture.md#fleet): default client ids that never clash, a
 * site link cut that every gateway survives without loss or reordering, and a twin gateway (a copied
 * configuration, the same gateway.id) reported as one clear error instead of a loop of reconnects.
 * The 50-gateway version with figures is `npm run bench:fleet`.
 */
import { describe, expect, it } from 'vitest';
import { checkSequence, collect, connectClient, publishSequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { bridgeGauge, bridgePatch, logLines, startGateway, type Gateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { sparkplugUplink } from '../helpers/sparkplug-host.js';
import { Decoder } from '../helpers/sparkplug-setup.js';
import type { Message } from '../../src/protocol/message.js';
import { waitFor } from '../helpers/wait.js';
import { encodePayload } from '../../src/sparkplug/payload.js';

const d = useDisposer();

/** One gateway `id` with the bridge `central` as a user writes it: no client id, so the default applies. */
async function fleetGateway(
  id: string,
  url: string,
  remote: Record<string, unknown> = {},
  metricsPort?: number,
): Promise<Gateway> {
  const patch = bridgePatch(url, { remote: { clientId: undefined, ...remote } });
  const metrics = metricsPort === undefined ? {} : { metrics: { host: '127.0.0.1', port: metricsPort } };
  return d.add(await startGateway({ ...patch, ...metrics, gateway: { id } }, { logLevel: 'info' }));
}

describe('fleet: many gateways, one central broker', { timeout: 90_000 }, () => {
  it('gateways with the default client id keep their sessions, survive a site link cut, and lose nothing, in order per gateway', async () => {
    const central = d.add(await startMosquitto());
    const site = d.add(await startFaultProxy(central.port)); // the site's link: every gateway's uplink crosses it
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const ids = ['line1', 'line2', 'line3', 'line4'];
    const gateways = await Promise.all(ids.map((id) => fleetGateway(id, site.url)));
    const publishers = await Promise.all(gateways.map((gw) => connectClient(gw.url)));
    for (const p of publishers) d.defer(() => p.endAsync(true));

    const acked = ids.map((): string[] => []);
    const send = (start: number, count: number) =>
      Promise.all(
        publishers.map((p, i) =>
          publishSequence(p, `plant/${ids[i]}`, count, {
            prefix: `${ids[i]}-`,
            start,
            concurrency: 20,
            ledger: acked[i],
          }),
        ),
      );
    await send(0, 300);
    const acceptedAtCut = site.accepted;
    site.refuse();
    site.reset();
    await send(300, 500); // buffered: PUBACKed by each gateway while its uplink is down
    // The cut lasts until every gateway saw it and reconnect attempts were refused.
    await waitFor(
      () =>
        gateways.every((gw) => logLines(gw).some((l) => String(l.msg).startsWith('uplink lost'))) &&
        site.accepted >= acceptedAtCut + ids.length,
      15_000,
      { message: 'every gateway to lose its link and try again' },
    );
    site.restore();
    await send(800, 200);

    const total = acked.reduce((n, a) => n + a.length, 0);
    await waitFor(() => new Set(up.payloads()).size >= total, 30_000, {
      message: () => `${new Set(up.payloads()).size}/${total} upstream`,
    });
    ids.forEach((id, i) => {
      const got = up.messages.filter((m) => m.topic === `plant/${id}`).map((m) => m.payload.toString());
      expect(checkSequence(got, acked[i]), id).toMatchObject({ missing: [], unexpected: [], outOfOrder: 0 });
    });
    const log = central.log();
    expect(log).not.toMatch(/already connected, closing old connection/);
    for (const id of ids)
      expect(
        log.match(new RegExp(`New client connected .* as ${id}-central`, 'g'))?.length ?? 0,
        id,
      ).toBeGreaterThanOrEqual(2);
    for (const gw of gateways) {
      expect(logLines(gw).filter((l) => l.msg === 'uplink online' && l.reconnected === true)).toHaveLength(1);
      expect(logLines(gw).filter((l) => l.level === 50 || l.level === 'error')).toEqual([]);
    }
  });

  it('each gateway keeps a retained JSON status on the central broker; "offline" by its Will when it dies, by itself when it stops', async () => {
    const central = d.add(await startMosquitto());
    const ids = ['cell1', 'cell2'];
    const gateways = await Promise.all(ids.map((id) => fleetGateway(id, central.url)));
    const latest = async (id: string) => {
      // A new subscriber gets the retained status: what `mosquitto_sub -t 'edgeferry/+/status'` shows.
      const sub = await collect(central.url, 'edgeferry/+/status', { qos: 1 });
      try {
        await waitFor(() => sub.messages.some((m) => m.topic === `edgeferry/${id}/status`), 5000);
        // The first is the retained copy (a later one would be a live refresh, retain 0 [MQTT-3.3.1-9]).
        const m = sub.messages.find((x) => x.topic === `edgeferry/${id}/status`);
        return { retain: m?.retain, report: JSON.parse(m?.payload.toString() ?? '{}') as Record<string, unknown> };
      } finally {
        await sub.stop();
      }
    };
    for (const id of ids) {
      const { retain, report } = await waitFor(async () => {
        const got = await latest(id);
        return got.retain === true && got.report.state === 'online' ? got : undefined;
      }, 15_000);
      expect(retain).toBe(true);
      expect(report).toMatchObject({
        gateway: id,
        version: expect.any(String),
        configDigest: expect.stringMatching(/^[0-9a-f]{16}$/),
        devices: { up: 0, down: [] },
        lastError: null,
      });
      expect(report.bridges).toEqual([
        {
          name: 'central',
          connected: true,
          backlog: { messages: 0, bytes: 0, oldestAgeS: 0 },
          deadLetters: 0,
          lastError: null,
        },
      ]);
    }
    await gateways[0].kill('SIGKILL');
    await gateways[1].stop();
    for (const id of ids)
      await waitFor(async () => (await latest(id)).report.state === 'offline', 15_000, { message: `${id} offline` });
  });

  it('a Sparkplug node reports its version and backlog as node metrics, and tells of a twin publishing its NBIRTH (same group and edge node id)', async () => {
    const central = d.add(await startMosquitto());
    const site = d.add(await startFaultProxy(central.port));
    const host = d.add(await collect(central.url, 'spBv1.0/#', { qos: 1 }));
    const node = (id: string, url: string) => ({
      gateway: { id },
      bridges: [
        { ...sparkplugUplink(url, { group: 'plant1', node: 'line4-gw', state: false }), remote: { urls: [url] } },
      ],
      sparkplug: { groupId: 'plant1', edgeNodeId: 'line4-gw', uplink: 'central' },
    });
    const first = d.add(await startGateway(node('cell1', site.url), { logLevel: 'info' }));
    const decoder = new Decoder();
    const decoded = () =>
      host.messages
        .filter((m) => m.topic.startsWith('spBv1.0/plant1/'))
        .map((m) => decoder.decode({ topic: m.topic, payload: m.payload } as Message));
    const births = await waitFor(
      () =>
        decoded()
          .filter((m) => m.type === 'NBIRTH')
          .at(0),
      10_000,
      { message: 'first NBIRTH' },
    );
    const metric = (name: string) => births.payload.metrics.find((m) => m.name === name);
    expect(metric('Node Info/Version')?.value).toEqual(expect.stringMatching(/^\d+\.\d+\.\d+/));
    expect(Number(metric('Node Info/Backlog Messages')?.value)).toBe(0);

    // Another node's data (outside this node's namespace) waits in the uplink's outbox while the link is cut.
    // The backlog of an outage is in the next NBIRTH (NDATA journaled meanwhile would be superseded by it), and
    // NDATA reports it drained.
    const local = await connectClient(first.url);
    d.defer(() => local.endAsync(true));
    site.refuse();
    site.reset();
    for (let i = 0; i < 20; i++)
      await local.publishAsync(`spBv1.0/plant2/DDATA/other-gw/meter`, Buffer.from([i]), { qos: 1 });
    await waitFor(() => logLines(first).some((l) => String(l.msg).startsWith('uplink lost; buffering (')), 10_000);
    site.restore();
    const rebirth = await waitFor(
      () =>
        decoded()
          .filter((m) => m.type === 'NBIRTH')
          .at(1),
      10_000,
      { message: 'NBIRTH after the cut' },
    );
    expect(
      Number(rebirth.payload.metrics.find((m) => m.name === 'Node Info/Backlog Messages')?.value),
    ).toBeGreaterThanOrEqual(20);
    const backlogReports = () =>
      decoded()
        .filter((m) => m.type === 'NDATA')
        .flatMap((m) => m.payload.metrics.filter((x) => decoder.nameOf(x.alias) === 'Node Info/Backlog Messages'));
    await waitFor(() => backlogReports().some((x) => Number(x.value) === 0), 25_000, {
      message: () =>
        `backlog reports ${backlogReports()
          .map((x) => Number(x.value))
          .join(',')}; upstream ${decoded()
          .map((m) => m.type)
          .join(',')}`,
    });

    // A twin: another gateway (its own gateway.id, so its own client id) with a copied sparkplug section.
    const twin = d.add(await startGateway(node('cell2', central.url), { logLevel: 'info' }));
    await waitFor(
      () => logLines(first).some((l) => l.level === 50 && /another edge node publishes our NBIRTH/.test(String(l.msg))),
      15_000,
      {
        message: () => first.output(),
      },
    );
    // No false alarm: a node never takes its own NBIRTH (MQTT 5 no-local) for a twin's.
    expect(logLines(twin).filter((l) => l.level === 50)).toEqual([]);
  });

  it('tells of a twin on a 3.1.1 uplink too, where its own NBIRTH comes back (no no-local) and is known as its own', async () => {
    const central = d.add(await startMosquitto());
    const host = d.add(await collect(central.url, 'spBv1.0/#', { qos: 1 }));
    const uplink = sparkplugUplink(central.url, { group: 'plant1', node: 'line4-gw', state: false });
    const gw = d.add(
      await startGateway(
        {
          gateway: { id: 'cell1' },
          bridges: [{ ...uplink, remote: { ...uplink.remote, urls: [central.url], protocolVersion: 4 } }],
          sparkplug: { groupId: 'plant1', edgeNodeId: 'line4-gw', uplink: 'central' },
        },
        { logLevel: 'info' },
      ),
    );
    const nbirth = 'spBv1.0/plant1/NBIRTH/line4-gw';
    await waitFor(() => host.messages.some((m) => m.topic === nbirth), 10_000, { message: 'NBIRTH upstream' });
    // The central broker sends the gateway its own NBIRTH back before this NCMD (one connection, in order): once
    // the NCMD is refused (an unknown metric), the echo has been seen, and it raised no alarm.
    const twinAlarms = () => logLines(gw).filter((l) => /another edge node publishes our NBIRTH/.test(String(l.msg)));
    const ncmd = encodePayload({
      timestamp: Date.now(),
      metrics: [{ name: 'no such metric', datatype: 'Boolean', value: true }],
    });
    await host.client.publishAsync('spBv1.0/plant1/NCMD/line4-gw', ncmd, { qos: 1 });
    await waitFor(() => logLines(gw).some((l) => l.msg === 'command refused'), 10_000, { message: () => gw.output() });
    expect(twinAlarms()).toEqual([]);
    // A twin's NBIRTH (another timestamp, so other bytes) is told.
    const twinBirth = encodePayload({
      timestamp: Date.now() + 1,
      seq: 0,
      metrics: [{ name: 'bdSeq', datatype: 'Int64', value: 0n }],
    });
    await host.client.publishAsync(nbirth, twinBirth, { qos: 1 });
    await waitFor(() => twinAlarms().length === 1, 10_000, { message: () => gw.output() });
  });

  for (const protocolVersion of [5, 4] as const) {
    it(`a twin gateway (same gateway.id) is one error naming the client id clash and a count, MQTT ${protocolVersion === 5 ? '5' : '3.1.1'}`, async () => {
      const central = d.add(await startMosquitto());
      const ports = [await freePort(), await freePort()];
      const twins: Gateway[] = [];
      for (const port of ports) twins.push(await fleetGateway('line7', central.url, { protocolVersion }, port));
      const taken = async () =>
        (await Promise.all(ports.map((p) => bridgeGauge(p, 'edgeferry_bridge_session_taken_total')))).map(
          (v) => v ?? 0,
        );
      // Sessions taken, counted after the first few quick closes (Mosquitto 2.0 closes the old connection without
      // DISCONNECT 0x8E, MQTT 5 too, so the schedule infers it).
      await waitFor(async () => (await taken()).reduce((a, b) => a + b) >= 2, 60_000, {
        intervalMs: 250,
        message: () => twins.map((t) => t.output()).join('\n'),
      });
      expect(central.log()).toMatch(/Client line7-central already connected, closing old connection/);
      for (const twin of twins) {
        // Not a loop of warnings: the first quick closes, then silence but for the one error.
        expect(
          logLines(twin).filter((l) => String(l.msg).startsWith('uplink lost; buffering (')).length,
        ).toBeLessThanOrEqual(3);
        const errors = logLines(twin).filter((l) => l.level === 'error' || l.level === 50);
        expect(errors.length).toBeLessThanOrEqual(1);
        for (const e of errors) {
          expect(e.msg).toMatch(/another client with the same client id/);
          expect(e.code).toBe('EF_UPLINK_SESSION_TAKEN');
          expect(e).not.toHaveProperty('err'); // an expected event: the cause in words, no stack
        }
      }
    });
  }
});
