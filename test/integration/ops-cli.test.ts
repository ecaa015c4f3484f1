/**
 * Authentication tooling: `edgeferry passwd FILE USER [--delete]` (password on stdin) writes files that
 * Debian's Mosquitto accepts as its `password_file`, and that edgeferry accepts; it edits files made by
 * `mosquitto_passwd` without disturbing their other lines.
 */
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PasswordFile } from '../../src/broker/password-file.js';
import { useDisposer } from '../helpers/disposer.js';
import { runCli, startGateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { connectRefused, openClient, runTool } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';

const d = useDisposer();

/** Runs `edgeferry passwd ...` with `stdin` piped in (undefined: stdin closed at once). */
function passwd(args: string[], stdin?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runCli(['passwd', ...args], stdin);
}

/** mosquitto_pub to `port` as `user`: resolves with its exit code and stderr. */
async function mosquittoLogin(
  port: number,
  user: string,
  password: string,
): Promise<{ code: number | null; stderr: string }> {
  const r = await runTool('mosquitto_pub', [
    '-h',
    '127.0.0.1',
    '-p',
    String(port),
    '-u',
    user,
    '-P',
    password,
    '-t',
    'cli/test',
    '-q',
    '1',
    '-m',
    'x',
  ]);
  return { code: r.code, stderr: r.stderr + r.stdout };
}

/** A real Mosquitto with this password file and no anonymous access. */
function mosquittoWith(passwordFile: string) {
  return startMosquitto({ extraConf: [`password_file ${passwordFile}`, 'allow_anonymous false'].join('\n') });
}

/**
 * An owner and group other than the ones a new file gets: as root (CI) daemon (1) and nogroup (65534); otherwise
 * our own uid and one of our other groups, the only change a non-root user may make.
 */
const OTHER =
  process.getuid?.() === 0
    ? { uid: 1, gid: 65534 }
    : { uid: process.getuid!(), gid: process.getgroups!().find((g) => g !== process.getgid!()) ?? process.getgid!() };

describe('edgeferry passwd', { timeout: 60_000 }, () => {
  it('creates a file that Debian mosquitto accepts as password_file, and that edgeferry accepts', async () => {
    const dir = d.tempDir('edgeferry-passwd-');
    const file = join(dir, 'passwd');
    const set = await passwd([file, 'alice'], 'correct horse battery staple\n');
    expect(set, set.stderr).toMatchObject({ code: 0 });
    expect(set.stdout).toMatch(/set the password of "alice"/);
    const text = readFileSync(file, 'utf8');
    expect(text).toMatch(/^alice:\$7\$101\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]{88}\n$/);
    expect(text).not.toContain('correct horse');
    expect(statSync(file).mode & 0o777).toBe(0o600);

    const mosquitto = d.add(await mosquittoWith(file));
    expect(await mosquittoLogin(mosquitto.port, 'alice', 'correct horse battery staple')).toMatchObject({ code: 0 });
    const wrong = await mosquittoLogin(mosquitto.port, 'alice', 'correct horse');
    expect(wrong.code).not.toBe(0);
    expect(wrong.stderr).toMatch(/not authori[sz]ed|bad user name or password/i);

    const port = await freePort();
    const strict = await freePort();
    const gw = d.add(
      await startGateway({
        listeners: [
          { type: 'tcp', host: '127.0.0.1', port },
          { type: 'tcp', host: '127.0.0.1', port: strict, allowAnonymous: false },
        ],
        auth: { passwordFile: file },
      }),
    );
    void gw;
    d.add(
      await openClient(`mqtt://127.0.0.1:${strict}`, {
        username: 'alice',
        password: 'correct horse battery staple',
        protocolVersion: 5,
      }),
    );
    expect(
      await connectRefused(`mqtt://127.0.0.1:${strict}`, {
        username: 'alice',
        password: 'correct horse',
        protocolVersion: 5,
      }),
    ).toBe(0x86);
  });

  it('adds, changes and deletes users in a mosquitto_passwd file, keeping the other lines as they were', async () => {
    const dir = d.tempDir('edgeferry-passwd-');
    const file = join(dir, 'passwd');
    execFileSync('mosquitto_passwd', ['-c', '-b', file, 'bob', 'bob-pw'], { stdio: 'pipe' });
    execFileSync('mosquitto_passwd', ['-b', file, 'carol', 'carol-pw'], { stdio: 'pipe' });
    writeFileSync(file, `# managed by hand and by tools\n${readFileSync(file, 'utf8')}`);
    const original = readFileSync(file, 'utf8').split('\n');

    expect((await passwd([file, 'alice'], 'alice-pw\n')).code).toBe(0);
    expect((await passwd([file, 'carol'], 'carol-new\n')).code).toBe(0);
    const edited = readFileSync(file, 'utf8').split('\n');
    expect(edited[0]).toBe('# managed by hand and by tools');
    expect(edited[1]).toBe(original[1]); // bob untouched
    expect(edited[2]).toMatch(/^carol:\$7\$/);
    expect(edited[2]).not.toBe(original[2]); // carol changed in place
    expect(edited[3]).toMatch(/^alice:\$7\$/);

    const mosquitto = d.add(await mosquittoWith(file));
    expect(await mosquittoLogin(mosquitto.port, 'bob', 'bob-pw')).toMatchObject({ code: 0 });
    expect(await mosquittoLogin(mosquitto.port, 'alice', 'alice-pw')).toMatchObject({ code: 0 });
    expect(await mosquittoLogin(mosquitto.port, 'carol', 'carol-new')).toMatchObject({ code: 0 });
    expect((await mosquittoLogin(mosquitto.port, 'carol', 'carol-pw')).code).not.toBe(0);

    const removed = await passwd([file, 'bob', '--delete']);
    expect(removed.code).toBe(0);
    expect(readFileSync(file, 'utf8')).not.toMatch(/^bob:/m);
    await mosquitto.restart();
    expect((await mosquittoLogin(mosquitto.port, 'bob', 'bob-pw')).code).not.toBe(0);
    expect(await mosquittoLogin(mosquitto.port, 'alice', 'alice-pw')).toMatchObject({ code: 0 });
  });

  it('keeps the mode, owner and group of the file it changes (0640, another group, so the service group still reads it)', async () => {
    const dir = d.tempDir('edgeferry-passwd-');
    const file = join(dir, 'passwd');
    execFileSync('mosquitto_passwd', ['-c', '-b', file, 'bob', 'bob-pw'], { stdio: 'pipe' });
    chownSync(file, OTHER.uid, OTHER.gid);
    chmodSync(file, 0o640);
    expect((await passwd([file, 'alice'], 'alice-pw\n')).code).toBe(0);
    const after = statSync(file);
    expect({ mode: after.mode & 0o7777, uid: after.uid, gid: after.gid }).toEqual({ mode: 0o640, ...OTHER });
    expect(readFileSync(file, 'utf8')).toMatch(/^bob:.*\nalice:/);
    expect((await passwd([file, 'bob', '--delete'])).code).toBe(0);
    expect(statSync(file).mode & 0o7777).toBe(0o640);
    // No temp file is left beside it.
    expect(readdirSync(dir)).toEqual(['passwd']);
  });

  it("writes through a symlink to its target, keeping the link and the target's mode, owner and group", async () => {
    const dir = d.tempDir('edgeferry-passwd-');
    mkdirSync(join(dir, 'real'));
    const target = join(dir, 'real', 'passwd');
    const link = join(dir, 'passwd');
    execFileSync('mosquitto_passwd', ['-c', '-b', target, 'bob', 'bob-pw'], { stdio: 'pipe' });
    chownSync(target, OTHER.uid, OTHER.gid);
    chmodSync(target, 0o640);
    symlinkSync('real/passwd', link);
    expect((await passwd([link, 'alice'], 'alice-pw\n')).code).toBe(0);
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe('real/passwd');
    const after = statSync(target);
    expect({ mode: after.mode & 0o7777, uid: after.uid, gid: after.gid }).toEqual({ mode: 0o640, ...OTHER });
    expect(readFileSync(target, 'utf8')).toMatch(/^bob:.*\nalice:/);
    expect(readdirSync(join(dir, 'real'))).toEqual(['passwd']);
  });

  it('on a terminal asks for the password twice without echo, as mosquitto_passwd does, and writes nothing when they differ', async () => {
    const file = join(d.tempDir('edgeferry-passwd-'), 'passwd');
    /** `edgeferry passwd FILE USER` on a pseudo-terminal (util-linux `script`), each answer typed at its prompt. */
    const onTerminal = (user: string, answers: string[]) =>
      new Promise<{ code: number | null; output: string }>((resolve, reject) => {
        const command = `${process.execPath} ${join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli.js')} passwd ${file} ${user}`;
        const child = spawn('script', ['-qec', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
        let output = '';
        let asked = 0;
        child.stdout.on('data', (chunk: Buffer) => {
          output += chunk.toString();
          // A prompt ends the output so far: type the next answer.
          while (asked < answers.length && (output.match(/[Pp]assword: $/gm) ?? []).length > asked)
            child.stdin.write(`${answers[asked++]}\r`);
        });
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        child.once('error', reject);
        child.once('close', (code) => {
          clearTimeout(timer);
          child.stdin.end();
          resolve({ code, output });
        });
      });
    const set = await onTerminal('alice', ['Alice-pw-1', 'Alice-pw-1']);
    expect(set.code).toBe(0);
    expect(set.output.replace(/\r/g, '')).toBe(
      `Password: \nReenter password: \nset the password of "alice" in ${file}\n`,
    );
    const { file: passwords } = PasswordFile.parse(readFileSync(file, 'utf8'));
    expect(await passwords.verify('alice', Buffer.from('Alice-pw-1'))).toBe(true);

    const before = readFileSync(file, 'utf8');
    const typo = await onTerminal('alice', ['Alice-pw-2', 'Alice-pw-3']);
    expect(typo.code).toBe(2);
    expect(typo.output).toContain('edgeferry passwd: the passwords do not match');
    expect(typo.output).not.toMatch(/Alice-pw/);
    expect(readFileSync(file, 'utf8')).toBe(before);
  });

  it('refuses an empty password, a missing one, a deleted user that does not exist, and bad usage, with exit code 2', async () => {
    const dir = d.tempDir('edgeferry-passwd-');
    const file = join(dir, 'passwd');
    const empty = await passwd([file, 'alice'], '\n');
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(/must not be empty/);
    const none = await passwd([file, 'alice']);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/no password/);
    expect((await passwd([file, 'ghost', '--delete'])).code).toBe(2);
    expect((await passwd([file])).code).toBe(2);
    expect((await passwd([file, 'a:b'], 'pw\n')).code).toBe(2);
    // Nothing was written by the refused runs.
    expect(() => statSync(file)).toThrow();
  });
});

describe('bridge URL credentials', { timeout: 60_000 }, () => {
  it('refuses user:password@ in a bridge url with exit code 2, naming the keys to use and never printing the password', async () => {
    const dir = d.tempDir('edgeferry-bridge-url-');
    const file = join(dir, 'gw.yaml');
    writeFileSync(
      file,
      [
        'bridges:',
        '  - name: central',
        '    remote: { urls: ["mqtts://line4:Pl4nt-S3cret@backbone.example:8883"] }',
        '    topics: [{ filter: "a/#" }]',
        '',
      ].join('\n'),
    );
    for (const args of [
      ['--check-config', '--config', file],
      ['--config', file],
    ]) {
      const r = await runCli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr + r.stdout).toMatch(
        /bridges\.0\.remote\.urls\.0: must not carry credentials \(user:password@\): set remote\.username, and remote\.password or remote\.passwordFile/,
      );
      expect(r.stderr + r.stdout).not.toContain('Pl4nt-S3cret');
    }
  });
});
