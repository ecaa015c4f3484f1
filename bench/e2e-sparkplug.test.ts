/**
 * The Sparkplug session end to end, as a report: pymodbus (press-1) and a node-opcua server (oven-1) feed the
 * gateway process, whose uplink bridge reaches a central Mosquitto through a tap that reads the Will of every
 * CONNECT; a primary host application built on Tahu's `sparkplug-payload` codec watches the group on Mosquitto
 * and publishes its STATE. It performs, in order: DCMD writes of every datatype the two devices take, an outage
 * of the central broker, the host going offline and online, device loss (Modbus unit muted, OPC UA server killed),
 * kill -9 of the gateway and a restart. It prints every birth and death with bdSeq and seq (data collapsed into
 * runs) and checks the rules: NBIRTH bdSeq = the Will of the CONNECT that carries it, NDEATH bdSeq = its NBIRTH's,
 * seq 0..255 without gaps from each NBIRTH, DBIRTH before DDATA, data stored while the uplink was down flagged
 * historical and live data not, births only while the host is online.
 *
 *   npm run e2e:sparkplug        (the report also goes to bench/results/e2e-sparkplug.txt)
 *
 * A vitest file (bench/vitest.config.ts) rather than a node script: the fixtures and helpers it reuses
 * (test/helpers, test/fixtures) find their Python and node-opcua servers relative to their sources.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer, connect as tcpConnect, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Long from 'long';
import { connect as mqttConnect, type MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import { get as getSparkplug } from 'sparkplug-payload';
import { expect, it } from 'vitest';
import { useDisposer } from '../test/helpers/disposer.js';
import { startGateway, type Gateway } from '../test/helpers/gateway.js';
import { modbusPress, startModbusSim } from '../test/helpers/modbus-sim.js';
import { startMosquitto } from '../test/helpers/mosquitto.js';
import { delay, waitFor } from '../test/helpers/wait.js';
import { startOpcuaFixture } from '../test/fixtures/opcua-fixture.js';
import type * as ProtoModule from 'sparkplug-payload/lib/sparkplugPayloadProto.js';

const require = createRequire(import.meta.url);
/** Tahu's own protobuf codec: its `decodePayload` drops the value of a DATA metric that carries an alias only. */
const { Payload } = (require('sparkplug-payload/lib/sparkplugPayloadProto.js') as typeof ProtoModule).org.eclipse.tahu.protobuf;
type RawMetric = ProtoModule.org.eclipse.tahu.protobuf.Payload.IMetric;

const tahuOrNull = getSparkplug('spBv1.0');
if (!tahuOrNull) throw new Error('sparkplug-payload has no spBv1.0');
const tahu = tahuOrNull;

const GROUP = 'plant1';
const NODE = 'line4-gw';
const HOST_ID = 'scada-e2e';
const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

const d = useDisposer();

// -------------------------------------------------------------------------------------------------------------
// The tap: a TCP proxy in front of Mosquitto that decodes the first packet of each connection (the CONNECT).

interface ConnectSeen {
  readonly atMs: number;
  readonly clientId: string;
  readonly willBdSeq: number | undefined;
}

async function startTap(targetPort: number, onConnect: (c: ConnectSeen) => void): Promise<{ port: number; dispose(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = tcpConnect(targetPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    const parser = mqttPacket.parser({ protocolVersion: 5 });
    let seen = false;
    parser.on('packet', (packet) => {
      if (seen || packet.cmd !== 'connect') return;
      seen = true;
      const will = packet.will?.payload;
      const bdSeq = will ? tahu.decodePayload(typeof will === 'string' ? Buffer.from(will) : new Uint8Array(will)).metrics?.find((m) => m.name === 'bdSeq')?.value : undefined;
      onConnect({ atMs: Date.now(), clientId: packet.clientId, willBdSeq: bdSeq === undefined ? undefined : Number(bdSeq as never) });
    });
    client.on('data', (chunk) => {
      if (!seen) parser.parse(chunk);
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => client.write(chunk));
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    dispose: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// -------------------------------------------------------------------------------------------------------------
// The primary host application: MQTT.js + Tahu's codec, a persistent session (it gets the QoS 1 NDEATH it
// missed while offline), its STATE with a Will.

interface Seen {
  readonly atMs: number;
  readonly type: string;
  readonly device?: string;
  readonly seq?: number;
  readonly bdSeq?: number;
  readonly metrics: readonly { readonly name: string; readonly value: unknown; readonly historical: boolean; readonly timestamp?: number }[];
}

/** A 64-bit field as Tahu's protobufjs codec returns it (a Long, or a number when it fits). */
const long = (v: unknown, unsigned = false): Long => {
  const l = Long.fromValue(v as Long);
  return unsigned ? l.toUnsigned() : l.toSigned();
};

/** A metric's value as Tahu's codec carries it, read by the datatype its birth declared. */
function valueOf(m: RawMetric, type: number | undefined): unknown {
  if (m.isNull) return null;
  const int = m.intValue ?? 0;
  switch (type) {
    case 1: return (int << 24) >> 24; // Int8: two's complement in int_value
    case 2: return (int << 16) >> 16;
    case 3: return int | 0;
    case 4: return BigInt(long(m.longValue).toString());
    case 5: case 6: return int;
    case 7: return m.intValue ?? Number(long(m.longValue, true).toString());
    case 8: return BigInt(long(m.longValue, true).toString());
    case 9: return m.floatValue;
    case 10: return m.doubleValue;
    case 11: return m.booleanValue;
    case 12: case 14: return m.stringValue;
    case 13: return long(m.longValue).toNumber();
    default: return m.bytesValue ? Buffer.from(m.bytesValue).toString('hex') : undefined;
  }
}

class Host {
  readonly seen: Seen[] = [];
  private readonly aliases = new Map<number, { name: string; type: number }>();
  private client: MqttClient | undefined;

  constructor(private readonly url: string) {}

  /** Connects (resuming its session) and says it is online. */
  async online(): Promise<void> {
    // Sparkplug 3.0: the Will carries the timestamp of the online STATE, so an edge node tells this life's death.
    const timestamp = Date.now();
    const client = mqttConnect(this.url, {
      clientId: HOST_ID,
      clean: false,
      reconnectPeriod: 300,
      will: { topic: `spBv1.0/STATE/${HOST_ID}`, payload: Buffer.from(JSON.stringify({ online: false, timestamp })), qos: 1, retain: true },
    });
    this.client = client;
    client.on('message', (topic, payload) => this.onMessage(topic, payload));
    client.on('error', () => undefined);
    // Also after the central broker comes back: a primary host says it is online on every connection.
    client.on('connect', () => {
      void client.publishAsync(`spBv1.0/STATE/${HOST_ID}`, JSON.stringify({ online: true, timestamp }), { qos: 1, retain: true });
    });
    await new Promise<void>((resolve) => client.once('connect', () => resolve()));
    await client.subscribeAsync(`spBv1.0/${GROUP}/#`, { qos: 1 });
  }

  /** Goes away without DISCONNECT: the broker publishes its Will, the offline STATE. */
  offline(): void {
    const client = this.client;
    this.client = undefined;
    client?.stream.destroy();
    client?.end(true);
  }

  dcmd(device: string, metrics: { name: string; type: string; value: unknown }[]): Promise<unknown> {
    const payload = Buffer.from(tahu.encodePayload({ timestamp: Date.now(), metrics: metrics as never }));
    return (this.client as MqttClient).publishAsync(`spBv1.0/${GROUP}/DCMD/${NODE}/${device}`, payload, { qos: 0 });
  }

  value(device: string, name: string): unknown {
    for (let i = this.seen.length - 1; i >= 0; i--) {
      const s = this.seen[i];
      if (s.device !== device || !(s.type === 'DDATA' || s.type === 'DBIRTH')) continue;
      const m = s.metrics.find((x) => x.name === name && !x.historical);
      if (m) return m.value;
    }
    return undefined;
  }

  dispose(): void {
    this.client?.end(true);
  }

  private onMessage(topic: string, payload: Buffer): void {
    const [, , type, , device] = topic.split('/');
    if (type === 'STATE' || type === 'NCMD' || type === 'DCMD') return;
    const p = Payload.decode(payload);
    if (type === 'NBIRTH') this.aliases.clear();
    const metrics = (p.metrics ?? []).map((m) => {
      const alias = m.alias === undefined || m.alias === null ? undefined : Number(m.alias);
      if (m.name && alias !== undefined && m.datatype) this.aliases.set(alias, { name: m.name, type: m.datatype });
      const known = alias === undefined ? undefined : this.aliases.get(alias);
      const name = m.name ?? known?.name ?? `alias ${alias}`;
      return {
        name,
        value: valueOf(m, m.datatype ?? known?.type),
        historical: m.isHistorical === true,
        timestamp: m.timestamp === undefined || m.timestamp === null ? undefined : long(m.timestamp, true).toNumber(),
      };
    });
    const bdSeq = metrics.find((m) => m.name === 'bdSeq')?.value;
    this.seen.push({
      atMs: Date.now(),
      type,
      device,
      seq: p.seq === undefined || p.seq === null ? undefined : long(p.seq, true).toNumber(),
      bdSeq: bdSeq === undefined || bdSeq === null ? undefined : Number(bdSeq),
      metrics,
    });
  }
}

// -------------------------------------------------------------------------------------------------------------

const PRESS_TAGS = [
  { name: 'count', table: 'holding', address: 40, datatype: 'uint32' },
  { name: 'i16', table: 'holding', address: 0, datatype: 'int16', writable: true },
  { name: 'u16', table: 'holding', address: 1, datatype: 'uint16', writable: true },
  { name: 'i32', table: 'holding', address: 2, datatype: 'int32', writable: true },
  { name: 'u32', table: 'holding', address: 4, datatype: 'uint32', writable: true },
  { name: 'i64', table: 'holding', address: 6, datatype: 'int64', writable: true },
  { name: 'u64', table: 'holding', address: 10, datatype: 'uint64', writable: true },
  { name: 'f32', table: 'holding', address: 14, datatype: 'float32', writable: true },
  { name: 'f64', table: 'holding', address: 16, datatype: 'float64', writable: true },
  { name: 'label', table: 'holding', address: 20, datatype: 'string', length: 4, writable: true },
  { name: 'valve', table: 'coil', address: 0, datatype: 'bool', writable: true },
];

const ua = (name: string, datatype: string) => ({ name, nodeId: `ns=1;s=Fixture.Writable.${name}`, datatype, writable: true });
const OVEN_TAGS = [
  ua('Small', 'Int8'), ua('Octet', 'UInt8'), ua('Mode', 'Int16'), ua('Total', 'Int64'), ua('Ratio', 'Float'),
  ua('Setpoint', 'Double'), ua('Enabled', 'Boolean'), ua('Label', 'String'), ua('When', 'DateTime'),
];

/** Every datatype the two devices take, one DCMD metric each: [device, tag, Sparkplug type, value sent, value expected back]. */
const WHEN = Date.parse('2026-12-01T10:00:00.123Z');
const WRITES: [string, string, string, unknown, unknown][] = [
  ['press-1', 'i16', 'Int16', -32_768, -32_768],
  ['press-1', 'u16', 'UInt16', 65_535, 65_535],
  ['press-1', 'i32', 'Int32', -2_000_000_000, -2_000_000_000],
  ['press-1', 'u32', 'UInt32', 4_000_000_000, 4_000_000_000],
  ['press-1', 'i64', 'Int64', Long.fromString('-9000000000000000000'), -9_000_000_000_000_000_000n],
  ['press-1', 'u64', 'UInt64', Long.fromString('18000000000000000000', true), 18_000_000_000_000_000_000n],
  ['press-1', 'f32', 'Float', 1.5, 1.5],
  ['press-1', 'f64', 'Double', Math.PI, Math.PI],
  ['press-1', 'label', 'String', 'OK-7', 'OK-7'],
  ['press-1', 'valve', 'Boolean', true, true],
  ['oven-1', 'Small', 'Int8', -128, -128],
  ['oven-1', 'Octet', 'UInt8', 255, 255],
  ['oven-1', 'Mode', 'Int16', -7, -7],
  ['oven-1', 'Total', 'Int64', Long.fromString('-5000000000'), -5_000_000_000n],
  ['oven-1', 'Ratio', 'Float', 0.25, 0.25],
  ['oven-1', 'Setpoint', 'Double', 99.125, 99.125],
  ['oven-1', 'Enabled', 'Boolean', true, true],
  ['oven-1', 'Label', 'String', 'héllo', 'héllo'],
  ['oven-1', 'When', 'DateTime', WHEN, WHEN],
];

it('Sparkplug session end to end: births, deaths, bdSeq and seq through outages, host STATE, device loss, kill -9 and DCMD writes', async () => {
  const t0 = Date.now();
  const lines: string[] = [];
  const at = (ms: number) => `t+${((ms - t0) / 1000).toFixed(1).padStart(5)}s`;
  const note = (text: string) => lines.push(`${at(Date.now())}  == ${text}`);
  const connects: ConnectSeen[] = [];
  const phases: { name: string; atMs: number }[] = [];
  const phase = (name: string) => {
    phases.push({ name, atMs: Date.now() });
    note(name);
  };

  const central = d.add(await startMosquitto({ persistence: true }));
  const tap = d.add(await startTap(central.port, (c) => connects.push(c)));
  const sim = d.add(await startModbusSim());
  await sim.set(1, 'hr', 40, [0, 1]);
  const opcua = d.add(await startOpcuaFixture({ dir: d.tempDir('edgeferry-e2e-opcua-') }));
  const host = d.add(new Host(central.url));
  await host.online();

  phase('start: host online (STATE), gateway starts');
  const gw: Gateway = d.add(
    await startGateway(
      {
        bridges: [
          {
            name: 'central',
            remote: { urls: [`mqtt://127.0.0.1:${tap.port}`], clientId: NODE, keepaliveS: 5 },
            reconnect: { minDelayMs: 200, maxDelayMs: 500 },
            topics: [
              { filter: 'spBv1.0/#', direction: 'out' },
              { filter: `spBv1.0/${GROUP}/NCMD/${NODE}`, direction: 'in' },
              { filter: `spBv1.0/${GROUP}/DCMD/${NODE}/#`, direction: 'in' },
              { filter: 'spBv1.0/STATE/+', direction: 'in' },
            ],
          },
        ],
        sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central', primaryHostId: HOST_ID, deviceReconnect: { minDelayMs: 300, maxDelayMs: 600 } },
        connectors: [
          { ...modbusPress(sim, PRESS_TAGS), timeoutMs: 500 },
          { id: 'oven-1', type: 'opcua', endpoint: opcua.endpoint, subscription: { publishingIntervalMs: 100 }, tags: OVEN_TAGS },
        ],
      },
      { logLevel: 'info' },
    ),
  );
  const births = (type: string, device?: string) => host.seen.filter((s) => s.type === type && (device === undefined || s.device === device)).length;
  const bothBorn = async (nbirths: number, what: string) =>
    waitFor(() => births('NBIRTH') >= nbirths && births('DBIRTH', 'press-1') >= nbirths && births('DBIRTH', 'oven-1') >= nbirths, 30_000, {
      message: () => `${what}: ${host.seen.map((s) => `${s.type}:${s.device ?? ''}`).join(' ')}`,
    });
  await bothBorn(1, 'first births');
  let count = 1;
  const tick = async () => {
    count++;
    await sim.set(1, 'hr', 40, [0, count]);
  };
  await tick();
  await waitFor(() => host.value('press-1', 'count') === count, 10_000, { message: 'live data' });

  phase('DCMD writes of every datatype');
  for (const device of ['press-1', 'oven-1']) {
    await host.dcmd(device, WRITES.filter((w) => w[0] === device).map(([, name, type, value]) => ({ name, type, value })));
  }
  const confirmed = () => WRITES.filter(([device, name, , , back]) => host.value(device, name) === back);
  await waitFor(() => confirmed().length === WRITES.length, 20_000, {
    message: () => `read-back of ${WRITES.filter((w) => !confirmed().includes(w)).map((w) => w[1]).join(', ')}`,
  }).catch(() => undefined);
  const writeReport = WRITES.map(([device, name, type, , back]) => {
    const got = host.value(device, name);
    return `    ${type.padEnd(8)} ${device}/${name.padEnd(9)} sent ${String(back).padEnd(22)} DDATA read-back ${String(got).padEnd(22)} ${got === back ? 'ok' : 'MISMATCH'}`;
  });
  // Out of range for Int8: refused by the node, audited, nothing written.
  await host.dcmd('oven-1', [{ name: 'Small', type: 'Int8', value: 300 }]);

  phase('outage of the central broker (Mosquitto stopped 6 s; press-1 keeps changing)');
  const outageStart = Date.now();
  await central.stop();
  for (let i = 0; i < 5; i++) {
    await tick();
    await delay(600);
  }
  const outageEnd = Date.now();
  await central.restart();
  phase('central broker back');
  await bothBorn(2, 'births after the outage');
  await tick();
  await waitFor(() => host.value('press-1', 'count') === count, 15_000, { message: 'live data after the outage' });

  phase('primary host offline (connection dropped: its Will says offline)');
  host.offline();
  await delay(2500);
  await tick();
  await delay(1000);
  phase('primary host online again');
  await host.online();
  await bothBorn(3, 'births after the host came back');
  await tick();
  await waitFor(() => host.value('press-1', 'count') === count, 15_000, { message: 'live data after the host came back' });

  phase('device loss: Modbus unit muted, then answering again');
  await sim.mute(1);
  await waitFor(() => births('DDEATH', 'press-1') >= 1, 15_000, { message: 'DDEATH press-1' });
  await sim.unmute(1);
  await waitFor(() => births('DBIRTH', 'press-1') >= 4, 15_000, { message: 'DBIRTH press-1 again' });
  phase('device loss: OPC UA server killed, then restarted');
  await opcua.kill();
  await waitFor(() => births('DDEATH', 'oven-1') >= 1, 20_000, { message: 'DDEATH oven-1' });
  await opcua.restart();
  await waitFor(() => births('DBIRTH', 'oven-1') >= 4, 40_000, { message: 'DBIRTH oven-1 again' });

  phase('kill -9 of the gateway');
  await gw.kill('SIGKILL');
  await waitFor(() => births('NDEATH') >= 3, 20_000, { message: 'NDEATH (the Will) after kill -9' });
  await tick();
  phase('gateway restarted');
  await gw.restart();
  await bothBorn(4, 'births after the restart');
  await tick();
  await waitFor(() => host.value('press-1', 'count') === count, 15_000, { message: 'live data after the restart' });
  const refused = gw.output().split('\n').filter((l) => l.includes('"command refused"'));

  // ---------------------------------------------------------------------------------------------------------
  // The timeline: births, deaths and CONNECTs one per line, data collapsed into runs.
  const events: { atMs: number; text: string }[] = [
    ...phases.map((p) => ({ atMs: p.atMs, text: `== ${p.name}` })),
    ...connects.filter((c) => c.clientId === NODE).map((c, i) => ({ atMs: c.atMs, text: `   CONNECT #${i + 1} of the uplink, Will NDEATH bdSeq=${c.willBdSeq}` })),
  ];
  let run: { atMs: number; key: string; seqs: number[]; n: number } | undefined;
  const flush = () => {
    if (!run) return;
    events.push({ atMs: run.atMs, text: `   ${run.key} ×${run.n} (seq ${run.seqs[0]}..${run.seqs.at(-1)})` });
    run = undefined;
  };
  for (const s of host.seen) {
    if (s.type === 'DDATA' || s.type === 'NDATA') {
      const historical = s.metrics.some((m) => m.historical);
      const key = `${s.type} ${s.device ?? ''}${historical ? ' historical' : ''}`.replace('  ', ' ');
      if (run?.key !== key) {
        flush();
        run = { atMs: s.atMs, key, seqs: [], n: 0 };
      }
      run.n++;
      if (s.seq !== undefined) run.seqs.push(s.seq);
      continue;
    }
    flush();
    const what = s.type === 'NBIRTH' || s.type === 'NDEATH' ? `bdSeq=${s.bdSeq}` : '';
    events.push({ atMs: s.atMs, text: `   ${s.type.padEnd(6)} ${(s.device ?? NODE).padEnd(8)} ${s.seq === undefined ? '' : `seq=${s.seq} `}${what}` });
  }
  flush();
  events.sort((a, b) => a.atMs - b.atMs);

  // ---------------------------------------------------------------------------------------------------------
  // The rules.
  const problems: string[] = [];
  const uplinkConnects = connects.filter((c) => c.clientId === NODE);
  let bdSeq: number | undefined;
  let nextSeq: number | undefined;
  let born = new Set<string>();
  const stateOnline = (ms: number) => {
    // The host was offline from its drop to its next online().
    const off = phases.find((p) => p.name.startsWith('primary host offline'));
    const on = phases.find((p) => p.name.startsWith('primary host online'));
    return !(off && on && ms > off.atMs + 200 && ms < on.atMs);
  };
  for (const s of host.seen) {
    const where = `${at(s.atMs)} ${s.type} ${s.device ?? ''} seq ${s.seq}`;
    if (s.type === 'NBIRTH') {
      const connect = uplinkConnects.filter((c) => c.atMs <= s.atMs).at(-1);
      if (connect?.willBdSeq !== s.bdSeq) problems.push(`${where}: bdSeq ${s.bdSeq}, but the Will of the CONNECT says ${connect?.willBdSeq}`);
      if (s.seq !== 0) problems.push(`${where}: NBIRTH seq is not 0`);
      if (!stateOnline(s.atMs)) problems.push(`${where}: NBIRTH while the primary host is offline`);
      bdSeq = s.bdSeq;
      nextSeq = 1;
      born = new Set();
      continue;
    }
    if (s.type === 'NDEATH') {
      if (s.bdSeq !== bdSeq) problems.push(`${where}: NDEATH bdSeq ${s.bdSeq}, the NBIRTH said ${bdSeq}`);
      nextSeq = undefined;
      continue;
    }
    if (nextSeq === undefined) {
      problems.push(`${where}: no NBIRTH before it`);
      continue;
    }
    if (s.seq !== nextSeq) problems.push(`${where}: expected seq ${nextSeq}`);
    nextSeq = ((s.seq ?? 0) + 1) & 0xff;
    if (s.type === 'DBIRTH') {
      born.add(s.device as string);
      if (s.metrics.some((m) => m.historical)) problems.push(`${where}: a birth metric flagged historical`);
    }
    if (s.type === 'DDEATH') born.delete(s.device as string);
    if (s.type === 'DDATA' && !born.has(s.device as string)) problems.push(`${where}: DDATA before its DBIRTH`);
    if (s.type === 'DDATA') {
      for (const m of s.metrics) {
        const t = m.timestamp ?? 0;
        // Read while the central broker was down: it can only arrive from the outbox, historical.
        if (t > outageStart + 200 && t < outageEnd - 200 && !m.historical) problems.push(`${where}: ${m.name} read during the outage, not historical`);
        if (m.historical && s.atMs - t < 500) problems.push(`${where}: ${m.name} historical, but read ${s.atMs - t} ms before it arrived`);
      }
    }
  }
  const historical = host.seen.filter((s) => s.type === 'DDATA' && s.metrics.some((m) => m.historical));
  if (historical.length === 0) problems.push('no historical data after the outage');
  if (confirmed().length !== WRITES.length) problems.push(`DCMD read-back missing or different: ${WRITES.filter((w) => !confirmed().includes(w)).map((w) => w[1]).join(', ')}`);
  if (refused.length !== 1) problems.push(`expected one refused DCMD (Int8 300), the audit log has ${refused.length}`);

  const report = [
    `edgeferry Sparkplug end-to-end run, ${new Date(t0).toISOString()}`,
    `pymodbus press-1 + node-opcua oven-1 -> gateway -> uplink (through a CONNECT tap) -> Mosquitto ${central.url} <- host ${HOST_ID} (sparkplug-payload)`,
    '',
    ...events.map((e) => `${at(e.atMs)} ${e.text}`),
    '',
    `DCMD writes (${WRITES.length} datatypes over both devices), confirmed by the DDATA of the value read back:`,
    ...writeReport,
    `    refused: ${refused.map((l) => { const j = JSON.parse(l) as Record<string, unknown>; return `${String(j.metric)}=${String(j.value)} (${String(j.why)})`; }).join('; ')}`,
    '',
    `Checks: NBIRTH bdSeq = Will of its CONNECT; NDEATH bdSeq = NBIRTH's; NBIRTH seq 0 then +1 mod 256; DBIRTH before DDATA;`,
    `        outage data historical, live data not, births never; births only while the host is online; every write read back.`,
    problems.length === 0 ? 'All checks passed.' : `FAILED:\n${problems.map((p) => `  - ${p}`).join('\n')}`,
  ].join('\n');
  mkdirSync(RESULTS_DIR, { recursive: true });
  writeFileSync(join(RESULTS_DIR, 'e2e-sparkplug.txt'), `${report}\n`);
  console.log(report);
  expect(problems).toEqual([]);
}, 300_000);
