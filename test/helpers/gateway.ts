/**
 * The edgeferry gateway as a real process (`node dist/src/cli.js --config <file>`; run `npm run build` first).
 *
 *   const gw = d.add(await startGateway({ bridges: [{ name: 'central', remote: { urls: [central.url] },
 *                                                      topics: [{ filter: 'plant/#' }] }] }));
 *   await gw.kill('SIGKILL'); await gw.restart();   // same config, same data dir
 *
 * The config is written as JSON (valid YAML): a TCP listener on a free port, a temp storage dir, JSON logs at
 * `warn`, and `patch` merged on top (objects merged deeply, arrays replaced). Readiness is systemd's READY=1.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createConnection } from 'node:net';
import { afterAll, beforeAll } from 'vitest';
import { openNotifySocket } from './notify-socket.js';
import { freePort } from './ports.js';
import { removeDir, tempDir } from './temp.js';
import { delay, waitFor } from './wait.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const CLI = join(ROOT, 'dist', 'src', 'cli.js');

export interface Gateway {
  readonly port: number;
  /** `mqtt://127.0.0.1:<port>` */
  readonly url: string;
  /** Storage path (LMDB files), kept across `restart()`. */
  readonly dataDir: string;
  readonly configFile: string;
  /** The current process (replaced by `restart()`). */
  readonly proc: ChildProcess;
  /** stdout + stderr of every run so far (JSON log lines). */
  output(): string;
  /** Sends a signal and waits for the process to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** SIGTERM, waiting for a clean exit (SIGKILL after 15 s). */
  stop(): Promise<void>;
  /** Starts a new process with the same config and data dir, once the previous one exited. */
  restart(): Promise<void>;
  /** Stops and removes the temp dirs (what `Disposer.add` calls). */
  dispose(): Promise<void>;
}

export interface GatewayOptions {
  /** Log level for the process (default `warn`; `debug` helps when a test fails). */
  logLevel?: string;
  /** Milliseconds to wait for the MQTT listener (default 15000). */
  readyTimeoutMs?: number;
  /** Extra environment for the process, applied last (e.g. `NOTIFY_SOCKET`, `WATCHDOG_USEC`). */
  env?: Record<string, string>;
  /**
   * Run the process in a mount namespace of its own, with this file bound over /etc/hosts: host names resolve as
   * the test writes them, for this process only. Needs root (see `privateHostsProblem`).
   */
  hostsFile?: string;
}

/** The gateway's JSON log lines so far, parsed. */
export function logLines(gw: Gateway): Record<string, unknown>[] {
  return gw
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/**
 * Rewrites the gateway's config file with `edit`, sends SIGHUP and resolves with the next log line `msg` (one more
 * than there were before).
 */
export async function reloadGateway<C>(
  gw: Gateway,
  edit: (config: C) => void,
  msg: string,
): Promise<Record<string, unknown>> {
  const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as C;
  edit(config);
  writeFileSync(gw.configFile, JSON.stringify(config, null, 2));
  const count = (): Record<string, unknown>[] => logLines(gw).filter((l) => l.msg === msg);
  const before = count().length;
  gw.proc.kill('SIGHUP');
  return waitFor(() => count()[before], 15_000, {
    message: () => `log line "${msg}" after SIGHUP:\n${gw.output()}`,
  });
}

/** Why `hostsFile` cannot work here (no root, no mount namespaces), or undefined when it can. */
export function privateHostsProblem(): string | undefined {
  const probe = spawnSync('unshare', ['-m', 'sh', '-c', 'mount --bind /dev/null /etc/hosts'], { encoding: 'utf8' });
  if (probe.error !== undefined) return probe.error.message;
  return probe.status === 0 ? undefined : probe.stderr.trim() || `unshare exited ${probe.status}`;
}

/**
 * One gateway for the tests of a file or a describe block: started before them (with `patch`, or what `patch()`
 * returns, for what is known only then, such as free ports), disposed after them. Used like the Gateway it stands
 * for, from inside the tests:
 *
 *   const gw = useGateway({ broker: { maxQueuedMessages: 5 } });
 *   it('...', async () => { const c = await openClient(gw.url); ... });
 */
export function useGateway(
  patch: object | (() => object | Promise<object>) = {},
  options: GatewayOptions = {},
): Gateway {
  let current: Gateway | undefined;
  beforeAll(async () => {
    current = await startGateway(typeof patch === 'function' ? await patch() : patch, options);
  });
  afterAll(async () => {
    await current?.dispose();
  });
  const started = (): Gateway => {
    if (current === undefined) throw new Error('useGateway: the gateway starts before the tests; use it inside them');
    return current;
  };
  return {
    get port() {
      return started().port;
    },
    get url() {
      return started().url;
    },
    get dataDir() {
      return started().dataDir;
    },
    get configFile() {
      return started().configFile;
    },
    get proc() {
      return started().proc;
    },
    output: () => started().output(),
    kill: (signal) => started().kill(signal),
    stop: () => started().stop(),
    restart: () => started().restart(),
    dispose: () => started().dispose(),
  };
}

export async function startGateway(patch: object = {}, options: GatewayOptions = {}): Promise<Gateway> {
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` before the integration tests`);
  const dir = tempDir('edgeferry-gw-');
  const dataDir = join(dir, 'data');
  const port = await freePort();
  const base = {
    listeners: [{ type: 'tcp', host: '127.0.0.1', port }],
    storage: { path: dataDir },
    log: { level: options.logLevel ?? 'warn', format: 'json' },
  };
  const config = deepMerge(base, patch as Record<string, unknown>);
  const configFile = join(dir, 'edgeferry.yaml');
  writeFileSync(configFile, JSON.stringify(config, null, 2));
  const actualPort = (config.listeners as { port: number }[])[0]?.port ?? port;

  let out = '';
  let proc: ChildProcess | undefined;
  let disposed = false;

  /**
   * Starts the process and waits until it is ready: by default through the systemd notify protocol itself
   * (READY=1 comes once store, bridges, listeners and metrics are up, and needs no MQTT login, which would count as
   * a failed one on a listener that requires credentials); when the test brings its own NOTIFY_SOCKET, by a TCP
   * connect to the listener. A process that does not become ready is killed, not left behind.
   */
  const launch = async (): Promise<void> => {
    const notify = options.env?.NOTIFY_SOCKET === undefined ? openNotifySocket(dir) : undefined;
    const gateway = [process.execPath, CLI, '--config', configFile];
    // `unshare` and `sh` exec in turn, so the child's pid is the gateway's and signals reach it directly.
    const [command, ...args] =
      options.hostsFile === undefined
        ? gateway
        : ['unshare', '-m', 'sh', '-c', 'mount --bind "$0" /etc/hosts && exec "$@"', options.hostsFile, ...gateway];
    const child = spawn(command, args, {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NOTIFY_SOCKET: notify?.path ?? '', ...options.env },
    });
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    proc = child;
    const deadline = Date.now() + (options.readyTimeoutMs ?? 15_000);
    try {
      for (;;) {
        if (child.exitCode !== null || child.signalCode !== null) {
          throw new Error(`gateway exited (${child.exitCode ?? child.signalCode}) before it was ready:\n${tail(out)}`);
        }
        if (notify ? notify.messages.some((m) => m.startsWith('READY=1')) : await accepts(actualPort)) return;
        if (Date.now() > deadline)
          throw new Error(`gateway was not ready on port ${actualPort} in time:\n${tail(out)}`);
        await delay(50);
      }
    } catch (err) {
      child.kill('SIGKILL');
      throw err;
    } finally {
      notify?.close();
    }
  };

  const signal = async (sig: NodeJS.Signals, killAfterMs: number): Promise<void> => {
    const child = proc;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolveExit) => child.once('exit', () => resolveExit()));
    child.kill(sig);
    const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    await exited;
    clearTimeout(timer);
  };

  try {
    await launch();
  } catch (err) {
    removeDir(dir);
    throw err;
  }
  return {
    port: actualPort,
    url: `mqtt://127.0.0.1:${actualPort}`,
    dataDir,
    configFile,
    get proc() {
      return proc as ChildProcess;
    },
    output: () => out,
    kill: (sig = 'SIGKILL') => signal(sig, 5000),
    stop: () => signal('SIGTERM', 15_000),
    restart: async () => {
      await signal('SIGTERM', 15_000);
      await launch();
    },
    dispose: async () => {
      if (disposed) return;
      disposed = true;
      await signal('SIGTERM', 15_000);
      removeDir(dir);
    },
  };
}

/**
 * One sample from the gateway's /metrics on `port`: `sample` is its name with its labels as the gateway writes
 * them (`edgeferry_broker_messages_dropped_total{reason="queue_full"}`); undefined when absent.
 */
export async function metricValue(port: number, sample: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${sample} `));
  return line === undefined ? undefined : Number(line.slice(sample.length + 1));
}

/** A per-bridge gauge from the gateway's /metrics on `port` (bridge "central"), undefined when absent. */
export function bridgeGauge(port: number, name: string): Promise<number | undefined> {
  return metricValue(port, `${name}{bridge="central"}`);
}

/** Whether something accepts TCP connections on the port (the connection is closed at once). */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolveAccepts) => {
    const socket = createConnection(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolveAccepts(true);
    });
    socket.once('error', () => resolveAccepts(false));
  });
}

function tail(text: string, lines = 40): string {
  return text.split('\n').slice(-lines).join('\n');
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Objects merge key by key; arrays and scalars in `patch` replace. */
export function deepMerge(base: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(patch)) {
    const current = out[key];
    out[key] = isPlainObject(current) && isPlainObject(value) ? deepMerge(current, value) : value;
  }
  return out;
}

/**
 * A `startGateway` patch with one bridge `central` to `url`, tuned for tests: fast reconnects, short liveness
 * timeouts, replay unpaced. `bridge` is merged into the bridge entry (objects deeply, arrays replaced).
 */
export function bridgePatch(
  url: string | string[],
  bridge: Record<string, unknown> = {},
): { bridges: Record<string, unknown>[] } {
  const base = {
    name: 'central',
    remote: { urls: Array.isArray(url) ? url : [url], clientId: 'edgeferry-central', keepaliveS: 5 },
    topics: [{ filter: 'plant/#', direction: 'out' }],
    ackTimeoutS: 3,
    reconnect: { minDelayMs: 100, maxDelayMs: 1000 },
    replay: { messagesPerS: 0, bytesPerS: 0 },
  };
  return { bridges: [deepMerge(base, bridge)] };
}

/** Runs `edgeferry <args>` to completion (killed after 15 s), with `stdin` piped in (undefined: closed at once). */
export function runCli(
  args: readonly string[],
  stdin?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolveRun, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolveRun({ code, stdout, stderr });
    });
    child.stdin.end(stdin ?? '');
  });
}
