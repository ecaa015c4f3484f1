/**
 * A corrupt data directory gives a clear error naming it (exit 3, no crash loop under systemd), and
 * `--reset-store` moves it aside, keeping it for analysis, and starts with an empty store.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/temp.js';

const CLI = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli.js');

function run(configFile: string, extra: string[] = [], timeoutMs = 20_000) {
  // --check-config would not open the store; a real start that exits at once (port in use would also do) is what
  // we need, so the gateway is started and stopped by a short timeout when it comes up.
  return spawnSync(process.execPath, [CLI, '--config', configFile, ...extra], { encoding: 'utf8', timeout: timeoutMs, killSignal: 'SIGTERM' });
}

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
