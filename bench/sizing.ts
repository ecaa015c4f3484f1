/**
 * `npm run bench:sizing`: what a site's uplink outage costs on the gateway's disk, and how long its catch-up takes
 * on a slow link with live data flowing. See bench/README.md ("Sizing") for the method and the results.
 *
 * One site: Modbus TCP PLCs (bench/sizing-plc.ts, a child process; 500 tags each, every tag changing once a second
 * by default) polled by the gateway (a real process) into its Sparkplug node, whose uplink bridge (live-first, the
 * defaults) goes through a paced proxy (test/helpers/fault-proxy.ts: the link, its rate and its cut) to a central
 * Mosquitto. Two counters decode every DDATA: one on the gateway's own broker (what the node published) and one on
 * the central broker (what arrived, live or historical), by the payload's timestamp in 100 ms buckets.
 * For each compression (a fresh gateway), each link rate and each cut length:
 * - live: `--live-s` with the link up: bytes upstream at the proxy per value the central host received;
 * - cut: the proxy refuses and resets every connection for `--cut-s`; the LMDB data file's growth (its allocated
 *   blocks) per value the node published meanwhile, and the outbox's own count (`edgeferry_bridge_backlog_bytes`);
 * - catch-up: from the link's return until the central host has every value sampled before it (and as many as the
 *   gateway's broker had: a missing value would hold it until the deadline, and counts as lost); the reconnect
 *   (return -> NBIRTH upstream), the bytes upstream per value delivered meanwhile, the most values/s delivered.
 * The table scales these to 1, 8 and 24 h and to 500, 5,000 and 50,000 tags (bench/sizing-model.ts).
 */
import type { ChildProcess } from 'node:child_process';
import { fork } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { connectAsync, type MqttClient } from 'mqtt';
import { decodeCommandPayload } from '../src/sparkplug/compression.js';
import { startFaultProxy, type FaultProxy } from '../test/helpers/fault-proxy.js';
import {
  GATEWAY_NODE_FLAGS,
  freePort,
  launchCentralMosquitto,
  launchUntilReady,
  readCpuS,
  type LaunchedProcess,
} from './brokers.js';
import { choiceList, parseOrExit, positiveInt, rootDir, runMain, scratchDir, writeResults } from './harness.js';
import { sleep, waitUntil } from './qos1-load.js';
import { deviceTags } from './sizing-plc.js';
import { bytesText, catchUpS, diskBytes, durationText, mbitToBytesPerS, type PerValueCosts } from './sizing-model.js';

const GROUP = 'sizing';
const NODE = 'site';
const TAGS_PER_DEVICE = 500;
/** The bridges' `queue.maxBytes` default: beyond it (by the outbox's own count) the outbox drops the oldest. */
const DEFAULT_OUTBOX_BYTES = 1_073_741_824;
const COMPRESSIONS = ['none', 'deflate'] as const;
type Compression = (typeof COMPRESSIONS)[number];

const usage = [
  'npm run bench:sizing -- [options]',
  '  --tags N              tags of the measured site, default 5000 (500 per PLC)',
  '  --changes-per-s N     value changes per second over all tags, default = tags',
  "  --poll-ms N           the PLCs' poll interval, default 500",
  '  --links A,B           link rates in Mbit/s, default 10,100',
  '  --cut-s A,B           outage lengths in s, default 60 (the README figures: 60,300)',
  '  --compression A,B     sparkplug.compression settings, default none,deflate',
  '  --reps N              repetitions of every cut (medians reported), default 1',
  '  --live-s N            live window before each cut, default 20',
  '  --delay-ms N          one-way latency of the link, default 0',
  "  --inflight N          the uplink bridge's inflight, default 100 (its default)",
  "  --central-inflight N  the central Mosquitto's max_inflight_messages (its Receive Maximum), default 20 (its default)",
  '  --quick               10 Mbit/s, a 10 s cut, 5 s live: a smoke test, not a measurement',
  '  --out FILE            JSON results, default bench/results/sizing.json',
  "  --from FILE           print the tables of an earlier run's JSON results again (nothing runs)",
  '  -h, --help',
].join('\n');

const opts = parseOrExit(usage, () => {
  const { values } = parseArgs({
    options: {
      tags: { type: 'string' },
      'changes-per-s': { type: 'string' },
      'poll-ms': { type: 'string' },
      links: { type: 'string' },
      'cut-s': { type: 'string' },
      compression: { type: 'string' },
      reps: { type: 'string' },
      'live-s': { type: 'string' },
      'delay-ms': { type: 'string' },
      inflight: { type: 'string' },
      'central-inflight': { type: 'string' },
      quick: { type: 'boolean', default: false },
      out: { type: 'string' },
      from: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) return null;
  const quick = values.quick;
  const numbers = (v: string | undefined, fallback: string, name: string): number[] =>
    (v ?? fallback).split(',').map((x) => positiveInt(x.trim(), 0, name));
  const tags = positiveInt(values.tags, 5000, 'tags');
  return {
    tags,
    changesPerS: positiveInt(values['changes-per-s'], tags, 'changes-per-s'),
    pollMs: positiveInt(values['poll-ms'], 500, 'poll-ms'),
    linksMbit: numbers(values.links, quick ? '10' : '10,100', 'links'),
    cutsS: numbers(values['cut-s'], quick ? '10' : '60', 'cut-s'),
    compressions: choiceList(values.compression ?? COMPRESSIONS.join(','), COMPRESSIONS, 'compression'),
    reps: positiveInt(values.reps, 1, 'reps'),
    liveS: positiveInt(values['live-s'], quick ? 5 : 20, 'live-s'),
    delayMs: values['delay-ms'] === undefined ? 0 : Number(values['delay-ms']),
    inflight: positiveInt(values.inflight, 100, 'inflight'),
    centralInflight: positiveInt(values['central-inflight'], 20, 'central-inflight'),
    quick,
    out: path.resolve(values.out ?? path.join(rootDir, 'bench/results/sizing.json')),
    from: values.from,
  };
});

const live = new Set<ChildProcess>();
const killAll = (): void => {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
};

/**
 * The DDATA values one subscriber received, by the payload's timestamp in 100 ms buckets, and how many were flagged
 * historical. Compressed payloads are inflated the way a host does.
 */
class ValueCounter {
  values = 0;
  historical = 0;
  nodeBirths = 0;
  lastNodeBirthMs = 0;
  private readonly buckets = new Map<number, number>();
  client: MqttClient | undefined;

  async connect(port: number, clientId: string): Promise<void> {
    this.client = await connectAsync(`mqtt://127.0.0.1:${port}`, { clientId, protocolVersion: 5, reconnectPeriod: 0 });
    this.client.on('message', (topic, payload) => this.onMessage(topic, payload));
    await this.client.subscribeAsync(`spBv1.0/${GROUP}/#`, { qos: 0 });
  }

  private onMessage(topic: string, payload: Buffer): void {
    const type = topic.split('/')[2];
    if (type === 'NBIRTH') {
      this.nodeBirths++;
      this.lastNodeBirthMs = performance.now();
    }
    if (type !== 'DDATA') return;
    const p = decodeCommandPayload(payload, () => undefined);
    const bucket = Math.floor((p.timestamp ?? 0) / 100);
    this.buckets.set(bucket, (this.buckets.get(bucket) ?? 0) + p.metrics.length);
    this.values += p.metrics.length;
    for (const m of p.metrics) if (m.isHistorical) this.historical++;
  }

  /** Values sampled in [fromMs, toMs) (wall clock, the payloads' timestamps). */
  between(fromMs: number, toMs: number): number {
    let n = 0;
    for (let b = Math.floor(fromMs / 100); b < Math.floor(toMs / 100); b++) n += this.buckets.get(b) ?? 0;
    return n;
  }

  async close(): Promise<void> {
    await this.client?.endAsync(true);
  }
}

/** One gateway with its site, its link and its counters. */
interface Site {
  readonly gateway: LaunchedProcess;
  /** Its configuration and store. */
  readonly dir: string;
  readonly dataFile: string;
  readonly metricsPort: number;
  readonly local: ValueCounter;
  readonly central: ValueCounter;
  /** Wall-clock ms from which both counters see every value. */
  readonly countedFromMs: number;
}

async function gaugeOf(metricsPort: number, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const m = new RegExp(`^${name}\\{bridge="central"\\} (\\S+)$`, 'm').exec(text);
  return m === null ? Number.NaN : Number(m[1]);
}

/** The bytes the LMDB data file takes on disk (allocated blocks: what a full disk runs out of). */
const allocatedBytes = (file: string): number => fs.statSync(file).blocks * 512;

interface CutRecord {
  compression: Compression;
  linkMbit: number;
  cutS: number;
  rep: number;
  liveValuesPerS: number;
  /** The gateway's CPU, in cores, live and during the catch-up. */
  liveCpu: number;
  catchUpCpu: number;
  wireLiveBytesPerValue: number;
  bufferedValues: number;
  diskGrowthBytes: number;
  diskBytesPerValue: number;
  outboxBytesPerValue: number;
  reconnectS: number;
  catchUpS: number;
  backlogValues: number;
  wireReplayBytesPerValue: number;
  /** Stored values/s delivered from the NBIRTH on (the live ones besides). */
  drainPerS: number;
  linkUse: number;
  lost: number;
  loadavg1: number;
}

async function measureCut(
  site: Site,
  proxy: FaultProxy,
  cell: { compression: Compression; linkMbit: number; cutS: number; rep: number },
): Promise<CutRecord> {
  const { local, central } = site;
  // Live: the link up.
  const cpuS = () => readCpuS(site.gateway.pid);
  const live0 = { bytes: proxy.bytes.up, values: central.values, ms: performance.now(), cpuS: cpuS() };
  await sleep(opts.liveS * 1000);
  const liveS = (performance.now() - live0.ms) / 1000;
  const liveCpu = (cpuS() - live0.cpuS) / liveS;
  const liveValues = central.values - live0.values;
  const wireLiveBytesPerValue = (proxy.bytes.up - live0.bytes) / liveValues;

  // The cut.
  const diskBefore = allocatedBytes(site.dataFile);
  const cutAtMs = Date.now();
  proxy.refuse();
  proxy.reset();
  await sleep(cell.cutS * 1000);
  const outboxBytes = await gaugeOf(site.metricsPort, 'edgeferry_bridge_backlog_bytes');
  const diskGrowthBytes = allocatedBytes(site.dataFile) - diskBefore;
  const births = central.nodeBirths;
  const back = {
    bytes: proxy.bytes.up,
    values: central.values,
    ms: performance.now(),
    wallMs: Date.now(),
    cpuS: cpuS(),
  };
  proxy.restore();
  const bufferedValues = local.between(cutAtMs, back.wallMs);

  // The catch-up: every value sampled before the return at the central host.
  const target = local.between(site.countedFromMs, back.wallMs);
  const backlogValues = target - central.between(site.countedFromMs, back.wallMs);
  const caughtUp = () => central.between(site.countedFromMs, back.wallMs) >= target;
  const done = await waitUntil(caughtUp, Math.max(120_000, cell.cutS * 3000), 50);
  const endMs = performance.now();
  const catchUp = (endMs - back.ms) / 1000;
  const catchUpCpu = (cpuS() - back.cpuS) / catchUp;
  const delivered = central.values - back.values;
  const reconnectS = central.nodeBirths > births ? (central.lastNodeBirthMs - back.ms) / 1000 : Number.NaN;
  // The drain: from the NBIRTH upstream (the births go first) to the last stored value.
  const drainS = catchUp - (Number.isNaN(reconnectS) ? 0 : reconnectS);
  return {
    ...cell,
    liveValuesPerS: Math.round(liveValues / liveS),
    liveCpu: round(liveCpu),
    catchUpCpu: round(catchUpCpu),
    wireLiveBytesPerValue: round(wireLiveBytesPerValue),
    bufferedValues,
    diskGrowthBytes,
    diskBytesPerValue: round(diskGrowthBytes / bufferedValues),
    outboxBytesPerValue: round(outboxBytes / bufferedValues),
    reconnectS: round(reconnectS),
    catchUpS: round(catchUp),
    backlogValues,
    wireReplayBytesPerValue: round((proxy.bytes.up - back.bytes) / delivered),
    drainPerS: Math.round(backlogValues / drainS),
    linkUse: round((proxy.bytes.up - back.bytes) / drainS / mbitToBytesPerS(cell.linkMbit)),
    lost: done ? 0 : Math.max(1, target - central.between(site.countedFromMs, back.wallMs)),
    loadavg1: round(os.loadavg()[0]),
  };
}

const pct = (x: number): string => `${Math.round(x * 100)} %`;
const round = (x: number, digits = 2): number => Number(x.toFixed(digits));
const median = (xs: number[]): number => {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  return s.length % 2 === 1 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function startSite(
  tmpDir: string,
  compression: Compression,
  proxy: FaultProxy,
  centralPort: number,
  plcPorts: readonly number[],
): Promise<Site> {
  const dir = fs.mkdtempSync(path.join(tmpDir, `gw-${compression}-`));
  const port = await freePort();
  const metricsPort = await freePort();
  const tags = deviceTags(TAGS_PER_DEVICE);
  const config = {
    gateway: { id: NODE },
    listeners: [{ type: 'tcp', host: '127.0.0.1', port }],
    storage: { path: path.join(dir, 'data') },
    log: { level: 'warn', format: 'json' },
    metrics: { host: '127.0.0.1', port: metricsPort },
    // Every bridge setting at its default (live-first, reconnect within 2 s) but `inflight`: as a user runs it.
    bridges: [
      {
        name: 'central',
        inflight: opts.inflight,
        remote: { urls: [proxy.url], clientId: NODE },
        topics: [
          { filter: 'spBv1.0/#', direction: 'out' },
          { filter: `spBv1.0/${GROUP}/NCMD/${NODE}`, direction: 'in' },
          { filter: `spBv1.0/${GROUP}/DCMD/${NODE}/#`, direction: 'in' },
        ],
      },
    ],
    sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central', compression },
    connectors: plcPorts.map((plcPort, i) => ({
      id: `plc-${i}`,
      type: 'modbus',
      transport: 'tcp',
      host: '127.0.0.1',
      port: plcPort,
      unitId: 1,
      addressBase: 0,
      pollIntervalMs: opts.pollMs,
      timeoutMs: 2000,
      tags,
    })),
  };
  fs.writeFileSync(path.join(dir, 'edgeferry.yaml'), JSON.stringify(config, null, 2));
  const gateway = await launchUntilReady({
    name: `gateway (${compression})`,
    file: process.execPath,
    args: [...GATEWAY_NODE_FLAGS, path.join(rootDir, 'dist/src/cli.js'), '--config', path.join(dir, 'edgeferry.yaml')],
    dir,
    port,
    live,
    pollMs: 100,
    probePrefix: 'sizing-probe-',
    readyTimeoutMs: 60_000,
  });
  const local = new ValueCounter();
  await local.connect(port, 'sizing-local');
  const central = new ValueCounter();
  await central.connect(centralPort, 'sizing-central');
  // Births upstream, then a warm-up (JIT, every device born and polled).
  await waitUntil(() => central.values > 0, 60_000, 100);
  await sleep(opts.quick ? 3000 : 10_000);
  return {
    gateway,
    dir,
    dataFile: path.join(dir, 'data', 'data.mdb'),
    metricsPort,
    local,
    central,
    countedFromMs: Date.now() + 1000,
  };
}

function describe(r: CutRecord): string {
  return (
    `${r.compression.padEnd(7)} ${String(r.linkMbit).padStart(4)} Mbit/s cut ${r.cutS} s rep ${r.rep}: ` +
    `live ${r.liveValuesPerS} values/s, ${r.wireLiveBytesPerValue} B/value on the wire, gateway CPU ${pct(r.liveCpu)}; ` +
    `buffered ${r.bufferedValues} values, disk +${bytesText(r.diskGrowthBytes)} (${r.diskBytesPerValue} B/value, ` +
    `outbox ${r.outboxBytesPerValue}); caught up in ${r.catchUpS} s (reconnect ${r.reconnectS} s), ` +
    `${r.wireReplayBytesPerValue} B/value, drained ${r.drainPerS} values/s, link ${pct(r.linkUse)}, CPU ${pct(r.catchUpCpu)}` +
    (r.lost > 0 ? `, ${r.lost} NOT DELIVERED` : '') +
    ` (load ${r.loadavg1})`
  );
}

/** The per-value costs of one compression: medians over its cuts, the ceiling the highest seen. */
function costsOf(records: CutRecord[]): PerValueCosts & { liveValuesPerS: number; outboxBytesPerValue: number } {
  return {
    outboxBytesPerValue: round(median(records.map((r) => r.outboxBytesPerValue))),
    diskBytesPerValue: round(median(records.map((r) => r.diskBytesPerValue))),
    wireLiveBytesPerValue: round(median(records.map((r) => r.wireLiveBytesPerValue))),
    wireReplayBytesPerValue: round(median(records.map((r) => r.wireReplayBytesPerValue))),
    drainPerSByLink: Object.fromEntries(
      [...new Set(records.map((r) => r.linkMbit))].map((link) => [
        link,
        Math.round(
          Math.max(
            ...records
              .filter((r) => r.linkMbit === link)
              .map((r) => r.backlogValues / (r.catchUpS - (r.reconnectS || 0))),
          ),
        ),
      ]),
    ),
    reconnectS: round(median(records.map((r) => r.reconnectS))),
    liveValuesPerS: Math.round(median(records.map((r) => r.liveValuesPerS))),
  };
}

/** The measured site's shape, as the tables need it. */
interface SiteShape {
  readonly tags: number;
  readonly linksMbit: readonly number[];
  readonly cutsS: readonly number[];
  readonly compressions: readonly Compression[];
}

function printTables(records: CutRecord[], site: SiteShape): object {
  const costs = new Map(
    site.compressions.map((c) => [c, costsOf(records.filter((r) => r.compression === c))] as const),
  );
  const out: string[] = [];
  out.push('\nMeasured catch-ups against the model (median per cell):\n');
  out.push('| compression | link | outage | backlog values | catch-up measured | model |');
  out.push('|---|---|---|---|---|---|');
  for (const [compression, c] of costs) {
    for (const linkMbit of site.linksMbit) {
      for (const cutS of site.cutsS) {
        const cell = records.filter((r) => r.compression === compression && r.linkMbit === linkMbit && r.cutS === cutS);
        if (cell.length === 0) continue;
        const model = catchUpS(c, median(cell.map((r) => r.liveValuesPerS)), cutS, linkMbit);
        out.push(
          `| ${compression} | ${linkMbit} Mbit/s | ${cutS} s | ${median(cell.map((r) => r.bufferedValues))} | ` +
            `${durationText(median(cell.map((r) => r.catchUpS)))} | ${durationText(model)} |`,
        );
      }
    }
  }
  const table: object[] = [];
  out.push('\nSizing (per-value costs measured on the site above, scaled to the site size and outage length):\n');
  const linkHeads = site.linksMbit.flatMap((l) => [1, 8, 24].map((h) => `${h} h on ${l} Mbit/s`));
  out.push(
    `| tags | compression | values/s | disk per hour of outage | disk for 24 h | outage the default 1 GiB outbox holds | ${linkHeads.join(' | ')} |`,
  );
  out.push(`|---|---|---|---|---|---|${linkHeads.map(() => '---').join('|')}|`);
  for (const tags of [500, 5000, 50_000]) {
    for (const [compression, c] of costs) {
      const valuesPerS = (c.liveValuesPerS * tags) / site.tags;
      const catchUps = site.linksMbit.flatMap((l) => [1, 8, 24].map((h) => catchUpS(c, valuesPerS, h * 3600, l)));
      table.push({
        tags,
        compression,
        valuesPerS,
        diskPerHourBytes: diskBytes(c, valuesPerS, 3600),
        catchUpS: catchUps,
      });
      out.push(
        `| ${tags.toLocaleString('en')}${tags === site.tags ? ' (measured)' : ''} | ${compression} | ` +
          `${Math.round(valuesPerS).toLocaleString('en')} | ${bytesText(diskBytes(c, valuesPerS, 3600))} | ` +
          `${bytesText(diskBytes(c, valuesPerS, 86_400))} | ${durationText(DEFAULT_OUTBOX_BYTES / (c.outboxBytesPerValue * valuesPerS))} | ` +
          `${catchUps.map(durationText).join(' | ')} |`,
      );
    }
  }
  out.push(
    '\nPer value: ' +
      [...costs]
        .map(
          ([k, c]) =>
            `${k}: disk ${c.diskBytesPerValue} B, wire live ${c.wireLiveBytesPerValue} B, replay ${c.wireReplayBytesPerValue} B, ` +
            `drain at most ${Object.entries(c.drainPerSByLink)
              .map(([l, d]) => `${d} values/s on ${l} Mbit/s`)
              .join(', ')}, reconnect ${c.reconnectS} s`,
        )
        .join('; '),
  );
  process.stdout.write(out.join('\n') + '\n');
  return { costs: Object.fromEntries(costs), table };
}

async function main(): Promise<void> {
  const startedAt = new Date();
  const { tmpDir, cleanup } = scratchDir('edgeferry-sizing-', killAll, 'bench:sizing interrupted');
  const devices = Math.ceil(opts.tags / TAGS_PER_DEVICE);
  const plc = fork(path.join(rootDir, 'dist/bench/sizing-plc.js'), [
    String(devices),
    String(TAGS_PER_DEVICE),
    String(opts.changesPerS / (devices * TAGS_PER_DEVICE)),
  ]);
  live.add(plc);
  const plcPorts = await new Promise<number[]>((resolve) =>
    plc.once('message', (msg: { ports: number[] }) => resolve(msg.ports)),
  );

  const centralPort = await freePort();
  const centralDir = path.join(tmpDir, 'central');
  fs.mkdirSync(centralDir);
  // The central broker as shipped (Receive Maximum 20 unless --central-inflight), but no queue cap for the counter
  // subscribed there.
  const central = await launchCentralMosquitto({
    dir: centralDir,
    port: centralPort,
    lines: ['persistence false', 'max_queued_messages 0', `max_inflight_messages ${opts.centralInflight}`],
    live,
    probePrefix: 'sizing-probe-',
  });
  const proxy = await startFaultProxy(centralPort);
  proxy.setDelayMs(opts.delayMs);
  process.stdout.write(
    `site: ${devices} Modbus PLCs x ${TAGS_PER_DEVICE} tags, ${opts.changesPerS} changes/s, poll ${opts.pollMs} ms; ` +
      `links ${opts.linksMbit.join(', ')} Mbit/s; cuts ${opts.cutsS.join(', ')} s; ${opts.reps} rep(s)\n`,
  );

  const records: CutRecord[] = [];
  // A fresh gateway for every cut: an empty store, so the data file's growth is the cut's (LMDB reuses the pages
  // an earlier backlog freed, and the file never shrinks).
  for (let rep = 1; rep <= opts.reps; rep++) {
    for (const compression of opts.compressions) {
      for (const linkMbit of opts.linksMbit) {
        for (const cutS of opts.cutsS) {
          proxy.setRate(mbitToBytesPerS(linkMbit));
          const site = await startSite(tmpDir, compression, proxy, centralPort, plcPorts);
          const record = await measureCut(site, proxy, { compression, linkMbit, cutS, rep });
          records.push(record);
          process.stdout.write(describe(record) + '\n');
          await site.local.close();
          await site.central.close();
          await site.gateway.stop();
          fs.rmSync(site.dir, { recursive: true, force: true });
        }
      }
    }
  }
  const summary = printTables(records, opts);
  await proxy.stop();
  await central.stop();
  plc.kill();
  writeResults(opts.out, startedAt, opts, summary, records);
  cleanup();
  if (records.some((r) => r.lost > 0)) process.exitCode = 1;
}

if (opts.from === undefined) {
  runMain('bench:sizing', main, killAll);
} else {
  // The tables again from a results file: its runs, the site it measured.
  const results = JSON.parse(fs.readFileSync(opts.from, 'utf8')) as { options: SiteShape; runs: CutRecord[] };
  printTables(results.runs, results.options);
}
