/**
 * Commands that reach a PLC, through the real gateway process and a pymodbus server: only the central host's
 * commands on the node's current upstream session, never a retained one, never one a local client sent without an
 * ACL grant; and nobody but the gateway publishes in the node's own Sparkplug namespace
 * (docs/architecture.md#security-model). Hosts are MQTT.js clients on a central Mosquitto behind the uplink and on
 * the gateway; a fault proxy cuts the link. Run `npm run build` first.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { logLines, startGateway } from '../helpers/gateway.js';
import type { Gateway } from '../helpers/gateway.js';
import { float32Words, modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import type { ModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { connectRefused, openClient, runToolOk } from '../helpers/mqtt-client.js';
import { hostsMayCommand, sparkplugUplink, startSparkplugHost, sparkplugSection } from '../helpers/sparkplug-host.js';
import type { SparkplugHost } from '../helpers/sparkplug-host.js';
import { delay, waitFor } from '../helpers/wait.js';
import { encodePayload } from '../../src/sparkplug/payload.js';

const d = useDisposer();

const GROUP = 'plant1';
const NODE = 'line4-gw';
const DCMD = `spBv1.0/${GROUP}/DCMD/${NODE}/press-1`;
const SETPOINT = 4;

const TAGS = [
  { name: 'temperature', table: 'holding', address: 0, datatype: 'float32', deadband: 0.5 },
  { name: 'setpoint', table: 'holding', address: SETPOINT, datatype: 'uint16', writable: true },
];

const sparkplug = (extra: object = {}): object => sparkplugSection(GROUP, NODE, extra);

/** A DCMD writing `value` to the setpoint, as a host sends it. */
const setpoint = (value: number): Buffer =>
  encodePayload({ timestamp: Date.now(), metrics: [{ name: 'setpoint', datatype: 'UInt16', value }] });

/** The gateway's audit lines with this message. */
const audit = (gw: Gateway, msg: string) => logLines(gw).filter((l) => l.msg === msg);

/** The values the gateway wrote to the setpoint by DCMD, in order. */
const written = (gw: Gateway) => audit(gw, 'DCMD write done').map((l) => l.value);

/** Setpoint writes the PLC received (write requests on its register). */
const plcWrites = async (sim: ModbusSim) =>
  (await sim.requests()).filter((r) => r.op === 'write' && r.table === 'hr' && r.address === SETPOINT);

/**
 * Waits until the gateway wrote `value` to the setpoint (audited, read back) and the PLC holds it: the marker that
 * every command sent before it was handled.
 */
const holds = async (gw: Gateway, sim: ModbusSim, value: number) => {
  await waitFor(() => written(gw).includes(String(value)), 10_000, { message: `setpoint ${value} written` });
  expect(await sim.get(1, 'hr', SETPOINT, 1)).toEqual([value]);
};

async function uplinkSetup(extra: object = {}) {
  const central = d.add(await startMosquitto());
  const proxy = d.add(await startFaultProxy(central.port));
  const sim = d.add(await startModbusSim());
  await sim.set(1, 'hr', 0, [...float32Words(20), 0, 0, 5]);
  const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-host' }));
  const gw = d.add(
    await startGateway(
      {
        bridges: [sparkplugUplink(proxy.url, { group: GROUP, node: NODE, keepaliveS: 5 })],
        sparkplug: sparkplug({ uplink: 'central' }),
        connectors: [modbusPress(sim, TAGS)],
        ...extra,
      },
      { logLevel: 'info' },
    ),
  );
  await host.waitFor((h) => h.births('DBIRTH', 'press-1').length >= 1, 15_000, 'upstream births');
  return { central, proxy, sim, host, gw };
}

/** A QoS 1 DCMD from the central host. */
const hostCommand = (host: SparkplugHost, value: number, retain = false) =>
  host.client.publishAsync(DCMD, setpoint(value), { qos: 1, retain });

describe('commands from the central host', () => {
  it('a DCMD sent while the link was cut is never written: the uplink session is clean [tck-id-principles-persistence-clean-session-50]', async () => {
    const { proxy, sim, host, gw } = await uplinkSetup();
    proxy.refuse();
    proxy.reset();
    await host.waitFor((h) => h.of('NDEATH').length === 1, 15_000, 'NDEATH via the Will at the cut');
    // The host does not see the node, but sends anyway (QoS 1: a persistent session would queue it for the node).
    await hostCommand(host, 9999);
    await sim.resetRequests();
    proxy.restore();
    await host.waitFor((h) => h.births('NBIRTH').length === 2, 15_000, 'births after the cut');
    // A command on the new session is the marker: the one sent during the cut would have come before it.
    await hostCommand(host, 77);
    await holds(gw, sim, 77);
    expect(await plcWrites(sim)).toHaveLength(1);
    expect(written(gw)).toEqual(['77']);
    // The uplink connected with a clean session: the central broker kept nothing of the last one.
    const online = logLines(gw).filter((l) => l.msg === 'uplink online');
    expect(online.map((l) => l.sessionPresent)).toEqual([false, false]);
  });

  it('a retained DCMD is never executed: not when it is published, not when the next connection delivers it again', async () => {
    const { sim, host, gw } = await uplinkSetup();
    await hostCommand(host, 4242, true);
    await hostCommand(host, 78);
    await holds(gw, sim, 78);
    await gw.restart();
    // After the restart, the retained DCMD comes again with the uplink's subscription (and from the local retained store).
    await host.waitFor((h) => h.births('NBIRTH').length === 2, 15_000, 'births after the restart');
    await hostCommand(host, 79);
    await holds(gw, sim, 79);
    expect(written(gw)).toEqual(['78', '79']);
    const refused = audit(gw, 'command refused');
    expect(refused.length).toBeGreaterThanOrEqual(2);
    expect(new Set(refused.map((l) => l.why))).toEqual(
      new Set(['retained: a command is never executed from a retained message']),
    );
  });
});

describe('local clients', () => {
  it("without an ACL file no local client commands the PLC (v5: 0x87, 3.1.1: dropped), and none publishes in the node's namespace or leaves a will there; refusals are audited", async () => {
    const { sim, host, gw } = await uplinkSetup();
    const v5 = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'intruder' }));
    await expect(v5.publish(DCMD, setpoint(1111), { qos: 1 })).rejects.toThrow(/135|authori/i);
    const payloadFile = join(d.tempDir('edgeferry-cmd-'), 'dcmd');
    writeFileSync(payloadFile, setpoint(2222));
    await runToolOk('mosquitto_pub', [
      '-h',
      '127.0.0.1',
      '-p',
      String(gw.port),
      '-V',
      'mqttv311',
      '-q',
      '1',
      '-i',
      'tool-311',
      '-t',
      DCMD,
      '-f',
      payloadFile,
    ]);
    await expect(
      v5.publish(
        `spBv1.0/${GROUP}/NCMD/${NODE}`,
        encodePayload({ timestamp: 1, metrics: [{ name: 'Node Control/Rebirth', datatype: 'Boolean', value: true }] }),
        { qos: 1 },
      ),
    ).rejects.toThrow(/135|authori/i);
    // A forged reading as our DDATA, and a forged NDEATH: refused whatever the ACL says.
    const forged = encodePayload({
      timestamp: Date.now(),
      seq: 200,
      metrics: [{ name: 'temperature', datatype: 'Float', value: 999.9 }],
    });
    await expect(v5.publish(`spBv1.0/${GROUP}/DDATA/${NODE}/press-1`, forged, { qos: 1 })).rejects.toThrow(
      /135|authori/i,
    );
    await v5.publish(`spBv1.0/${GROUP}/NDEATH/${NODE}`, encodePayload({ timestamp: 1, metrics: [] }), { qos: 0 });
    const will = {
      topic: `spBv1.0/${GROUP}/NDEATH/${NODE}`,
      payload: Buffer.from('x'),
      qos: 0 as const,
      retain: false,
    };
    expect(await connectRefused(gw.url, { protocolVersion: 5, clientId: 'will-forger', will })).toBe(0x87);
    // Another node's namespace and the rest of the group stay open to local clients (a local edge node of its own).
    await v5.publish(`spBv1.0/${GROUP}/DDATA/${NODE}-2/press-1`, forged, { qos: 1 });
    // Markers: a real reading goes up after the forged one would have, and the central host's command is written.
    await sim.set(1, 'hr', 0, float32Words(30));
    await host.waitFor((h) => h.value(NODE, 'press-1', 'temperature') === 30, 10_000, 'the real reading upstream');
    await hostCommand(host, 80);
    await holds(gw, sim, 80);
    const ours = host.of('DDATA', 'press-1').filter((m) => m.edgeNodeId === NODE);
    expect(ours.flatMap((m) => m.payload.metrics).filter((m) => Math.abs(Number(m.value) - 999.9) < 0.01)).toEqual([]);
    // The other node's message went up: the check is not a blanket refusal of the group.
    expect(host.of('DDATA', 'press-1').filter((m) => m.edgeNodeId === `${NODE}-2`)).toHaveLength(1);
    expect(host.of('NDEATH')).toEqual([]);
    expect(host.violations).toEqual([]);
    expect(written(gw)).toEqual(['80']);
    const refusals = audit(gw, 'publish refused').map((l) => [l.clientId, l.topic, l.why]);
    const command = 'a command to the edge node needs an ACL file that grants it (auth.aclFile)';
    const gatewayOnly = "the gateway's own Sparkplug namespace: only the gateway publishes there";
    expect(refusals).toEqual([
      ['intruder', DCMD, command],
      ['tool-311', DCMD, command],
      ['intruder', `spBv1.0/${GROUP}/NCMD/${NODE}`, command],
      ['intruder', `spBv1.0/${GROUP}/DDATA/${NODE}/press-1`, gatewayOnly],
      ['intruder', `spBv1.0/${GROUP}/NDEATH/${NODE}`, gatewayOnly],
      ['will-forger', `spBv1.0/${GROUP}/NDEATH/${NODE}`, gatewayOnly],
    ]);
  });

  it('with an ACL file, a local client commands the PLC only where it is granted; never from a retained message, also not at the next start', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [...float32Words(20), 0, 0, 5]);
    const aclFile = join(d.tempDir('edgeferry-cmd-'), 'acl');
    writeFileSync(
      aclFile,
      [
        'user hmi',
        `topic write ${DCMD}`,
        'topic write spBv1.0/#',
        'user viewer',
        'topic readwrite spBv1.0/STATE/#',
        '',
      ].join('\n'),
    );
    // No uplink: commands answer to the local session.
    const gw = d.add(
      await startGateway(
        { auth: { aclFile }, sparkplug: sparkplug(), connectors: [modbusPress(sim, TAGS)] },
        { logLevel: 'info' },
      ),
    );
    await waitFor(() => logLines(gw).some((l) => l.msg === 'edge node started'), 10_000);
    const hmi = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'hmi-1', username: 'hmi' }));
    const viewer = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'viewer-1', username: 'viewer' }));
    await expect(viewer.publish(DCMD, setpoint(3333), { qos: 1 })).rejects.toThrow(/135|authori/i);
    // The ACL grants hmi all of spBv1.0/#: our namespace stays the gateway's.
    await expect(hmi.publish(`spBv1.0/${GROUP}/DDATA/${NODE}/press-1`, setpoint(1), { qos: 1 })).rejects.toThrow(
      /135|authori/i,
    );
    await hmi.publish(DCMD, setpoint(4444), { qos: 1, retain: true });
    await hmi.publish(DCMD, setpoint(55), { qos: 1 });
    await holds(gw, sim, 55);
    await gw.restart();
    await waitFor(() => audit(gw, 'edge node started').length === 2, 10_000);
    const again = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'hmi-2', username: 'hmi' }));
    await again.publish(DCMD, setpoint(56), { qos: 1 });
    await holds(gw, sim, 56);
    expect(written(gw)).toEqual(['55', '56']);
    const retained = 'retained: a command is never executed from a retained message';
    expect(audit(gw, 'command refused').map((l) => [l.who, l.user, l.why])).toEqual([
      ['hmi-1', 'hmi', retained],
      // At the start, from the local retained store (the sender's session is gone, so no user).
      ['hmi-1', undefined, retained],
    ]);
    expect(audit(gw, 'denied by ACL').map((l) => [l.clientId, l.topic])).toEqual([['viewer-1', DCMD]]);
    expect(audit(gw, 'publish refused').map((l) => [l.clientId, l.topic])).toEqual([
      ['hmi-1', `spBv1.0/${GROUP}/DDATA/${NODE}/press-1`],
    ]);
  });

  it('writes the DCMDs to one tag in the order they came, each read back before the next: 300 of them 15 ms apart', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [...float32Words(20), 0, 0, 5]);
    const gw = d.add(
      await startGateway(
        { auth: hostsMayCommand(d.tempDir()), sparkplug: sparkplug(), connectors: [modbusPress(sim, TAGS)] },
        { logLevel: 'info' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'scada-local' }));
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length > 0, 10_000, 'births');
    await sim.resetRequests();
    const values = Array.from({ length: 300 }, (_, i) => 1000 + i);
    for (const value of values) {
      await host.client.publishAsync(DCMD, setpoint(value), { qos: 0 });
      await delay(15);
    }
    await waitFor(
      () =>
        audit(gw, 'DCMD write done').length +
          audit(gw, 'DCMD write accepted, but the device reads back another value').length ===
        300,
      30_000,
      {
        message: '300 writes done',
      },
    );
    // In the order sent, each read back as written (no write of the next value between a write and its read-back).
    const done = audit(gw, 'DCMD write done');
    expect(done.map((l) => l.value)).toEqual(values.map(String));
    expect(done.filter((l) => l.readBack !== l.value)).toEqual([]);
    expect(await plcWrites(sim)).toHaveLength(values.length);
    expect(await sim.get(1, 'hr', SETPOINT, 1)).toEqual([values.at(-1)]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'setpoint') === values.at(-1), 5000, 'the last value read back');
  });
});
