import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/ops/pino-logger.js';
import { removeDir, tempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';

// Runs the built CLI, as the `edgeferry` bin does; `npm test` builds first.
const root = join(import.meta.dirname, '../..');
const cli = join(root, 'dist/src/cli.js');
const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };

interface Run {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exited: Promise<number | null>;
}

const children = new Set<ChildProcess>();

function run(args: string[]): Run {
  const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, stdout: () => stdout, stderr: () => stderr, exited };
}

/** Waits for a JSON log line with this message; fails at once, with the output, if the process exits. */
async function waitForLog(r: Run, msg: string): Promise<void> {
  const output = () => `"${msg}"; output:\n${r.stdout()}${r.stderr()}`;
  const logged = () => logLines(r.stdout()).some((line) => line.msg === msg);
  await waitFor(() => logged() || r.child.exitCode !== null, 10_000, { message: output });
  if (!logged()) throw new Error(`exited with ${r.child.exitCode} before ${output()}`);
}

function logLines(output: string): { level: number; msg: string; [key: string]: unknown }[] {
  return output
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line));
}

let dir: string;
beforeAll(() => {
  if (!existsSync(cli)) throw new Error(`${cli} is missing: run \`npm run build\` first`);
});
beforeEach(() => {
  dir = tempDir('edgeferry-cli-');
});
afterEach(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  children.clear();
  removeDir(dir);
});

function writeConfig(text: string): string {
  const file = join(dir, 'edgeferry.yaml');
  writeFileSync(file, text);
  return file;
}

const runnableConfig = (port: number, level = 'info') =>
  `listeners: [{ port: ${port} }]\nstorage: { path: data }\nlog: { level: ${level} }\n`;

describe('edgeferry command line', () => {
  it('--version prints the package version and exits 0', async () => {
    const r = run(['--version']);
    expect(await r.exited).toBe(0);
    expect(r.stdout()).toBe(`${version}\n`);
  });

  it('--help reads like a manual page: every option, command, signal and exit status, and exits 0', async () => {
    const r = run(['--help']);
    expect(await r.exited).toBe(0);
    const sections = [
      'NAME',
      'SYNOPSIS',
      'DESCRIPTION',
      'OPTIONS',
      'COMMANDS',
      'FILES',
      'SIGNALS',
      'EXIT STATUS',
      'SEE ALSO',
    ];
    const at = sections.map((s) => r.stdout().indexOf(`\n${s}\n`));
    expect(
      at.every((i) => i >= 0),
      `sections at ${at.join(', ')}`,
    ).toBe(true);
    expect(at).toEqual([...at].sort((a, b) => a - b)); // in manual page order
    for (const word of [
      '--config',
      '--check-config',
      '--reset-store',
      '--log-format',
      '--version',
      '--help',
      'SIGHUP',
      'store salvage',
      'passwd FILE USER',
    ]) {
      expect(r.stdout()).toContain(word);
    }
  });

  it("COMMAND --help prints that command's usage and exits 0", async () => {
    const store = run(['store', '--help']);
    expect(await store.exited).toBe(0);
    expect(store.stdout()).toContain('edgeferry store salvage');
    expect(store.stdout()).not.toContain('SYNOPSIS');
    const passwd = run(['passwd', '-h']);
    expect(await passwd.exited).toBe(0);
    expect(passwd.stdout()).toContain('edgeferry passwd FILE USER');
  });

  it('an unknown option or a bad --log-format is a usage error, exit 2', async () => {
    const unknown = run(['--bogus']);
    expect(await unknown.exited).toBe(2);
    expect(unknown.stderr()).toContain("Unknown option '--bogus'");
    const format = run(['--log-format', 'xml', '--check-config']);
    expect(await format.exited).toBe(2);
    expect(format.stderr()).toContain('--log-format must be one of json, pretty');
  });

  it('--check-config accepts the embedded default when no file is given', async () => {
    const r = run(['--check-config']);
    expect(await r.exited).toBe(0);
    expect(r.stdout()).toBe(`config OK: ${join(root, 'config/edgeferry.yaml')}\n`);
  });

  it('--check-config on a bad file exits 2 and names the file, each key path, position and problem', async () => {
    const file = writeConfig('listeners:\n  - port: 70000\nbroker:\n  maxInflight: 0\nbrdiges: []\n');
    const r = run(['--check-config', '-c', file]);
    expect(await r.exited).toBe(2);
    expect(r.stdout()).toBe('');
    expect(r.stderr()).toBe(
      `edgeferry: EF_CONFIG_INVALID: ${file}: 3 problems\n` +
        `  ${file}:2:11 listeners.0.port: Too big: expected number to be <=65535\n` +
        `  ${file}:4:16 broker.maxInflight: Too small: expected number to be >=1\n` +
        `  ${file}:5:1 brdiges: unknown key "brdiges": did you mean "bridges"?\n`,
    );
  });

  it('a missing config file exits 2 without starting', async () => {
    const r = run(['-c', join(dir, 'nope.yaml')]);
    expect(await r.exited).toBe(2);
    expect(r.stderr()).toContain('EF_CONFIG_UNREADABLE: ');
    expect(r.stderr()).toContain('cannot read the file: ENOENT');
  });

  it('runs, keeps running on an invalid SIGHUP reload, applies a valid one, and stops on SIGTERM with exit 0', async () => {
    const file = writeConfig(runnableConfig(0));
    const r = run(['-c', file, '--log-format', 'json']);
    await waitForLog(r, 'edgeferry started');
    const [starting] = logLines(r.stdout());
    expect(starting).toMatchObject({ msg: 'edgeferry starting', version, configFile: file, pid: r.child.pid });

    writeFileSync(file, 'listeners: [{ port: 0 }]\nbroker: { maxInflight: 0 }\n');
    r.child.kill('SIGHUP');
    await waitForLog(r, 'config reload rejected, keeping the running config');
    const rejected = logLines(r.stdout()).find((line) => line.msg.startsWith('config reload rejected'));
    expect(rejected).toMatchObject({ level: 50, problems: [{ path: 'broker.maxInflight', location: `${file}:2:24` }] });
    expect(r.child.exitCode).toBeNull();

    writeFileSync(file, runnableConfig(0, 'debug'));
    r.child.kill('SIGHUP');
    await waitForLog(r, 'config reloaded');

    r.child.kill('SIGTERM');
    expect(await r.exited).toBe(0);
    expect(logLines(r.stdout()).map((line) => line.msg)).toContain('stopped');
  });

  describe('with a port taken', () => {
    let blocker: Server;
    beforeEach(async () => {
      blocker = createServer();
      await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    });
    afterEach(async () => {
      await new Promise((resolve) => blocker.close(resolve));
    });

    it('a port in use is one fatal line naming the listener and the port, exit 1', async () => {
      const { port } = blocker.address() as { port: number };
      const r = run(['-c', writeConfig(runnableConfig(port)), '--log-format', 'json']);
      expect(await r.exited).toBe(1);
      expect(logLines(r.stdout()).at(-1)).toMatchObject({
        level: 60,
        code: 'EF_LISTENER_BIND',
        msg: expect.stringMatching(
          new RegExp(`^tcp listener 127\\.0\\.0\\.1:${port} cannot listen: port ${port} is already in use`),
        ),
      });
    });
  });
});

describe('createLogger', () => {
  function capture() {
    const chunks: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        chunks.push(chunk.toString());
        done();
      },
    });
    return { destination, text: () => chunks.join('') };
  }

  it('writes JSON lines with child bindings and redacts passwords', () => {
    const out = capture();
    const log = createLogger({ level: 'info', format: 'json' }, { destination: out.destination });
    log.child({ mod: 'bridge' }).info({ remote: { username: 'gw', password: 'hunter2' }, password: 'x' }, 'uplink up');
    log.debug('hidden');
    const lines = logLines(out.text());
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 30, mod: 'bridge', msg: 'uplink up', remote: { username: 'gw' } });
    expect(out.text()).not.toContain('hunter2');
    expect(out.text()).not.toContain('"password":"x"');
  });

  it('setLevel reaches children created before the change', () => {
    const out = capture();
    const log = createLogger({ level: 'info', format: 'json' }, { destination: out.destination });
    const child = log.child({ mod: 'broker' });
    expect(child.isLevelEnabled('debug')).toBe(false);
    log.setLevel('debug');
    expect(child.isLevelEnabled('debug')).toBe(true);
    child.debug('now visible');
    expect(logLines(out.text()).map((line) => line.msg)).toEqual(['now visible']);
  });

  it('pretty format writes one human-readable line per event (a stack below only for an `err`), and auto is JSON when the destination is not a terminal', async () => {
    const pretty = capture();
    const log = createLogger({ level: 'info', format: 'pretty' }, { destination: pretty.destination });
    log.warn({ bridge: 'central' }, 'uplink offline');
    await waitFor(() => pretty.text().includes('uplink offline'), 2000, { message: 'the pretty line' });
    expect(pretty.text()).toMatch(/^\[.*\] WARN \(\d+\): uplink offline \{"bridge":"central"\}\n$/);
    log.error({ err: new TypeError('a bug') }, 'handling failed');
    await waitFor(() => pretty.text().includes('handling failed'), 2000, { message: 'the error line' });
    expect(pretty.text()).toMatch(/handling failed *\n(.*\n)*\s+TypeError: a bug\n\s+at /);

    const auto = capture();
    createLogger({ level: 'info', format: 'auto' }, { destination: auto.destination }).info('hello');
    expect(logLines(auto.text())).toMatchObject([{ msg: 'hello' }]);
  });
});
