/**
 * The soak tool (`npm run soak`, bench/soak.ts) in a short run: three bridges over the one journal
 * (docs/architecture.md#one-journal), three cycles of link outages at 1,000 msg/s, one with a SIGKILL of the
 * gateway and a restart, b2's link cut through the whole second cycle so that its cursor lags while b1 and b3
 * drain, through the real processes (gateway, Mosquitto upstream, a fault proxy per bridge). It must pass its own
 * checks: every acknowledged message upstream through every bridge, in order, no error logged, the data file reused
 * after the warm-up (docs/reliability.md#fault-scenarios "Soak"). The day-long run is the same command with --duration 24h.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { removeDir, tempDir } from '../helpers/temp.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dir = tempDir('soak-test-');

afterAll(() => removeDir(dir));

interface SoakSummary {
  published: number;
  acked: number;
  gatewayErrors: number;
  bridges: { name: string; arrived: number; missing: number; outOfOrder: number }[];
  samples: {
    killed: boolean;
    bridges: { name: string; backlog: number | undefined; drainS: number | undefined; lagging: boolean }[];
  }[];
  problems: string[];
}

describe('soak (bench/soak.ts), short run', () => {
  it('loses nothing on any bridge and keeps order through outages, a lagging bridge and a SIGKILL, with no error logged (docs/reliability.md#fault-scenarios)', async () => {
    const out = path.join(dir, 'soak.json');
    const args = [
      '--bridges',
      '3',
      '--duration',
      '39s',
      '--cycle-s',
      '13',
      '--outage-s',
      '2',
      '--kill-every',
      '2',
      '--rate',
      '1000',
      '--warmup-cycles',
      '2',
      '--out',
      out,
    ];
    const result = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = execFile(
        process.execPath,
        [path.join(root, 'dist/bench/soak.js'), ...args],
        { timeout: 150_000 },
        (err, stdout, stderr) =>
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
    expect(summary.gatewayErrors).toBe(0);
    expect(summary.bridges.map((b) => b.name)).toEqual(['b1', 'b2', 'b3']);
    for (const b of summary.bridges) {
      expect(b.arrived, b.name).toBe(summary.published);
      expect(b.missing, b.name).toBe(0);
      expect(b.outOfOrder, b.name).toBe(0);
    }
    // b2 lagged through cycle 2 (its cursor several seconds of traffic behind while the others had drained), then
    // drained within cycle 3; b1 and b3 drained in every cycle.
    const [, lagCycle, catchUpCycle] = summary.samples;
    expect(lagCycle.bridges.map((b) => b.lagging)).toEqual([false, true, false]);
    expect(lagCycle.bridges[1].backlog).toBeGreaterThan(5_000);
    expect(lagCycle.bridges[0].backlog).toBeLessThanOrEqual(1_000);
    expect(catchUpCycle.bridges.every((b) => !b.lagging && b.drainS !== undefined)).toBe(true);
  }, 180_000);
});
