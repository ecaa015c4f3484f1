/**
 * The Sparkplug session rules of the upstream session, against the gateway process, a central Mosquitto and a
 * host application written with sparkplug-payload (docs/architecture.md#sparkplug-session).
 */
import { copyFileSync, writeFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import mqttPacket from 'mqtt-packet';
import type { IConnectPacket } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { decodePayload } from '../../src/sparkplug/payload.js';
import { makeCerts } from '../fixtures/certs.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { logLines, runCli, startGateway } from '../helpers/gateway.js';
import { startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto, startTlsMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { startSparkplugHost, sparkplugUplink } from '../helpers/sparkplug-host.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();
const GROUP = 'plant1';
const NODE = 'line4-gw';

const device = (port: number, id = 'press-1', unitId = 1) => ({
  id,
  type: 'modbus',
  transport: 'tcp',
  host: '127.0.0.1',
  port,
  unitId,
  addressBase: 0,
  pollIntervalMs: 100,
  timeoutMs: 5000,
  tags: [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }],
});

const bdSeq = (m: { payload: { metrics: readonly { name?: string; value: unknown }[] } }) =>
  Number(m.payload.metrics.find((x) => x.name === 'bdSeq')?.value);

/** The Sparkplug uplink bridge to `url`, with the in filters the edge node needs. */
const uplinkBridge = (url: string, extraIn: readonly string[] = []) =>
  sparkplugUplink(url, { group: GROUP, node: NODE, maxDelayMs: 200, state: false, extraIn });

/** A TCP server that reads CONNECT packets and never answers them: the gateway waits for a CONNACK. */
async function startSilentBroker(port: number): Promise<{ connects: IConnectPacket[]; close(): Promise<void> }> {
  const connects: IConnectPacket[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    const parser = mqttPacket.parser();
    parser.on('packet', (packet) => {
      if (packet.cmd === 'connect') connects.push(packet);
    });
    socket.on('data', (chunk) => parser.parse(chunk));
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    connects,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

const willBdSeq = (connect: IConnectPacket): number =>
  Number(decodePayload(connect.will?.payload as Buffer).metrics.find((m) => m.name === 'bdSeq')?.value);

describe('Sparkplug upstream session', () => {
  it('bdSeq counts CONNECTs sent, not attempts: refused attempts take none, and after a SIGKILL between CONNECT and CONNACK the next NBIRTH and Will carry the next one [tck-id-payloads-nbirth-bdseq-increment] [tck-id-payloads-nbirth-bdseq] [tck-id-payloads-ndeath-bdseq]', async () => {
    const port = await freePort();
    // Nothing listens yet: every attempt is refused before a CONNECT can leave.
    const gw = d.add(
      await startGateway(
        {
          bridges: [uplinkBridge(`mqtt://127.0.0.1:${port}`)],
          sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central' },
        },
        { logLevel: 'debug' },
      ),
    );
    const refused = () => logLines(gw).filter((l) => l.msg === 'uplink error').length;
    await waitFor(() => refused() >= 5, 10_000, { message: 'five refused uplink attempts' });
    const silent = await startSilentBroker(port);
    try {
      await waitFor(() => silent.connects.length > 0, 10_000, { message: 'a CONNECT at the silent broker' });
      // The first CONNECT this node ever sent: bdSeq 0, however many attempts failed before.
      expect(willBdSeq(silent.connects[0])).toBe(0);
      // Killed between CONNECT and CONNACK: bdSeq 0 has been used.
      await gw.kill('SIGKILL');
    } finally {
      await silent.close();
    }
    const central = d.add(await startMosquitto({ port }));
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    await gw.restart();
    await host.waitFor((h) => h.of('NBIRTH').length === 1, 10_000, 'NBIRTH after the restart');
    expect(bdSeq(host.of('NBIRTH')[0])).toBe(1);
    // The Will registered with that CONNECT carries the same bdSeq: the central broker publishes it on a crash.
    await gw.kill('SIGKILL');
    await host.waitFor((h) => h.of('NDEATH').length === 1, 10_000, 'the Will NDEATH after the crash');
    expect(bdSeq(host.of('NDEATH')[0])).toBe(1);
    expect(host.isOnline(NODE)).toBe(false);
    expect(host.violations).toEqual([]);
  });

  it('a TLS handshake that fails sends no CONNECT and takes no bdSeq [tck-id-payloads-nbirth-bdseq-increment]', async () => {
    const certs = makeCerts(d.tempDir());
    const { central, tlsUrl } = await startTlsMosquitto(certs);
    d.add(central);
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    // The uplink trusts another CA first: every handshake fails. The file is read at every attempt.
    const caFile = join(d.tempDir('edgeferry-sp-ca-'), 'ca.pem');
    copyFileSync(certs.rogueCa, caFile);
    const bridge = { ...uplinkBridge(tlsUrl), remote: { urls: [tlsUrl], clientId: NODE, tls: { caFile } } };
    const gw = d.add(
      await startGateway(
        { bridges: [bridge], sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central' } },
        { logLevel: 'debug' },
      ),
    );
    const failed = () => logLines(gw).filter((l) => l.msg === 'uplink error').length;
    await waitFor(() => failed() >= 5, 10_000, { message: 'five failed TLS handshakes' });
    copyFileSync(certs.ca, caFile);
    await host.waitFor((h) => h.of('NBIRTH').length === 1, 10_000, 'NBIRTH once the handshake succeeds');
    expect(bdSeq(host.of('NBIRTH')[0])).toBe(0);
    expect(host.violations).toEqual([]);
  });

  it('primary host offline: NDEATH, then the node leaves the MQTT server; when the host is back, births with the next bdSeq (that of its new Will) and what was stored meanwhile as history [tck-id-operational-behavior-edge-node-termination-host-offline] [tck-id-payloads-nbirth-bdseq] [tck-id-payloads-ndeath-bdseq]', async () => {
    const central = d.add(await startMosquitto());
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [1]);
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    const bornAt = Date.now();
    await host.publishState('scada-1', true, bornAt);
    const gw = d.add(
      await startGateway({
        bridges: [uplinkBridge(central.url, ['spBv1.0/STATE/+'])],
        sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central', primaryHostId: 'scada-1' },
        connectors: [device(sim.port)],
      }),
    );
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length === 1, 10_000, 'births while the host is online');
    const first = bdSeq(host.births('NBIRTH')[0]);
    const mqttSessions = () => central.log().match(/New client connected from .* as line4-gw /g)?.length ?? 0;
    expect(mqttSessions()).toBe(1);
    // A local subscriber shows when the edge node has published (and the bridge journaled) a change.
    const local = d.add(await openClient(gw.url));
    await local.subscribe(`spBv1.0/${GROUP}/DDATA/${NODE}/press-1`);

    await host.publishState('scada-1', false, bornAt);
    await host.waitFor((h) => h.of('NDEATH').length === 1, 10_000, 'NDEATH after the host went offline');
    expect(bdSeq(host.of('NDEATH')[0])).toBe(first);
    // Then the MQTT session ends (a normal DISCONNECT: the broker drops the Will) and a new one starts, unborn.
    await waitFor(() => mqttSessions() === 2, 10_000, { message: () => `a second MQTT session:\n${central.log()}` });
    expect(central.log()).toMatch(/Client line4-gw disconnected\./);
    await sim.set(1, 'hr', 0, [2]);
    await local.waitForMessages(1, { timeoutMs: 10_000 });

    await host.publishState('scada-1', true, bornAt + 1000);
    await host.waitFor(
      (h) => h.births('NBIRTH').length === 2 && h.births('DBIRTH', 'press-1').length === 2,
      10_000,
      'births when the host is back',
    );
    expect(bdSeq(host.births('NBIRTH')[1])).toBe(first + 1);
    expect(host.of('NDEATH')).toHaveLength(1);
    await host.waitFor(
      (h) => h.of('DDATA', 'press-1').some((m) => m.payload.metrics.some((x) => x.isHistorical && x.value === 2)),
      10_000,
      'the change stored while the host was away, flagged historical',
    );
    expect(mqttSessions()).toBe(2);
    // The Will of the new session carries the new bdSeq.
    await gw.kill('SIGKILL');
    await host.waitFor((h) => h.of('NDEATH').length === 2, 10_000, 'the Will NDEATH after a crash');
    expect(bdSeq(host.of('NDEATH')[1])).toBe(first + 1);
    expect(host.violations).toEqual([]);
  });

  it('refuses a config whose uplink does not bring NCMD, DCMD or the primary host STATE down, at --check-config and at start-up, naming the filter to add', async () => {
    const file = join(d.tempDir('edgeferry-sp-config-'), 'gw.yaml');
    const config = (inFilters: readonly string[]) => ({
      storage: { path: join(d.tempDir('edgeferry-sp-data-'), 'data') },
      bridges: [
        {
          ...uplinkBridge('mqtt://127.0.0.1:1', []),
          topics: [
            { filter: 'spBv1.0/#', direction: 'out' },
            ...inFilters.map((filter) => ({ filter, direction: 'in' })),
          ],
        },
      ],
      sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central', primaryHostId: 'scada-1' },
      connectors: [device(1502)],
    });
    writeFileSync(file, JSON.stringify(config([])));
    for (const args of [
      ['--check-config', '--config', file],
      ['--config', file],
    ]) {
      const r = await runCli(args);
      expect(r.code, args.join(' ')).toBe(2);
      const out = r.stderr + r.stdout;
      expect(out).toContain(
        `sparkplug.uplink: the uplink bridge "central" has no in filter for spBv1.0/${GROUP}/NCMD/${NODE}: add { filter: "spBv1.0/${GROUP}/NCMD/${NODE}", direction: in } to bridges[0].topics`,
      );
      expect(out).toContain(
        `sparkplug.uplink: the uplink bridge "central" has no in filter for spBv1.0/${GROUP}/DCMD/${NODE}/#: add { filter: "spBv1.0/${GROUP}/DCMD/${NODE}/#", direction: in } to bridges[0].topics`,
      );
      expect(out).toContain(
        'sparkplug.primaryHostId: the uplink bridge "central" has no in filter for spBv1.0/STATE/scada-1: add { filter: "spBv1.0/STATE/scada-1", direction: in } to bridges[0].topics',
      );
    }
    // Wildcards that cover the topics do.
    writeFileSync(
      file,
      JSON.stringify(config([`spBv1.0/${GROUP}/+/${NODE}/#`, `spBv1.0/${GROUP}/NCMD/+`, 'spBv1.0/STATE/+'])),
    );
    const ok = await runCli(['--check-config', '--config', file]);
    expect([ok.code, ok.stdout.trim()]).toEqual([0, `config OK: ${file}`]);
  });

  it('the DBIRTHs of devices starting with the node come before its own NDATA, and Node Info NDATA never goes up historical when nothing was buffered [tck-id-payloads-dbirth-order]', async () => {
    const central = d.add(await startMosquitto());
    const sim = d.add(await startModbusSim({ units: [1, 2] }));
    // The oven answers its first read two seconds late (a slow connector, such as OPC UA setting up its session).
    const slow = d.add(await startFaultProxy(sim.port));
    slow.setDelayMs(1000);
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    d.add(
      await startGateway({
        bridges: [uplinkBridge(central.url)],
        sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central' },
        connectors: [device(sim.port, 'press-1', 1), device(slow.port, 'oven-1', 2)],
      }),
    );
    const devicesOnline = (m: { payload: { metrics: readonly { value: unknown }[] } }) => m.payload.metrics[0]?.value;
    await host.waitFor(
      (h) => h.of('NDATA').some((m) => devicesOnline(m) === 2),
      15_000,
      'NDATA with both devices online',
    );
    const order = host.messages.map((m) => (m.deviceId === undefined ? m.type : `${m.type}:${m.deviceId}`));
    expect(order.indexOf('DBIRTH:press-1')).toBeGreaterThan(0);
    // No node data between the NBIRTH and the DBIRTHs of the devices that came up with the node.
    expect(order.indexOf('NDATA')).toBeGreaterThan(order.indexOf('DBIRTH:oven-1'));
    expect(host.of('NDATA').map(devicesOnline)).toEqual([2]);
    expect(
      host
        .of('NDATA')
        .flatMap((m) => m.payload.metrics)
        .filter((x) => x.isHistorical),
    ).toEqual([]);
    expect(host.violations).toEqual([]);
  });
});
