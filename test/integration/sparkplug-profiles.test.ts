/**
 * Device profiles (docs/architecture.md#device-profiles): identical machines described once under `profiles:`,
 * each connector naming its profile and setting what differs. Through the real gateway process, polled from the
 * pymodbus server, watched by a Sparkplug host; bad references refused by `--check-config`. Run `npm run build` first.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { runCli, startGateway } from '../helpers/gateway.js';
import { startModbusSim } from '../helpers/modbus-sim.js';
import { hostsMayCommand, startSparkplugHost } from '../helpers/sparkplug-host.js';

const d = useDisposer();

const GROUP = 'plant1';
const NODE = 'line4-gw';

const sparkplug = {
  groupId: GROUP,
  edgeNodeId: NODE,
  rebirthDebounceMs: 0,
  deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 },
};

describe('device profiles', () => {
  it("runs two devices from one profile, each on its own unit id, with the profile's tags, poll settings and properties; an edited profile reaches both at SIGHUP", async () => {
    const sim = d.add(await startModbusSim({ units: [1, 2] }));
    await sim.set(1, 'hr', 0, [215, 10]);
    await sim.set(2, 'hr', 0, [180, 20]);
    const gw = d.add(
      await startGateway({
        auth: hostsMayCommand(d.tempDir()),
        sparkplug,
        profiles: {
          press: {
            type: 'modbus',
            transport: 'tcp',
            host: '127.0.0.1',
            port: sim.port,
            addressBase: 0,
            pollIntervalMs: 100,
            timeoutMs: 1500,
            retries: 0,
            tags: [
              { name: 'temperature', table: 'holding', address: 0, datatype: 'int16', scale: 0.1, engUnit: '°C' },
              { name: 'setpoint', table: 'holding', address: 1, datatype: 'uint16', writable: true },
            ],
          },
        },
        connectors: [
          { id: 'press-1', profile: 'press', unitId: 1 },
          // A per-device override of a profile key: this press is polled more slowly.
          { id: 'press-2', profile: 'press', unitId: 2, pollIntervalMs: 200 },
        ],
      }),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP));
    await host.rebirth(NODE);
    await host.waitFor(
      (h) => h.births('DBIRTH', 'press-1').length > 0 && h.births('DBIRTH', 'press-2').length > 0,
      20_000,
      'both DBIRTHs',
    );
    for (const [device, temperature, setpoint] of [
      ['press-1', 21.5, 10],
      ['press-2', 18, 20],
    ] as const) {
      const birth = host.births('DBIRTH', device)[0];
      expect(birth.payload.metrics.map((m) => m.name)).toEqual(['temperature', 'setpoint']);
      expect(birth.payload.metrics[0].value).toBeCloseTo(temperature, 9);
      expect(birth.payload.metrics[0].properties).toMatchObject({ engUnit: '°C', readOnly: true });
      expect(birth.payload.metrics[1].value).toBe(setpoint);
      expect(birth.payload.metrics[1].properties).toMatchObject({ readOnly: false });
    }

    // Each device polls its own unit: a change on unit 2 shows up on press-2 only.
    await sim.set(2, 'hr', 1, [33]);
    await host.waitFor((h) => h.value(NODE, 'press-2', 'setpoint') === 33, 10_000, 'press-2 setpoint 33');
    expect(host.value(NODE, 'press-1', 'setpoint')).toBe(10);
    const reads = await sim.requests();
    expect(new Set(reads.filter((r) => r.op === 'read').map((r) => r.unit))).toEqual(new Set([1, 2]));

    // A write through one device goes to its own unit.
    await host.write(NODE, 'press-1', [{ name: 'setpoint', datatype: 'UInt16', value: 77 }]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'setpoint') === 77, 10_000, 'press-1 setpoint 77');
    expect(await sim.get(1, 'hr', 1, 1)).toEqual([77]);
    expect(await sim.get(2, 'hr', 1, 1)).toEqual([33]);

    // An edited profile reaches every device that names it at the next reload: each is reborn with the new tag.
    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { profiles: { press: { tags: object[] } } };
    config.profiles.press.tags.push({ name: 'running', table: 'coil', address: 0, datatype: 'bool' });
    writeFileSync(gw.configFile, JSON.stringify(config));
    gw.proc.kill('SIGHUP');
    await host.waitFor(
      (h) =>
        ['press-1', 'press-2'].every((id) =>
          h
            .births('DBIRTH', id)
            .at(-1)
            ?.payload.metrics.some((m) => m.name === 'running'),
        ),
      20_000,
      "both devices reborn with the profile's new tag",
    );
    expect(host.violations).toEqual([]);
  });

  it("--check-config expands every device: a bad profile reference names the key, a bad profile key is reported once at the profile, a device's own conflict names the device", async () => {
    const file = join(d.tempDir('edgeferry-profiles-'), 'gw.yaml');
    writeFileSync(
      file,
      [
        'storage: { path: data }',
        `sparkplug: { groupId: ${GROUP}, edgeNodeId: ${NODE} }`,
        'profiles:',
        '  press:',
        '    type: modbus',
        '    transport: tcp',
        '    addressBase: 0',
        '    tags:',
        '      - { name: temperature, table: holding, address: 0, datatype: int16, engLow: 5, engHigh: 1 }',
        '  oven:',
        '    type: opcua',
        '    endpoint: opc.tcp://127.0.0.1:4840',
        '    tags: [ { name: t, nodeId: Temperature, datatype: Double } ]',
        'connectors:',
        '  - { id: press-1, profile: press, host: 10.0.0.1, unitId: 1 }',
        '  - { id: press-2, profile: press, host: 10.0.0.2, unitId: 2, addressBase: 1 }',
        '  - { id: press-3, profile: presss, host: 10.0.0.3 }',
        '  - { id: oven-1, profile: oven, nodeIdPrefix: "ns=3;s=Oven1." }',
        '  - { id: oven-2, profile: oven }',
        '  - { id: oven-3, type: modbus, profile: oven }',
        '',
      ].join('\n'),
    );
    const r = await runCli(['--check-config', '--config', file]);
    expect(r.code).toBe(2);
    const lines = r.stderr
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l.startsWith(file));
    expect(lines).toEqual([
      `${file}:17:29 connectors.2.profile: no profile named "presss" (profiles: press, oven)`,
      `${file}:20:25 connectors.5.type: profile "oven" is for opcua connectors, not modbus`,
      // In the profile's tags: once, not once per device.
      `${file}:9:95 profiles.press.tags.0.engHigh: must be above engLow (5)`,
      `${file}:9:55 profiles.press.tags.0.address: must be >= 1 with addressBase 1 (in device press-2)`,
      // oven-1 makes whole NodeIds with its prefix; oven-2 has none.
      `${file}:13:32 profiles.oven.tags.0.nodeId: must be a NodeId like ns=3;s=Line4.Press.Temperature, ns=2;i=1001, ns=2;g=<guid> or nsu=<uri>;s=… (in device oven-2)`,
    ]);

    // Fixed: every device expands into a valid connector.
    writeFileSync(
      file,
      [
        'storage: { path: data }',
        `sparkplug: { groupId: ${GROUP}, edgeNodeId: ${NODE} }`,
        'profiles:',
        '  press: { type: modbus, transport: tcp, addressBase: 0, tags: [ { name: temperature, table: holding, address: 0, datatype: int16 } ] }',
        'connectors:',
        '  - { id: press-1, profile: press, host: 10.0.0.1, unitId: 1 }',
        '  - { id: press-2, profile: press, host: 10.0.0.2, unitId: 2 }',
        '',
      ].join('\n'),
    );
    const ok = await runCli(['--check-config', '--config', file]);
    expect([ok.code, ok.stdout.trim()]).toEqual([0, `config OK: ${file}`]);
  });
});
