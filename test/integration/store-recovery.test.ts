/**
 * A corrupt data directory gives a clear error naming it (exit 3, no crash loop under systemd), and
 * `--reset-store` moves it aside, keeping it for analysis, and starts with an empty store. A directory the service
 * user may not use, or a storage.path that is a file, says so instead. The permission test runs the gateway as
 * `nobody` (setpriv) and needs root for that; skipped with the reason elsewhere.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { tempDir } from '../helpers/temp.js';

const CLI = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli.js');

const d = useDisposer();

/** Runs the gateway; `asNobody`: as the unprivileged user nobody (group nogroup, no others), as root reads everything. */
function run(configFile: string, extra: string[] = [], timeoutMs = 20_000, asNobody = false) {
  // --check-config would not open the store; a real start that exits at once is what we need, so the gateway is
  // started and stopped by a short timeout when it comes up.
  const command = [process.execPath, CLI, '--config', configFile, ...extra];
  const [file, ...args] = asNobody
    ? ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups', ...command]
    : command;
  return spawnSync(file, args, { encoding: 'utf8', timeout: timeoutMs, killSignal: 'SIGTERM' });
}

const NOBODY = 65534;

describe('an unreadable data directory', () => {
  it('refuses to start with exit code 3 and a message naming the directory and the way out', () => {
    const dir = tempDir('edgeferry-corrupt-');
    const data = join(dir, 'data');
    mkdirSync(data);
    writeFileSync(join(data, 'data.mdb'), Buffer.alloc(64 * 1024, 0x5a));
    const configFile = join(dir, 'gw.yaml');
    writeFileSync(configFile, `listeners: [{ port: 0 }]\nstorage: { path: ${data} }\nlog: { format: json }\n`);
    const result = run(configFile);
    expect(result.status).toBe(3);
    expect(result.stdout + result.stderr).toContain(data);
    expect(result.stdout + result.stderr).toMatch(/--reset-store/);
  });

  it('that the service user may not read: exit 3 saying so and naming the chown that fixes it, also with --reset-store; after that chown it starts', (ctx) => {
    if (process.getuid?.() !== 0) return ctx.skip('needs root to run the gateway as another user and to chown');
    const dir = d.tempDir('edgeferry-perm-');
    chmodSync(dir, 0o755); // nobody may reach the config file and the data directory, not into the latter
    const data = join(dir, 'data');
    const configFile = join(dir, 'gw.yaml');
    writeFileSync(configFile, `listeners: [{ port: 0 }]\nstorage: { path: ${data} }\nlog: { format: json }\n`);
    // A store root made (a start as root), then not the service user's.
    expect(run(configFile, [], 6000).stdout).toMatch(/edgeferry started/);
    chmodSync(data, 0o700);
    const fatal = (stdout: string) =>
      JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as { code?: string; msg?: string; err?: unknown };
    const expected = new RegExp(
      `^cannot open the data directory ${data}: edgeferry\\.lock cannot be read \\(EACCES: permission denied.*\\)\\. It is not damaged: ` +
        `.* keeps out the user edgeferry runs as \\(nobody\\)\\. Give it to that user: chown -R nobody: ${data}$`,
    );
    for (const extra of [[], ['--reset-store']]) {
      const refused = run(configFile, extra, 20_000, true);
      expect(refused.status).toBe(3);
      expect(fatal(refused.stdout)).toEqual({
        ...fatal(refused.stdout),
        code: 'EF_STORE_OPEN',
        msg: expect.stringMatching(expected),
        err: undefined,
      });
      expect(refused.stdout).not.toMatch(/backup|--reset-store/);
    }
    expect(readdirSync(dir).filter((name) => name.startsWith('data.reset-'))).toEqual([]);

    // What the message says to do (chown -R nobody: DIR) is the way out.
    for (const name of ['', ...readdirSync(data)]) chownSync(join(data, name), NOBODY, NOBODY);
    const started = run(configFile, [], 6000, true);
    expect(started.stdout).toMatch(/edgeferry started/);
    expect(started.status).toBe(0);
  });

  it('a storage.path that is a regular file: exit 3 saying that, once, without advice about damage', () => {
    const dir = d.tempDir('edgeferry-file-');
    const data = join(dir, 'data');
    writeFileSync(data, 'not a directory\n');
    const configFile = join(dir, 'gw.yaml');
    writeFileSync(configFile, `listeners: [{ port: 0 }]\nstorage: { path: ${data} }\nlog: { format: json }\n`);
    for (const extra of [[], ['--reset-store']]) {
      const refused = run(configFile, extra);
      expect(refused.status).toBe(3);
      const fatal = JSON.parse(refused.stdout.trim().split('\n').at(-1) ?? '{}') as {
        code?: string;
        msg?: string;
        err?: unknown;
      };
      expect(fatal.code).toBe('EF_STORE_OPEN');
      expect(fatal.msg).toMatch(
        new RegExp(
          `^storage\\.path ${data} cannot be the data directory: ${data} is a file, not a directory\\. Set storage\\.path to a directory`,
        ),
      );
      expect(fatal.err).toBeUndefined();
      // `edgeferry starting`, then that one line: no system error text repeated in a stack and its cause.
      expect(refused.stdout.trim().split('\n')).toHaveLength(2);
      expect(refused.stdout).not.toMatch(/backup|--reset-store/);
    }
  });

  it('--reset-store moves the directory aside and starts with an empty store', () => {
    const dir = tempDir('edgeferry-reset-');
    const data = join(dir, 'data');
    mkdirSync(data);
    writeFileSync(join(data, 'data.mdb'), Buffer.alloc(64 * 1024, 0x5a));
    const configFile = join(dir, 'gw.yaml');
    writeFileSync(configFile, `listeners: [{ port: 0 }]\nstorage: { path: ${data} }\nlog: { format: json }\n`);
    // Started fine: it runs until the timeout's SIGTERM and then stops gracefully with exit 0.
    const result = run(configFile, ['--reset-store'], 6000);
    expect(result.stdout).toMatch(/store reset: the old data directory was moved aside/);
    expect(result.stdout).toMatch(/edgeferry started/);
    expect(result.status).toBe(0);
    const aside = readdirSync(dir).filter((name) => name.startsWith('data.reset-'));
    expect(aside).toHaveLength(1);
    expect(existsSync(join(dir, aside[0], 'data.mdb'))).toBe(true);
    expect(existsSync(join(data, 'data.mdb'))).toBe(true);
  });
});
