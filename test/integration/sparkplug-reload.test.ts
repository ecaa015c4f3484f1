/**
 * Reload of connectors: SIGHUP adds, reconfigures and removes connectors on the running Sparkplug edge
 * node. An added one is born (DBIRTH) when it first answers and its data flows; a reconfigured one dies (DDEATH)
 * and is born again with its new metric list; a removed one dies. The node's session (NBIRTH, bdSeq, seq), the
 * other devices and a connected local MQTT client carry on throughout; a host application checking the
 * Sparkplug rules sees no violation, locally and upstream through the bridge. Run `npm run build` first.
 */
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, reloadGateway, startGateway, type Gateway } from '../helpers/gateway.js';
import { startModbusSim, type ModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { hostsMayCommand, startSparkplugHost, type HostMessage } from '../helpers/sparkplug-host.js';

const d = useDisposer();

const GROUP = 'plant1';
const NODE = 'line4-gw';
const DEVICES_ONLINE = 'Node Info/Devices Online';

function modbus(sim: ModbusSim, id: string, unitId: number, tags: object[]) {
  return {
    id,
    type: 'modbus',
    transport: 'tcp',
    host: '127.0.0.1',
    port: sim.port,
    unitId,
    addressBase: 0,
    pollIntervalMs: 100,
    // Generous: two shared cores under load must not make a healthy unit look dead.
    timeoutMs: 1500,
    retries: 0,
    tags,
  };
}

const press = (sim: ModbusSim) =>
  modbus(sim, 'press-1', 1, [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }]);
const LEVEL = { name: 'level', table: 'holding', address: 0, datatype: 'uint16' };
const ALARM = { name: 'alarm', table: 'coil', address: 0, datatype: 'bool' };

const sparkplug = (extra: object = {}) => ({
  groupId: GROUP,
  edgeNodeId: NODE,
  rebirthDebounceMs: 0,
  deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 },
  ...extra,
});

const linesWith = (gw: Gateway, msg: string) => logLines(gw).filter((l) => l.msg === msg);

/** The parts of the written config file these tests edit. */
interface ConfigFile {
  connectors: Record<string, unknown>[];
  sparkplug: Record<string, unknown>;
}

/** Rewrites the config file, sends SIGHUP and resolves with the next log line `msg` (one more than before). */
const reload = (gw: Gateway, edit: (config: ConfigFile) => void, msg: string) => reloadGateway(gw, edit, msg);

const names = (m: HostMessage | undefined) => m?.payload.metrics.map((x) => x.name);

describe('SIGHUP reload of connectors', { timeout: 90_000 }, () => {
  it('adds a connector (DBIRTH, then its data), reconfigures it (DDEATH, DBIRTH with the new metrics) and removes it (DDEATH) while the other device, the node session and a local client carry on', async () => {
    const sim = d.add(await startModbusSim({ units: [1, 2] }));
    await sim.set(1, 'hr', 0, [1]);
    await sim.set(2, 'hr', 0, [40]);
    const gw = d.add(
      await startGateway(
        {
          auth: hostsMayCommand(d.tempDir()),
          sparkplug: sparkplug(),
          connectors: [press(sim)],
          broker: { sysIntervalS: 0 },
        },
        { logLevel: 'info' },
      ),
    );
    const local = d.add(await openClient(gw.url, { clientId: 'local-pub', protocolVersion: 5 }));
    const host = d.add(await startSparkplugHost(gw.url, GROUP));
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length === 1, 15_000, 'births of press-1');
    await host.waitFor((h) => h.value(NODE, undefined, DEVICES_ONLINE) === 1, 5000, 'one device online');

    // Added: born in the running session when it first answers; its data flows.
    const added = await reload(gw, (c) => c.connectors.push(modbus(sim, 'press-2', 2, [LEVEL])), 'connector added');
    expect([added.level, added.connector, added.type]).toEqual([30, 'press-2', 'modbus']);
    await host.waitFor((h) => h.births('DBIRTH', 'press-2').length === 1, 15_000, 'DBIRTH of the added press-2');
    expect(names(host.births('DBIRTH', 'press-2')[0])).toEqual(['level']);
    expect(host.value(NODE, 'press-2', 'level')).toBe(40);
    await sim.set(2, 'hr', 0, [41]);
    await host.waitFor((h) => h.value(NODE, 'press-2', 'level') === 41, 10_000, 'data of press-2');
    await host.waitFor((h) => h.value(NODE, undefined, DEVICES_ONLINE) === 2, 5000, 'two devices online');

    // Reconfigured: a death, then a birth declaring the new metric list.
    await sim.set(2, 'co', 0, [true]);
    const reconfigured = await reload(gw, (c) => (c.connectors[1].tags = [LEVEL, ALARM]), 'connector reconfigured');
    expect(reconfigured.connector).toBe('press-2');
    await host.waitFor((h) => h.births('DBIRTH', 'press-2').length === 2, 15_000, 'DBIRTH of the reconfigured press-2');
    expect(host.of('DDEATH', 'press-2')).toHaveLength(1);
    const deathAt = host.messages.indexOf(host.of('DDEATH', 'press-2')[0]);
    const rebirthAt = host.messages.indexOf(host.births('DBIRTH', 'press-2')[1]);
    expect(deathAt).toBeLessThan(rebirthAt);
    expect(names(host.births('DBIRTH', 'press-2')[1])).toEqual(['level', 'alarm']);
    expect(host.value(NODE, 'press-2', 'alarm')).toBe(true);
    await sim.set(2, 'hr', 0, [42]);
    await host.waitFor((h) => h.value(NODE, 'press-2', 'level') === 42, 10_000, 'data of the reconfigured press-2');

    // Removed: a death; the node counts one device again.
    const removed = await reload(gw, (c) => void c.connectors.pop(), 'connector removed');
    expect(removed.connector).toBe('press-2');
    await host.waitFor((h) => h.of('DDEATH', 'press-2').length === 2, 10_000, 'DDEATH of the removed press-2');
    await host.waitFor((h) => h.value(NODE, undefined, DEVICES_ONLINE) === 1, 5000, 'one device online again');
    await sim.set(2, 'hr', 0, [43]);

    // press-1 was never touched: one birth, no death, its data still flows; the node session is the first one.
    await sim.set(1, 'hr', 0, [2]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'count') === 2, 10_000, 'data of press-1 after the reloads');
    expect(host.births('DBIRTH', 'press-1')).toHaveLength(1);
    expect(host.of('DDEATH', 'press-1')).toEqual([]);
    expect(host.births('NBIRTH')).toHaveLength(1);
    expect(host.of('NDEATH')).toEqual([]);
    // Nothing of the removed device after its death.
    const lastDeath = host.messages.indexOf(host.of('DDEATH', 'press-2')[1]);
    expect(host.messages.slice(lastDeath + 1).filter((m) => m.deviceId === 'press-2')).toEqual([]);
    expect(host.value(NODE, 'press-2', 'level')).toBe(42);
    expect(host.violations).toEqual([]);

    // Connector changes no longer need a restart; the sparkplug section itself still does.
    expect(linesWith(gw, 'configuration changes that need a restart to apply')).toEqual([]);
    const warning = await reload(
      gw,
      (c) => (c.sparkplug.rebirthDebounceMs = 5000),
      'configuration changes that need a restart to apply',
    );
    expect(warning.sections).toEqual(['sparkplug']);

    // The local client's connection lived through every reload.
    await local.publish('plant/after', 'still here', { qos: 1 });
    expect(local.closed).toBe(false);
    expect(local.disconnects).toEqual([]);
    expect(local.client.connected).toBe(true);
  });

  it('through the Sparkplug uplink: the central host sees the added device born and the removed one die, in the same upstream session', async () => {
    const central = d.add(await startMosquitto());
    const sim = d.add(await startModbusSim({ units: [1, 2] }));
    await sim.set(2, 'hr', 0, [7]);
    const upstream = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-host' }));
    const bridge = {
      name: 'central',
      remote: { urls: [central.url], clientId: NODE, keepaliveS: 5 },
      reconnect: { minDelayMs: 100, maxDelayMs: 300 },
      topics: [
        { filter: 'spBv1.0/#', direction: 'out' },
        { filter: `spBv1.0/${GROUP}/NCMD/${NODE}`, direction: 'in' },
        { filter: `spBv1.0/${GROUP}/DCMD/${NODE}/#`, direction: 'in' },
      ],
    };
    const gw = d.add(
      await startGateway(
        { bridges: [bridge], sparkplug: sparkplug({ uplink: 'central' }), connectors: [press(sim)] },
        { logLevel: 'info' },
      ),
    );
    await upstream.waitFor((h) => h.births('DBIRTH', 'press-1').length === 1, 15_000, 'upstream births');

    await reload(gw, (c) => c.connectors.push(modbus(sim, 'press-2', 2, [LEVEL])), 'connector added');
    await upstream.waitFor((h) => h.value(NODE, 'press-2', 'level') === 7, 15_000, 'upstream DBIRTH of press-2');
    await sim.set(2, 'hr', 0, [8]);
    await upstream.waitFor((h) => h.value(NODE, 'press-2', 'level') === 8, 10_000, 'upstream data of press-2');

    await reload(gw, (c) => void c.connectors.pop(), 'connector removed');
    await upstream.waitFor((h) => h.of('DDEATH', 'press-2').length === 1, 10_000, 'upstream DDEATH of press-2');
    // One upstream session throughout: no NDEATH, no second NBIRTH, press-1 born once.
    expect(upstream.births('NBIRTH')).toHaveLength(1);
    expect(upstream.of('NDEATH')).toEqual([]);
    expect(upstream.births('DBIRTH', 'press-1')).toHaveLength(1);
    expect(upstream.violations).toEqual([]);
  });
});
