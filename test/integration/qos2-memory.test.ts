/**
 * The same QoS 2 PUBLISH sent again and again without PUBREL: until PUBREL the receiver
 * acknowledges every resend with PUBREC and delivers the message once [MQTT-4.3.3-10]; the gateway keeps one
 * packet id for it, not a copy per resend, and nothing of it after the connection closed. Measured on the heap
 * (plus array buffers) after full collections, in a child process running the gateway with --expose-gc: RSS
 * would also count memory the allocator keeps after the garbage of 3,000 × 10 kB reads was collected.
 */
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const FIXTURE = join(ROOT, 'test/fixtures/qos2-resend-heap.mjs');
const COUNT = 3000;
const PAYLOAD_BYTES = 10_000;
/** Heap noise between full collections on this machine is well under this; one copy per resend would be 30 MB. */
const SLACK_BYTES = 3 * 1024 * 1024;

const d = useDisposer();

describe(`${COUNT} QoS 2 PUBLISHes with one packet id and no PUBREL`, () => {
  for (const version of [4, 5] as const) {
    it(`MQTT ${version === 5 ? '5' : '3.1.1'}: one PUBREC each, one delivery, no copy per resend and nothing left after close [MQTT-4.3.3-10]`, () => {
      const dataDir = d.tempDir('edgeferry-qos2-heap-');
      const run = spawnSync(process.execPath, ['--expose-gc', FIXTURE, ROOT, dataDir, String(version), String(COUNT)], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(run.status, run.stderr).toBe(0);
      const m = JSON.parse(run.stdout.trim().split('\n').at(-1)!) as {
        before: number;
        open: number;
        closed: number;
        pubrecs: number;
        delivered: number;
      };
      expect(m.pubrecs).toBe(COUNT);
      expect(m.delivered).toBe(1);
      const mb = (n: number): string => `${(n / 1e6).toFixed(1)} MB`;
      const figures = `heap before ${mb(m.before)}, flow open ${mb(m.open)}, after close ${mb(m.closed)} (${mb(COUNT * PAYLOAD_BYTES)} sent)`;
      expect(m.open - m.before, figures).toBeLessThan(SLACK_BYTES);
      expect(m.closed - m.before, figures).toBeLessThan(SLACK_BYTES);
    });
  }
});
