/**
 * Systemd: the notify protocol of the real gateway process against real AF_UNIX datagram sockets
 * (READY only once the listener accepts, WATCHDOG at half of WATCHDOG_USEC, STOPPING on SIGTERM, exit 0), the
 * systemd-notify fallback on an abstract socket, and the unit file checked by `systemd-analyze` and run the way
 * systemd runs it (ExecStartPre, ExecStart, ExecReload's SIGHUP, SIGTERM).
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway } from '../helpers/gateway.js';
import { openClient } from '../helpers/mqtt-client.js';
import { openNotifySocket } from '../helpers/notify-socket.js';
import { freePort } from '../helpers/ports.js';
import { delay, waitFor } from '../helpers/wait.js';

const d = useDisposer();
const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const UNIT = join(ROOT, 'systemd', 'edgeferry.service');
/** The Node.js runtime the package bundles, which the unit runs. */
const BUNDLED_NODE = '/opt/edgeferry/node/bin/node';

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolveConnect) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolveConnect(true);
    });
    socket.once('error', () => resolveConnect(false));
  });
}

/** Datagrams received on an abstract AF_UNIX socket (`@name`), by a small Python listener: one JSON line each. */
async function openAbstractNotifySocket(): Promise<{ address: string; messages(): string[]; stop(): Promise<void> }> {
  const name = `edgeferry-test-${randomBytes(6).toString('hex')}`;
  const script = [
    'import json, socket, sys',
    's = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)',
    `s.bind('\\0' + sys.argv[1])`,
    'print("bound", flush=True)',
    'while True:',
    '    print(json.dumps(s.recv(65536).decode()), flush=True)',
  ].join('\n');
  const child: ChildProcess = spawn('python3', ['-c', script, name], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: string[] = [];
  let partial = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    const parts = (partial + chunk.toString()).split('\n');
    partial = parts.pop() ?? '';
    lines.push(...parts);
  });
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.kill('SIGTERM');
    await exited;
  };
  await waitFor(() => lines.includes('bound'), 5000, { message: 'python notify listener bound' });
  return {
    address: `@${name}`,
    messages: () => lines.filter((l) => l !== 'bound').map((l) => JSON.parse(l) as string),
    stop,
  };
}

describe('systemd notify protocol, real gateway process', { timeout: 60_000 }, () => {
  it('sends READY=1 with a STATUS only once the MQTT listener accepts connections, and only once', async () => {
    const sock = openNotifySocket(d.tempDir('edgeferry-notify-'));
    d.defer(() => sock.close());
    const port = await freePort();
    let acceptingAtReady: boolean | undefined;
    let watching = true as boolean; // cleared below while the watcher runs
    // Watch for READY while the gateway starts; the moment it arrives, probe the port.
    const watcher = (async () => {
      while (watching) {
        if (sock.messages.some((m) => m.startsWith('READY=1'))) {
          acceptingAtReady = await canConnect(port);
          return;
        }
        await delay(2);
      }
    })();
    try {
      d.add(
        await startGateway(
          { listeners: [{ type: 'tcp', host: '127.0.0.1', port }] },
          { env: { NOTIFY_SOCKET: sock.path } },
        ),
      );
      await waitFor(() => acceptingAtReady !== undefined, 10_000, {
        message: () => `READY=1; got ${JSON.stringify(sock.messages)}`,
      });
    } finally {
      watching = false;
      await watcher;
    }
    expect(acceptingAtReady).toBe(true);
    const ready = sock.messages.filter((m) => m.startsWith('READY=1'));
    expect(ready).toHaveLength(1);
    expect(ready[0]).toMatch(/^READY=1\nSTATUS=1 listener\(s\), 0 bridge\(s\)$/);
    expect(sock.messages.filter((m) => m.startsWith('error'))).toEqual([]);
  });

  it('never sends READY=1 when a listener cannot bind: the process exits non-zero instead', async () => {
    const dir = d.tempDir('edgeferry-notify-');
    const sock = openNotifySocket(dir);
    d.defer(() => sock.close());
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', () => r()));
    d.defer(() => new Promise<void>((r) => taken.close(() => r())));
    const busyPort = (taken.address() as net.AddressInfo).port;
    const config = join(dir, 'edgeferry.yaml');
    writeFileSync(
      config,
      JSON.stringify({
        listeners: [{ port: await freePort() }, { port: busyPort }],
        storage: { path: join(dir, 'data') },
        log: { level: 'warn', format: 'json' },
      }),
    );
    const child = spawn(process.execPath, [join(ROOT, 'dist', 'src', 'cli.js'), '--config', config], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NOTIFY_SOCKET: sock.path },
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
    expect(code, out).toBe(1);
    expect(out).toMatch(/EADDRINUSE|cannot listen/);
    expect(sock.messages.filter((m) => m.startsWith('READY=1'))).toEqual([]);
  });

  it('pings WATCHDOG=1 at half of WATCHDOG_USEC, then on SIGTERM sends STOPPING=1, stops pinging and exits 0', async () => {
    const sock = openNotifySocket(d.tempDir('edgeferry-notify-'));
    d.defer(() => sock.close());
    // WatchdogSec=0.6 s: a ping every 300 ms.
    const gw = d.add(await startGateway({}, { env: { NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '600000' } }));
    const pings = () => sock.messages.filter((m) => m === 'WATCHDOG=1').length;
    await waitFor(() => pings() >= 1, 5000, { message: 'a first WATCHDOG=1' });
    const first = pings();
    const started = performance.now();
    await waitFor(() => pings() >= first + 6, 10_000, {
      message: () => `6 more WATCHDOG=1; got ${JSON.stringify(sock.messages)}`,
    });
    const elapsedMs = performance.now() - started;
    // Six periods of 300 ms: never faster than asked, and well inside the 600 ms watchdog.
    expect(elapsedMs).toBeGreaterThan(6 * 300 * 0.8);
    expect(elapsedMs).toBeLessThan(6 * 600);

    await gw.stop();
    expect(gw.proc.exitCode).toBe(0);
    await waitFor(() => sock.messages.includes('STOPPING=1'), 5000, {
      message: () => `STOPPING=1; got ${JSON.stringify(sock.messages)}`,
    });
    const stoppingAt = sock.messages.indexOf('STOPPING=1');
    expect(sock.messages.indexOf(sock.messages.find((m) => m.startsWith('READY=1')) ?? '')).toBeLessThan(stoppingAt);
    expect(sock.messages.slice(stoppingAt + 1)).not.toContain('WATCHDOG=1');
  });

  it('does not ping a watchdog meant for another process (WATCHDOG_PID), but still sends READY', async () => {
    const sock = openNotifySocket(d.tempDir('edgeferry-notify-'));
    d.defer(() => sock.close());
    const gw = d.add(
      await startGateway({}, { env: { NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '200000', WATCHDOG_PID: '1' } }),
    );
    await waitFor(() => sock.messages.some((m) => m.startsWith('READY=1')), 5000);
    // Ten would-be periods (100 ms each) after READY; a MQTT round trip paces the wait.
    const c = d.add(await openClient(gw.url));
    await delay(1000);
    await c.stop();
    expect(sock.messages.filter((m) => m === 'WATCHDOG=1')).toEqual([]);
  });

  it('falls back to the systemd-notify binary for an abstract NOTIFY_SOCKET (@name), which unix-dgram cannot address', async () => {
    const abstract = await openAbstractNotifySocket();
    d.defer(() => abstract.stop());
    const gw = d.add(await startGateway({}, { env: { NOTIFY_SOCKET: abstract.address, WATCHDOG_USEC: '1000000' } }));
    await waitFor(() => abstract.messages().some((m) => m.startsWith('READY=1')), 10_000, {
      message: () => `READY=1; got ${JSON.stringify(abstract.messages())}`,
    });
    expect(abstract.messages().find((m) => m.startsWith('READY=1'))).toMatch(/^READY=1\nSTATUS=1 listener\(s\)/);
    await waitFor(() => abstract.messages().includes('WATCHDOG=1'), 5000, {
      message: () => `WATCHDOG=1; got ${JSON.stringify(abstract.messages())}`,
    });
    await gw.stop();
    expect(gw.proc.exitCode).toBe(0);
    await waitFor(() => abstract.messages().includes('STOPPING=1'), 5000, {
      message: () => `STOPPING=1; got ${JSON.stringify(abstract.messages())}`,
    });
    expect(gw.output()).not.toMatch(/systemd notification failed/);
  });
});

describe('systemd unit file', { timeout: 60_000 }, () => {
  const unit = readFileSync(UNIT, 'utf8');
  const directive = (key: string): string[] =>
    unit
      .split('\n')
      .filter((l) => l.startsWith(`${key}=`))
      .map((l) => l.slice(key.length + 1));

  it('passes systemd-analyze verify', () => {
    // systemd-analyze checks that the program exists: the bundled runtime is only there once the package is
    // installed (test/package verifies the installed unit), so here the unit runs this Node.
    const copy = join(d.tempDir('edgeferry-verify-'), 'edgeferry.service');
    writeFileSync(copy, unit.replaceAll(BUNDLED_NODE, process.execPath));
    const out = execFileSync('systemd-analyze', ['verify', '--man=no', copy], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    expect(out).toBe('');
  });

  it('has an exposure of at most 2.0 ("OK") in systemd-analyze security --offline', () => {
    const out = execFileSync('systemd-analyze', ['security', '--offline=true', '--no-pager', UNIT], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const m = /Overall exposure level for edgeferry\.service: (\d+\.\d+) (\S+)/.exec(out);
    expect(m, out).not.toBeNull();
    expect(Number(m![1])).toBeLessThanOrEqual(2.0);
    expect(m![2]).toBe('OK');
  });

  it('declares the notify type, watchdog, restart policy, dedicated user, directories, memory ceiling and hardening the issue asks for', () => {
    expect(directive('Type')).toEqual(['notify']);
    expect(Number(directive('WatchdogSec')[0])).toBeGreaterThan(0);
    expect(directive('Restart')).toEqual(['on-failure']);
    expect(directive('User')).toEqual(['edgeferry']);
    expect(directive('StateDirectory')).toEqual(['edgeferry']);
    expect(directive('ConfigurationDirectory')).toEqual(['edgeferry']);
    expect(directive('ProtectSystem')).toEqual(['strict']);
    expect(directive('ProtectHome')).toEqual(['yes']);
    expect(directive('PrivateTmp')).toEqual(['yes']);
    expect(directive('NoNewPrivileges')).toEqual(['yes']);
    expect(directive('CapabilityBoundingSet')).toEqual(['']);
    expect(directive('RestrictAddressFamilies')[0]).toMatch(/AF_INET/);
    expect(directive('ExecReload')[0]).toMatch(/kill -HUP \$MAINPID/);
    expect(Number(directive('TimeoutStopSec')[0])).toBeGreaterThan(25); // the CLI's own stop deadline is 25 s
    // A flood that escapes the gateway's limits restarts this service instead of starving the box.
    expect(directive('MemoryMax')[0]).toMatch(/^\d+[KMG]$/);
  });

  it('runs as systemd would run it: ExecStartPre checks the config, ExecStart notifies READY, ExecReload reloads, SIGTERM exits 0', async () => {
    const dir = d.tempDir('edgeferry-unit-');
    const port = await freePort();
    const config = join(dir, 'edgeferry.yaml');
    writeFileSync(
      config,
      JSON.stringify({
        listeners: [{ port }],
        storage: { path: join(dir, 'data') },
        log: { level: 'info', format: 'json' },
      }),
    );
    // The unit's own command lines, with the install paths pointed at this checkout and the temp config.
    const argv = (key: string): string[] => {
      const line = directive(key)[0];
      expect(line, key).toBeDefined();
      return line
        .replaceAll(BUNDLED_NODE, process.execPath)
        .replaceAll('/opt/edgeferry', ROOT)
        .replaceAll('/etc/edgeferry/edgeferry.yaml', config)
        .split(/\s+/);
    };
    const [preExe, ...preArgs] = argv('ExecStartPre');
    expect(execFileSync(preExe, preArgs, { encoding: 'utf8' })).toMatch(/config OK/);

    const sock = openNotifySocket(dir);
    d.defer(() => sock.close());
    const [exe, ...args] = argv('ExecStart');
    const child = spawn(exe, args, {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '30000000' },
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (out += c.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    d.defer(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    await waitFor(() => sock.messages.some((m) => m.startsWith('READY=1')), 15_000, {
      message: () => `READY=1 from ExecStart; output:\n${out}`,
    });
    expect(await canConnect(port)).toBe(true);
    // `--log-format json` from ExecStart: every line is JSON.
    expect(out.split('\n').filter((l) => l !== '' && !l.startsWith('{'))).toEqual([]);

    child.kill('SIGHUP'); // ExecReload=/bin/kill -HUP $MAINPID
    await waitFor(() => out.includes('"config reloaded"'), 10_000, { message: () => `a reload; output:\n${out}` });

    const stopStarted = performance.now();
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(performance.now() - stopStarted).toBeLessThan(Number(directive('TimeoutStopSec')[0]) * 1000);
    expect(sock.messages).toContain('STOPPING=1');
  });
});
