/**
 * The Sparkplug edge node through the real gateway process, fed by a pymodbus server, watched by a host
 * application (MQTT.js + our Sparkplug decoder) on the gateway itself and on a central Mosquitto behind the
 * bridge. Run `npm run build` first.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Long from 'long';
import { get as getSparkplug } from 'sparkplug-payload';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { openClient } from '../helpers/mqtt-client.js';
import { startGateway } from '../helpers/gateway.js';
import { float32Words, WRITABLE_REGISTER_TAGS, modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { removeDir, tempDir } from '../helpers/temp.js';
import { startOpcuaFixture, type OpcuaFixture } from '../fixtures/opcua-fixture.js';
import type { ModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { hostsMayCommand, startSparkplugHost, sparkplugUplink, sparkplugSection } from '../helpers/sparkplug-host.js';
import type { HostMessage, SparkplugHost } from '../helpers/sparkplug-host.js';
import { waitFor } from '../helpers/wait.js';
import { compressPayload } from '../../src/sparkplug/compression.js';

const d = useDisposer();

const GROUP = 'plant1';
const NODE = 'line4-gw';

const PRESS_TAGS = [
  { name: 'temperature', table: 'holding', address: 0, datatype: 'float32', deadband: 0.5 },
  { name: 'count', table: 'holding', address: 2, datatype: 'uint32' },
  { name: 'setpoint', table: 'holding', address: 4, datatype: 'int16', writable: true },
  { name: 'running', table: 'coil', address: 0, datatype: 'bool', writable: true },
];

/** The Modbus press on the pymodbus server, with `tags` (default: a few of each kind, two of them writable). */
function connectors(sim: ModbusSim, tags: readonly object[] = PRESS_TAGS) {
  return [modbusPress(sim, tags)];
}

const sparkplug = (extra: object = {}): object => sparkplugSection(GROUP, NODE, extra);

const bridgeTo = (url: string) => sparkplugUplink(url, { group: GROUP, node: NODE, keepaliveS: 5 });

const bdSeqOf = (m: HostMessage | undefined): number | undefined => {
  const v = m?.payload.metrics.find((x) => x.name === 'bdSeq')?.value;
  return v === undefined || v === null ? undefined : Number(v);
};

/** bdSeq moved on (+1 per CONNECT attempt, mod 256; attempts that never connected leave gaps). */
const isNewerBdSeq = (next: number | undefined, previous: number | undefined): boolean => {
  const step = ((next as number) - (previous as number)) & 0xff;
  return next !== undefined && previous !== undefined && step >= 1 && step < 128;
};

/** The gateway's JSON log lines with this message. */
const auditLines = (gw: { output(): string }, msg: string) =>
  gw
    .output()
    .split('\n')
    .filter((l) => l.includes(`"${msg}"`))
    .map((l) => JSON.parse(l) as Record<string, unknown>);

const metric = (host: SparkplugHost, m: HostMessage, name: string) =>
  m.payload.metrics.find((x) => host.nameOf(NODE, x) === name);

describe('Sparkplug edge node on the local broker', () => {
  it('answers a late host with births, reports Modbus changes by exception and writes DCMD values into the device', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [...float32Words(20), 0, 7, 5]);
    const gw = d.add(
      await startGateway({ auth: hostsMayCommand(d.tempDir()), sparkplug: sparkplug(), connectors: connectors(sim) }),
    );
    // Without a password file the user name is taken as given (as in Mosquitto): enough to see it in the audit log.
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'scada-1', username: 'operator-7' }));
    // A host that joins late asks for a rebirth [tck-id-operational-behavior-host-application-...rebirth].
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length === 1, 10_000, 'births');
    const nbirth = host.births('NBIRTH')[0];
    expect(nbirth.payload.seq).toBe(0);
    expect(nbirth.payload.metrics.find((m) => m.name === 'bdSeq')?.datatype).toBe('Int64');
    const dbirth = host.births('DBIRTH', 'press-1')[0];
    expect(dbirth.payload.metrics.map((m) => [m.name, m.datatype, m.value])).toEqual([
      ['temperature', 'Float', 20],
      ['count', 'UInt32', 7],
      ['setpoint', 'Int16', 5],
      ['running', 'Boolean', false],
    ]);

    // Within the deadband: not published. The counter: published, alone, with its read time.
    await sim.set(1, 'hr', 0, [...float32Words(20.3), 0, 8]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'count') === 8, 5000, 'count 8');
    const ddata = host.of('DDATA', 'press-1').at(-1) as HostMessage;
    expect(ddata.payload.metrics.map((m) => host.nameOf(NODE, m))).toEqual(['count']);
    expect(ddata.payload.metrics[0].timestamp).toBeGreaterThan(Date.now() - 5000);

    await host.write(NODE, 'press-1', [
      { name: 'setpoint', datatype: 'Int16', value: -42 },
      { name: 'running', datatype: 'Boolean', value: true },
    ]);
    await host.waitFor(
      (h) => h.value(NODE, 'press-1', 'setpoint') === -42 && h.value(NODE, 'press-1', 'running') === true,
      5000,
      'written values',
    );
    expect(await sim.get(1, 'hr', 4, 1)).toEqual([0x10000 - 42]);
    expect(await sim.get(1, 'co', 0, 1)).toEqual([1]);

    // Refused without harm: a read-only metric, one the device does not have, and a wrong type.
    await host.write(NODE, 'press-1', [{ name: 'count', datatype: 'UInt32', value: 1 }]);
    await host.write(NODE, 'press-1', [{ name: 'nosuch', datatype: 'Int32', value: 2 }]);
    await host.write(NODE, 'press-1', [{ name: 'setpoint', datatype: 'String', value: 'hot' }]);
    await sim.set(1, 'hr', 2, [0, 9]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'count') === 9, 5000, 'count 9 after refused writes');
    // The audit line names who sent the command (the user and address, not only the client id anyone may choose),
    // and the value it carried.
    const refusals = gw
      .output()
      .split('\n')
      .filter((l) => l.includes('"command refused"'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(refusals.map((l) => [l.mod, l.who, l.user, l.remote, l.metric, l.value, l.why])).toEqual([
      ['audit', 'scada-1', 'operator-7', '127.0.0.1', 'count', '1', 'read-only metric'],
      ['audit', 'scada-1', 'operator-7', '127.0.0.1', 'nosuch', '2', 'unknown metric'],
      [
        'audit',
        'scada-1',
        'operator-7',
        '127.0.0.1',
        'setpoint',
        'hot',
        'wrong type: the metric is Int16, the command says String',
      ],
    ]);
    expect(await sim.get(1, 'hr', 2, 2)).toEqual([0, 9]);

    await gw.stop();
    await host.waitFor((h) => h.of('NDEATH').length === 1, 5000, 'NDEATH on a graceful stop');
    expect(bdSeqOf(host.of('NDEATH')[0])).toBe(bdSeqOf(nbirth));
    expect(host.violations).toEqual([]);
  });

  it('publishes DDEATH when the unit stops answering and DBIRTH before its data when it is back', async () => {
    const sim = d.add(await startModbusSim());
    const gw = d.add(
      await startGateway({ auth: hostsMayCommand(d.tempDir()), sparkplug: sparkplug(), connectors: connectors(sim) }),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP));
    // The host may also see the births of the start, when it subscribed before them (a slow start): count from here.
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length >= 1, 10_000, 'births');
    const birthsBefore = host.births('DBIRTH', 'press-1').length;
    const deathsBefore = host.of('DDEATH', 'press-1').length;
    const logBefore = gw.output().length;
    await sim.mute(1);
    await host.waitFor((h) => h.of('DDEATH', 'press-1').length === deathsBefore + 1, 10_000, 'DDEATH');
    // One short line: which device, what, where, why (no "[object Object]", nothing repeated).
    const lost = gw
      .output()
      .slice(logBefore)
      .split('\n')
      .filter((l) => l.includes('"msg":"device lost'))
      .map((l) => JSON.parse(l) as { device: string; code: string; reason: string; msg: string; err?: unknown });
    expect(lost.map((l) => [l.device, l.code, l.err])).toEqual([['press-1', 'EF_CONNECTOR_UNREACHABLE', undefined]]);
    // The poll cycle was at one of its two blocks when the unit went quiet.
    expect(lost[0].reason).toMatch(
      new RegExp(
        `^unit 1 at tcp://127\\.0\\.0\\.1:${sim.port}: read (holding 0\\+5|coil 0\\+1): no answer within 1500 ms$`,
      ),
    );
    expect(lost[0].msg).toBe(`device lost (${lost[0].reason})`);
    await sim.set(1, 'hr', 2, [0, 1234]);
    await sim.unmute(1);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length === birthsBefore + 1, 10_000, 'DBIRTH again');
    const reborn = host.births('DBIRTH', 'press-1')[birthsBefore];
    expect(metric(host, reborn, 'count')?.value).toBe(1234);
    expect(host.violations).toEqual([]);
  });
});

describe('Sparkplug edge node over the bridge uplink', () => {
  async function setup(options: { sparkplug?: object; compressCommands?: 'DEFLATE' | 'GZIP' } = {}) {
    const central = d.add(await startMosquitto());
    const proxy = d.add(await startFaultProxy(central.port));
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [...float32Words(20), 0, 1, 5]);
    const host = d.add(
      await startSparkplugHost(central.url, GROUP, {
        clientId: 'scada-host',
        compressCommands: options.compressCommands,
      }),
    );
    const gw = d.add(
      await startGateway({
        bridges: [bridgeTo(proxy.url)],
        sparkplug: sparkplug({ uplink: 'central', ...options.sparkplug }),
        connectors: connectors(sim),
      }),
    );
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length >= 1, 15_000, 'upstream births');
    return { central, proxy, sim, host, gw };
  }

  it('births upstream first on the uplink session; SIGKILL makes the central broker publish the NDEATH Will with the NBIRTH bdSeq, and bdSeq grows across restarts', async () => {
    const { sim, host, gw } = await setup();
    const first = host.births('NBIRTH')[0];
    expect(first.payload.seq).toBe(0);
    await sim.set(1, 'hr', 2, [0, 2]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'count') === 2, 5000, 'data upstream');
    await gw.kill('SIGKILL');
    await host.waitFor((h) => h.of('NDEATH').length >= 1, 15_000, 'NDEATH via the Will');
    const death = host.of('NDEATH')[0];
    expect(death.qos).toBe(1);
    expect(bdSeqOf(death)).toBe(bdSeqOf(first));
    expect(host.isOnline(NODE)).toBe(false);
    await gw.restart();
    await host.waitFor((h) => h.births('NBIRTH').length >= 2, 15_000, 'births after restart');
    expect(isNewerBdSeq(bdSeqOf(host.births('NBIRTH')[1]), bdSeqOf(first))).toBe(true);
    expect(host.violations).toEqual([]);
  });

  it('publishes the NDEATH upstream on a graceful stop (SIGTERM), with the bdSeq of the upstream NBIRTH', async () => {
    const { host, gw } = await setup();
    await gw.stop();
    await host.waitFor((h) => h.of('NDEATH').length >= 1, 10_000, 'NDEATH on SIGTERM');
    expect(bdSeqOf(host.of('NDEATH')[0])).toBe(bdSeqOf(host.births('NBIRTH')[0]));
    expect(host.isOnline(NODE)).toBe(false);
    expect(host.violations).toEqual([]);
  });

  it('after an uplink outage: new births first, then the stored data flagged historical with its timestamps in order, then live data', async () => {
    const { proxy, sim, host } = await setup();
    const firstBdSeq = bdSeqOf(host.births('NBIRTH')[0]);
    proxy.refuse();
    proxy.reset();
    await host.waitFor((h) => h.of('NDEATH').length === 1, 15_000, 'NDEATH via the Will at the outage');
    const outageStartMs = Date.now();
    for (let n = 100; n < 105; n++) {
      await sim.set(1, 'hr', 2, [0, n]);
      await sim.polled(); // read, and stored
    }
    const reconnectMark = host.messages.length;
    proxy.restore();
    await host.waitFor((h) => h.births('NBIRTH').length === 2, 15_000, 'births after the outage');
    await sim.set(1, 'hr', 2, [0, 200]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'count') === 200, 10_000, 'live data after the replay');

    const after = host.messages.slice(reconnectMark);
    expect(after[0].type).toBe('NBIRTH');
    expect(isNewerBdSeq(bdSeqOf(after[0]), firstBdSeq)).toBe(true);
    expect(after[1].type).toBe('DBIRTH');
    const data = after.filter((m) => m.type === 'DDATA');
    const historical = data.filter((m) => m.payload.metrics.every((x) => x.isHistorical));
    const live = data.filter((m) => m.payload.metrics.every((x) => !x.isHistorical));
    expect(historical.length + live.length).toBe(data.length); // never mixed in one message
    // Every value stored during the outage arrives, historical, in order, with the time it was read.
    const stored = historical.flatMap((m) => m.payload.metrics.filter((x) => host.nameOf(NODE, x) === 'count'));
    const values = stored.map((x) => Number(x.value));
    for (const n of [100, 101, 102, 103, 104]) expect(values).toContain(n);
    expect([...values].sort((a, b) => a - b)).toEqual(values);
    const ts = stored.map((x) => x.timestamp as number);
    expect([...ts].sort((a, b) => a - b)).toEqual(ts);
    expect(ts.filter((t) => values[ts.indexOf(t)] >= 100).every((t) => t >= outageStartMs - 500)).toBe(true);
    // Historical data comes before live data; the birth carries the latest value, not a stale one.
    expect(data.indexOf(historical.at(-1) as HostMessage)).toBeLessThan(data.indexOf(live[0]));
    expect(metric(host, after[1], 'count')?.value).toBe(104);
    expect(host.violations).toEqual([]);
  });

  it('answers an upstream NCMD rebirth with the same bdSeq and seq 0, and upstream DCMD writes land in the device', async () => {
    const { sim, host } = await setup();
    const first = host.births('NBIRTH')[0];
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('NBIRTH').length === 2 && h.births('DBIRTH').length === 2, 10_000, 'rebirth');
    const again = host.births('NBIRTH')[1];
    expect(again.payload.seq).toBe(0);
    expect(bdSeqOf(again)).toBe(bdSeqOf(first));
    await host.write(NODE, 'press-1', [{ name: 'setpoint', datatype: 'Int16', value: 77 }]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'setpoint') === 77, 10_000, 'DCMD result in DDATA');
    expect(await sim.get(1, 'hr', 4, 1)).toEqual([77]);
    expect(host.violations).toEqual([]);
  });

  it('sends births and data upstream compressed the Tahu way (sparkplug.compression), never the NDEATH, and executes commands a host compressed', async () => {
    const { sim, host, gw } = await setup({ sparkplug: { compression: 'deflate' }, compressCommands: 'GZIP' });
    await sim.set(1, 'hr', 2, [0, 9]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'count') === 9, 10_000, 'data upstream');
    // Decoded by Tahu's decoder (test/helpers/sparkplug-host.ts), in order, with every value the host expects;
    // compressed exactly where that makes it smaller (not a DATA of a value or two, maybe not a small birth: the
    // wrapper costs about 60 bytes).
    const sent = [...host.births('NBIRTH'), ...host.births('DBIRTH'), ...host.of('DDATA')];
    for (const m of sent) expect(m.compressed).toBe(compressPayload(m.plain, 'DEFLATE') !== m.plain);
    expect(metric(host, host.births('DBIRTH')[0], 'temperature')?.value).toBeCloseTo(20);
    // A command compressed by Tahu's encoder (GZIP) lands in the device.
    await host.write(NODE, 'press-1', [{ name: 'setpoint', datatype: 'Int16', value: 66 }]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'setpoint') === 66, 10_000, 'compressed DCMD written');
    expect(await sim.get(1, 'hr', 4, 1)).toEqual([66]);
    await gw.stop();
    await host.waitFor((h) => h.of('NDEATH').length >= 1, 10_000, 'NDEATH on SIGTERM');
    expect(host.of('NDEATH')[0]?.compressed).toBe(false);
    expect(host.violations).toEqual([]);
  });
});

describe('DCMD writes through the gateway never write a wrong value', () => {
  const typed = (sim: ModbusSim) =>
    connectors(sim, [
      ...WRITABLE_REGISTER_TAGS,
      { name: 'speed', table: 'holding', address: 30, datatype: 'int16', scale: 0.1, writable: true },
      { name: 'limit', table: 'holding', address: 31, datatype: 'uint16', writable: true },
      { name: 'valve', table: 'coil', address: 0, datatype: 'bool', writable: true },
    ]);

  /** The rebirth answered: a DBIRTH of press-1 after the latest NBIRTH. */
  const rebornAfter = (h: SparkplugHost): boolean => {
    const types = h.messages.map((m) => `${m.type}:${m.deviceId ?? ''}`);
    const nbirth = types.lastIndexOf('NBIRTH:');
    return nbirth >= 0 && types.lastIndexOf('DBIRTH:press-1') > nbirth;
  };

  /** A DCMD as a host on the Tahu JS library (`sparkplug-payload`) builds it: datatype in every metric. */
  const tahuDcmd = async (
    host: SparkplugHost,
    metrics: { name: string; type: string; value: unknown }[],
  ): Promise<void> => {
    const tahu = getSparkplug('spBv1.0');
    if (!tahu) throw new Error('sparkplug-payload has no spBv1.0');
    await host.client.publishAsync(
      `spBv1.0/${GROUP}/DCMD/${NODE}/press-1`,
      Buffer.from(tahu.encodePayload({ timestamp: Date.now(), metrics: metrics as never })),
    );
  };

  it('writes every datatype a sparkplug-payload host sends, and confirms each with the value read back from the PLC', async () => {
    const sim = d.add(await startModbusSim());
    const gw = d.add(
      await startGateway(
        { auth: hostsMayCommand(d.tempDir()), sparkplug: sparkplug(), connectors: typed(sim) },
        { logLevel: 'info' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'tahu-host' }));
    await host.rebirth(NODE);
    await host.waitFor(rebornAfter, 10_000, 'births');
    // The host joined a running session: what it saw before the rebirth answered is not this test's subject.
    const joined = host.violations.length;
    await tahuDcmd(host, [
      { name: 'i16', type: 'Int16', value: -32_768 },
      { name: 'u16', type: 'UInt16', value: 65_535 },
      { name: 'i32', type: 'Int32', value: -2_000_000_000 },
      // The library puts UInt32 into long_value (Sparkplug 3.0: int_value); both are accepted.
      { name: 'u32', type: 'UInt32', value: 4_000_000_000 },
      { name: 'i64', type: 'Int64', value: Long.fromString('-9000000000000000000') },
      { name: 'u64', type: 'UInt64', value: Long.fromString('18000000000000000000', true) },
      { name: 'f32', type: 'Float', value: 1.5 },
      { name: 'f64', type: 'Double', value: Math.PI },
      { name: 'label', type: 'String', value: 'OK-7' },
      { name: 'speed', type: 'Double', value: 21.5 },
      { name: 'valve', type: 'Boolean', value: true },
    ]);
    await host.waitFor(
      (h) => h.value(NODE, 'press-1', 'valve') === true && h.value(NODE, 'press-1', 'label') === 'OK-7',
      10_000,
      'confirmations',
    );
    // Big-endian register images (ABCD), as the PLC holds them.
    expect(await sim.get(1, 'hr', 0, 20)).toEqual([
      0x8000, 0xffff, 0x88ca, 0x6c00, 0xee6b, 0x2800, 0x8319, 0x93af, 0x1d7c, 0x0000, 0xf9cc, 0xd8a1, 0xc508, 0x0000,
      0x3fc0, 0x0000, 0x4009, 0x21fb, 0x5444, 0x2d18,
    ]);
    expect(await sim.get(1, 'hr', 20, 4)).toEqual([0x4f4b, 0x2d37, 0, 0]);
    expect(await sim.get(1, 'hr', 30, 1)).toEqual([215]);
    const values = ['i16', 'u16', 'i32', 'u32', 'i64', 'u64', 'f32', 'f64', 'label', 'speed', 'valve'].map((n) =>
      host.value(NODE, 'press-1', n),
    );
    expect(values).toEqual([
      -32_768,
      65_535,
      -2_000_000_000,
      4_000_000_000,
      -9_000_000_000_000_000_000n,
      18_000_000_000_000_000_000n,
      1.5,
      Math.PI,
      'OK-7',
      21.5,
      true,
    ]);
    const done = auditLines(gw, 'DCMD write done');
    expect(done.map((l) => l.metric).sort()).toEqual([
      'f32',
      'f64',
      'i16',
      'i32',
      'i64',
      'label',
      'speed',
      'u16',
      'u32',
      'u64',
      'valve',
    ]);
    expect(done.every((l) => l.who === 'tahu-host' && l.value === l.readBack)).toBe(true);
    expect(host.violations.slice(joined)).toEqual([]);
  });

  it('refuses a value out of range, not an exact register value after scale, or too long, with an audit line and no write [tck-id-operational-behavior-data-commands-dcmd-metric-value]', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [5]);
    await sim.set(1, 'hr', 30, [100]);
    const gw = d.add(
      await startGateway(
        { auth: hostsMayCommand(d.tempDir()), sparkplug: sparkplug(), connectors: typed(sim) },
        { logLevel: 'info' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'tahu-host' }));
    await host.rebirth(NODE);
    await host.waitFor(rebornAfter, 10_000, 'births');
    // The host joined a running session: what it saw before the rebirth answered is not this test's subject.
    const joined = host.violations.length;
    await sim.resetRequests();
    // 70000 to an int16 once reached a PLC as 4464.
    await tahuDcmd(host, [{ name: 'i16', type: 'Int16', value: 70_000 }]);
    await tahuDcmd(host, [{ name: 'u16', type: 'UInt16', value: -1 }]);
    await tahuDcmd(host, [{ name: 'speed', type: 'Double', value: 21.55 }]);
    await tahuDcmd(host, [{ name: 'label', type: 'String', value: 'TOO-LONG!' }]);
    await waitFor(() => auditLines(gw, 'command refused').length === 4, 10_000, { message: 'four refusals' });
    expect(auditLines(gw, 'command refused').map((l) => [l.mod, l.who, l.metric, l.value, l.why])).toEqual([
      ['audit', 'tahu-host', 'i16', '70000', '70000 is outside Int16 (-32768..32767)'],
      ['audit', 'tahu-host', 'u16', '4294967295', '4294967295 is outside UInt16 (0..65535)'],
      [
        'audit',
        'tahu-host',
        'speed',
        '21.55',
        '21.55 is no exact int16 register value with scale 0.1 and offset 0 (the nearest, 216, reads as 21.6; set roundWrites to round)',
      ],
      ['audit', 'tahu-host', 'label', 'TOO-LONG!', '9 characters do not fit 4 registers'],
    ]);
    expect((await sim.requests()).filter((r) => r.op === 'write')).toEqual([]);
    expect(await sim.get(1, 'hr', 0, 1)).toEqual([5]);
    expect(await sim.get(1, 'hr', 30, 1)).toEqual([100]);
    expect(auditLines(gw, 'DCMD write done')).toEqual([]);
    expect(host.violations.slice(joined)).toEqual([]);
  });

  it("publishes a scaled integer rounded to the scale's decimals, in the DBIRTH, DDATA, the plain topic and a write's read-back", async () => {
    const sim = d.add(await startModbusSim());
    // 207 * 0.1 is 20.700000000000003 in float arithmetic; 187 * 0.1 is 18.700000000000003.
    await sim.set(1, 'hr', 30, [207]);
    const plain = { topic: 'plant1/line4/{device}/{tag}' };
    const gw = d.add(
      await startGateway(
        { auth: hostsMayCommand(d.tempDir()), sparkplug: sparkplug({ plain }), connectors: typed(sim) },
        { logLevel: 'info' },
      ),
    );
    const reader = d.add(await openClient(gw.url));
    await reader.subscribe('plant1/line4/press-1/speed');
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'tahu-host' }));
    await host.rebirth(NODE);
    await host.waitFor(rebornAfter, 10_000, 'births');
    const birth = host.births('DBIRTH', 'press-1').at(-1) as HostMessage;
    expect(metric(host, birth, 'speed')?.value).toBe(20.7);
    await waitFor(() => reader.received('plant1/line4/press-1/speed').length > 0, 10_000, {
      message: 'the plain topic',
    });
    expect(JSON.parse(reader.received('plant1/line4/press-1/speed')[0].payload)).toMatchObject({ value: 20.7 });

    await sim.set(1, 'hr', 30, [206]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'speed') === 20.6, 10_000, 'DDATA of 20.6');
    await tahuDcmd(host, [{ name: 'speed', type: 'Double', value: 18.7 }]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'speed') === 18.7, 10_000, 'the read-back of 18.7');
    expect(await sim.get(1, 'hr', 30, 1)).toEqual([187]);
    expect(auditLines(gw, 'DCMD write done').map((l) => [l.metric, l.value, l.readBack])).toEqual([
      ['speed', '18.7', '18.7'],
    ]);
    await waitFor(() => reader.received('plant1/line4/press-1/speed').length >= 3, 10_000, { message: 'plain values' });
    expect(
      reader.received('plant1/line4/press-1/speed').map((m) => (JSON.parse(m.payload) as { value: number }).value),
    ).toEqual([20.7, 20.6, 18.7]);
  });

  it('confirms a write the PLC clamped with the value it holds, and logs that it reads back differently', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 31, [10]);
    await sim.clamp(1, 'hr', 31, 100);
    const gw = d.add(
      await startGateway(
        { auth: hostsMayCommand(d.tempDir()), sparkplug: sparkplug(), connectors: typed(sim) },
        { logLevel: 'info' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'tahu-host' }));
    await host.rebirth(NODE);
    await host.waitFor(rebornAfter, 10_000, 'births');
    // The host joined a running session: what it saw before the rebirth answered is not this test's subject.
    const joined = host.violations.length;
    const mark = host.messages.length;
    await tahuDcmd(host, [{ name: 'limit', type: 'UInt16', value: 250 }]);
    await host.waitFor((h) => h.value(NODE, 'press-1', 'limit') === 100, 10_000, 'read-back value');
    // The commanded 250 never shows up: the first DDATA after the command already carries what the PLC holds.
    const limits = host.messages
      .slice(mark)
      .filter((m) => m.type === 'DDATA')
      .flatMap((m) => m.payload.metrics.filter((x) => host.nameOf(NODE, x) === 'limit').map((x) => x.value));
    expect(limits).toEqual([100]);
    const lines = auditLines(gw, 'DCMD write accepted, but the device reads back another value');
    expect(lines.map((l) => [l.level, l.who, l.metric, l.value, l.readBack])).toEqual([
      [40, 'tahu-host', 'limit', '250', '100'],
    ]);
    expect(host.violations.slice(joined)).toEqual([]);
  });
});

describe('DCMD writes to OPC UA variables through the gateway', () => {
  let server: OpcuaFixture;
  let serverDir: string;

  beforeAll(async () => {
    serverDir = tempDir('edgeferry-opcua-dcmd-');
    server = await startOpcuaFixture({ dir: serverDir });
  }, 180_000);

  afterAll(async () => {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
    await server?.stop();
    if (serverDir) removeDir(serverDir);
  });

  const ua = (name: string, datatype: string) => ({
    name,
    nodeId: `ns=1;s=Fixture.Writable.${name}`,
    datatype,
    writable: true,
  });

  it('writes Int8, UInt8, Float and DateTime from a sparkplug-payload host, refuses values outside the datatype, and confirms with the value read back (a limiting PLC: audited)', async () => {
    const gw = d.add(
      await startGateway(
        {
          auth: hostsMayCommand(d.tempDir()),
          sparkplug: sparkplug(),
          connectors: [
            {
              id: 'oven-1',
              type: 'opcua',
              endpoint: server.endpoint,
              subscription: { publishingIntervalMs: 100 },
              tags: [
                ua('Small', 'Int8'),
                ua('Octet', 'UInt8'),
                ua('Ratio', 'Float'),
                ua('When', 'DateTime'),
                ua('Clamped', 'UInt16'),
              ],
            },
          ],
        },
        { logLevel: 'info' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'tahu-host' }));
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('DBIRTH', 'oven-1').length >= 1, 20_000, 'births');
    const tahu = getSparkplug('spBv1.0');
    if (!tahu) throw new Error('sparkplug-payload has no spBv1.0');
    const dcmd = (metrics: { name: string; type: string; value: unknown }[]) =>
      host.client.publishAsync(
        `spBv1.0/${GROUP}/DCMD/${NODE}/oven-1`,
        Buffer.from(tahu.encodePayload({ timestamp: Date.now(), metrics: metrics as never })),
      );
    const when = Date.parse('2026-12-01T10:00:00.123Z');
    await dcmd([
      { name: 'Small', type: 'Int8', value: -128 },
      { name: 'Octet', type: 'UInt8', value: 255 },
      { name: 'Ratio', type: 'Float', value: 0.25 },
      { name: 'When', type: 'DateTime', value: when },
    ]);
    await host.waitFor(
      (h) =>
        h.value(NODE, 'oven-1', 'Small') === -128 &&
        h.value(NODE, 'oven-1', 'Octet') === 255 &&
        h.value(NODE, 'oven-1', 'Ratio') === 0.25 &&
        h.value(NODE, 'oven-1', 'When') === when,
      10_000,
      'confirmations',
    );
    const written = (name: string) =>
      server.events.filter((e) => e.event === 'write' && e.name === name).map((e) => e.value);
    expect([written('Small'), written('Octet'), written('Ratio')]).toEqual([[-128], [255], [0.25]]);

    // Out of range for the Sparkplug datatype: refused by the node, nothing reaches the server.
    await dcmd([{ name: 'Small', type: 'Int8', value: 128 }]);
    await dcmd([{ name: 'Octet', type: 'UInt8', value: 256 }]);
    // The PLC limits the value: the DDATA says what it holds, and the audit log that it differs.
    await dcmd([{ name: 'Clamped', type: 'UInt16', value: 250 }]);
    await host.waitFor((h) => h.value(NODE, 'oven-1', 'Clamped') === 100, 10_000, 'clamped read-back');
    await waitFor(
      () => auditLines(gw, 'DCMD write accepted, but the device reads back another value').length === 1,
      10_000,
    );
    expect(auditLines(gw, 'command refused').map((l) => [l.metric, l.value, l.why])).toEqual([
      ['Small', '128', '128 is outside Int8 (-128..127)'],
      ['Octet', '256', '256 is outside UInt8 (0..255)'],
    ]);
    expect(
      auditLines(gw, 'DCMD write accepted, but the device reads back another value').map((l) => [
        l.metric,
        l.value,
        l.readBack,
      ]),
    ).toEqual([['Clamped', '250', '100']]);
    expect([written('Small'), written('Octet'), written('Clamped')]).toEqual([[-128], [255], [250]]);
  });

  it('publishes a value with status Uncertain (UncertainLastUsableValue) with its value and quality UNCERTAIN, in the DBIRTH and on the plain topic', async () => {
    const status = (name: string) => ({ name, nodeId: `ns=1;s=Fixture.Status.${name}`, datatype: 'Double' });
    const plain = { topic: 'plant1/line4/{device}/{tag}' };
    const gw = d.add(
      await startGateway({
        auth: hostsMayCommand(d.tempDir()),
        sparkplug: sparkplug({ plain }),
        connectors: [
          {
            id: 'oven-1',
            type: 'opcua',
            endpoint: server.endpoint,
            subscription: { publishingIntervalMs: 100 },
            tags: [status('Doubtful'), status('Broken')],
          },
        ],
      }),
    );
    const reader = d.add(await openClient(gw.url));
    await reader.subscribe('plant1/line4/oven-1/+');
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'tahu-host' }));
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('DBIRTH', 'oven-1').length >= 1, 20_000, 'births');
    const birth = host.births('DBIRTH', 'oven-1').at(-1) as HostMessage;
    expect(metric(host, birth, 'Doubtful')).toMatchObject({ value: 19.5, quality: 64 });
    expect(metric(host, birth, 'Broken')).toMatchObject({ value: null, quality: 0 });
    await waitFor(() => reader.received().length >= 2, 10_000, { message: 'the plain topics' });
    const plainValue = (tag: string) => JSON.parse(reader.received(`plant1/line4/oven-1/${tag}`)[0].payload) as object;
    expect(plainValue('Doubtful')).toMatchObject({ value: 19.5, quality: 'uncertain' });
    expect(plainValue('Broken')).toMatchObject({ value: null, quality: 'bad' });
  });
});
