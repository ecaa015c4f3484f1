/**
 * A real Mosquitto broker for tests (Debian `mosquitto`), on a free 127.0.0.1 port with its own temp conf,
 * persistence dir and log. Use it as the "central broker" upstream of a bridge.
 *
 *   const central = d.add(await startMosquitto({ persistence: true }));
 *   await central.stop(); ... await central.restart();   // same port, same persistence
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import type { TestPki } from '../fixtures/certs.js';
import { freePort } from './ports.js';
import { removeDir, tempDir } from './temp.js';
import { delay } from './wait.js';

export interface MosquittoOptions {
  /** Extra mosquitto.conf lines, appended after the defaults (later lines win for global options). */
  extraConf?: string;
  /** Keep sessions and queued messages across `restart()` (saved on SIGTERM). Default false. */
  persistence?: boolean;
  /** Listen on this port instead of a free one. */
  port?: number;
  /** Listen on this loopback address instead of 127.0.0.1 (e.g. 127.0.0.2: a second broker on the same port). */
  host?: string;
}

export interface Mosquitto {
  readonly port: number;
  /** `mqtt://<host>:<port>` */
  readonly url: string;
  /** Temp dir with mosquitto.conf, mosquitto.log and the persistence file. */
  readonly dir: string;
  readonly running: boolean;
  /** SIGTERM and wait for exit (Mosquitto saves persistence); idempotent. Keeps `dir` for `restart()`. */
  stop(): Promise<void>;
  /** SIGKILL (no persistence save). */
  kill(): Promise<void>;
  /** Starts again with the same port, conf and persistence. */
  restart(): Promise<void>;
  /** Stops and removes the temp dir (what `Disposer.add` calls). */
  dispose(): Promise<void>;
  /** The broker's log so far, for failure messages. */
  log(): string;
}

export async function startMosquitto(options: MosquittoOptions = {}): Promise<Mosquitto> {
  const dir = tempDir('edgeferry-mosquitto-');
  const port = options.port ?? (await freePort());
  const host = options.host ?? '127.0.0.1';
  const conf = join(dir, 'mosquitto.conf');
  const logFile = join(dir, 'mosquitto.log');
  writeFileSync(
    conf,
    [
      `listener ${port} ${host}`,
      'allow_anonymous true',
      // Tests run as root in CI containers; Mosquitto would otherwise switch to its own user and lose access
      // to the temp dir. Ignored when not root.
      `user ${userInfo().username}`,
      `persistence ${options.persistence ? 'true' : 'false'}`,
      `persistence_location ${dir}/`,
      // The checker subscriber must never be the one losing messages: no queue cap upstream in effect. Not 0
      // (unlimited): with 0, Mosquitto 2.0.11 closes the connection after every PUBLISH its ACL refuses (its quota
      // check after the refusal takes 0 literally), which a bridge reads as its session taken by a twin.
      'max_queued_messages 100000000',
      // ... nor the slow one: deliver to subscribers without Mosquitto's default window of 20.
      'max_inflight_messages 0',
      `log_dest file ${logFile}`,
      'log_type error',
      'log_type warning',
      'log_type notice',
      'log_type information',
      'connection_messages true',
      options.extraConf ?? '',
      '',
    ].join('\n'),
  );
  let proc: ChildProcess | undefined;
  let disposed = false;

  const launch = async (): Promise<void> => {
    const child = spawn('mosquitto', ['-c', conf], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    proc = child;
    const deadline = Date.now() + 10_000;
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`mosquitto exited (${child.exitCode ?? child.signalCode}): ${stderr}\n${readLog()}`);
      }
      if (await canConnect(port, host)) return;
      if (Date.now() > deadline)
        throw new Error(`mosquitto did not listen on ${host}:${port}: ${stderr}\n${readLog()}`);
      await delay(25);
    }
  };

  const readLog = (): string => {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '(no log)';
    }
  };

  const signal = async (sig: NodeJS.Signals): Promise<void> => {
    const child = proc;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(sig);
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };

  await launch();
  const handle: Mosquitto = {
    port,
    url: `mqtt://${host}:${port}`,
    dir,
    get running() {
      return proc !== undefined && proc.exitCode === null && proc.signalCode === null;
    },
    stop: () => signal('SIGTERM'),
    kill: () => signal('SIGKILL'),
    restart: async () => {
      await signal('SIGTERM');
      await launch();
    },
    dispose: async () => {
      if (disposed) return;
      disposed = true;
      await signal('SIGTERM');
      removeDir(dir);
    },
    log: readLog,
  };
  return handle;
}

function canConnect(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = tcpConnect(port, host);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * A Mosquitto with a second listener for TLS on `tlsUrl` (server certificate from `pki`, `require_certificate`
 * for mutual TLS); `url` stays plain, for checkers.
 */
export async function startTlsMosquitto(
  pki: TestPki,
  options: { requireCertificate?: boolean } = {},
): Promise<{ central: Mosquitto; tlsPort: number; tlsUrl: string }> {
  const tlsPort = await freePort();
  const central = await startMosquitto({
    extraConf: [
      `listener ${tlsPort} 127.0.0.1`,
      `cafile ${pki.ca}`,
      `certfile ${pki.server.cert}`,
      `keyfile ${pki.server.key}`,
      `require_certificate ${options.requireCertificate === true}`,
    ].join('\n'),
  });
  return { central, tlsPort, tlsUrl: `mqtts://127.0.0.1:${tlsPort}` };
}
