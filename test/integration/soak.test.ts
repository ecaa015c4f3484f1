/**
 * The soak tool (`npm run soak`, bench/soak.ts) in a short run: three cycles of link outages at 1,000 msg/s, one
 * with a SIGKILL of the gateway and a restart, through the real processes (gateway, Mosquitto upstream, fault
 * proxy). It must pass its own checks: every acknowledged message upstream, in order, no error logged, the data
 * file reused after the warm-up (docs/reliability.md#fault-scenarios "Soak"). The day-long run is the same command with --duration 24h.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'soak-test-'));

afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

interface SoakSummary {
  published: number;
  acked: number;
  arrived: number;
  missing: number;
  outOfOrder: number;
  gatewayErrors: number;
  samples: { killed: boolean; drainS: number | undefined }[];
  problems: string[];
}

describe('soak (bench/soak.ts), short run', () => {
  it('loses nothing and keeps order through outages and a SIGKILL, with no error logged (docs/reliability.md#fault-scenarios)', async () => {
    const out = path.join(dir, 'soak.json');
    const args = ['--duration', '27s', '--cycle-s', '9', '--outage-s', '2', '--kill-every', '2', '--rate', '1000', '--warmup-cycles', '2', '--out', out];
    const result = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = execFile(process.execPath, [path.join(root, 'dist/bench/soak.js'), ...args], { timeout: 150_000 }, (err, stdout, stderr) =>
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, output: stdout + stderr }),
      );
      child.stdin?.end();
    });
    expect(result.output).toContain('soak passed');
    expect(result.code).toBe(0);
    const summary = JSON.parse(fs.readFileSync(out, 'utf8')) as SoakSummary;
    expect(summary.problems).toEqual([]);
    expect(summary.samples.map((s) => s.killed)).toEqual([false, true, false]);
    expect(summary.published).toBeGreaterThan(20_000);
    expect(summary.acked).toBe(summary.published);
    expect(summary.arrived).toBe(summary.published);
    expect(summary.missing).toBe(0);
    expect(summary.outOfOrder).toBe(0);
  }, 180_000);
});
