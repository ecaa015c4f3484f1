/**
 * What a tag means travels in the births: engUnit, engLow, engHigh, documentation and readOnly as metric
 * properties (docs/architecture.md#tag-properties), from the tag's config (Modbus, OPC UA) or from the OPC UA
 * server's AnalogItem, decoded by a host built with the Tahu JS library (`sparkplug-payload`) over the real
 * gateway process. Run `npm run build` first.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { get as getSparkplug } from 'sparkplug-payload';
import { useDisposer } from '../helpers/disposer.js';
import { runCli, startGateway, type Gateway } from '../helpers/gateway.js';
import { modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { removeDir, tempDir } from '../helpers/temp.js';
import { startOpcuaFixture, type OpcuaFixture } from '../fixtures/opcua-fixture.js';
import { hostsMayCommand, startSparkplugHost, type SparkplugHost } from '../helpers/sparkplug-host.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

const GROUP = 'plant1';
const NODE = 'line4-gw';

const sparkplug = {
  groupId: GROUP,
  edgeNodeId: NODE,
  rebirthDebounceMs: 0,
  deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 },
};

interface TahuProperty {
  readonly type: string;
  readonly value: unknown;
}
interface TahuMetric {
  readonly name?: string;
  readonly properties?: Record<string, TahuProperty>;
  readonly value?: unknown;
}

const tahu = getSparkplug('spBv1.0');
if (!tahu) throw new Error('sparkplug-payload has no spBv1.0');

/**
 * The first DBIRTH of `deviceId` and the DDATA after it as a Tahu host decodes them: a host joins, asks for a
 * rebirth and reads the raw payloads itself (our own decoder in `host` follows the values).
 */
async function tahuBirth(
  gw: Gateway,
  deviceId: string,
): Promise<{ birth: TahuMetric[]; data: TahuMetric[][]; host: SparkplugHost }> {
  const host = d.add(await startSparkplugHost(gw.url, GROUP));
  const births: TahuMetric[][] = [];
  const data: TahuMetric[][] = [];
  host.client.on('message', (topic: string, payload: Buffer) => {
    const decoded = tahu!.decodePayload(payload) as unknown as { metrics?: TahuMetric[] };
    if (topic === `spBv1.0/${GROUP}/DBIRTH/${NODE}/${deviceId}`) births.push(decoded.metrics ?? []);
    if (topic === `spBv1.0/${GROUP}/DDATA/${NODE}/${deviceId}` && births.length > 0) data.push(decoded.metrics ?? []);
  });
  await host.rebirth(NODE);
  // Generous: an OPC UA session, its tag resolution and subscription on two shared, busy cores.
  await waitFor(() => births.length > 0, 45_000, { message: `DBIRTH of ${deviceId}` });
  expect(host.violations).toEqual([]);
  return { birth: births[0], data, host };
}

const propertiesOf = (metrics: TahuMetric[], name: string): Record<string, TahuProperty> | undefined =>
  metrics.find((m) => m.name === name)?.properties;

describe('metric properties in the DBIRTH', () => {
  it("publishes a Modbus tag's engUnit, engLow, engHigh and description, and readOnly from writable; DDATA carries none of them", async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [215, 40]);
    const tags = [
      // Raw tenths of a degree, published in °C: the range is in published units.
      {
        name: 'temperature',
        table: 'holding',
        address: 0,
        datatype: 'int16',
        scale: 0.1,
        engUnit: '°C',
        engLow: -20,
        engHigh: 150,
        description: 'Oil temperature at the pump',
      },
      { name: 'setpoint', table: 'holding', address: 1, datatype: 'uint16', writable: true, engUnit: 'bar' },
      { name: 'running', table: 'coil', address: 0, datatype: 'bool' },
    ];
    const gw = d.add(
      await startGateway({ auth: hostsMayCommand(d.tempDir()), sparkplug, connectors: [modbusPress(sim, tags)] }),
    );
    const { birth, data, host } = await tahuBirth(gw, 'press-1');

    // Sparkplug 3.0 §6.4.8: every property value carries its type [tck-id-payloads-metric-propertyvalue-type-req].
    expect(propertiesOf(birth, 'temperature')).toEqual({
      engUnit: { type: 'String', value: '°C' },
      engLow: { type: 'Double', value: -20 },
      engHigh: { type: 'Double', value: 150 },
      documentation: { type: 'String', value: 'Oil temperature at the pump' },
      readOnly: { type: 'Boolean', value: true },
    });
    expect(propertiesOf(birth, 'setpoint')).toEqual({
      engUnit: { type: 'String', value: 'bar' },
      readOnly: { type: 'Boolean', value: false },
    });
    expect(propertiesOf(birth, 'running')).toEqual({ readOnly: { type: 'Boolean', value: true } });

    // Properties describe the metric once, in the birth: a change goes out as alias and value only.
    await sim.set(1, 'hr', 0, [230]);
    await host.waitFor(
      (h) => Math.abs(Number(h.value(NODE, 'press-1', 'temperature')) - 23) < 1e-9,
      10_000,
      'DDATA with 23.0 °C',
    );
    expect(data.length).toBeGreaterThan(0);
    for (const metrics of data) for (const m of metrics) expect(m.properties ?? {}).toEqual({});
  });

  it('--check-config refuses a range on a non-numeric tag and an upside-down one, naming the key and where', async () => {
    const file = join(d.tempDir('edgeferry-props-'), 'gw.yaml');
    writeFileSync(
      file,
      [
        'storage: { path: data }',
        `sparkplug: { groupId: ${GROUP}, edgeNodeId: ${NODE} }`,
        'connectors:',
        '  - { id: press-1, type: modbus, transport: tcp, host: 127.0.0.1, addressBase: 0, tags: [',
        '      { name: running, table: coil, address: 0, datatype: bool, engLow: 0 },',
        '      { name: level, table: holding, address: 0, datatype: uint16, engLow: 10, engHigh: 10 } ] }',
        '',
      ].join('\n'),
    );
    const r = await runCli(['--check-config', '--config', file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`${file}:5:73 connectors.0.tags.0.engLow: a range applies to numeric tags only`);
    expect(r.stderr).toContain(`${file}:6:89 connectors.0.tags.1.engHigh: must be above engLow (10)`);
  });
});

describe('metric properties of OPC UA tags', () => {
  let server: OpcuaFixture;
  let serverDir: string;

  beforeAll(async () => {
    serverDir = tempDir('edgeferry-opcua-props-');
    server = await startOpcuaFixture({ dir: serverDir });
  }, 180_000);

  afterAll(async () => {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
    await server?.stop();
    if (serverDir) removeDir(serverDir);
  });

  it("publishes an AnalogItem's EngineeringUnits, EURange and Description, under what the tag's config overrides (nodes named with a nodeIdPrefix)", async () => {
    const gw = d.add(
      await startGateway({
        auth: hostsMayCommand(d.tempDir()),
        sparkplug,
        connectors: [
          {
            id: 'oven-1',
            type: 'opcua',
            endpoint: server.endpoint,
            subscription: { publishingIntervalMs: 100 },
            // As in a profile shared by several machines: each tag's nodeId is the end of the NodeId.
            nodeIdPrefix: 'ns=1;s=Fixture.',
            tags: [
              { name: 'pressure', nodeId: 'Analog.Pressure', datatype: 'Double' },
              // The same node, with the config's own unit and description: the config wins, the range stays the server's.
              {
                name: 'pressure-psi',
                nodeId: 'Analog.Pressure',
                datatype: 'Double',
                engUnit: 'psi',
                description: 'Pump pressure',
              },
              { name: 'setpoint', nodeId: 'Writable.Setpoint', datatype: 'Double', writable: true, engHigh: 90 },
            ],
          },
        ],
      }),
    );
    const { birth, host } = await tahuBirth(gw, 'oven-1');
    expect(host.births('DBIRTH', 'oven-1')[0].payload.metrics.map((m) => [m.name, m.value])).toEqual([
      ['pressure', 120.5],
      ['pressure-psi', 120.5],
      ['setpoint', 42.5],
    ]);
    expect(propertiesOf(birth, 'pressure')).toEqual({
      engUnit: { type: 'String', value: 'bar' },
      engLow: { type: 'Double', value: 0 },
      engHigh: { type: 'Double', value: 250 },
      documentation: { type: 'String', value: 'Hydraulic pressure' },
      readOnly: { type: 'Boolean', value: true },
    });
    expect(propertiesOf(birth, 'pressure-psi')).toEqual({
      engUnit: { type: 'String', value: 'psi' },
      engLow: { type: 'Double', value: 0 },
      engHigh: { type: 'Double', value: 250 },
      documentation: { type: 'String', value: 'Pump pressure' },
      readOnly: { type: 'Boolean', value: true },
    });
    // A plain variable has no unit or range on the server: only what the config says.
    expect(propertiesOf(birth, 'setpoint')).toEqual({
      engHigh: { type: 'Double', value: 90 },
      readOnly: { type: 'Boolean', value: false },
    });
  }, 90_000);
});
