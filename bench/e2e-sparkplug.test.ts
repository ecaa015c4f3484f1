/**
 * The Sparkplug session end to end, as a report: pymodbus (press-1) and a node-opcua server (oven-1) feed the
 * gateway process, whose uplink bridge reaches a central Mosquitto through a tap that reads the Will of every
 * CONNECT; a primary host application built on Tahu's `sparkplug-payload` codec watches the group on Mosquitto
 * and publishes its STATE. It performs, in order: DCMD writes of every datatype the two devices take, an outage
 * of the central broker, the host going offline and online, device loss (the Modbus and OPC UA servers killed),
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
import { WRITABLE_REGISTER_TAGS, modbusPress, startModbusSim } from '../test/helpers/modbus-sim.js';
import { startMosquitto } from '../test/helpers/mosquitto.js';
import { delay, waitFor } from '../test/helpers/wait.js';
import { startOpcuaFixture } from '../test/fixtures/opcua-fixture.js';
import type * as ProtoModule from 'sparkplug-payload/lib/sparkplugPayloadProto.js';

const require = createRequire(import.meta.url);
/** Tahu's own protobuf codec: its `decodePayload` drops the value of a DATA metric that carries an alias only. */
const { Payload } = (require('sparkplug-payload/lib/sparkplugPayloadProto.js') as typeof ProtoModule).org.eclipse.tahu
  .protobuf;
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

interface Tap {
  readonly port: number;
  /** Stops listening and drops every connection: from the gateway's side the central broker is unreachable. */
  close(): Promise<void>;
  /** Listens again on the same port. */
  reopen(): Promise<void>;
  dispose(): Promise<void>;
}

async function startTap(targetPort: number, onConnect: (c: ConnectSeen) => void): Promise<Tap> {
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
      const bdSeq = will
        ? tahu
            .decodePayload(typeof will === 'string' ? Buffer.from(will) : new Uint8Array(will))
            .metrics?.find((m) => m.name === 'bdSeq')?.value
        : undefined;
      onConnect({
        atMs: Date.now(),
        clientId: packet.clientId,
        willBdSeq: bdSeq === undefined ? undefined : Number(bdSeq as never),
      });
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
  const listen = (port: number) => new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const close = async () => {
    if (!server.listening) return;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of sockets) s.destroy();
    await closed;
  };
  await listen(0);
  const port = (server.address() as { port: number }).port;
  return { port, close, reopen: () => listen(port), dispose: close };
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
  readonly metrics: readonly {
    readonly name: string;
    readonly value: unknown;
    readonly historical: boolean;
    readonly timestamp?: number;
  }[];
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
  const sent = (key: string) => Object.prototype.hasOwnProperty.call(m, key);
  switch (type) {
    case 1:
      return (int << 24) >> 24; // Int8: two's complement in int_value
    case 2:
      return (int << 16) >> 16;
    case 3:
      return int | 0;
    case 4:
      return BigInt(long(m.longValue).toString());
    case 5:
    case 6:
      return int;
    case 7:
      return sent('intValue') ? int >>> 0 : long(m.longValue, true).toNumber(); // UInt32: either field
    case 8:
      return BigInt(long(m.longValue, true).toString());
    case 9:
      return m.floatValue;
    case 10:
      return m.doubleValue;
    case 11:
      return m.booleanValue;
    case 12:
    case 14:
      return m.stringValue;
    case 13:
      return long(m.longValue).toNumber();
    default:
      return m.bytesValue ? Buffer.from(m.bytesValue).toString('hex') : undefined;
  }
}

class Host {
  readonly seen: Seen[] = [];
  private readonly aliases = new Map<number, { name: string; type: number }>();
  private client: MqttClient | undefined;

  constructor(private readonly url: string) {}

  /**
   * Connects (resuming its session) and says it is online. Sparkplug 3.0: each connection has a timestamp of its
   * own, in the Will and in the online STATE, so an edge node can tell this life's death from an older one; a
   * lost connection (the central broker went away) is made again the same way, with a new timestamp.
   */
  async online(): Promise<void> {
    const timestamp = Date.now();
    const client = mqttConnect(this.url, {
      clientId: HOST_ID,
      clean: false,
      reconnectPeriod: 0,
      will: {
        topic: `spBv1.0/STATE/${HOST_ID}`,
        payload: Buffer.from(JSON.stringify({ online: false, timestamp })),
        qos: 1,
        retain: true,
      },
    });
    this.client = client;
    client.on('message', (topic, payload) => this.onMessage(topic, payload));
    client.on('error', () => undefined);
    // Once per connection: MQTT.js may report a close twice, and two connections with one client id take over
    // from each other, each publishing its Will.
    client.once('close', () => {
      if (this.client === client) setTimeout(() => void this.online().catch(() => undefined), 300);
    });
    await new Promise<void>((resolve, reject) => {
      client.once('connect', () => resolve());
      client.once('close', () => reject(new Error('host connection refused')));
    });
    await client.subscribeAsync(`spBv1.0/${GROUP}/#`, { qos: 1 });
    await client.publishAsync(`spBv1.0/STATE/${HOST_ID}`, JSON.stringify({ online: true, timestamp }), {
      qos: 1,
      retain: true,
    });
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
    const client = this.client;
    this.client = undefined;
    client?.end(true);
  }

  private onMessage(topic: string, payload: Buffer): void {
    const [, , type, , device] = topic.split('/');
    if (type === 'STATE' || type === 'NCMD' || type === 'DCMD') return;
    const p = Payload.decode(payload);
    if (type === 'NBIRTH') this.aliases.clear();
    // protobufjs answers absent fields with their defaults (name '', alias 0): only own properties were sent.
    const has = (o: object, key: string) => Object.prototype.hasOwnProperty.call(o, key);
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- a library decodes it: kept in case an absent field is left unset
    const metrics = (p.metrics ?? []).map((m) => {
      const alias = has(m, 'alias') ? long(m.alias, true).toNumber() : undefined;
      const declared = has(m, 'datatype') ? (m.datatype as number) : undefined;
      if (has(m, 'name') && alias !== undefined && declared !== undefined)
        this.aliases.set(alias, { name: m.name as string, type: declared });
      const known = alias === undefined ? undefined : this.aliases.get(alias);
      return {
        name: has(m, 'name') ? (m.name as string) : (known?.name ?? `alias ${alias}`),
        value: valueOf(m, declared ?? known?.type),
        historical: m.isHistorical === true,
        timestamp: has(m, 'timestamp') ? long(m.timestamp, true).toNumber() : undefined,
      };
    });
    const bdSeq = metrics.find((m) => m.name === 'bdSeq')?.value;
    this.seen.push({
      atMs: Date.now(),
      type,
      device,
      seq: has(p, 'seq') ? long(p.seq, true).toNumber() : undefined,
      bdSeq: bdSeq === undefined || bdSeq === null ? undefined : Number(bdSeq),
      metrics,
    });
  }
}

// -------------------------------------------------------------------------------------------------------------

const PRESS_TAGS = [
  { name: 'count', table: 'holding', address: 40, datatype: 'uint32' },
  ...WRITABLE_REGISTER_TAGS,
  // Read only here: pymodbus 3.0.0rc1 (Debian 12) ends its server a second or two after the gateway writes a coil
  // (FC5) and reads it back, so the device loss phase would lose its simulator. Boolean writes go to oven-1.
  { name: 'valve', table: 'coil', address: 0, datatype: 'bool' },
];

const ua = (name: string, datatype: string) => ({
  name,
  nodeId: `ns=1;s=Fixture.Writable.${name}`,
  datatype,
  writable: true,
});
const OVEN_TAGS = [
  // Live data that needs no hand on the device: +1 every 500 ms on the server.
  { name: 'Counter', nodeId: 'ns=1;s=Fixture.Changing.Counter', datatype: 'UInt32' },
  ua('Small', 'Int8'),
  ua('Octet', 'UInt8'),
  ua('Mode', 'Int16'),
  ua('Total', 'Int64'),
  ua('Ratio', 'Float'),
  ua('Setpoint', 'Double'),
  ua('Enabled', 'Boolean'),
  ua('Label', 'String'),
  ua('When', 'DateTime'),
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
    process.stderr.write(`${lines.at(-1)}\n`);
  };

  const central = d.add(await startMosquitto({ persistence: true }));
  const tap = d.add(await startTap(central.port, (c) => connects.push(c)));
  const sim = d.add(await startModbusSim());
  const opcua = d.add(await startOpcuaFixture({ dir: d.tempDir('edgeferry-e2e-opcua-'), tickMs: 500 }));
  const host = d.add(new Host(central.url));
  await host.online();

  // A step that fails ends the run there; the report shows how far it got.
  let gw: Gateway | undefined;
  let outageStart = 0;
  let outageEnd = 0;
  let writeReport: string[] = [];
  /** The writes whose DDATA read-back matched, when they were made (a restarted OPC UA server holds its defaults). */
  let writesConfirmed = 0;
  let failure: unknown;
  const births = (type: string, device?: string) =>
    host.seen.filter((s) => s.type === type && (device === undefined || s.device === device)).length;
  const bothBorn = async (nbirths: number, what: string) =>
    waitFor(
      () =>
        births('NBIRTH') >= nbirths && births('DBIRTH', 'press-1') >= nbirths && births('DBIRTH', 'oven-1') >= nbirths,
      30_000,
      {
        message: () => `${what}: ${host.seen.map((s) => `${s.type}:${s.device ?? ''}`).join(' ')}`,
      },
    );
  /** Live (not historical) data of the OPC UA counter, arrived from now on. */
  const liveData = async (what: string) => {
    const since = Date.now();
    await waitFor(
      () =>
        host.seen.some(
          (x) => x.atMs > since && x.type === 'DDATA' && x.metrics.some((m) => m.name === 'Counter' && !m.historical),
        ),
      15_000,
      { message: what },
    );
  };
  const confirmed = () => WRITES.filter(([device, name, , , back]) => host.value(device, name) === back);
  try {
    phase('start: host online (STATE), gateway starts');
    gw = d.add(
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
          sparkplug: {
            groupId: GROUP,
            edgeNodeId: NODE,
            uplink: 'central',
            primaryHostId: HOST_ID,
            deviceReconnect: { minDelayMs: 300, maxDelayMs: 600 },
          },
          connectors: [
            // Generous: a poll timeout on the busy 2-core VM would count as a device loss the run did not cause.
            // Polled once a second: Debian 12's pymodbus 3.0.0rc1 simulator has ended its server by itself after some
            // 10-30 s of polling every 100 ms (longer than any integration test keeps one).
            { ...modbusPress(sim, PRESS_TAGS), pollIntervalMs: 1000, timeoutMs: 3000, retries: 1 },
            {
              id: 'oven-1',
              type: 'opcua',
              endpoint: opcua.endpoint,
              subscription: { publishingIntervalMs: 100 },
              tags: OVEN_TAGS,
            },
          ],
        },
        { logLevel: 'info' },
      ),
    );
    await bothBorn(1, 'first births');
    await liveData('live data');

    phase('DCMD writes of every datatype');
    for (const device of ['press-1', 'oven-1']) {
      await host.dcmd(
        device,
        WRITES.filter((w) => w[0] === device).map(([, name, type, value]) => ({ name, type, value })),
      );
    }
    await waitFor(() => confirmed().length === WRITES.length, 20_000, {
      message: () =>
        `read-back of ${WRITES.filter((w) => !confirmed().includes(w))
          .map((w) => w[1])
          .join(', ')}`,
    }).catch(() => undefined);
    writesConfirmed = confirmed().length;
    writeReport = WRITES.map(([device, name, type, , back]) => {
      const got = host.value(device, name);
      return `    ${type.padEnd(8)} ${device}/${name.padEnd(9)} sent ${String(back).padEnd(22)} DDATA read-back ${String(got).padEnd(22)} ${got === back ? 'ok' : 'MISMATCH'}`;
    });
    // Out of range for Int8: refused by the node, audited, nothing written.
    await host.dcmd('oven-1', [{ name: 'Small', type: 'Int8', value: 300 }]);
    await waitFor(() => gw?.output().includes('"command refused"'), 10_000, {
      message: 'the refusal in the audit log',
    });

    phase('outage of the central broker (Mosquitto stopped 6 s; the OPC UA counter keeps changing)');
    outageStart = Date.now();
    await tap.close();
    await central.stop();
    await delay(6000);
    outageEnd = Date.now();
    await central.restart();
    await tap.reopen();
    phase('central broker back');
    await bothBorn(2, 'births after the outage');
    await liveData('live data after the outage');

    phase('primary host offline (connection dropped: its Will says offline)');
    host.offline();
    await delay(3500);
    phase('primary host online again');
    await host.online();
    await bothBorn(3, 'births after the host came back');
    await liveData('live data after the host came back');

    // Muted rather than killed: pymodbus 3.0.0rc1 cannot listen again on the same port for a minute (TIME_WAIT).
    phase('device loss: the Modbus unit stops answering, then answers again');
    const pressDeaths = births('DDEATH', 'press-1');
    const pressBirths = births('DBIRTH', 'press-1');
    await sim.mute(1);
    await waitFor(() => births('DDEATH', 'press-1') > pressDeaths, 20_000, { message: 'DDEATH press-1' });
    await sim.unmute(1);
    await waitFor(() => births('DBIRTH', 'press-1') > pressBirths, 20_000, { message: 'DBIRTH press-1 again' });
    phase('device loss: OPC UA server killed, started again');
    const ovenDeaths = births('DDEATH', 'oven-1');
    const ovenBirths = births('DBIRTH', 'oven-1');
    await opcua.kill();
    await waitFor(() => births('DDEATH', 'oven-1') > ovenDeaths, 20_000, { message: 'DDEATH oven-1' });
    await opcua.restart();
    await waitFor(() => births('DBIRTH', 'oven-1') > ovenBirths, 40_000, { message: 'DBIRTH oven-1 again' });

    phase('kill -9 of the gateway');
    const nodeDeaths = births('NDEATH');
    await gw.kill('SIGKILL');
    await waitFor(() => births('NDEATH') > nodeDeaths, 20_000, { message: 'NDEATH (the Will) after kill -9' });
    await delay(1000);
    phase('gateway restarted');
    await gw.restart();
    await bothBorn(4, 'births after the restart');
    await liveData('live data after the restart');
  } catch (err) {
    failure = err;
  }
  const refused = (gw?.output() ?? '').split('\n').filter((l) => l.includes('"command refused"'));

  // ---------------------------------------------------------------------------------------------------------
  // The timeline: births, deaths and CONNECTs one per line, data collapsed into runs.
  const events: { atMs: number; text: string }[] = [
    ...phases.map((p) => ({ atMs: p.atMs, text: `== ${p.name}` })),
    ...connects
      .filter((c) => c.clientId === NODE)
      .map((c, i) => ({ atMs: c.atMs, text: `   CONNECT #${i + 1} of the uplink, Will NDEATH bdSeq=${c.willBdSeq}` })),
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
    events.push({
      atMs: s.atMs,
      text: `   ${s.type.padEnd(6)} ${(s.device ?? NODE).padEnd(8)} ${s.seq === undefined ? '' : `seq=${s.seq} `}${what}`,
    });
  }
  flush();
  events.sort((a, b) => a.atMs - b.atMs);

  // ---------------------------------------------------------------------------------------------------------
  // The rules.
  const problems: string[] = failure === undefined ? [] : [`the run stopped: ${(failure as Error).message}`];
  const uplinkConnects = connects.filter((c) => c.clientId === NODE);
  let bdSeq: number | undefined;
  let nextSeq: number | undefined;
  let born = new Set<string>();
  let sessionBirthMs = 0;
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
      if (connect?.willBdSeq !== s.bdSeq)
        problems.push(`${where}: bdSeq ${s.bdSeq}, but the Will of the CONNECT says ${connect?.willBdSeq}`);
      if (s.seq !== 0) problems.push(`${where}: NBIRTH seq is not 0`);
      if (!stateOnline(s.atMs)) problems.push(`${where}: NBIRTH while the primary host is offline`);
      bdSeq = s.bdSeq;
      sessionBirthMs = s.metrics.find((m) => m.name === 'bdSeq')?.timestamp ?? s.atMs;
      nextSeq = 1;
      born = new Set();
      continue;
    }
    if (s.type === 'NDEATH') {
      // The death of the session born with that bdSeq, or of a connection that was never born (the host was away).
      const connect = uplinkConnects.filter((c) => c.atMs <= s.atMs).at(-1);
      if (s.bdSeq !== bdSeq && s.bdSeq !== connect?.willBdSeq)
        problems.push(`${where}: NDEATH bdSeq ${s.bdSeq}: neither the NBIRTH's (${bdSeq}) nor the Will of the CONNECT`);
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
        if (t > outageStart + 200 && t < outageEnd - 200 && !m.historical)
          problems.push(`${where}: ${m.name} read during the outage, not historical`);
        // Historical: read before the births of the session it arrives in (journaled, sent after them).
        if (m.historical && t >= sessionBirthMs)
          problems.push(`${where}: ${m.name} historical, but read after this session's NBIRTH`);
      }
    }
  }
  const historical = host.seen.filter((s) => s.type === 'DDATA' && s.metrics.some((m) => m.historical));
  if (historical.length === 0) problems.push('no historical data after the outage');
  if (writesConfirmed !== WRITES.length)
    problems.push(`DCMD read-back missing or different for ${WRITES.length - writesConfirmed} writes (see the table)`);
  if (refused.length !== 1) problems.push(`expected one refused DCMD (Int8 300), the audit log has ${refused.length}`);

  const report = [
    `edgeferry Sparkplug end-to-end run, ${new Date(t0).toISOString()}`,
    `pymodbus press-1 + node-opcua oven-1 -> gateway -> uplink (through a CONNECT tap) -> Mosquitto ${central.url} <- host ${HOST_ID} (sparkplug-payload)`,
    '',
    ...events.map((e) => `${at(e.atMs)} ${e.text}`),
    '',
    `DCMD writes (${WRITES.length} datatypes over both devices), confirmed by the DDATA of the value read back:`,
    ...writeReport,
    `    refused: ${refused
      .map((l) => {
        const j = JSON.parse(l) as Record<string, unknown>;
        return `${String(j.metric)}=${String(j.value)} (${String(j.why)})`;
      })
      .join('; ')}`,
    '',
    `Checks: NBIRTH bdSeq = Will of its CONNECT; NDEATH bdSeq = its NBIRTH's (or, never born, its CONNECT's Will); NBIRTH seq 0,`,
    `        then +1 mod 256; DBIRTH before DDATA; data read during the outage historical, historical data read before its`,
    `        session's NBIRTH, births never historical; births only while the host is online; every write read back.`,
    problems.length === 0 ? 'All checks passed.' : `FAILED:\n${problems.map((p) => `  - ${p}`).join('\n')}`,
    ...(problems.length === 0
      ? []
      : [
          '',
          'Gateway warnings and errors:',
          ...(gw?.output() ?? '').split('\n').filter((l) => /"level":(40|50|60)/.test(l)),
        ]),
  ].join('\n');
  mkdirSync(RESULTS_DIR, { recursive: true });
  writeFileSync(join(RESULTS_DIR, 'e2e-sparkplug.txt'), `${report}\n`);
  console.log(report);
  expect(problems).toEqual([]);
}, 300_000);
