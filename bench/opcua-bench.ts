/**
 * End to end: an OPC UA server (test/fixtures/opcua-server.mjs, its own process) with
 * 1,000 Double variables that all change every 100 ms, a real gateway process (`node dist/src/cli.js --config`)
 * with a `sparkplug:` section and one `opcua` connector monitoring all of them, and an MQTT subscriber (here, on
 * the gateway's local broker) that decodes every DDATA. Reports metrics/s delivered in DDATA, DDATA messages/s,
 * the latency from the server's source timestamp to the subscriber, and the CPU share (of one core) of the
 * gateway and of the server, read from /proc/<pid>/stat over the measuring window.
 *
 *   npm run bench:opcua-e2e [-- --seconds 30 --items 1000 --change-ms 100 --sampling-ms 0 --queue-size 2]
 *
 * Each fixture value is `tick + index / 10,000` (tick = the server's change counter), so the subscriber can
 * tell a skipped change (a gap in one item's ticks) and a value on the wrong metric (index ≠ alias's tag) from
 * a slow but complete delivery. Target: 10,000 value changes/s with the gateway under 50% of one core.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { decodePayload, encodePayload, type MetricDatatype } from '../src/sparkplug/payload.js';
import { GATEWAY_NODE_FLAGS, freePort, machineInfo, readCpuS, readRssKb } from './brokers.js';
import { PacketReader, PacketType, encodeConnect, encodePublish, encodeSubscribe } from './mqtt-wire.js';

const USAGE = `Usage: node dist/bench/opcua-bench.js [options]   (npm run bench:opcua-e2e -- [options])

OPC UA server (fixture process) → gateway process (opcua connector + Sparkplug edge node) → DDATA on its
local broker, counted and decoded by an MQTT subscriber in this process.

  --items N           monitored items, all changing together (default 1000)
  --change-ms MS      the server changes every item this often (default 100)
  --publishing-ms MS  subscription publishing interval (default 100)
  --sampling-ms MS    monitored item sampling interval (default 0: every change, node-opcua reports on write)
  --queue-size N      monitored item queue size (default 2: two changes within one publishing interval survive)
  --seconds S         measuring window (default 30)
  --warmup-s S        after every item has been seen in a DDATA, before measuring (default 5)
  --slice-s S         the window is also reported in slices of this length (default 5)
  --out FILE          JSON summary (default bench/results/opcua.json)
  --cpu-prof DIR      run the gateway under node --cpu-prof (a .cpuprofile in DIR when it stops)
  -h, --help
`;

const { values: args } = parseArgs({
  options: {
    items: { type: 'string', default: '1000' },
    'change-ms': { type: 'string', default: '100' },
    'publishing-ms': { type: 'string', default: '100' },
    'sampling-ms': { type: 'string', default: '0' },
    'queue-size': { type: 'string', default: '2' },
    seconds: { type: 'string', default: '30' },
    'warmup-s': { type: 'string', default: '5' },
    'slice-s': { type: 'string', default: '5' },
    out: { type: 'string' },
    'cpu-prof': { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});

const rootDir = fileURLToPath(new URL('../../', import.meta.url));
const serverScript = join(rootDir, 'test/fixtures/opcua-server.mjs');
const cliScript = join(rootDir, 'dist/src/cli.js');

const GROUP = 'bench';
const NODE = 'gw';
const DEVICE = 'opcua-bench';
/** The target in bench/README.md. */
const TARGET_CHANGES_PER_S = 10_000;
const TARGET_GATEWAY_CPU_PERCENT = 50;
/** setInterval in the server drifts by its callback's duration every tick: allow for that, not for losses. */
const THROUGHPUT_TOLERANCE = 0.98;

const tagName = (i: number): string => `B${String(i).padStart(4, '0')}`;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const round = (x: number, digits = 1): number => Number(x.toFixed(digits));

// -------------------------------------------------------------------------------------------------------------
// Child processes

interface Child {
  readonly proc: ChildProcess;
  readonly pid: number;
  /** The last lines it printed (stdout and stderr), for an error message. */
  tail(): string;
  stop(signalFirst: NodeJS.Signals, graceMs: number): Promise<void>;
}

function startChild(file: string, argv: string[], onLine?: (line: string) => void, nodeArgs: string[] = []): Child {
  const proc = spawn(process.execPath, [...nodeArgs, file, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] });
  if (proc.pid === undefined) throw new Error(`${file}: spawn failed`);
  const lines: string[] = [];
  const keep = (line: string): void => {
    lines.push(line);
    if (lines.length > 40) lines.shift();
  };
  // Both pipes are read to the end: a child blocked on a full pipe would skew the measurement.
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    keep(line);
    onLine?.(line);
  });
  createInterface({ input: proc.stderr! }).on('line', keep);
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  return {
    proc,
    pid: proc.pid,
    tail: () => lines.join('\n'),
    async stop(signalFirst, graceMs) {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill(signalFirst);
      const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function startServer(
  dir: string,
  items: number,
  changeMs: number,
): Promise<{ child: Child; endpoint: string; startS: number }> {
  const t0 = performance.now();
  let onListening: (endpoint: string) => void = () => undefined;
  const listening = new Promise<string>((r) => (onListening = r));
  const child = startChild(
    serverScript,
    ['--port', '0', '--pki', join(dir, 'server-pki'), '--bulk', String(items), '--bulk-interval-ms', String(changeMs)],
    (line) => {
      if (!line.startsWith('{')) return; // node-opcua's own chatter
      const event = JSON.parse(line) as { event?: string; endpoint?: string };
      if (event.event === 'listening') onListening(String(event.endpoint));
    },
  );
  const exited = new Promise<never>((_, reject) =>
    child.proc.once('exit', (code) =>
      reject(new Error(`OPC UA server exited (${code}) before listening:\n${child.tail()}`)),
    ),
  );
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`OPC UA server did not listen within 180 s:\n${child.tail()}`)), 180_000);
  });
  let endpoint: string;
  try {
    endpoint = await Promise.race([listening, exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
  return { child, endpoint, startS: (performance.now() - t0) / 1000 };
}

function gatewayConfig(o: {
  port: number;
  dataDir: string;
  endpoint: string;
  items: number;
  publishingMs: number;
  samplingMs: number;
  queueSize: number;
}): string {
  const lines = [
    '# Written by bench/opcua-bench.ts',
    'listeners:',
    `  - { type: tcp, host: 127.0.0.1, port: ${o.port} }`,
    `storage: { path: ${JSON.stringify(o.dataDir)} }`,
    'log: { level: warn, format: json }',
    `sparkplug: { groupId: ${GROUP}, edgeNodeId: ${NODE} }`,
    'connectors:',
    `  - id: ${DEVICE}`,
    '    type: opcua',
    `    endpoint: ${JSON.stringify(o.endpoint)}`,
    `    subscription: { publishingIntervalMs: ${o.publishingMs}, maxNotificationsPerPublish: 0 }`,
    '    tags:',
  ];
  for (let i = 0; i < o.items; i++) {
    const name = tagName(i);
    lines.push(
      `      - { name: ${name}, nodeId: "ns=1;s=Fixture.Bulk.${name}", datatype: Double, samplingIntervalMs: ${o.samplingMs}, queueSize: ${o.queueSize} }`,
    );
  }
  return `${lines.join('\n')}\n`;
}

// -------------------------------------------------------------------------------------------------------------
// The subscriber: MQTT 3.1.1 over a raw socket, decoding every Sparkplug message of the bench group

/** Latency histogram in 1 ms buckets; the last bucket holds everything slower. */
class Histogram {
  private readonly buckets = new Uint32Array(10_001);
  count = 0;
  max = 0;

  add(ms: number): void {
    const b = Math.min(this.buckets.length - 1, Math.max(0, Math.round(ms)));
    this.buckets[b]++;
    this.count++;
    if (ms > this.max) this.max = ms;
  }

  quantile(q: number): number {
    if (this.count === 0) return Number.NaN;
    const rank = Math.ceil(q * this.count);
    let seen = 0;
    for (let b = 0; b < this.buckets.length; b++) {
      seen += this.buckets[b];
      if (seen >= rank) return b;
    }
    return this.buckets.length - 1;
  }
}

interface Counters {
  ddata: number;
  ddataBytes: number;
  metrics: number;
  /** Changes an item's ticks jumped over (tick went from t to t + k, k > 1: k - 1 skipped). */
  skipped: number;
  /** A tick seen again or going back (a duplicate, or reordering). */
  repeated: number;
  /** A value whose index part does not match the metric's tag: the alias mapping is wrong. */
  wrong: number;
  /** Values that were not a good Double (null, bad quality). */
  bad: number;
  births: number;
  deaths: number;
  /** The highest server tick seen so far (how far the server has got, as delivered). */
  maxTick: number;
}

class Subscriber {
  readonly counters: Counters = {
    ddata: 0,
    ddataBytes: 0,
    metrics: 0,
    skipped: 0,
    repeated: 0,
    wrong: 0,
    bad: 0,
    births: 0,
    deaths: 0,
    maxTick: 0,
  };
  latency = new Histogram();
  /** alias → tag index, from the last DBIRTH. */
  private aliasIndex = new Map<number, number>();
  private aliasType = new Map<number, MetricDatatype>();
  /** Last tick per tag index (-1: none yet). */
  private lastTick: Int32Array;
  /** Items seen in a DDATA since the last DBIRTH. */
  private seen: Uint8Array;
  seenCount = 0;
  birthSeen = false;
  firstDataAtMs: number | undefined;
  private socket: Socket | undefined;
  private rebirthAtMs = 0;

  constructor(
    private readonly port: number,
    private readonly items: number,
  ) {
    this.lastTick = new Int32Array(items).fill(-1);
    this.seen = new Uint8Array(items);
  }

  /** Connects (retrying until the gateway's listener is up) and subscribes to `spBv1.0/<group>/#`. */
  async connect(deadlineMs: number, isAlive: () => boolean): Promise<void> {
    for (;;) {
      try {
        this.socket = await this.tryConnect();
        return;
      } catch (err) {
        if (!isAlive()) throw new Error('the gateway exited', { cause: err });
        if (performance.now() > deadlineMs)
          throw new Error('the gateway did not accept an MQTT connection in time', { cause: err });
        await sleep(100);
      }
    }
  }

  private tryConnect(): Promise<Socket> {
    return new Promise((resolvePromise, reject) => {
      const sock = connect({ host: '127.0.0.1', port: this.port });
      sock.setNoDelay(true);
      let subscribed = false;
      const fail = (err: Error): void => {
        sock.destroy();
        reject(err);
      };
      sock.once('error', fail);
      const reader = new PacketReader((type, _flags, buf, start, end) => {
        if (type === PacketType.connack) {
          if (buf[start + 1] !== 0) return fail(new Error(`CONNACK return code ${buf[start + 1]}`));
          sock.write(encodeSubscribe(1, `spBv1.0/${GROUP}/#`, 0));
        } else if (type === PacketType.suback && !subscribed) {
          subscribed = true;
          sock.off('error', fail);
          sock.on('error', (err) => process.stderr.write(`subscriber socket: ${err.message}\n`));
          resolvePromise(sock);
        } else if (type === PacketType.publish) {
          // QoS 0: topic length, topic, payload (no packet id).
          const topicLength = buf.readUInt16BE(start);
          const topic = buf.toString('utf8', start + 2, start + 2 + topicLength);
          this.onMessage(topic, buf.subarray(start + 2 + topicLength, end));
        }
      });
      sock.on('data', (chunk: Buffer) => reader.push(chunk));
      sock.once('connect', () => sock.write(encodeConnect(`opcua-bench-${process.pid}`, 0)));
    });
  }

  private onMessage(topic: string, payload: Buffer): void {
    const kind = topic.split('/')[2];
    if (kind === 'DBIRTH') this.onBirth(payload);
    else if (kind === 'DDATA') this.onData(payload);
    else if (kind === 'DDEATH' || kind === 'NDEATH') this.counters.deaths++;
  }

  private onBirth(payload: Buffer): void {
    const birth = decodePayload(payload);
    this.aliasIndex.clear();
    this.aliasType.clear();
    for (const m of birth.metrics) {
      const match = /^B(\d{4})$/.exec(m.name ?? '');
      if (match === null || m.alias === undefined) continue;
      this.aliasIndex.set(m.alias, Number(match[1]));
      if (m.datatype !== undefined) this.aliasType.set(m.alias, m.datatype);
    }
    this.seen.fill(0);
    this.seenCount = 0;
    this.birthSeen = true;
    this.counters.births++;
  }

  private onData(payload: Buffer): void {
    const nowMs = Date.now();
    this.firstDataAtMs ??= nowMs;
    this.counters.ddata++;
    this.counters.ddataBytes += payload.length;
    if (!this.birthSeen) {
      // We connected after the DBIRTH: without it the aliases mean nothing. Ask for a rebirth (NCMD).
      this.counters.metrics += decodePayload(payload).metrics.length;
      if (nowMs - this.rebirthAtMs > 3000) this.requestRebirth(nowMs);
      return;
    }
    const data = decodePayload(payload, (m) => (m.alias === undefined ? undefined : this.aliasType.get(m.alias)));
    const c = this.counters;
    c.metrics += data.metrics.length;
    for (const m of data.metrics) {
      const index = m.alias === undefined ? undefined : this.aliasIndex.get(m.alias);
      if (index === undefined) {
        c.wrong++;
        continue;
      }
      if (m.timestamp !== undefined) this.latency.add(nowMs - m.timestamp);
      if (typeof m.value !== 'number' || (m.quality !== undefined && m.quality !== 192)) {
        c.bad++;
        continue;
      }
      const tick = Math.floor(m.value);
      if (Math.round((m.value - tick) * 10_000) !== index) c.wrong++;
      const last = this.lastTick[index];
      if (last >= 0) {
        if (tick > last + 1) c.skipped += tick - last - 1;
        else if (tick <= last) c.repeated++;
      }
      this.lastTick[index] = tick;
      if (tick > c.maxTick) c.maxTick = tick;
      if (this.seen[index] === 0) {
        this.seen[index] = 1;
        this.seenCount++;
      }
    }
  }

  private requestRebirth(nowMs: number): void {
    this.rebirthAtMs = nowMs;
    const payload = encodePayload({
      timestamp: nowMs,
      metrics: [{ name: 'Node Control/Rebirth', datatype: 'Boolean', value: true }],
    });
    this.socket?.write(encodePublish(`spBv1.0/${GROUP}/NCMD/${NODE}`, payload, 0));
  }

  /** Clears the per-window statistics that are not plain counters. */
  resetWindow(): void {
    this.latency = new Histogram();
  }

  close(): void {
    this.socket?.destroy();
  }

  get allSeen(): boolean {
    return this.birthSeen && this.seenCount === this.items;
  }
}

// -------------------------------------------------------------------------------------------------------------
// The run

interface Snapshot {
  atMs: number;
  counters: Counters;
  gatewayCpuS: number;
  serverCpuS: number;
  benchCpuS: number;
}

function snapshot(sub: Subscriber, gatewayPid: number, serverPid: number): Snapshot {
  const cpu = process.cpuUsage();
  return {
    atMs: performance.now(),
    counters: { ...sub.counters },
    gatewayCpuS: readCpuS(gatewayPid),
    serverCpuS: readCpuS(serverPid),
    benchCpuS: (cpu.user + cpu.system) / 1e6,
  };
}

function rates(a: Snapshot, b: Snapshot, items: number) {
  const s = (b.atMs - a.atMs) / 1000;
  const d = (k: keyof Counters): number => b.counters[k] - a.counters[k];
  return {
    seconds: round(s, 2),
    metricsPerS: Math.round(d('metrics') / s),
    ddataPerS: round(d('ddata') / s),
    metricsPerDdata: round(d('metrics') / Math.max(1, d('ddata'))),
    ddataKBytesPerS: round(d('ddataBytes') / 1024 / s),
    serverChangesPerS: Math.round((d('maxTick') * items) / s),
    gatewayCpuPercent: round(((b.gatewayCpuS - a.gatewayCpuS) / s) * 100),
    serverCpuPercent: round(((b.serverCpuS - a.serverCpuS) / s) * 100),
    benchCpuPercent: round(((b.benchCpuS - a.benchCpuS) / s) * 100),
    skipped: d('skipped'),
    repeated: d('repeated'),
    wrong: d('wrong'),
    bad: d('bad'),
    births: d('births'),
    deaths: d('deaths'),
  };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length === 0
    ? Number.NaN
    : s.length % 2
      ? s[(s.length - 1) / 2]
      : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function run(): Promise<void> {
  const items = Number(args.items);
  const changeMs = Number(args['change-ms']);
  const publishingMs = Number(args['publishing-ms']);
  const samplingMs = Number(args['sampling-ms']);
  const queueSize = Number(args['queue-size']);
  const seconds = Number(args.seconds);
  const warmupS = Number(args['warmup-s']);
  const sliceS = Number(args['slice-s']);
  const out = resolve(args.out ?? join(rootDir, 'bench/results/opcua.json'));
  if (
    ![items, changeMs, publishingMs, samplingMs, queueSize, seconds, warmupS, sliceS].every(
      (x) => Number.isFinite(x) && x >= 0,
    ) ||
    items < 1 ||
    items > 10_000
  ) {
    throw new Error('options must be non-negative numbers, --items 1..10000');
  }
  const offeredPerS = (items * 1000) / changeMs;
  const load0 = loadavg()[0];
  const startedAt = new Date().toISOString();
  const log = (line: string): void => void process.stderr.write(`${line}\n`);

  const dir = mkdtempSync(join(tmpdir(), 'edgeferry-opcua-bench-'));
  const children: Child[] = [];
  let sub: Subscriber | undefined;
  const cleanup = async (): Promise<void> => {
    sub?.close();
    // The gateway first (SIGTERM: a graceful stop, then SIGKILL), so it does not spend its stop reconnecting.
    for (const child of [...children].reverse()) await child.stop('SIGTERM', 10_000);
    rmSync(dir, { recursive: true, force: true });
  };
  const onSignal = (): void => {
    void cleanup().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  try {
    log(
      `OPC UA server: starting with ${items} items changing every ${changeMs} ms (node-opcua loads its nodeset: several seconds)`,
    );
    const server = await startServer(dir, items, changeMs);
    children.push(server.child);
    log(`OPC UA server: ${server.endpoint} after ${server.startS.toFixed(1)} s`);

    const port = await freePort();
    const configFile = join(dir, 'edgeferry.yaml');
    writeFileSync(
      configFile,
      gatewayConfig({
        port,
        dataDir: join(dir, 'data'),
        endpoint: server.endpoint,
        items,
        publishingMs,
        samplingMs,
        queueSize,
      }),
    );
    const gatewayT0 = performance.now();
    const profDir = args['cpu-prof'] === undefined ? undefined : resolve(args['cpu-prof']);
    const gateway = startChild(cliScript, ['--config', configFile], undefined, [
      ...GATEWAY_NODE_FLAGS,
      ...(profDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${profDir}`]),
    ]);
    children.push(gateway);
    const isAlive = (): boolean => gateway.proc.exitCode === null && gateway.proc.signalCode === null;
    const deadline = (ms: number): number => performance.now() + ms;

    sub = new Subscriber(port, items);
    try {
      await sub.connect(deadline(30_000), isAlive);
    } catch (err) {
      throw new Error(`${(err as Error).message}; gateway output:\n${gateway.tail()}`, { cause: err });
    }
    const s = sub;
    // Ready once the DBIRTH is known and every item has shown up in a DDATA (the monitored items all exist).
    const readyBy = deadline(120_000);
    while (!s.allSeen) {
      if (!isAlive()) throw new Error(`the gateway exited:\n${gateway.tail()}`);
      if (performance.now() > readyBy) {
        throw new Error(
          `not every item arrived within 120 s (DBIRTH ${s.birthSeen ? 'seen' : 'not seen'}, ${s.seenCount}/${items} items, ${s.counters.ddata} DDATA); gateway output:\n${gateway.tail()}`,
        );
      }
      await sleep(50);
    }
    const readyS = (performance.now() - gatewayT0) / 1000;
    log(
      `gateway: every item in DDATA ${readyS.toFixed(1)} s after its start; warming up ${warmupS} s, then measuring ${seconds} s`,
    );
    await sleep(warmupS * 1000);

    s.resetWindow();
    const first = snapshot(s, gateway.pid, server.child.pid);
    const slices: Snapshot[] = [first];
    const endMs = first.atMs + seconds * 1000;
    while (performance.now() < endMs) {
      await sleep(Math.min(sliceS * 1000, endMs - performance.now()));
      const snap = snapshot(s, gateway.pid, server.child.pid);
      slices.push(snap);
      const r = rates(slices[slices.length - 2], snap, items);
      log(
        `  ${r.seconds.toFixed(1)} s: ${r.metricsPerS} metrics/s, ${r.ddataPerS} DDATA/s, gateway ${r.gatewayCpuPercent}% CPU, server ${r.serverCpuPercent}%`,
      );
      if (!isAlive()) throw new Error(`the gateway exited while measuring:\n${gateway.tail()}`);
    }
    const last = slices[slices.length - 1];
    const total = rates(first, last, items);
    const sliceRates = slices.slice(1).map((snap, i) => rates(slices[i], snap, items));
    const gatewayRssKb = readRssKb(gateway.pid);
    const latency = {
      p50Ms: s.latency.quantile(0.5),
      p99Ms: s.latency.quantile(0.99),
      maxMs: Math.round(s.latency.max),
    };

    const throughputMet =
      total.metricsPerS >= THROUGHPUT_TOLERANCE * TARGET_CHANGES_PER_S && total.skipped === 0 && total.wrong === 0;
    const cpuMet = total.gatewayCpuPercent < TARGET_GATEWAY_CPU_PERCENT;
    const notes: string[] = [];
    if (total.serverChangesPerS < THROUGHPUT_TOLERANCE * offeredPerS) {
      notes.push(
        `the server made only ${total.serverChangesPerS} changes/s of ${offeredPerS} offered (its timer runs late by each round's duration, more under load)`,
      );
    }
    if (offeredPerS < TARGET_CHANGES_PER_S)
      notes.push(`offered ${offeredPerS}/s is below the target's ${TARGET_CHANGES_PER_S}/s`);
    if (total.skipped > 0) notes.push(`${total.skipped} changes skipped (sampling or queue too coarse, or lost)`);
    if (total.wrong > 0) notes.push(`${total.wrong} values on the wrong metric`);
    if (total.deaths > 0 || total.births > 0)
      notes.push(`${total.deaths} deaths and ${total.births} births during the window`);
    const load1 = loadavg()[0];
    if (Math.max(load0, load1) > 2)
      notes.push(
        `1-minute load average ${load0.toFixed(1)} → ${load1.toFixed(1)} on ${machineInfo().cpus} cores: other work competed`,
      );

    const summary = {
      benchmark: 'opcua-e2e',
      startedAt,
      machine: machineInfo(),
      params: { items, changeMs, publishingMs, samplingMs, queueSize, seconds, warmupS, sliceS, offeredPerS },
      startup: { serverStartS: round(server.startS), gatewayToAllItemsS: round(readyS) },
      results: {
        ...total,
        latencySourceToSubscriberMs: latency,
        gatewayRssMb: round(gatewayRssKb / 1024),
        loadavg1: [round(load0, 2), round(load1, 2)],
      },
      slices: sliceRates,
      target: {
        changesPerS: TARGET_CHANGES_PER_S,
        gatewayCpuPercent: TARGET_GATEWAY_CPU_PERCENT,
        throughputMet,
        cpuMet,
        met: throughputMet && cpuMet,
        notes,
      },
    };
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(summary, null, 2)}\n`);

    const fmt = (x: number): string => x.toLocaleString('en-US');
    const range = (k: 'metricsPerS' | 'gatewayCpuPercent'): string => {
      const xs = sliceRates.map((r) => r[k]);
      return `${sliceS} s slices: min ${fmt(Math.min(...xs))}, median ${fmt(median(xs))}, max ${fmt(Math.max(...xs))}`;
    };
    const lines = [
      '',
      `OPC UA → gateway → Sparkplug DDATA: ${fmt(items)} items every ${changeMs} ms (${fmt(offeredPerS)} changes/s offered), ` +
        `publishing ${publishingMs} ms, sampling ${samplingMs} ms, queue ${queueSize}; ${total.seconds} s window`,
      `  metrics/s delivered in DDATA   ${fmt(total.metricsPerS).padStart(8)}   (${range('metricsPerS')})`,
      `  server changes/s               ${fmt(total.serverChangesPerS).padStart(8)}   skipped ${total.skipped}, repeated ${total.repeated}, wrong ${total.wrong}, bad ${total.bad}`,
      `  DDATA messages/s               ${String(total.ddataPerS).padStart(8)}   (${total.metricsPerDdata} metrics per DDATA, ${total.ddataKBytesPerS} KiB/s)`,
      `  latency server → subscriber    p50 ${latency.p50Ms} ms, p99 ${latency.p99Ms} ms, max ${latency.maxMs} ms`,
      `  gateway CPU % of one core      ${String(total.gatewayCpuPercent).padStart(8)}   (${range('gatewayCpuPercent')}; RSS ${summary.results.gatewayRssMb} MB)`,
      `  server CPU % of one core       ${String(total.serverCpuPercent).padStart(8)}`,
      `  bench (subscriber) CPU %       ${String(total.benchCpuPercent).padStart(8)}`,
      `  load average (1 min)           ${load0.toFixed(2)} → ${load1.toFixed(2)}`,
      `  target ${fmt(TARGET_CHANGES_PER_S)} changes/s (≥ ${THROUGHPUT_TOLERANCE * 100}%, none skipped) with the gateway < ${TARGET_GATEWAY_CPU_PERCENT}% of one core: ` +
        `${summary.target.met ? 'MET' : 'NOT MET'} (throughput ${throughputMet ? 'met' : 'not met'}, CPU ${cpuMet ? 'met' : 'not met'})`,
      ...notes.map((n) => `  note: ${n}`),
      `  JSON: ${out}`,
      '',
    ];
    process.stdout.write(lines.join('\n'));
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await cleanup();
  }
}

if (args.help) {
  process.stdout.write(USAGE);
} else {
  run().catch((err: unknown) => {
    process.stderr.write(`opcua-bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  });
}
