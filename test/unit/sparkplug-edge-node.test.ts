import { afterEach, describe, expect, it } from 'vitest';
import { MAX_QUEUED_WRITES_PER_TAG } from '../../src/sparkplug/commands.js';
import { EdgeNode } from '../../src/sparkplug/edge-node.js';
import type { UplinkControl } from '../../src/sparkplug/edge-node.js';
import { sparkplugSchema } from '../../src/sparkplug/schema.js';
import type { SparkplugConfig } from '../../src/sparkplug/schema.js';
import { decodePayload, encodePayload } from '../../src/sparkplug/payload.js';
import type { Message } from '../../src/protocol/message.js';
import type { Logger, LogFn } from '../../src/util/logger.js';
import { removeDir, tempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';
import { command, Decoder, RecordingBroker, FakeConnector } from '../helpers/sparkplug-setup.js';
import { ValueRefusedError } from '../../connectors/contract.js';

interface LogLine {
  level: string;
  fields: Record<string, unknown>;
  msg: string;
}

function captureLogger(lines: LogLine[], bindings: Record<string, unknown> = {}): Logger {
  const fn =
    (level: string): LogFn =>
    (a: object | string, b?: string) => {
      if (typeof a === 'string') lines.push({ level, fields: bindings, msg: a });
      else lines.push({ level, fields: { ...bindings, ...a }, msg: b ?? '' });
    };
  return {
    fatal: fn('fatal'),
    error: fn('error'),
    warn: fn('warn'),
    info: fn('info'),
    debug: fn('debug'),
    trace: fn('trace'),
    child: (more) => captureLogger(lines, { ...bindings, ...more }),
    isLevelEnabled: () => true,
  };
}

const dirs: string[] = [];
const nodes: EdgeNode[] = [];
afterEach(async () => {
  for (const node of nodes.splice(0)) await node.stop();
  for (const dir of dirs.splice(0)) removeDir(dir);
});

function setup(
  options: {
    config?: Partial<SparkplugConfig>;
    connectors?: FakeConnector[];
    profiles?: ReadonlyMap<string, string>;
    dir?: string;
  } = {},
): {
  node: EdgeNode;
  broker: RecordingBroker;
  press: FakeConnector;
  logs: LogLine[];
  dir: string;
  decoder: Decoder;
  decoded: () => ReturnType<Decoder['decode']>[];
} {
  const dir = options.dir ?? tempDir('edgeferry-sp-');
  if (!options.dir) dirs.push(dir);
  const broker = new RecordingBroker();
  const press =
    options.connectors?.[0] ??
    new FakeConnector('press-1', [
      { name: 'temperature', datatype: 'Double', deadband: 0.5 },
      { name: 'count', datatype: 'UInt32' },
      { name: 'setpoint', datatype: 'Float', writable: true },
      { name: 'big', datatype: 'Int64', writable: true },
    ]);
  const logs: LogLine[] = [];
  const config = sparkplugSchema.parse({
    groupId: 'plant1',
    edgeNodeId: 'line4-gw',
    rebirthDebounceMs: 0,
    deviceReconnect: { minDelayMs: 10, maxDelayMs: 20 },
    deathTimeoutMs: 200,
    ...options.config,
  });
  const node = new EdgeNode({
    config,
    broker,
    connectors: options.connectors ?? [press],
    profiles: options.profiles,
    stateDir: dir,
    log: captureLogger(logs),
  });
  nodes.push(node);
  const decoder = new Decoder();
  let seen = 0;
  const all: ReturnType<Decoder['decode']>[] = [];
  const decoded = () => {
    for (; seen < broker.published.length; seen++) {
      const msg = broker.published[seen];
      if (msg.origin === 'edge-node') all.push(decoder.decode(msg));
    }
    return all;
  };
  return { node, broker, press, logs, dir, decoder, decoded };
}

const kinds = (list: { type: string; deviceId?: string; payload: { seq?: number } }[]) =>
  list.map((m) => `${m.type}${m.deviceId ? `:${m.deviceId}` : ''}#${m.payload.seq ?? '-'}`);

describe('Sparkplug edge node: births, data, deaths', () => {
  it('publishes NBIRTH (seq 0, Int64 bdSeq, Node Control/Rebirth false without alias) and then a DBIRTH per device with every metric [tck-id-payloads-nbirth-seq]', async () => {
    const { node, press, broker, decoded } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1, setpoint: 5, big: 2n ** 40n });
    const msgs = decoded();
    expect(kinds(msgs).slice(0, 2)).toEqual(['NBIRTH#0', 'DBIRTH:press-1#1']);
    const nbirth = msgs[0].payload;
    expect(nbirth.timestamp).toBeGreaterThan(0);
    const bdSeq = nbirth.metrics.find((m) => m.name === 'bdSeq');
    expect(bdSeq).toMatchObject({ datatype: 'Int64', value: 0n });
    const rebirth = nbirth.metrics.find((m) => m.name === 'Node Control/Rebirth');
    expect(rebirth).toMatchObject({ datatype: 'Boolean', value: false, alias: undefined });
    const dbirth = msgs[1].payload;
    expect(dbirth.metrics.map((m) => [m.name, m.datatype, m.value])).toEqual([
      ['temperature', 'Double', 20],
      ['count', 'UInt32', 1],
      ['setpoint', 'Float', 5],
      ['big', 'Int64', 2n ** 40n],
    ]);
    const aliases = [...nbirth.metrics, ...dbirth.metrics].map((m) => m.alias).filter((a) => a !== undefined);
    expect(new Set(aliases).size).toBe(aliases.length);
    expect(aliases.length).toBe(5);
    for (const m of broker.published) expect([m.qos, m.retain]).toEqual([0, false]);
  });

  it('reports by exception: unchanged values and changes within the deadband are not published; data carries aliases, per-metric timestamps and seq +1', async () => {
    const { node, press, decoded, decoder } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1, setpoint: 5, big: 0n }, 1000);
    press.emit({ temperature: 20.4, count: 1, setpoint: 5, big: 0n }, 2000);
    expect(kinds(decoded())).toEqual(['NBIRTH#0', 'DBIRTH:press-1#1', 'NDATA#2']);
    press.emit({ temperature: 20.6, count: 2, setpoint: 5, big: 0n }, 3000);
    const last = decoded().at(-1);
    expect(kinds([last as never])).toEqual(['DDATA:press-1#3']);
    expect(
      last?.payload.metrics.map((m) => [decoder.nameOf(m.alias), m.value, m.timestamp, m.name, m.datatype]),
    ).toEqual([
      ['temperature', 20.6, 3000, undefined, undefined],
      ['count', 2, 3000, undefined, undefined],
    ]);
  });

  it('wraps seq from 255 to 0', async () => {
    const { node, press, decoded } = setup();
    await node.start();
    for (let i = 0; i < 300; i++) press.emit({ count: i });
    const seqs = decoded().map((m) => m.payload.seq);
    for (let i = 1; i < seqs.length; i++) expect(seqs[i]).toBe(((seqs[i - 1] as number) + 1) & 0xff);
    expect(seqs).toContain(255);
  });

  it('publishes a bad reading as null with quality BAD, and the recovery with quality GOOD', async () => {
    const { node, press, decoded } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1 });
    press.emit({ temperature: { value: 0, quality: 'bad' } });
    press.emit({ temperature: { value: 0, quality: 'bad' } });
    press.emit({ temperature: 21 });
    const data = decoded().filter((m) => m.type === 'DDATA');
    expect(data.map((m) => m.payload.metrics.map((x) => [x.value, x.quality]))).toEqual([[[null, 0]], [[21, 192]]]);
  });

  it('publishes an uncertain reading with its value and quality UNCERTAIN (64), and its return to good with GOOD', async () => {
    const { node, press, decoded } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1 });
    press.emit({ temperature: { value: 19.5, quality: 'uncertain' } });
    press.emit({ temperature: { value: 19.5, quality: 'uncertain' } });
    press.emit({ temperature: 19.5 });
    press.emit({ temperature: { value: 0, quality: 'bad' } });
    const data = decoded().filter((m) => m.type === 'DDATA');
    expect(data.map((m) => m.payload.metrics.map((x) => [x.value, x.quality]))).toEqual([
      [[19.5, 64]],
      [[19.5, 192]],
      [[null, 0]],
    ]);
  });

  it('publishes DDEATH when a device is lost, restarts it with backoff and sends DBIRTH again before its data', async () => {
    const { node, press, decoded } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1 });
    press.lose();
    expect(kinds(decoded()).slice(-2)).toEqual(['DDEATH:press-1#3', 'NDATA#4']);
    await waitFor(() => press.running, 2000);
    expect(press.stops).toBeGreaterThanOrEqual(1);
    press.emit({ temperature: 25, count: 1 });
    press.emit({ temperature: 30, count: 1 });
    expect(kinds(decoded()).slice(-3)).toEqual(['DBIRTH:press-1#5', 'NDATA#6', 'DDATA:press-1#7']);
  });

  it('births a device that was unreachable at start-up when it first answers', async () => {
    const press = new FakeConnector('press-1', [{ name: 'count', datatype: 'UInt32' }]);
    press.reachable = false;
    const { node, decoded, logs } = setup({ connectors: [press] });
    await node.start();
    await waitFor(() => press.starts >= 2, 2000);
    expect(kinds(decoded())).toEqual(['NBIRTH#0']);
    expect(logs.filter((l) => String(l.msg).startsWith('device unreachable; retrying ('))).toHaveLength(1);
    press.reachable = true;
    await waitFor(() => press.running, 2000);
    press.emit({ count: 7 });
    expect(kinds(decoded())).toEqual(['NBIRTH#0', 'DBIRTH:press-1#1', 'NDATA#2']);
  });

  it('answers NCMD Rebirth at once with NBIRTH (same bdSeq, seq 0) and every DBIRTH, and debounces floods', async () => {
    const { node, press, broker, decoded } = setup({ config: { rebirthDebounceMs: 60_000 } });
    await node.start();
    press.emit({ temperature: 20, count: 1 });
    press.emit({ count: 2 });
    const rebirth = command([{ name: 'Node Control/Rebirth', datatype: 'Boolean', value: true }]);
    broker.inject('spBv1.0/plant1/NCMD/line4-gw', rebirth);
    broker.inject('spBv1.0/plant1/NCMD/line4-gw', rebirth);
    const msgs = decoded();
    expect(kinds(msgs).slice(-3)).toEqual(['DDATA:press-1#3', 'NBIRTH#0', 'DBIRTH:press-1#1']);
    const bdSeqs = msgs
      .filter((m) => m.type === 'NBIRTH')
      .map((m) => m.payload.metrics.find((x) => x.name === 'bdSeq')?.value);
    expect(bdSeqs).toEqual([0n, 0n]);
    expect(msgs.at(-1)?.payload.metrics.find((m) => m.name === 'count')?.value).toBe(2);
    expect(node.stats.rebirths).toBe(1);
  });
});

describe('Sparkplug edge node: DCMD', () => {
  it('writes a writable metric through its connector, by name or alias', async () => {
    const { node, press, broker, decoded } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1, setpoint: 1, big: 0n });
    const alias = decoded()[1].payload.metrics.find((m) => m.name === 'big')?.alias;
    broker.inject(
      'spBv1.0/plant1/DCMD/line4-gw/press-1',
      command([{ name: 'setpoint', datatype: 'Float', value: 12.5 }]),
    );
    broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', command([{ alias, valueType: 'Int64', value: -5n }]));
    await waitFor(() => node.stats.writesOk === 2, 1000);
    expect(press.writes).toEqual([
      { tag: 'setpoint', value: 12.5 },
      { tag: 'big', value: -5n },
    ]);
  });

  it('writes to one tag one after the other, in the order they came, and refuses beyond 100 waiting; another tag does not wait', async () => {
    const { node, press, broker, logs } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1 });
    let open = (): void => undefined;
    press.writeGate = new Promise((resolve) => (open = resolve));
    const dcmd = (metric: Parameters<typeof command>[0][number]) =>
      broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', command([metric]), { origin: 'scada-1' });
    // One write under way (the device is slow), 100 behind it, then two more: refused.
    for (let i = 0; i < MAX_QUEUED_WRITES_PER_TAG + 3; i++) dcmd({ name: 'setpoint', datatype: 'Float', value: i });
    dcmd({ name: 'big', datatype: 'Int64', value: 7n });
    await waitFor(() => press.writes.length === 2, 1000);
    expect(press.writes).toEqual([
      { tag: 'setpoint', value: 0 },
      { tag: 'big', value: 7n },
    ]);
    const why = `${MAX_QUEUED_WRITES_PER_TAG} writes to this tag are already waiting`;
    expect(
      logs.filter((l) => l.msg === 'command refused').map((l) => [l.fields.metric, l.fields.value, l.fields.why]),
    ).toEqual([
      ['setpoint', '101', why],
      ['setpoint', '102', why],
    ]);
    open();
    await waitFor(() => node.stats.writesOk === MAX_QUEUED_WRITES_PER_TAG + 2, 1000);
    const setpoints = press.writes.filter((w) => w.tag === 'setpoint').map((w) => w.value);
    expect(setpoints).toEqual(Array.from({ length: MAX_QUEUED_WRITES_PER_TAG + 1 }, (_, i) => i));
  });

  it('refuses and logs (who, what, why) writes to unknown or read-only metrics, wrong types and unknown devices, and keeps the session', async () => {
    const { node, press, broker, logs, decoded } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1 });
    const dcmd = (metrics: Parameters<typeof command>[0], device = 'press-1') =>
      broker.inject(`spBv1.0/plant1/DCMD/line4-gw/${device}`, command(metrics), { origin: 'scada-1' });
    dcmd([{ name: 'nope', datatype: 'Float', value: 1 }]);
    dcmd([{ name: 'count', datatype: 'UInt32', value: 3 }]);
    dcmd([{ name: 'setpoint', datatype: 'String', value: 'hot' }]);
    dcmd([{ name: 'setpoint', valueType: 'String', value: 'hot' }]);
    dcmd([{ name: 'setpoint', datatype: 'Float', value: 1 }], 'press-9');
    broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', Buffer.from('not protobuf at all'), { origin: 'scada-1' });
    expect(press.writes).toEqual([]);
    const refused = logs
      .filter((l) => l.msg === 'command refused')
      .map((l) => [l.fields.who, l.fields.metric, l.fields.why]);
    expect(refused.slice(0, 5)).toEqual([
      ['scada-1', 'nope', 'unknown metric'],
      ['scada-1', 'count', 'read-only metric'],
      ['scada-1', 'setpoint', 'wrong type: the metric is Float, the command says String'],
      ['scada-1', 'setpoint', 'wrong type: Float expected'],
      ['scada-1', undefined, 'unknown device'],
    ]);
    expect(refused).toHaveLength(6);
    press.emit({ count: 2 });
    expect(kinds(decoded()).at(-1)).toMatch(/^DDATA:press-1/);
  });

  it("on a Template instance's device, writes the instance's members (by its alias) and refuses its tags as plain metrics, another template, a read-only or out-of-range member [tck-id-payloads-template-instance-members]", async () => {
    const gauge = new FakeConnector('press-1', [
      { name: 'setpoint', datatype: 'Int16', writable: true },
      { name: 'count', datatype: 'UInt32' },
    ]);
    const { node, broker, logs, decoded } = setup({
      connectors: [gauge],
      profiles: new Map([['press-1', 'press']]),
      config: { templates: true },
    });
    await node.start();
    gauge.emit({ setpoint: 5, count: 1 });
    const alias = decoded()[1].payload.metrics[0].alias;
    const instance = (ref: string, members: { name: string; datatype: 'Int16' | 'UInt32'; value: number }[]) => ({
      name: 'press',
      datatype: 'Template' as const,
      template: { isDefinition: false as const, ref, members },
    });
    const dcmd = (metrics: Parameters<typeof command>[0]) =>
      broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', command(metrics), { origin: 'scada-1' });
    dcmd([{ name: 'setpoint', datatype: 'Int16', value: 7 }]);
    dcmd([instance('oven', [{ name: 'setpoint', datatype: 'Int16', value: 7 }])]);
    dcmd([
      instance('press', [
        { name: 'count', datatype: 'UInt32', value: 2 },
        { name: 'setpoint', datatype: 'Int16', value: 70_000 },
      ]),
    ]);
    dcmd([
      {
        alias,
        valueType: 'Template',
        template: { isDefinition: false, ref: 'press', members: [{ name: 'setpoint', datatype: 'Int16', value: -9 }] },
      },
    ]);
    await waitFor(() => node.stats.writesOk === 1, 1000);
    expect(gauge.writes).toEqual([{ tag: 'setpoint', value: -9 }]);
    expect(logs.filter((l) => l.msg === 'command refused').map((l) => [l.fields.metric, l.fields.why])).toEqual([
      ['setpoint', 'unknown metric'],
      ['press', 'not an instance of press'],
      ['press/count', 'read-only metric'],
      ['press/setpoint', '70000 is outside Int16 (-32768..32767)'],
    ]);
    // The read-back goes out as the instance with that member.
    const ddata = decoded().at(-1)!;
    expect(ddata.payload.metrics.map((m) => [m.alias, m.template?.members.map((x) => [x.name, x.value])])).toEqual([
      [alias, [['setpoint', -9]]],
    ]);
  });

  it("refuses a value outside the metric's datatype, and one the connector finds does not fit the device, with a command refused line and no write", async () => {
    const gauge = new FakeConnector('press-1', [
      { name: 'setpoint', datatype: 'Int16', writable: true },
      { name: 'speed', datatype: 'Double', writable: true },
    ]);
    const { node, broker, logs } = setup({ connectors: [gauge] });
    await node.start();
    gauge.emit({ setpoint: 5, speed: 1 });
    const dcmd = (metrics: Parameters<typeof command>[0]) =>
      broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', command(metrics), { origin: 'scada-1' });
    // 70000 as an Int16 reached a PLC as 4464 once; now it is refused before the connector sees it.
    dcmd([{ name: 'setpoint', datatype: 'Int16', value: 70_000 }]);
    dcmd([{ name: 'setpoint', datatype: 'Int16', value: -32_769 }]);
    expect(gauge.writes).toEqual([]);
    gauge.writeError = new ValueRefusedError(
      'press-1',
      'speed',
      '21.55 is no exact int16 register value with scale 0.1 and offset 0',
    );
    dcmd([{ name: 'speed', datatype: 'Double', value: 21.55 }]);
    await waitFor(() => logs.filter((l) => l.msg === 'command refused').length === 3, 1000);
    const refused = logs
      .filter((l) => l.msg === 'command refused')
      .map((l) => [l.fields.metric, l.fields.value, l.fields.why]);
    expect(refused).toEqual([
      ['setpoint', '70000', '70000 is outside Int16 (-32768..32767)'],
      ['setpoint', '-32769', '-32769 is outside Int16 (-32768..32767)'],
      ['speed', '21.55', '21.55 is no exact int16 register value with scale 0.1 and offset 0'],
    ]);
    expect(node.stats).toMatchObject({ commandsRefused: 3, writesFailed: 0, writesOk: 0 });
  });

  it('confirms a write with the value read back from the device, past the deadband, and logs one that reads back differently', async () => {
    const oven = new FakeConnector('press-1', [{ name: 'setpoint', datatype: 'Float', writable: true, deadband: 5 }]);
    const { node, broker, logs, decoded } = setup({ connectors: [oven] });
    await node.start();
    oven.emit({ setpoint: 20 });
    const dcmd = (value: number) =>
      broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', command([{ name: 'setpoint', datatype: 'Float', value }]), {
        origin: 'scada-1',
      });
    const ddata = () =>
      decoded()
        .filter((m) => m.type === 'DDATA')
        .map((m) => m.payload.metrics[0].value);
    // Inside the deadband (5), but a host waits for the confirmation of its own write.
    dcmd(21);
    await waitFor(() => ddata().length === 1, 1000);
    expect(ddata()).toEqual([21]);
    // The PLC clamps to 100: the DDATA says 100 (not the commanded 250), and the audit log says so.
    oven.holds = (_tag, value) => Math.min(Number(value), 100);
    dcmd(250);
    await waitFor(() => ddata().length === 2, 1000);
    expect(ddata()).toEqual([21, 100]);
    const audit = logs
      .filter((l) => l.msg.startsWith('DCMD write'))
      .map((l) => [l.level, l.msg, l.fields.value, l.fields.readBack]);
    expect(audit).toEqual([
      ['info', 'DCMD write done', '21', '21'],
      ['warn', 'DCMD write accepted, but the device reads back another value', '250', '100'],
    ]);
    // The same value again changes nothing hosts were told: no DDATA.
    dcmd(100);
    await waitFor(() => node.stats.writesOk === 3, 1000);
    expect(ddata()).toEqual([21, 100]);
  });

  it('logs a write the device refused', async () => {
    const { node, press, broker, logs } = setup();
    await node.start();
    press.emit({ temperature: 20 });
    press.writeError = new Error('Modbus exception 2');
    broker.inject(
      'spBv1.0/plant1/DCMD/line4-gw/press-1',
      command([{ name: 'setpoint', datatype: 'Float', value: 3 }]),
      { origin: 'scada-1' },
    );
    await waitFor(() => logs.some((l) => l.msg === 'DCMD write failed'), 1000);
    expect(node.stats.writesFailed).toBe(1);
  });
});

describe('Sparkplug edge node: commands only to a born node, never retained', () => {
  const setpoint = command([{ name: 'setpoint', datatype: 'Float', value: 12.5 }]);
  const refusals = (logs: LogLine[]) =>
    logs.filter((l) => l.msg === 'command refused').map((l) => [l.fields.who, l.fields.topic, l.fields.why]);

  it('refuses a retained NCMD or DCMD, live or delivered at subscribe, with an audit line and no write', async () => {
    const { node, press, broker, logs } = setup();
    // Retained before the node starts (a restart): delivered at subscribe, flagged retained.
    broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', setpoint, { origin: 'old-host', retain: true });
    await node.start();
    press.emit({ temperature: 20 });
    broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', setpoint, { origin: 'scada-1', retain: true });
    broker.inject(
      'spBv1.0/plant1/NCMD/line4-gw',
      command([{ name: 'Node Control/Rebirth', datatype: 'Boolean', value: true }]),
      { origin: 'scada-1', retain: true },
    );
    broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', setpoint, { origin: 'scada-1' });
    await waitFor(() => node.stats.writesOk === 1, 1000);
    const why = 'retained: a command is never executed from a retained message';
    expect(refusals(logs)).toEqual([
      ['old-host', 'spBv1.0/plant1/DCMD/line4-gw/press-1', why],
      ['scada-1', 'spBv1.0/plant1/DCMD/line4-gw/press-1', why],
      ['scada-1', 'spBv1.0/plant1/NCMD/line4-gw', why],
    ]);
    expect(press.writes).toEqual([{ tag: 'setpoint', value: 12.5 }]);
    expect(node.stats.rebirths).toBe(0);
  });

  it('takes a command from the uplink only while the node is born on its current connection [tck-id-principles-persistence-clean-session-50]', async () => {
    const { node, press, broker, logs } = setup({ config: { uplink: 'central' } });
    const control = {
      online: false,
      pause: () => undefined,
      resume: () => undefined,
      reconnect: () => undefined,
      origin: 'bridge:central',
    };
    node.attachUplink(control);
    await node.start();
    press.emit({ temperature: 20 });
    const fromUplink = () =>
      broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', setpoint, { origin: 'bridge:central' });
    fromUplink(); // before any connection
    control.online = true;
    node.hooks.will();
    node.hooks.connectSending();
    node.hooks.prologue(); // the births of this connection
    fromUplink();
    await waitFor(() => node.stats.writesOk === 1, 1000);
    control.online = false; // the link is cut: that session is over
    fromUplink();
    // Local clients (an ACL grant let them publish) answer to the local session, born here.
    broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', setpoint, { origin: 'local-hmi' });
    await waitFor(() => node.stats.writesOk === 2, 1000);
    const notBorn = 'the node is not born on the current uplink session';
    expect(refusals(logs).map(([who, , why]) => [who, why])).toEqual([
      ['bridge:central', notBorn],
      ['bridge:central', notBorn],
    ]);
    expect(press.writes).toHaveLength(2);
  });

  it('waiting for the primary host, the node is not born and refuses commands; a new connection refuses them until its births', async () => {
    const { node, press, broker, logs } = setup({ config: { uplink: 'central', primaryHostId: 'scada' } });
    const control = {
      online: true,
      pause: () => undefined,
      resume: () => undefined,
      reconnect: () => undefined,
      publishNow: () => true,
      origin: 'bridge:central',
    };
    node.attachUplink(control);
    await node.start();
    press.emit({ temperature: 20 });
    node.hooks.will();
    node.hooks.prologue();
    const fromUplink = () =>
      broker.inject('spBv1.0/plant1/DCMD/line4-gw/press-1', setpoint, { origin: 'bridge:central' });
    fromUplink();
    broker.inject('spBv1.0/STATE/scada', Buffer.from(JSON.stringify({ online: true, timestamp: 1 })), { retain: true });
    fromUplink();
    await waitFor(() => node.stats.writesOk === 1, 1000);
    node.hooks.will();
    node.hooks.prologue(); // reconnected: the host's STATE on this connection has not come yet
    fromUplink();
    expect(refusals(logs).map(([, , why]) => why)).toEqual([
      'the node is not born on the current uplink session',
      'the node is not born on the current uplink session',
    ]);
    expect(press.writes).toHaveLength(1);
  });

  it('without an uplink, a command to a node that is not born (waiting for its primary host) is refused', async () => {
    const { node, broker, logs } = setup({ config: { primaryHostId: 'scada' } });
    await node.start();
    broker.inject(
      'spBv1.0/plant1/NCMD/line4-gw',
      command([{ name: 'Node Control/Rebirth', datatype: 'Boolean', value: true }]),
      { origin: 'scada-1' },
    );
    expect(refusals(logs)).toEqual([['scada-1', 'spBv1.0/plant1/NCMD/line4-gw', 'the node is not born']]);
    expect(node.stats.rebirths).toBe(0);
  });
});

describe('Sparkplug edge node: bdSeq and aliases survive restarts', () => {
  it('takes a new bdSeq for every upstream CONNECT sent (not per attempt) and for every local session, persisted on disk [tck-id-payloads-nbirth-bdseq-increment]', async () => {
    const dir = tempDir('edgeferry-sp-');
    dirs.push(dir);
    const first = setup({ dir });
    const willBdSeq = (m: Message) => decodePayload(m.payload).metrics[0].value;
    expect(willBdSeq(first.node.hooks.will())).toBe(0n);
    // That attempt failed before its CONNECT left (DNS, TCP, TLS): the next one carries the same bdSeq.
    expect(willBdSeq(first.node.hooks.will())).toBe(0n);
    first.node.hooks.connectSending();
    expect(willBdSeq(first.node.hooks.will())).toBe(1n);
    first.node.hooks.connectSending();
    await first.node.start();
    const aliases1 = first.decoded()[0].payload.metrics.map((m) => m.alias);
    await first.node.stop();
    const second = setup({ dir });
    expect(willBdSeq(second.node.hooks.will())).toBe(2n);
    await second.node.start();
    const nbirth = second.decoded()[0].payload;
    expect(nbirth.metrics.find((m) => m.name === 'bdSeq')?.value).toBe(1n);
    expect(nbirth.metrics.map((m) => m.alias)).toEqual(aliases1);
  });

  it('publishes NDEATH (QoS 1, bdSeq of the NBIRTH, no seq) on a graceful stop', async () => {
    const { node, broker, decoded } = setup();
    await node.start();
    await node.stop();
    const death = broker.published.at(-1) as Message;
    expect([death.topic, death.qos, death.retain]).toEqual(['spBv1.0/plant1/NDEATH/line4-gw', 1, false]);
    const payload = decoded().at(-1)?.payload;
    expect(payload?.seq).toBeUndefined();
    expect(payload?.metrics).toMatchObject([{ name: 'bdSeq', datatype: 'Int64', value: 0n }]);
  });
});

describe('Sparkplug edge node: the uplink seam', () => {
  const entry = (msg: Message, appendedAtMs: number) => ({ msg, appendedAtMs });

  it('Will = NDEATH with the next bdSeq; prologue = NBIRTH (seq 0, same bdSeq) + DBIRTHs; backlog becomes historical data renumbered after them, stored NDATA is superseded by the NBIRTH', async () => {
    const { node, press, broker } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1 }, 1000);
    press.emit({ count: 2 }, 2000);
    const journaled = broker.published.map((m) => entry(m, broker.clock.nowMs() - 10_000));
    const will = node.hooks.will();
    expect([will.topic, will.qos, will.retain]).toEqual(['spBv1.0/plant1/NDEATH/line4-gw', 1, false]);
    const prologue = node.hooks.prologue();
    const decoder = new Decoder();
    expect(prologue.map((m) => `${m.topic}#${decodePayload(m.payload).seq}`)).toEqual([
      'spBv1.0/plant1/NBIRTH/line4-gw#0',
      'spBv1.0/plant1/DBIRTH/line4-gw/press-1#1',
    ]);
    prologue.forEach((m) => decoder.decode(m));
    expect(decodePayload(prologue[0].payload).metrics.find((m) => m.name === 'bdSeq')?.value).toBe(
      decodePayload(will.payload).metrics[0].value,
    );
    const sent = journaled.map((e) => node.hooks.rewrite(e, true)).filter((m): m is Message => m !== null);
    // The old births are superseded, and so is the node's NDATA (the NBIRTH has its metrics' current values); data
    // stored before the session goes up historical, renumbered after the births.
    const out = sent.map((m) => decoder.decode(m));
    expect(kinds(out)).toEqual(['DDATA:press-1#2']);
    expect(out[0].payload.metrics.map((m) => [decoder.nameOf(m.alias), m.value, m.timestamp, m.isHistorical])).toEqual([
      ['count', 2, 2000, true],
    ]);
    // Live data continues the upstream seq, not historical.
    press.emit({ count: 3 }, 3000);
    const live = node.hooks.rewrite(
      entry(broker.published.at(-1) as Message, broker.clock.nowMs() + 1),
      false,
    ) as Message;
    const d = decoder.decode(live);
    expect([d.payload.seq, d.payload.metrics[0].isHistorical]).toEqual([3, false]);
    expect(node.hooks.rewrite(entry({ ...live, topic: 'plant/other' }, 0), true)?.topic).toBe('plant/other');
  });

  it('passes a live rebirth (seq 0, upstream bdSeq), a device death and a later DBIRTH; drops data of devices not born upstream', async () => {
    const { node, press, broker } = setup();
    await node.start();
    press.emit({ temperature: 20 });
    node.hooks.will();
    const prologue = node.hooks.prologue();
    const upBdSeq = decodePayload(prologue[0].payload).metrics.find((m) => m.name === 'bdSeq')?.value;
    const mark = broker.published.length;
    const later = () =>
      broker.published.slice(mark).map((m) => node.hooks.rewrite(entry(m, broker.clock.nowMs() + 1), false));
    press.lose();
    await waitFor(() => press.running, 2000);
    press.emit({ temperature: 30 });
    press.emit({ temperature: 40 });
    broker.inject(
      'spBv1.0/plant1/NCMD/line4-gw',
      command([{ name: 'Node Control/Rebirth', datatype: 'Boolean', value: true }]),
    );
    const results = later();
    const shown = results.map((m) =>
      m === null ? 'dropped' : `${m.topic.split('/')[2]}#${decodePayload(m.payload).seq ?? '-'}`,
    );
    // The NCMD (a host's command journaled on its way) passes untouched.
    expect(shown).toEqual(['DDEATH#2', 'NDATA#3', 'DBIRTH#4', 'NDATA#5', 'DDATA#6', 'NCMD#-', 'NBIRTH#0', 'DBIRTH#1']);
    const nbirth = results.find((m) => m?.topic.includes('NBIRTH')) as Message;
    expect(decodePayload(nbirth.payload).metrics.find((m) => m.name === 'bdSeq')?.value).toBe(upBdSeq);
    // A second pass (a re-send after reconnect would be a new session, but within this one) changes nothing twice.
    expect(node.hooks.rewrite(entry(nbirth, broker.clock.nowMs()), false)).toBeNull();
  });

  it('waits for the primary host before upstream births, using publishNow when the bridge offers it; on an offline STATE sends NDEATH and ends the MQTT session [tck-id-operational-behavior-edge-node-termination-host-offline]', async () => {
    const { node, broker } = setup({ config: { uplink: 'central', primaryHostId: 'scada' } });
    const sentNow: Message[][] = [];
    const events: string[] = [];
    const control: UplinkControl = {
      online: true,
      pause: (reason) => events.push(`pause:${reason}`),
      resume: () => events.push('resume'),
      publishNow: (msgs) => {
        sentNow.push([...msgs]);
        return true;
      },
      reconnect: (reason) => events.push(`reconnect:${reason}`),
      origin: 'bridge:central',
    };
    node.attachUplink(control);
    await node.start();
    // Local session is not gated when an uplink carries the Sparkplug session.
    expect(broker.published[0].topic).toBe('spBv1.0/plant1/NBIRTH/line4-gw');
    node.hooks.will();
    node.hooks.connectSending();
    expect(node.hooks.prologue()).toEqual([]);
    expect(events).toEqual(['pause:waiting for the primary host']);
    const state = (online: boolean, timestamp: number) =>
      broker.inject('spBv1.0/STATE/scada', Buffer.from(JSON.stringify({ online, timestamp })), { retain: true });
    state(true, 1000);
    expect(sentNow[0].map((m) => m.topic)).toEqual(['spBv1.0/plant1/NBIRTH/line4-gw']);
    expect(events.at(-1)).toBe('resume');
    state(false, 900); // older than the online: ignored
    expect(node.stats.uplinkBorn).toBe(true);
    state(false, 1000); // the host's Will reuses its birth timestamp
    expect(sentNow[1].map((m) => [m.topic, m.qos])).toEqual([['spBv1.0/plant1/NDEATH/line4-gw', 1]]);
    expect(events.slice(-2)).toEqual([
      'pause:primary host offline',
      'reconnect:primary host offline: Sparkplug session ended',
    ]);
    // Back before the uplink reconnected: no births on the connection that is closing.
    state(true, 2000);
    expect(sentNow).toHaveLength(2);
    // The next connection: a new bdSeq in its Will and its births, once a STATE on this connection (the retained
    // one, delivered again after its SUBSCRIBE) says online [tck-id-message-flow-edge-node-birth-publish-phid-wait].
    const bdSeqOf = (m: Message) => decodePayload(m.payload).metrics.find((x) => x.name === 'bdSeq')?.value;
    const will = node.hooks.will();
    node.hooks.connectSending();
    expect(node.hooks.prologue()).toEqual([]);
    expect(sentNow).toHaveLength(2);
    state(true, 2000);
    const births = sentNow[2];
    expect(births.map((m) => m.topic)).toEqual(['spBv1.0/plant1/NBIRTH/line4-gw']);
    expect(bdSeqOf(births[0])).toBe(bdSeqOf(will));
    expect(bdSeqOf(births[0])).toBe((bdSeqOf(sentNow[1][0]) as bigint) + 1n);
  });

  it('on a graceful stop sends the upstream NDEATH at once when the bridge can, else lets the journaled one through the rewrite', async () => {
    for (const direct of [true, false]) {
      const { node, broker } = setup();
      const sentNow: Message[] = [];
      node.attachUplink({
        online: true,
        pause: () => undefined,
        resume: () => undefined,
        publishNow: direct ? (msgs) => (sentNow.push(...msgs), true) : undefined,
        reconnect: () => undefined,
        origin: 'bridge:central',
      });
      await node.start();
      node.hooks.will();
      const upBdSeq = decodePayload(node.hooks.prologue()[0].payload).metrics.find((m) => m.name === 'bdSeq')?.value;
      const stopped = node.stop();
      await waitFor(() => broker.published.some((m) => m.topic.includes('NDEATH')), 1000);
      const local = broker.published.find((m) => m.topic.includes('NDEATH')) as Message;
      const rewritten = node.hooks.rewrite(entry(local, broker.clock.nowMs() + 1), false);
      await stopped;
      const upstream = direct ? sentNow[0] : rewritten;
      expect([upstream?.topic, upstream?.qos]).toEqual(['spBv1.0/plant1/NDEATH/line4-gw', 1]);
      expect(decodePayload((upstream as Message).payload).metrics[0].value).toBe(upBdSeq);
      // Sent once: with publishNow, the journaled copy is dropped.
      if (direct) expect(rewritten).toBeNull();
    }
  });

  it('without an uplink, gates the local session on the primary host STATE', async () => {
    const { node, broker, decoded } = setup({ config: { primaryHostId: 'scada' } });
    await node.start();
    expect(decoded()).toEqual([]);
    const state = (online: boolean, timestamp: number) =>
      broker.inject('spBv1.0/STATE/scada', Buffer.from(JSON.stringify({ online, timestamp })), { retain: true });
    state(true, 1000);
    state(false, 1000);
    await waitFor(() => decoded().length === 2, 1000);
    state(true, 999); // stale online: ignored
    state(true, 5000);
    await waitFor(() => decoded().length === 3, 1000);
    expect(kinds(decoded())).toEqual(['NBIRTH#0', 'NDEATH#-', 'NBIRTH#0']);
    const bdSeqs = decoded().map((m) => m.payload.metrics.find((x) => x.name === 'bdSeq')?.value);
    expect(bdSeqs).toEqual([0n, 0n, 1n]);
    // Not JSON: ignored and logged, the session goes on.
    broker.inject('spBv1.0/STATE/scada', encodePayload({ timestamp: 1, metrics: [] }));
    expect(node.stats.localBorn).toBe(true);
  });

  it('is born once when the host STATE is already retained at start', async () => {
    const { node, broker, decoded } = setup({ config: { primaryHostId: 'scada' } });
    broker.inject('spBv1.0/STATE/scada', Buffer.from(JSON.stringify({ online: true, timestamp: 5 })), { retain: true });
    await node.start();
    expect(kinds(decoded())).toEqual(['NBIRTH#0']);
  });
});

describe('Sparkplug edge node: devices added, removed and replaced while it runs (reload)', () => {
  const aliasesOf = (m: { payload: { metrics: readonly { name?: string; alias?: number }[] } }) =>
    Object.fromEntries(m.payload.metrics.filter((x) => x.alias !== undefined).map((x) => [x.name, x.alias]));

  it('births an added device with a DBIRTH when it first answers, inside the running session, with aliases unique across the node; the other device is untouched', async () => {
    const { node, press, decoded, decoder } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1 });
    const oven = new FakeConnector('oven-1', [
      { name: 'temperature', datatype: 'Float' },
      { name: 'door', datatype: 'Boolean', writable: true },
    ]);
    node.addDevice(oven);
    await waitFor(() => oven.running, 1000);
    expect(kinds(decoded())).toEqual(['NBIRTH#0', 'DBIRTH:press-1#1', 'NDATA#2']);
    oven.emit({ temperature: 180, door: false });
    press.emit({ count: 2 });
    const msgs = decoded();
    // No NBIRTH again: the session (bdSeq, seq) goes on; the device count follows its birth.
    expect(kinds(msgs)).toEqual([
      'NBIRTH#0',
      'DBIRTH:press-1#1',
      'NDATA#2',
      'DBIRTH:oven-1#3',
      'NDATA#4',
      'DDATA:press-1#5',
    ]);
    expect(msgs[4].payload.metrics[0].value).toBe(2);
    const dbirth = msgs[3].payload;
    expect(dbirth.metrics.map((m) => [m.name, m.datatype, m.value])).toEqual([
      ['temperature', 'Float', 180],
      ['door', 'Boolean', false],
    ]);
    const all = [msgs[0], msgs[1], msgs[3]]
      .flatMap((m) => m.payload.metrics.map((x) => x.alias))
      .filter((a) => a !== undefined);
    expect(new Set(all).size).toBe(all.length);
    expect(press.starts).toBe(1);
    expect(press.stops).toBe(0);
    // Its data and its commands work like the others'.
    oven.emit({ temperature: 185, door: false });
    const ddata = decoded().at(-1);
    expect([ddata?.deviceId, decoder.nameOf(ddata?.payload.metrics[0].alias), ddata?.payload.metrics[0].value]).toEqual(
      ['oven-1', 'temperature', 185],
    );
    await node.stop();
    expect(oven.stops).toBeGreaterThanOrEqual(1);
  });

  it('a removed device gets DDEATH (then the device count), its connector stops, its commands are refused, and the other device carries on in the same session; the count waits for the DBIRTHs of devices starting with the node [tck-id-payloads-dbirth-order]', async () => {
    const press = new FakeConnector('press-1', [{ name: 'count', datatype: 'UInt32' }]);
    const oven = new FakeConnector('oven-1', [{ name: 'door', datatype: 'Boolean', writable: true }]);
    const { node, broker, decoded, logs } = setup({ connectors: [press, oven] });
    await node.start();
    press.emit({ count: 1 });
    oven.emit({ door: false });
    expect(await node.removeDevice('oven-1')).toBe(true);
    expect(oven.running).toBe(false);
    expect(oven.stops).toBe(1);
    // Late samples of the removed connector publish nothing.
    oven.emit({ door: true });
    press.emit({ count: 2 });
    const msgs = decoded();
    expect(kinds(msgs)).toEqual([
      'NBIRTH#0',
      'DBIRTH:press-1#1',
      'DBIRTH:oven-1#2',
      'NDATA#3',
      'DDEATH:oven-1#4',
      'NDATA#5',
      'DDATA:press-1#6',
    ]);
    expect(msgs[3].payload.metrics[0].value).toBe(2);
    expect(msgs[5].payload.metrics[0].value).toBe(1);
    expect(msgs[4].payload.timestamp).toBeGreaterThan(msgs[2].payload.timestamp as number);
    broker.inject(
      'spBv1.0/plant1/DCMD/line4-gw/oven-1',
      command([{ name: 'door', datatype: 'Boolean', value: true }]),
      { origin: 'scada-1' },
    );
    expect(oven.writes).toEqual([]);
    expect(logs.filter((l) => l.msg === 'command refused').map((l) => l.fields.why)).toEqual(['unknown device']);
    expect(node.deviceList.map((d) => d.id)).toEqual(['press-1']);
    expect(await node.removeDevice('oven-1')).toBe(false);
  });

  it('a device that never answered is removed without a DDEATH, and its pending restart is cancelled', async () => {
    const press = new FakeConnector('press-1', [{ name: 'count', datatype: 'UInt32' }]);
    const dead = new FakeConnector('dead-1', [{ name: 'count', datatype: 'UInt32' }]);
    dead.reachable = false;
    const { node, decoded } = setup({ connectors: [press, dead] });
    await node.start();
    await waitFor(() => dead.starts >= 2, 2000);
    const device = node.deviceList.find((d) => d.id === 'dead-1');
    await node.removeDevice('dead-1');
    dead.reachable = true;
    // Stopped, not in backoff: the retry timer is cleared and a late one would find nothing to restart.
    expect(device?.stats.state).toBe('stopped');
    expect(dead.running).toBe(false);
    press.emit({ count: 1 });
    expect(kinds(decoded())).toEqual(['NBIRTH#0', 'DBIRTH:press-1#1', 'NDATA#2']);
  });

  it('a reconfigured device (removed, then added with a new tag list) gets DDEATH, then a DBIRTH with its new metrics: kept metrics keep their alias, new ones get fresh aliases', async () => {
    const { node, press, decoded } = setup();
    await node.start();
    press.emit({ temperature: 20, count: 1, setpoint: 5, big: 0n });
    const first = decoded()[1];
    await node.removeDevice('press-1');
    const replacement = new FakeConnector('press-1', [
      { name: 'count', datatype: 'UInt32' },
      { name: 'pressure', datatype: 'Double' },
    ]);
    node.addDevice(replacement);
    await waitFor(() => replacement.running, 1000);
    replacement.emit({ count: 3, pressure: 1.5 });
    const msgs = decoded();
    expect(kinds(msgs)).toEqual([
      'NBIRTH#0',
      'DBIRTH:press-1#1',
      'NDATA#2',
      'DDEATH:press-1#3',
      'NDATA#4',
      'DBIRTH:press-1#5',
      'NDATA#6',
    ]);
    const second = msgs[5];
    expect(second.payload.metrics.map((m) => [m.name, m.value])).toEqual([
      ['count', 3],
      ['pressure', 1.5],
    ]);
    const before = aliasesOf(first);
    const after = aliasesOf(second);
    expect(after.count).toBe(before.count);
    const used = [...Object.values(before), ...msgs[0].payload.metrics.map((m) => m.alias)].filter(
      (a) => a !== undefined,
    );
    expect(used).not.toContain(after.pressure);
    // The old connector was stopped before the new one started: one device connection at a time.
    expect(press.stops).toBe(1);
    expect(press.running).toBe(false);
    expect(() => node.addDevice(new FakeConnector('press-1', []))).toThrow(/already exists/);
  });

  it('keeps the aliases of an added device across a restart of the node (persisted with the others)', async () => {
    const dir = tempDir('edgeferry-sp-');
    dirs.push(dir);
    const one = setup({ dir });
    await one.node.start();
    one.press.emit({ temperature: 20 });
    const oven = new FakeConnector('oven-1', [{ name: 'door', datatype: 'Boolean' }]);
    one.node.addDevice(oven);
    await waitFor(() => oven.running, 1000);
    oven.emit({ door: true });
    const alias = one.decoded().find((m) => m.deviceId === 'oven-1')?.payload.metrics[0].alias;
    expect(alias).toBeDefined();
    await one.node.stop();
    const oven2 = new FakeConnector('oven-1', [{ name: 'door', datatype: 'Boolean' }]);
    const two = setup({
      dir,
      connectors: [new FakeConnector('press-1', [{ name: 'temperature', datatype: 'Double', deadband: 0.5 }]), oven2],
    });
    await two.node.start();
    oven2.emit({ door: false });
    expect(two.decoded().find((m) => m.type === 'DBIRTH' && m.deviceId === 'oven-1')?.payload.metrics[0].alias).toBe(
      alias,
    );
  });

  it("upstream: the added device's DBIRTH and the removed device's DDEATH pass the rewrite in the uplink session, and the next prologue lists only the current devices", async () => {
    const { node, press, broker } = setup();
    await node.start();
    press.emit({ temperature: 20 });
    node.hooks.will();
    node.hooks.prologue();
    const mark = broker.published.length;
    const oven = new FakeConnector('oven-1', [{ name: 'door', datatype: 'Boolean' }]);
    node.addDevice(oven);
    await waitFor(() => oven.running, 1000);
    oven.emit({ door: true });
    oven.emit({ door: false });
    await node.removeDevice('press-1');
    const shown = broker.published
      .slice(mark)
      .map((m) => node.hooks.rewrite({ msg: m, appendedAtMs: broker.clock.nowMs() + 1 }, false))
      .map((m) =>
        m === null
          ? 'dropped'
          : `${m.topic.split('/').slice(2).join(':').replace(':line4-gw', '')}#${decodePayload(m.payload).seq ?? '-'}`,
      );
    expect(shown).toEqual(['DBIRTH:oven-1#2', 'NDATA#3', 'DDATA:oven-1#4', 'DDEATH:press-1#5', 'NDATA#6']);
    node.hooks.will();
    expect(node.hooks.prologue().map((m) => m.topic)).toEqual([
      'spBv1.0/plant1/NBIRTH/line4-gw',
      'spBv1.0/plant1/DBIRTH/line4-gw/oven-1',
    ]);
  });
});
