/**
 * The release as an operator installs it: the .deb of `npm run package` installed into this machine with dpkg
 * (no systemd as PID 1 needed), checked file by file, its command run without network, its unit verified, the
 * installed gateway started by hand as the `edgeferry` user on the installed config, upgraded over a buffered
 * backlog and persistent session, downgraded, removed and purged (the data stays), and the .tar.gz installed
 * offline with its install.sh.
 *
 * It changes the machine (a package, a user, /opt, /etc, /var/lib), so it runs only where EDGEFERRY_RELEASE names
 * the folder `npm run package` wrote (vitest.config.ts), as root, on a machine without edgeferry: CI (.ci/run).
 * It removes everything it installed when it ends. Its tests are the steps of one installation, in order: run
 * the file, not one of them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLmdbStore, SCHEMA_VERSION } from '../../src/store/lmdb/open.js';
import { silentLogger } from '../../src/util/logger.js';
import { useDisposer } from '../helpers/disposer.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient, runToolOk, startMosquittoSub } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();
const RELEASE = resolve(process.env.EDGEFERRY_RELEASE ?? 'release');
const CONFIG = '/etc/edgeferry/edgeferry.yaml';
const DATA = '/var/lib/edgeferry';
const UNIT = '/lib/systemd/system/edgeferry.service';

function run(command: string, args: readonly string[], options: { cwd?: string } = {}): string {
  const result = spawnSync(command, args, {
    encoding: 'utf8',
    cwd: options.cwd,
    timeout: 120_000,
    maxBuffer: 64 << 20,
  });
  if (result.status !== 0) {
    throw new Error(
      `${command} ${args.join(' ')} exited ${result.status ?? result.signal}:\n${result.stdout}\n${result.stderr}`,
    );
  }
  return result.stdout;
}

/** `dpkg -i`, timed: what an operator waits for. */
function dpkgInstall(deb: string): number {
  const started = performance.now();
  run('dpkg', ['-i', deb]);
  return (performance.now() - started) / 1000;
}

/** The installed package's version, or undefined when it is not installed. */
function installedVersion(): string | undefined {
  const r = spawnSync('dpkg-query', ['-W', '-f=${Status} ${Version}', 'edgeferry'], { encoding: 'utf8' });
  const m = /^install ok installed (\S+)$/.exec(r.stdout);
  return m?.[1];
}

/** The release's .deb (exactly one in EDGEFERRY_RELEASE) and its version. */
function releaseDeb(): { deb: string; version: string } {
  const debs = readdirSync(RELEASE).filter((f) => /^edgeferry_.+_amd64\.deb$/.test(f));
  if (debs.length !== 1)
    throw new Error(`expected one edgeferry_<version>_amd64.deb in ${RELEASE}, found ${JSON.stringify(debs)}`);
  return { deb: join(RELEASE, debs[0]), version: /^edgeferry_(.+)_amd64\.deb$/.exec(debs[0])![1] };
}

/** The same package with another version: what the next release of it looks like to dpkg and to the gateway. */
function rebuiltAs(deb: string, version: string): string {
  const dir = d.tempDir('edgeferry-deb-');
  const tree = join(dir, 'tree');
  run('dpkg-deb', ['-R', deb, tree]);
  const control = join(tree, 'DEBIAN', 'control');
  writeFileSync(control, readFileSync(control, 'utf8').replace(/^Version: .*$/m, `Version: ${version}`));
  const pkg = join(tree, 'opt', 'edgeferry', 'package.json');
  writeFileSync(pkg, JSON.stringify({ ...(JSON.parse(readFileSync(pkg, 'utf8')) as object), version }, null, 2));
  const out = join(dir, `edgeferry_${version}_amd64.deb`);
  run('dpkg-deb', ['--root-owner-group', '-Zgzip', '-z1', '--build', tree, out]);
  return out;
}

/** The installed command as the service user, the way the unit runs it. */
function asService(args: readonly string[]): [string, string[]] {
  return ['setpriv', ['--reuid=edgeferry', '--regid=edgeferry', '--init-groups', '/usr/bin/edgeferry', ...args]];
}

function runAsService(args: readonly string[]): string {
  return run(...asService(args));
}

interface Installed {
  readonly proc: ChildProcess;
  output(): string;
  /** SIGTERM; resolves with the exit code. */
  stop(): Promise<number | null>;
}

/** The installed gateway started by hand on the installed config; resolves once it logged that it started. */
async function startInstalled(): Promise<Installed> {
  const [command, args] = asService(['--log-format', 'json']);
  const proc = spawn(command, args, { cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (c: Buffer) => (out += c.toString()));
  proc.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  const stop = async (): Promise<number | null> => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    return exited;
  };
  d.defer(async () => {
    await stop();
  });
  await waitFor(() => out.includes('"msg":"edgeferry started"') || proc.exitCode !== null, 20_000, {
    message: () => `the installed gateway to start; output:\n${out}`,
  });
  expect(proc.exitCode, out).toBeNull();
  return { proc, output: () => out, stop };
}

/** The installed default config as an operator edits it: a free port (never 1883 in tests), and `extra` YAML. */
function editConfig(original: string, port: number, extra = ''): string {
  expect(original).toMatch(/^ {4}port: 1883$/m);
  const text = original.replace(/^ {4}port: 1883$/m, `    port: ${port}`) + extra;
  writeFileSync(CONFIG, text);
  return text;
}

/** Undoes everything the package and this file put on the machine (only what they made: see beforeAll). */
function removeEverything(): void {
  spawnSync('dpkg', ['--purge', 'edgeferry'], { encoding: 'utf8' });
  for (const path of [
    '/opt/edgeferry',
    '/etc/edgeferry',
    DATA,
    '/usr/bin/edgeferry',
    '/etc/systemd/system/edgeferry.service',
    '/usr/share/bash-completion/completions/edgeferry',
  ]) {
    rmSync(path, { recursive: true, force: true });
  }
  spawnSync('userdel', ['edgeferry'], { encoding: 'utf8' });
  spawnSync('groupdel', ['edgeferry'], { encoding: 'utf8' });
}

describe('the release package, installed into this machine', { timeout: 180_000 }, () => {
  const { deb, version } = releaseDeb();
  const next = `${version}+next1`;
  let original = '';

  beforeAll(() => {
    if (process.getuid?.() !== 0) {
      throw new Error('test/package installs the release with dpkg: run it as root (CI does, through .ci/run)');
    }
    const found = [
      installedVersion() !== undefined && 'the edgeferry package',
      existsSync('/opt/edgeferry') && '/opt/edgeferry',
      existsSync(DATA) && DATA,
      spawnSync('getent', ['passwd', 'edgeferry']).status === 0 && 'the edgeferry user',
    ].filter(Boolean);
    if (found.length > 0) {
      throw new Error(
        `test/package needs a machine without edgeferry and removes what it installs; found ${found.join(', ')}`,
      );
    }
  });
  afterAll(removeEverything);

  it('dpkg -i installs the gateway, its Node.js 24, its dependencies, the unit, the command and a conffile config; no tests, benchmarks or TypeScript', () => {
    const seconds = dpkgInstall(deb);
    console.info(`dpkg -i ${basename(deb)} (${(statSync(deb).size / 1e6).toFixed(1)} MB): ${seconds.toFixed(1)} s`);
    expect(installedVersion()).toBe(version);

    for (const file of ['/opt/edgeferry/node/bin/node', '/usr/bin/edgeferry']) {
      expect(statSync(file).mode & 0o111, file).not.toBe(0);
    }
    for (const file of [
      UNIT,
      CONFIG,
      '/opt/edgeferry/dist/src/cli.js',
      '/opt/edgeferry/package.json',
      '/opt/edgeferry/node_modules/lmdb/package.json',
      '/opt/edgeferry/config/edgeferry.example.yaml',
      '/usr/share/bash-completion/completions/edgeferry',
    ]) {
      expect(existsSync(file), file).toBe(true);
    }
    const files = run('dpkg', ['-L', 'edgeferry']).split('\n');
    expect(files.filter((f) => /^\/opt\/edgeferry\/(dist\/(test|bench)|src|test|bench)(\/|$)/.test(f))).toEqual([]);
    expect(
      files.filter((f) => f.startsWith('/opt/edgeferry/') && !f.includes('/node_modules/') && /\.ts$/.test(f)),
    ).toEqual([]);
    // The data directory is not the package's: no dpkg operation can remove it.
    expect(files.filter((f) => f.startsWith(DATA))).toEqual([]);
    expect(run('dpkg-query', ['-W', '-f=${Conffiles}', 'edgeferry'])).toMatch(
      /^ \/etc\/edgeferry\/edgeferry\.yaml [0-9a-f]{32}$/m,
    );
    // Every installed file checks out against the package's checksums (postinst changed only the config's group).
    expect(run('dpkg', ['--verify', 'edgeferry'])).toBe('');

    // The service user (postinst): a system account without a login.
    const [, , uid, , , home, shell] = run('getent', ['passwd', 'edgeferry']).trim().split(':');
    expect(Number(uid)).toBeLessThan(1000);
    expect([home, shell]).toEqual([DATA, '/usr/sbin/nologin']);
    const group = run('getent', ['group', 'edgeferry']).split(':')[2];
    // The config is root's, readable by the service; the data directory is the service's.
    const config = statSync(CONFIG);
    expect([config.mode & 0o777, config.uid, config.gid]).toEqual([0o640, 0, Number(group)]);
    const data = statSync(DATA);
    expect([data.mode & 0o777, data.uid, data.gid]).toEqual([0o750, Number(uid), Number(group)]);
    original = readFileSync(CONFIG, 'utf8');
    expect(original).toMatch(/^ {2}path: \/var\/lib\/edgeferry\b/m);
  });

  it('runs /usr/bin/edgeferry on the bundled Node.js 24 with no network and no PATH, with its native addons; --help and the bash completion agree', () => {
    // A network namespace of its own (only a loopback that is down) and an empty environment.
    const offline = (args: string[], cwd = '/'): string =>
      run('env', ['-i', '/usr/bin/unshare', '-n', ...args], { cwd });
    expect(offline(['/usr/bin/edgeferry', '--version'])).toBe(`${version}\n`);
    expect(offline(['/opt/edgeferry/node/bin/node', '--version'])).toMatch(/^v24\./);
    // Every dependency loads from the installed tree, the native addons (built for this runtime) among them.
    const pkg = JSON.parse(readFileSync('/opt/edgeferry/package.json', 'utf8')) as {
      dependencies: object;
      optionalDependencies: object;
    };
    const modules = [
      ...Object.keys(pkg.dependencies),
      ...Object.keys(pkg.optionalDependencies),
      '@serialport/bindings-cpp',
    ];
    expect(modules).toEqual(expect.arrayContaining(['lmdb', 'unix-dgram', 'node-opcua-client', 'modbus-serial']));
    const load = `for (const m of ${JSON.stringify(modules)}) await import(m); console.log('loaded'); process.exit(0)`;
    expect(offline(['/opt/edgeferry/node/bin/node', '--input-type=module', '-e', load], '/opt/edgeferry')).toBe(
      'loaded\n',
    );

    const help = offline(['/usr/bin/edgeferry', '--help']);
    const complete = (line: string): string[] => {
      const words = line.split(' ');
      const script =
        `source /usr/share/bash-completion/completions/edgeferry; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')});` +
        ` COMP_CWORD=${words.length - 1}; _edgeferry; printf '%s\\n' "\${COMPREPLY[@]}"`;
      return run('bash', ['-c', script]).split('\n').filter(Boolean);
    };
    expect(complete('edgeferry st')).toEqual(['store']);
    expect(complete('edgeferry --log-format ')).toEqual(['json', 'pretty']);
    const offered = [...complete('edgeferry '), ...complete('edgeferry store '), ...complete('edgeferry opcua ')];
    expect(offered.length).toBeGreaterThan(10);
    for (const word of offered) expect(help, `--help mentions ${word}`).toContain(word);
  });

  it('passes systemd-analyze verify on the installed unit, which runs the bundled runtime', () => {
    const r = spawnSync('systemd-analyze', ['verify', '--man=no', UNIT], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(`${r.stdout}${r.stderr}`).not.toMatch(/edgeferry/);
    expect(readFileSync(UNIT, 'utf8')).toMatch(
      /^ExecStart=\/opt\/edgeferry\/node\/bin\/node --enable-source-maps --no-memory-reducer --v8-pool-size=0 /m,
    );
  });

  it('starts by hand as the edgeferry user with the installed config (its port edited) and carries publish and subscribe', async () => {
    const port = await freePort();
    editConfig(original, port);
    const gw = await startInstalled();
    const starting = JSON.parse(
      gw
        .output()
        .split('\n')
        .find((l) => l.includes('"msg":"edgeferry starting"'))!,
    ) as Record<string, string>;
    expect(starting.node).toMatch(/^v24\./);
    expect(starting.version).toBe(version);
    expect(existsSync(join(DATA, 'data.mdb'))).toBe(true);

    const sub = d.add(await startMosquittoSub(port, ['-t', 'plant/#', '-q', '1']));
    await runToolOk('mosquitto_pub', [
      '-h',
      '127.0.0.1',
      '-p',
      String(port),
      '-t',
      'plant/line4/temp',
      '-m',
      '21.5',
      '-q',
      '1',
    ]);
    expect((await sub.waitForMessages(1)).map((m) => [m.topic, m.payload])).toEqual([['plant/line4/temp', '21.5']]);
    expect(await gw.stop()).toBe(0);
  });

  it('upgrades N → N+1 over a backlog buffered while the uplink was down: the config edit, the backlog and the persistent session survive and drain', async () => {
    const central = d.add(await startMosquitto());
    await central.stop(); // the uplink is down while version N buffers
    const port = await freePort();
    const edited = editConfig(
      original,
      port,
      `bridges:\n  - name: central\n    remote:\n      urls: [${central.url}]\n    topics:\n      - filter: plant/#\n        direction: out\n        qos: 1\n`,
    );
    const url = `mqtt://127.0.0.1:${port}`;
    const hmi = {
      clientId: 'hmi',
      clean: false,
      protocolVersion: 5 as const,
      properties: { sessionExpiryInterval: 86_400 },
    };
    const messages = Array.from({ length: 20 }, (_, i) => `m${i}`);

    let gw = await startInstalled();
    const subscriber = await openClient(url, hmi);
    await subscriber.subscribe('plant/#', { qos: 1 });
    await subscriber.disconnect();
    const publisher = d.add(await openClient(url));
    for (const m of messages) await publisher.publish('plant/line4/count', m, { qos: 1 });
    await publisher.stop();
    expect(await gw.stop()).toBe(0);
    const listed = runAsService(['store', 'list']);
    expect(listed).toContain('outbox central: 20 messages');
    expect(listed).toContain('persistent sessions: 1 (20 queued messages)');

    const upgradeS = dpkgInstall(rebuiltAs(deb, next));
    console.info(`dpkg -i over ${version} (${next}): ${upgradeS.toFixed(1)} s`);
    expect(installedVersion()).toBe(next);
    expect(run('/usr/bin/edgeferry', ['--version'])).toBe(`${next}\n`);
    expect(readFileSync(CONFIG, 'utf8')).toBe(edited); // a conffile: the local edit stays

    await central.restart();
    const upstream = d.add(await startMosquittoSub(central.port, ['-t', 'plant/#', '-q', '1']));
    gw = await startInstalled();
    expect(gw.output()).toContain(`"version":"${next}"`);
    expect((await upstream.waitForMessages(20, 20_000)).map((m) => m.payload)).toEqual(messages);
    const resumed = d.add(await openClient(url, hmi));
    expect(resumed.connack.sessionPresent).toBe(true);
    expect((await resumed.waitForMessages(20)).map((m) => m.payload)).toEqual(messages);
    await resumed.disconnect();
    expect(await gw.stop()).toBe(0);
  });

  it('downgrades N+1 → N on the same store; a store of a newer format is refused, saying so and naming the directory', async () => {
    dpkgInstall(deb);
    expect(installedVersion()).toBe(version);
    const gw = await startInstalled();
    const url = `mqtt://127.0.0.1:${/^ {4}port: (\d+)$/m.exec(readFileSync(CONFIG, 'utf8'))![1]}`;
    const resumed = d.add(
      await openClient(url, {
        clientId: 'hmi',
        clean: false,
        protocolVersion: 5,
        properties: { sessionExpiryInterval: 86_400 },
      }),
    );
    expect(resumed.connack.sessionPresent).toBe(true); // the session N+1 kept, read by N
    await resumed.disconnect();
    expect(await gw.stop()).toBe(0);

    // A store the way a later release with another format would leave it.
    const dir = d.tempDir('edgeferry-newer-');
    const newer = await openLmdbStore(
      { path: join(dir, 'data'), sync: 'full', maxBytes: 0, log: silentLogger },
      { schemaVersion: SCHEMA_VERSION + 1 },
    );
    await newer.close();
    const config = join(dir, 'edgeferry.yaml');
    writeFileSync(config, readFileSync(CONFIG, 'utf8').replace(/^ {2}path: .*$/m, `  path: ${join(dir, 'data')}`));
    run('chown', ['-R', 'edgeferry:edgeferry', join(dir, 'data')]);
    run('chmod', ['0755', dir]);
    const [command, args] = asService(['--config', config]);
    const refused = spawnSync(command, args, { encoding: 'utf8', timeout: 30_000 });
    expect(refused.status, refused.stdout + refused.stderr).toBe(3);
    const out = refused.stdout + refused.stderr;
    expect(out).toContain(join(dir, 'data'));
    expect(out).toContain(`store format is version ${SCHEMA_VERSION + 1}, written by a newer edgeferry release`);
    expect(out).toContain('install the newer release again');
  });

  it('dpkg -r keeps the data directory and the config; dpkg --purge keeps the data directory', () => {
    const edited = readFileSync(CONFIG, 'utf8');
    const dataFile = statSync(join(DATA, 'data.mdb'));
    run('dpkg', ['-r', 'edgeferry']);
    expect(existsSync('/opt/edgeferry')).toBe(false);
    expect(existsSync('/usr/bin/edgeferry')).toBe(false);
    expect(readFileSync(CONFIG, 'utf8')).toBe(edited);
    expect(statSync(join(DATA, 'data.mdb')).size).toBe(dataFile.size);

    run('dpkg', ['--purge', 'edgeferry']);
    expect(existsSync(CONFIG)).toBe(false);
    expect(statSync(join(DATA, 'data.mdb')).size).toBe(dataFile.size);
    expect(spawnSync('getent', ['passwd', 'edgeferry']).status).toBe(0); // it still owns the data
  });

  it('installs the same tree from the .tar.gz with its install.sh, offline, finds the data that stayed, and upgrades over itself keeping the config', () => {
    const tarball = join(RELEASE, `edgeferry-${version}-linux-x64.tar.gz`);
    const dir = d.tempDir('edgeferry-tgz-');
    run('tar', ['-C', dir, '-xzf', tarball]);
    const top = join(dir, `edgeferry-${version}-linux-x64`);
    // Both archives' listings, files and links (directories end in /), as paths from the root.
    const listing = (pipeline: string, prefix: string): string[] =>
      run('sh', ['-c', pipeline])
        .split('\n')
        .filter((p) => p.startsWith(prefix) && !p.endsWith('/'))
        .map((p) => p.slice(prefix.length))
        .sort();
    const debFiles = listing(`dpkg-deb --fsys-tarfile ${deb} | tar -t`, './');
    const tarFiles = listing(`tar -tzf ${tarball}`, `edgeferry-${version}-linux-x64/root/`);
    expect(debFiles.length).toBeGreaterThan(1000);
    expect(tarFiles).toEqual(debFiles);

    run('/usr/bin/unshare', ['-n', join(top, 'install.sh')]);
    expect(run('/usr/bin/edgeferry', ['--version'])).toBe(`${version}\n`);
    expect(existsSync('/etc/systemd/system/edgeferry.service')).toBe(true);
    expect(statSync(CONFIG).mode & 0o777).toBe(0o640);
    const listed = runAsService(['store', 'list']);
    expect(listed).toContain(`store ${DATA}`);
    expect(listed).toContain('persistent sessions: 1');

    // Run again, as an upgrade is: the tree is swapped, the edited config stays.
    const edited = `${readFileSync(CONFIG, 'utf8')}# edited on site\n`;
    writeFileSync(CONFIG, edited);
    run('/usr/bin/unshare', ['-n', join(top, 'install.sh')]);
    expect(readFileSync(CONFIG, 'utf8')).toBe(edited);
    expect(readdirSync('/opt').filter((f) => f.startsWith('edgeferry'))).toEqual(['edgeferry']);
    expect(run('/usr/bin/edgeferry', ['--version'])).toBe(`${version}\n`);
  });
});
