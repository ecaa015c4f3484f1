/**
 * Operator-facing errors carry the EF_ codes of docs/troubleshooting.md everywhere: a configuration file that cannot be read or is
 * invalid (text on stderr, or one JSON log line with `--log-format json`), a rejected SIGHUP reload, a start-up
 * failure; and a data directory held by another edgeferry names that process and says to stop it, never to move
 * the data aside with --reset-store. Real gateway processes.
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { makeCerts } from '../fixtures/certs.js';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, runCli, startGateway, type Gateway } from '../helpers/gateway.js';
import { openClient } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

/** The JSON log lines of a CLI run's stdout. */
const jsonLines = (stdout: string) =>
  stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);

/** Sends SIGHUP and waits for the next log line with message `msg`. */
async function sighup(gw: Gateway, msg: string): Promise<Record<string, unknown>> {
  const before = logLines(gw).filter((l) => l.msg === msg).length;
  gw.proc.kill('SIGHUP');
  return waitFor(() => logLines(gw).filter((l) => l.msg === msg)[before], 10_000, {
    message: () => `log line "${msg}" after SIGHUP; output:\n${gw.output()}`,
  });
}

/** A copy of `gw`'s configuration on another port, same data directory: a second gateway. */
function secondConfig(gw: Gateway, port: number): string {
  const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { listeners: { port: number }[] };
  config.listeners[0].port = port;
  const file = join(d.tempDir('edgeferry-second-'), 'second.yaml');
  writeFileSync(file, JSON.stringify(config));
  return file;
}

describe('EF_ codes on start-up errors', { timeout: 60_000 }, () => {
  it('a configuration file that cannot be read: EF_CONFIG_UNREADABLE on stderr, exit 2', async () => {
    const dir = d.tempDir('edgeferry-errors-');
    const missing = await runCli(['--config', join(dir, 'nope.yaml')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^edgeferry: EF_CONFIG_UNREADABLE: .*nope\.yaml.*cannot read the file: ENOENT/);
    // A directory cannot be read as a file, also by root (CI).
    const directory = await runCli(['--check-config', '--config', dir]);
    expect(directory.code).toBe(2);
    expect(directory.stderr).toMatch(/^edgeferry: EF_CONFIG_UNREADABLE: .*cannot read the file: EISDIR/);
    expect(directory.stdout).toBe('');
  });

  it('with --log-format json, an unreadable or invalid configuration is one JSON fatal line with its code', async () => {
    const dir = d.tempDir('edgeferry-errors-');
    const missing = await runCli(['--config', join(dir, 'nope.yaml'), '--log-format', 'json']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toBe('');
    const [line, ...rest] = jsonLines(missing.stdout);
    expect(rest).toEqual([]);
    expect(line).toMatchObject({
      level: 60,
      code: 'EF_CONFIG_UNREADABLE',
      msg: expect.stringContaining('cannot read the file: ENOENT'),
      pid: expect.any(Number),
    });

    const file = join(dir, 'gw.yaml');
    writeFileSync(file, 'broker:\n  maxInflight: 0\n');
    const invalid = await runCli(['--config', file, '--log-format', 'json']);
    expect(invalid.code).toBe(2);
    expect(jsonLines(invalid.stdout)).toEqual([
      expect.objectContaining({
        level: 60,
        code: 'EF_CONFIG_INVALID',
        problems: [expect.objectContaining({ path: 'broker.maxInflight', location: `${file}:2:16` })],
      }),
    ]);
    // Without the flag, text for people, with the code.
    const text = await runCli(['--check-config', '--config', file]);
    expect(text.stderr).toMatch(
      new RegExp(`^edgeferry: EF_CONFIG_INVALID: ${file}: 1 problem\\n  ${file}:2:16 broker.maxInflight: `),
    );
  });

  it('a start-up failure logs the code of its cause: a taken port is one EF_LISTENER_BIND line (exit 1), an audit file that cannot be opened EF_CONFIG_INVALID (exit 2)', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    d.defer(() => new Promise<void>((resolve) => blocker.close(() => resolve())));
    const dir = d.tempDir('edgeferry-errors-');
    const file = join(dir, 'gw.yaml');
    const { port } = blocker.address() as { port: number };
    writeFileSync(
      file,
      JSON.stringify({ listeners: [{ port }], storage: { path: join(dir, 'data') }, log: { format: 'json' } }),
    );
    const taken = await runCli(['--config', file]);
    expect(taken.code).toBe(1);
    // One line: which listener, which port, what probably holds it; found before the store opens, so no store lines
    // (nor a stack, nor the system's error text twice) come with it.
    const inUse = `port ${port} is already in use by another program: another edgeferry, or a Mosquitto service (Debian's mosquitto package starts one on 1883)? \`ss -ltnp 'sport = :${port}'\` names it`;
    expect(jsonLines(taken.stdout).map(({ level, msg, code, err }) => ({ level, msg, code, err }))).toEqual([
      { level: 30, msg: 'edgeferry starting', code: undefined, err: undefined },
      {
        level: 60,
        msg: `tcp listener 127.0.0.1:${port} cannot listen: ${inUse}`,
        code: 'EF_LISTENER_BIND',
        err: undefined,
      },
    ]);
    // The metrics listener alike.
    writeFileSync(
      file,
      JSON.stringify({
        listeners: [{ port: await freePort() }],
        metrics: { port },
        storage: { path: join(dir, 'data') },
        log: { format: 'json' },
      }),
    );
    const metricsTaken = await runCli(['--config', file]);
    expect(metricsTaken.code).toBe(1);
    expect(jsonLines(metricsTaken.stdout).map((l) => l.msg)).toEqual([
      'edgeferry starting',
      `metrics endpoint 127.0.0.1:${port} cannot listen: ${inUse}`,
    ]);
    expect(existsSync(join(dir, 'data'))).toBe(false);

    // Below a regular file no directory can be made, nor a file opened, also by root.
    writeFileSync(join(dir, 'plain'), '');
    const auditFile = join(dir, 'plain', 'audit.log');
    writeFileSync(
      file,
      JSON.stringify({
        listeners: [{ port: await freePort() }],
        storage: { path: join(dir, 'data') },
        log: { format: 'json', auditFile },
      }),
    );
    const audit = await runCli(['--config', file]);
    expect(audit.code).toBe(2);
    expect(jsonLines(audit.stdout).at(-1)).toMatchObject({
      level: 60,
      code: 'EF_CONFIG_INVALID',
      problems: [{ path: 'log.auditFile', message: expect.stringMatching(/^cannot open the file for appending: /) }],
    });
  });
});

describe('EF_ codes on a rejected SIGHUP reload', { timeout: 60_000 }, () => {
  it('an invalid file is EF_CONFIG_INVALID, a file that cannot be read EF_CONFIG_UNREADABLE, a bad ACL file EF_CONFIG_INVALID; the gateway keeps running', async () => {
    const dir = d.tempDir('edgeferry-errors-');
    const aclFile = join(dir, 'acl');
    writeFileSync(aclFile, 'topic readwrite #\n');
    const gw = d.add(await startGateway({ auth: { aclFile } }, { logLevel: 'info' }));
    const good = readFileSync(gw.configFile, 'utf8');

    writeFileSync(
      gw.configFile,
      good.replace('"broker"', '"brokre"').replace('"auth"', '"broker": { "maxInflight": 0 }, "auth"'),
    );
    const invalid = await sighup(gw, 'config reload rejected, keeping the running config');
    expect(invalid).toMatchObject({
      level: 50,
      code: 'EF_CONFIG_INVALID',
      configFile: gw.configFile,
      problems: [expect.objectContaining({ path: 'broker.maxInflight' })],
    });

    rmSync(gw.configFile);
    mkdirSync(gw.configFile);
    const unreadable = await sighup(gw, 'config reload rejected, keeping the running config');
    expect(unreadable).toMatchObject({
      level: 50,
      code: 'EF_CONFIG_UNREADABLE',
      problems: [expect.objectContaining({ message: expect.stringContaining('EISDIR') })],
    });
    rmSync(gw.configFile, { recursive: true });
    writeFileSync(gw.configFile, good);

    writeFileSync(aclFile, 'topik read typo/#\n');
    const acl = await sighup(gw, 'config reload failed');
    expect(acl).toMatchObject({
      level: 50,
      code: 'EF_CONFIG_INVALID',
      problems: [expect.objectContaining({ path: 'auth.aclFile', location: `${aclFile}:1` })],
    });

    expect(gw.proc.exitCode).toBeNull();
    d.add(await openClient(gw.url, { protocolVersion: 5 }));
  });
});

describe('EF_ codes for TLS files that do not work', { timeout: 60_000 }, () => {
  it('a certificate whose key does not match is EF_CONFIG_INVALID naming the listener: at start (exit 2), and on SIGHUP (kept running)', async () => {
    const pki = makeCerts(d.tempDir('edgeferry-pki-'), { clients: [] });
    const other = makeCerts(d.tempDir('edgeferry-pki2-'), { clients: [] });
    const dir = d.tempDir('edgeferry-errors-');
    const certFile = join(dir, 'server.pem');
    const keyFile = join(dir, 'server.key');
    copyFileSync(other.server.cert, certFile);
    copyFileSync(pki.server.key, keyFile);
    const port = await freePort();
    const file = join(dir, 'gw.yaml');
    const tlsListener = { type: 'tls', host: '127.0.0.1', port, tls: { certFile, keyFile } };
    writeFileSync(
      file,
      JSON.stringify({ listeners: [tlsListener], storage: { path: join(dir, 'data') }, log: { format: 'json' } }),
    );
    const start = await runCli(['--config', file]);
    expect(start.code).toBe(2);
    expect(jsonLines(start.stdout).at(-1)).toMatchObject({
      level: 60,
      code: 'EF_CONFIG_INVALID',
      msg: expect.stringContaining(`tls listener 127.0.0.1:${port}: its TLS files are not usable`),
    });

    copyFileSync(pki.server.cert, certFile);
    const gw = d.add(
      await startGateway(
        { listeners: [{ type: 'tcp', host: '127.0.0.1', port: await freePort() }, tlsListener] },
        { logLevel: 'info' },
      ),
    );
    copyFileSync(other.server.cert, certFile);
    const reload = await sighup(gw, 'TLS files not reloaded, the listeners keep their current certificates');
    expect(reload).toMatchObject({ level: 50, code: 'EF_CONFIG_INVALID' });
    expect(gw.proc.exitCode).toBeNull();
  });
});

describe('--check-config reads every file the start reads', { timeout: 60_000 }, () => {
  it('refuses a bad ACL file, a bad password file, TLS files that do not load and an empty metrics token, as the start does (exit 2), naming each file, line and key', async () => {
    const dir = d.tempDir('edgeferry-check-');
    const pki = makeCerts(d.tempDir('edgeferry-pki-'), { clients: [] });
    const other = makeCerts(d.tempDir('edgeferry-pki2-'), { clients: [] });
    const [aclFile, passwordFile, tokenFile] = ['acl', 'passwd', 'token'].map((name) => join(dir, name));
    writeFileSync(aclFile, 'topic read plant/#\ntopc write plant/#\nuser\n');
    writeFileSync(passwordFile, 'alice:notahash\n');
    writeFileSync(tokenFile, '\n');
    const file = join(dir, 'gw.yaml');
    const port = await freePort();
    writeFileSync(
      file,
      JSON.stringify({
        listeners: [
          { port: await freePort() },
          { type: 'tls', host: '127.0.0.1', port, tls: { certFile: other.server.cert, keyFile: pki.server.key } },
        ],
        auth: { aclFile, passwordFile },
        metrics: { port: await freePort(), auth: { tokenFile } },
        storage: { path: join(dir, 'data') },
      }),
    );
    const check = await runCli(['--check-config', '--config', file]);
    expect(check.code).toBe(2);
    expect(check.stdout).toBe('');
    const lines = check.stderr.split('\n');
    expect(lines[0]).toBe(`edgeferry: EF_CONFIG_INVALID: ${file}: 5 problems`);
    expect(lines.slice(1, 4)).toEqual([
      `  ${passwordFile}:1 auth.passwordFile: not a "user:$7$..." or "user:$6$..." line`,
      `  ${aclFile}:2 auth.aclFile: unknown keyword "topc"`,
      `  ${aclFile}:3 auth.aclFile: user without a name`,
    ]);
    expect(lines[4]).toMatch(
      new RegExp(
        `^  ${file} listeners\\.1\\.tls: tls listener 127\\.0\\.0\\.1:${port}: its TLS files are not usable: `,
      ),
    );
    expect(lines[5]).toBe(`  ${file} metrics.auth.tokenFile: the token file is empty`);
    // The start refuses the same file with the same code: the check said so first (the unit's ExecStartPre).
    const start = await runCli(['--config', file, '--log-format', 'json']);
    expect(start.code).toBe(2);
    expect(jsonLines(start.stdout).at(-1)).toMatchObject({ level: 60, code: 'EF_CONFIG_INVALID' });
  });

  it('warns about console and metrics users that are not in the password file and a bridge whose TLS files do not load, and passes (exit 0); the start warns about the users too', async () => {
    const dir = d.tempDir('edgeferry-check-');
    const pki = makeCerts(d.tempDir('edgeferry-pki-'), { clients: [] });
    const other = makeCerts(d.tempDir('edgeferry-pki2-'), { clients: [] });
    const passwordFile = join(dir, 'passwd');
    execFileSync('mosquitto_passwd', ['-c', '-b', passwordFile, 'alice', 'alice-secret'], { stdio: 'pipe' });
    const patch = {
      auth: { passwordFile },
      listeners: [{ type: 'tcp', host: '127.0.0.1', port: await freePort(), allowAnonymous: true }],
      metrics: { host: '127.0.0.1', port: await freePort(), auth: { users: ['prometheus'] } },
      console: { viewers: ['alice', 'bob'], operators: ['carol'] },
      bridges: [
        {
          name: 'central',
          remote: {
            urls: [`mqtts://127.0.0.1:${await freePort()}`],
            tls: { certFile: other.server.cert, keyFile: pki.server.key },
          },
          topics: [{ filter: 'plant/#' }],
        },
      ],
    };
    const file = join(dir, 'gw.yaml');
    writeFileSync(file, JSON.stringify({ ...patch, storage: { path: join(dir, 'data') } }));
    const check = await runCli(['--check-config', '--config', file]);
    expect(check.code).toBe(0);
    expect(check.stdout).toBe(`config OK: ${file} (4 warnings)\n`);
    const warnings = check.stderr.trim().split('\n');
    expect(warnings.slice(0, 3)).toEqual([
      'edgeferry: warning: console.viewers: user "bob" is not in auth.passwordFile: it cannot log in',
      'edgeferry: warning: console.operators: user "carol" is not in auth.passwordFile: it cannot log in',
      'edgeferry: warning: metrics.auth.users: user "prometheus" is not in auth.passwordFile: it cannot log in',
    ]);
    expect(warnings[3]).toMatch(
      /^edgeferry: warning: bridges\.0\.remote\.tls: the TLS files do not load, the bridge cannot connect: .*key values mismatch/,
    );

    const gw = d.add(await startGateway(patch));
    expect(
      logLines(gw)
        .filter((l) => l.key !== undefined)
        .map((l) => [l.level, l.key, l.msg]),
    ).toEqual([
      [40, 'console.viewers', 'user "bob" is not in auth.passwordFile: it cannot log in'],
      [40, 'console.operators', 'user "carol" is not in auth.passwordFile: it cannot log in'],
      [40, 'metrics.auth.users', 'user "prometheus" is not in auth.passwordFile: it cannot log in'],
    ]);
  });
});

describe('a data directory held by another edgeferry', { timeout: 90_000 }, () => {
  it('a second gateway, store list and --reset-store name the holder (pid) and say to stop it, never to use --reset-store; nothing is moved', async () => {
    const gw = d.add(await startGateway());
    const holder = gw.proc.pid;
    const client = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await client.publish('held/a', 'before', { qos: 1, retain: true });
    const second = secondConfig(gw, await freePort());

    const gateway = await runCli(['--config', second, '--log-format', 'json']);
    expect(gateway.code).toBe(3);
    const fatal = jsonLines(gateway.stdout).at(-1);
    expect(fatal).toMatchObject({ level: 60, code: 'EF_STORE_IN_USE' });
    expect(fatal?.msg).toMatch(
      new RegExp(`in use by another edgeferry, process ${holder} \\(.*cli\\.js.*\\): stop it first`),
    );
    expect(gateway.stdout).not.toContain('--reset-store');

    const list = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(list.code).toBe(3);
    expect(list.stderr).toMatch(
      new RegExp(
        `^edgeferry store: EF_STORE_IN_USE: the data directory .* is in use by another edgeferry, process ${holder}`,
      ),
    );
    expect(list.stderr).not.toContain('--reset-store');

    const reset = await runCli(['--config', second, '--reset-store', '--log-format', 'json']);
    expect(reset.code).toBe(3);
    expect(jsonLines(reset.stdout).at(-1)).toMatchObject({ level: 60, code: 'EF_STORE_IN_USE' });
    expect(readFileSync(join(gw.dataDir, 'edgeferry.lock'), 'utf8')).toContain(`"pid":${holder}`);
    expect(existsSync(join(gw.dataDir, 'data.mdb'))).toBe(true);

    // The holder never noticed: it serves and stores on.
    await client.publish('held/b', 'after', { qos: 1, retain: true });
    await gw.restart();
    const reader = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await reader.subscribe('held/#', { qos: 1 });
    await reader.waitForMessages(2);
    expect(reader.payloads().sort()).toEqual(['after', 'before']);
  });

  it('is held before it is checked: a damaged data.mdb under a live holder is EF_STORE_IN_USE, not damage to reset', async () => {
    const dir = d.tempDir('edgeferry-errors-');
    const dataDir = join(dir, 'data');
    mkdirSync(dataDir);
    writeFileSync(join(dataDir, 'data.mdb'), Buffer.alloc(16_384)); // no LMDB meta page: damage, if anyone looked
    // The holder as edgeferry.lock records it (pid, boot id, process start time): any live process will do.
    const holder = spawn('sleep', ['60'], { stdio: 'ignore' });
    d.defer(() => void holder.kill('SIGKILL'));
    const stat = readFileSync(`/proc/${holder.pid}/stat`, 'utf8');
    const start = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    const bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    writeFileSync(join(dataDir, 'edgeferry.lock'), JSON.stringify({ pid: holder.pid, bootId, start }));
    const file = join(dir, 'gw.yaml');
    writeFileSync(file, JSON.stringify({ listeners: [{ port: await freePort() }], storage: { path: dataDir } }));

    const gateway = await runCli(['--config', file, '--log-format', 'json']);
    expect(gateway.code).toBe(3);
    expect(jsonLines(gateway.stdout).at(-1)).toMatchObject({
      code: 'EF_STORE_IN_USE',
      msg: expect.stringContaining(`in use by another edgeferry, process ${holder.pid} (sleep 60): stop it first`),
    });
    expect(gateway.stdout).not.toMatch(/reset-store|damaged|not an LMDB/);
    const list = await runCli(['store', 'list', '--config', file]);
    expect(list.code).toBe(3);
    expect(list.stderr).toContain('EF_STORE_IN_USE');
  });
});
