/**
 * `npm run bench:persistence`: QoS 1 persistent-session throughput and loss after SIGKILL, edgeferry against
 * Mosquitto with persistence on, interleaved, medians over repetitions. See bench/README.md.
 *
 * - `throughput`: a subscriber (3.1.1, clean session 0) subscribes to `bench/#` at QoS 1 and disconnects;
 *   N publishers publish M QoS 1 messages with a PUBACK-driven window; ingest rate = M / time until the last
 *   PUBACK. The subscriber then reconnects and drains its offline queue, PUBACKing everything: drain rate and
 *   how many of the acknowledged messages arrived.
 * - `sigkill`: the same ingest, then SIGKILL at once after the last PUBACK, restart on the same data
 *   directory, reconnect the subscriber: how many acknowledged messages arrive.
 *
 * All clients live in this process (raw sockets, pre-encoded packets from `mqtt-wire.ts`): the publishers
 * and the subscriber are never active at the same time, and the broker is its own process.
 *
 * `store` (throughput only) is the LMDB store alone in this process (bench/store-rate.ts), as many writes in
 * flight as the publishers keep (publishers x window), the same messages: the ceiling of durable ingest, measured
 * in the same run, so that edgeferry/store is a same-run ratio.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import {
  GATEWAY_NODE_FLAGS,
  freePort,
  launchUntilReady,
  readCpuS,
  readRssKb,
  summarizeOutput,
  type LaunchedProcess,
} from './brokers.js';
import {
  SequenceCounter,
  errorText,
  ingest,
  minPayloadBytes,
  nowNs,
  openConnection,
  secondsBetween,
  subackWaiter,
  subscribeAndWait,
  waitForDelivery,
  type Connection,
} from './qos1-load.js';
import {
  choiceList,
  loadAverageText,
  loadUsage,
  loadOptionSpecs,
  loadOptions,
  parseOrExit,
  positiveInt,
  rootDir,
  runInterleaved,
  runMain,
  scratchDir,
  writeResults,
  type LoadOptions,
  type RunRecord as HarnessRecord,
} from './harness.js';
import { formatNumber, renderGroups, summarizeGroups, type GroupColumn, type GroupSpec } from './report.js';
import { storeRate } from './store-rate.js';

const brokerKinds = ['edgeferry', 'mosquitto', 'edgeferry-relaxed', 'store', 'store-relay'] as const;
type BrokerKind = (typeof brokerKinds)[number];
const defaultBrokers: BrokerKind[] = ['edgeferry', 'mosquitto', 'store', 'store-relay'];
/** Measured in the throughput scenario's ingest only: they keep no session to drain or to survive a restart. */
const ingestOnly: readonly BrokerKind[] = ['store', 'store-relay'];
const scenarioKinds = ['throughput', 'sigkill'] as const;
type ScenarioKind = (typeof scenarioKinds)[number];

const defaults = { reps: 5, out: 'bench/results/persistence.json' };
const usage = `Usage: npm run bench:persistence -- [options]
  --brokers LIST        comma-separated from ${brokerKinds.join(',')}; default ${defaultBrokers.join(',')}
                        (edgeferry-relaxed = edgeferry with storage.sync: relaxed; store = the LMDB store
                        alone, in this process, at publishers x window writes in flight; store-relay = the
                        same store behind the bare Node relay (bare-net-server.ts --store), the same
                        publishers: throughput's ingest only, both)
  --scenarios LIST      comma-separated from ${scenarioKinds.join(',')}; default both
${loadUsage(defaults, ['  --payload-bytes N     payload size, default 64 (at least 8)'])}`;

const drainDeadlineMs = 120_000;
/** The drain ends when everything acknowledged arrived, or after this long without a new message. */
const drainQuietMs = 2_000;

interface Options extends LoadOptions {
  brokers: BrokerKind[];
  scenarios: ScenarioKind[];
  payloadBytes: number;
}

/** Every broker process still alive, so SIGINT and fatal errors can kill them all. */
const live = new Set<ChildProcess>();

function killAll(): void {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
}

/** Writes the broker's configuration into `dir` (its data lives there too) and returns how to run it. */
function brokerCommand(
  kind: BrokerKind,
  port: number,
  dir: string,
  cpuProfDir: string | undefined,
): { file: string; args: string[] } {
  const profile = cpuProfDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`];
  if (kind === 'store-relay') {
    return {
      file: process.execPath,
      args: [
        ...GATEWAY_NODE_FLAGS,
        ...profile,
        path.join(rootDir, 'dist/bench/bare-net-server.js'),
        String(port),
        '--store',
        dir,
      ],
    };
  }
  if (kind === 'mosquitto') {
    const config = path.join(dir, 'mosquitto.conf');
    fs.writeFileSync(
      config,
      [
        `listener ${port} 127.0.0.1`,
        'allow_anonymous true',
        'persistence true',
        // Mosquitto appends the file name to this prefix, hence the trailing slash.
        `persistence_location ${dir}/`,
        // The default, written out: the in-memory state reaches the disk this often, or on a clean shutdown.
        'autosave_interval 1800',
        // No queue limit, so what Mosquitto loses here is not its max_queued_messages (default 1000) at work.
        'max_queued_messages 0',
        'log_dest stderr',
        'log_type error',
        'log_type warning',
        '',
      ].join('\n'),
    );
    return { file: '/usr/sbin/mosquitto', args: ['-c', config] };
  }
  const config = path.join(dir, 'edgeferry.yaml');
  const sync = kind === 'edgeferry-relaxed' ? 'relaxed' : 'full';
  fs.writeFileSync(
    config,
    [
      'listeners:',
      `  - { type: tcp, host: 127.0.0.1, port: ${port} }`,
      'broker: { maxQueuedMessages: 0, maxQueuedBytes: 0 }',
      `storage: { path: ${JSON.stringify(path.join(dir, 'data'))}, sync: ${sync} }`,
      'log: { level: warn, format: json }',
      '',
    ].join('\n'),
  );
  return {
    file: process.execPath,
    args: [...GATEWAY_NODE_FLAGS, ...profile, path.join(rootDir, 'dist/src/cli.js'), '--config', config],
  };
}

/** Starts the broker and waits until a TCP connect + CONNECT/CONNACK succeeds. */
function launchBroker(
  kind: BrokerKind,
  port: number,
  dir: string,
  cpuProfDir: string | undefined,
): Promise<LaunchedProcess> {
  const { file, args } = brokerCommand(kind, port, dir, cpuProfDir);
  // Polled every 50 ms, because the restart time after SIGKILL is one of the figures.
  return launchUntilReady({ name: kind, file, args, dir, port, live, pollMs: 50, probePrefix: 'persist-probe-' });
}

// ---- clients ----------------------------------------------------------------------------------------------

/** Subscribes with a persistent session, then disconnects: from now on the broker queues for it. */
async function createPersistentSubscription(port: number, clientId: string): Promise<void> {
  const suback = subackWaiter();
  const conn = await openConnection(port, clientId, false, suback.onPacket);
  try {
    await subscribeAndWait(conn, 'bench/#', suback.granted);
  } finally {
    await conn.close();
  }
}

interface DrainResult {
  sessionPresent: boolean;
  received: number; // PUBLISH packets, duplicates included
  unique: number; // distinct (publisher, sequence number) seen
  delivered: number; // distinct acknowledged messages seen
  duplicates: number;
  connectNs: bigint; // CONNECT written
  connackNs: bigint;
  lastNs: bigint; // the chunk with the last PUBLISH (connectNs if none)
  truncated: boolean; // still receiving at the deadline
  problem: string | null;
}

/**
 * Reconnects the persistent session and takes its offline queue, PUBACKing every QoS 1 PUBLISH (one write
 * per received chunk). Ends when every acknowledged message arrived, after `drainQuietMs` without a new
 * one, or at the deadline.
 */
async function drain(port: number, clientId: string, ackedSeqs: Uint8Array[], expected: number): Promise<DrainResult> {
  const counter = new SequenceCounter(ackedSeqs);
  const connectNs = nowNs();
  const conn = await openConnection(port, clientId, false, counter.onPacket, counter.afterChunk);
  const connackNs = nowNs();
  counter.attach(conn.sock);
  // PUBLISHes that came in the CONNACK's chunk were counted before the socket was attached: acknowledge them now.
  counter.afterChunk();
  const truncated = await waitForDelivery(counter, {
    expected,
    quietMs: drainQuietMs,
    deadlineMs: drainDeadlineMs,
    problem: conn.problem,
  });
  const problem = conn.problem();
  await conn.close();
  return {
    sessionPresent: conn.sessionPresent,
    received: counter.received,
    unique: counter.unique,
    delivered: counter.delivered,
    duplicates: counter.duplicates,
    connectNs,
    connackNs,
    lastNs: counter.lastNs === 0n ? connectNs : counter.lastNs,
    truncated,
    problem,
  };
}

// ---- scenarios ------------------------------------------------------------------------------------------

type Metrics = Record<string, number>;

type RunRecord = HarnessRecord<{ scenario: ScenarioKind; broker: BrokerKind }>;

interface RunContext {
  kind: BrokerKind;
  scenario: ScenarioKind;
  opts: Options;
  tmpDir: string;
  runTag: string;
}

/** The `store` row: the session queue of a fresh store, as many writes in flight as the publishers keep. */
async function runStoreAlone(ctx: RunContext): Promise<Metrics> {
  const dir = fs.mkdtempSync(path.join(ctx.tmpDir, 'store-'));
  try {
    const { publishers, window, messages, payloadBytes } = ctx.opts;
    const ingestPerS = await storeRate(
      'session queue',
      { inFlight: publishers * window, messages, sync: 'full', payloadBytes },
      dir,
    );
    // Nothing is read back or restarted here: delivery and loss are not measured for it (n/a).
    return { ingestPerS, acked: messages, delivered: Number.NaN, lost: Number.NaN, duplicates: Number.NaN };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function runOnce(ctx: RunContext, notes: string[]): Promise<Metrics> {
  if (ctx.kind === 'store') return runStoreAlone(ctx);
  const dir = fs.mkdtempSync(path.join(ctx.tmpDir, `${ctx.kind}-`));
  const port = await freePort();
  const subscriberId = `${ctx.runTag}-sub`;
  let broker: LaunchedProcess | null = null;
  let publishers: Connection[] = [];
  try {
    const startedNs = nowNs();
    broker = await launchBroker(ctx.kind, port, dir, ctx.opts.cpuProfDir);
    const startS = secondsBetween(startedNs, nowNs());
    if (ctx.kind !== 'store-relay') await createPersistentSubscription(port, subscriberId);

    const cpuBefore = readCpuS(broker.pid);
    const genBefore = process.cpuUsage();
    const pub = await ingest(port, ctx.runTag, ctx.opts);
    publishers = pub.connections;
    const ingestS = secondsBetween(pub.startNs, pub.lastAckNs);
    const ingestBrokerCpuPct = (100 * (readCpuS(broker.pid) - cpuBefore)) / ingestS;
    const gen = process.cpuUsage(genBefore);
    const genCpuPct = (100 * (gen.user + gen.system)) / 1e6 / ingestS;
    if (!pub.complete)
      notes.push(
        `ingest incomplete: ${pub.acked} of ${ctx.opts.messages} acknowledged${pub.problem ? ` (${pub.problem})` : ''}`,
      );
    if (broker.exitStatus() !== null)
      throw new Error(`${ctx.kind} exited (${String(broker.exitStatus())}) during the ingest`);
    if (ctx.kind === 'store-relay') {
      // It queues for no session a subscriber could take: delivery and loss are not measured for it (n/a).
      return {
        ingestPerS: pub.acked / ingestS,
        acked: pub.acked,
        delivered: Number.NaN,
        lost: Number.NaN,
        duplicates: Number.NaN,
        ingestBrokerCpuPct,
        genCpuPct,
      };
    }

    let restartS = Number.NaN;
    let rssAfterIngestKb = Number.NaN;
    if (ctx.scenario === 'sigkill') {
      // At once after the last PUBACK: whatever the broker acknowledged must already be durable.
      await broker.kill();
      for (const c of publishers) c.destroy();
      publishers = [];
      const restartedNs = nowNs();
      broker = await launchBroker(ctx.kind, port, dir, ctx.opts.cpuProfDir);
      restartS = secondsBetween(restartedNs, nowNs());
    } else {
      rssAfterIngestKb = readRssKb(broker.pid);
      await Promise.all(publishers.map((c) => c.close()));
      publishers = [];
    }

    const drainCpuBefore = readCpuS(broker.pid);
    const d = await drain(port, subscriberId, pub.ackedSeqs, pub.acked);
    const drainS = secondsBetween(d.connectNs, d.lastNs);
    const drainBrokerCpuPct = (100 * (readCpuS(broker.pid) - drainCpuBefore)) / secondsBetween(d.connectNs, nowNs());
    if (d.truncated) notes.push(`drain still receiving after ${drainDeadlineMs / 1000} s`);
    if (d.problem !== null) notes.push(`subscriber: ${d.problem}`);
    if (broker.exitStatus() !== null)
      throw new Error(`${ctx.kind} exited (${String(broker.exitStatus())}) during the drain`);

    const lost = pub.acked - d.delivered;
    const common = {
      acked: pub.acked,
      delivered: d.delivered,
      lost,
      lostPct: pub.acked > 0 ? (100 * lost) / pub.acked : 0,
      duplicates: d.duplicates,
      sessionPresent: d.sessionPresent ? 1 : 0,
      ingestPerS: pub.acked / ingestS,
      ingestBrokerCpuPct,
      genCpuPct,
      startS,
    };
    if (ctx.scenario === 'sigkill') return { ...common, restartS };
    return {
      ...common,
      drainPerS: d.delivered > 0 ? d.delivered / drainS : 0,
      endToEndPerS: d.delivered / (ingestS + drainS),
      connackMs: secondsBetween(d.connectNs, d.connackNs) * 1000,
      ingestS,
      drainS,
      drainBrokerCpuPct,
      rssAfterIngestKb,
    };
  } catch (err) {
    const output = broker?.outputTail().trim() ?? '';
    throw new Error(`${errorText(err)}${output ? ` (broker output: ${summarizeOutput(output)})` : ''}`, { cause: err });
  } finally {
    for (const c of publishers) c.destroy();
    if (broker !== null) await broker.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- report ---------------------------------------------------------------------------------------------

const columns: Record<ScenarioKind, GroupColumn[]> = {
  throughput: [
    { key: 'ingestPerS', label: 'ingest msg/s', ratio: true },
    { key: 'drainPerS', label: 'drain msg/s', ratio: true },
    { key: 'endToEndPerS', label: 'end-to-end msg/s', ratio: true },
    { key: 'acked', label: 'acked' },
    { key: 'delivered', label: 'delivered' },
    { key: 'lost', label: 'lost', worst: 'max' },
    { key: 'duplicates', label: 'dups', worst: 'max' },
    { key: 'ingestBrokerCpuPct', label: 'broker CPU % in' },
    { key: 'drainBrokerCpuPct', label: 'broker CPU % out' },
    { key: 'genCpuPct', label: 'gen CPU % in' },
    { key: 'rssAfterIngestKb', label: 'RSS after ingest kB' },
  ],
  sigkill: [
    { key: 'acked', label: 'acknowledged' },
    { key: 'delivered', label: 'delivered after restart' },
    { key: 'lost', label: 'lost', worst: 'max' },
    { key: 'lostPct', label: 'lost %', worst: 'max' },
    { key: 'duplicates', label: 'dups', worst: 'max' },
    { key: 'sessionPresent', label: 'session kept', flag: true },
    { key: 'startS', label: 'fresh start s' },
    { key: 'restartS', label: 'restart s' },
    { key: 'ingestPerS', label: 'ingest msg/s' },
  ],
};

const titles: Record<ScenarioKind, (o: Options) => string> = {
  throughput: (o) =>
    `QoS 1 persistent session: ${o.publishers} publishers (window ${o.window}) -> offline queue -> 1 subscriber on reconnect, ` +
    `${o.messages.toLocaleString('en-US')} x ${o.payloadBytes} B`,
  sigkill: (o) =>
    `Loss after SIGKILL: ${o.messages.toLocaleString('en-US')} QoS 1 messages acknowledged, SIGKILL, restart, reconnect`,
};

function groups(opts: Options): GroupSpec[] {
  return opts.scenarios.map((scenario) => ({
    key: scenario,
    title: titles[scenario](opts),
    columns: columns[scenario],
  }));
}

function describeRun(r: RunRecord): string {
  const head = `[rep ${r.rep}] ${r.scenario.padEnd(10)} ${r.broker.padEnd(17)}`;
  const tail = `(${r.elapsedS.toFixed(1)} s, load ${r.loadavg1.toFixed(1)})${r.notes.length > 0 ? ` NOTE: ${r.notes.join('; ')}` : ''}`;
  if (!r.ok || r.metrics === undefined) return `${head} FAILED: ${(r.error ?? '').split('\n')[0].slice(0, 300)}`;
  const m = r.metrics;
  if (r.broker === 'store')
    return `${head} ingest ${formatNumber(m.ingestPerS)} msg/s (the store alone, session queue) ${tail}`;
  if (r.broker === 'store-relay') {
    return `${head} ingest ${formatNumber(m.ingestPerS)} msg/s (broker CPU ${m.ingestBrokerCpuPct.toFixed(0)}%; the store behind a bare relay) ${tail}`;
  }
  const loss = `acked ${formatNumber(m.acked)}, delivered ${formatNumber(m.delivered)}, lost ${formatNumber(m.lost)}, dups ${formatNumber(m.duplicates)}`;
  if (r.scenario === 'sigkill') {
    return `${head} ingest ${formatNumber(m.ingestPerS)} msg/s; after SIGKILL + restart (${formatNumber(m.restartS)} s, session ${m.sessionPresent === 1 ? 'kept' : 'gone'}): ${loss} ${tail}`;
  }
  return (
    `${head} ingest ${formatNumber(m.ingestPerS)} msg/s (broker CPU ${m.ingestBrokerCpuPct.toFixed(0)}%), ` +
    `drain ${formatNumber(m.drainPerS)} msg/s (broker CPU ${m.drainBrokerCpuPct.toFixed(0)}%), ${loss} ${tail}`
  );
}

// ---- main -----------------------------------------------------------------------------------------------

function parseOptions(): Options | null {
  const { values } = parseArgs({ options: { ...loadOptionSpecs, brokers: { type: 'string' } }, strict: true });
  if (values.help) return null;
  const opts: Options = {
    brokers: choiceList(values.brokers ?? defaultBrokers.join(','), brokerKinds, 'broker'),
    scenarios: choiceList(values.scenarios ?? scenarioKinds.join(','), scenarioKinds, 'scenario'),
    ...loadOptions(values, defaults),
    payloadBytes: positiveInt(values['payload-bytes'], 64, 'payload-bytes'),
  };
  if (opts.payloadBytes < minPayloadBytes)
    throw new Error('--payload-bytes must be at least 8 (sequence number and publisher index)');
  return opts;
}

async function main(): Promise<void> {
  const opts = parseOrExit(usage, parseOptions);
  if (!fs.existsSync(path.join(rootDir, 'dist/src/cli.js')) && opts.brokers.some((b) => b !== 'mosquitto')) {
    throw new Error('dist/src/cli.js is missing: run `npm run build` first');
  }
  const { tmpDir, cleanup } = scratchDir('edgeferry-bench-persist-', killAll, 'stopping brokers');

  const startedAt = new Date();
  process.stdout.write(
    `edgeferry persistence bench: brokers ${opts.brokers.join(', ')}; scenarios ${opts.scenarios.join(', ')}; ` +
      `${opts.reps} repetition(s) of ${opts.messages.toLocaleString('en-US')} messages${opts.quick ? ' (quick)' : ''}; ` +
      `load average ${loadAverageText()}\n`,
  );
  const records = await runInterleaved({
    reps: opts.reps,
    subjects: opts.brokers,
    cells: opts.scenarios,
    label: (scenario, broker) => ({ scenario, broker }),
    tagPrefix: 'p',
    run: (scenario, broker, runTag, notes) => runOnce({ kind: broker, scenario, opts, tmpDir, runTag }, notes),
    describe: describeRun,
    applies: (scenario, broker) => !ingestOnly.includes(broker) || scenario === 'throughput',
  });

  const brokers = opts.brokers.filter((b) => !ingestOnly.includes(b));
  const pairs: (readonly [string, string])[] = opts.brokers.includes('mosquitto')
    ? brokers.filter((b) => b !== 'mosquitto').map((b) => [b, 'mosquitto'] as const)
    : [];
  // The target of durable ingest: a share of what the store alone commits at the same in-flight count; and how
  // much of what is left is the gateway's own, next to the same store behind the least a Node server does.
  for (const floor of ingestOnly)
    if (opts.brokers.includes(floor) && opts.brokers.includes('edgeferry')) pairs.push(['edgeferry', floor]);
  const runs = records.map((r) => ({ ...r, group: r.scenario }));
  const summary = summarizeGroups(runs, groups(opts), opts.brokers, pairs);
  process.stdout.write(renderGroups(summary, groups(opts)) + '\n');
  for (const r of records) {
    if (r.ok && r.broker !== 'mosquitto' && r.metrics !== undefined && r.metrics.lost > 0) {
      process.stdout.write(
        `\nWARNING: ${r.broker} lost ${r.metrics.lost} acknowledged message(s) in ${r.scenario} rep ${r.rep}\n`,
      );
    }
  }
  const options = {
    ...opts,
    out: undefined,
    drainQuietMs,
    mosquitto: 'persistence true, autosave_interval 1800, max_queued_messages 0',
  };
  writeResults(opts.out, startedAt, options, summary, records);
  cleanup();
}

runMain('persistence bench', main, killAll);
