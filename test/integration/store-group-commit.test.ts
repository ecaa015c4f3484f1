/**
 * Group commit (docs/architecture.md#durability): on a disk whose flush takes milliseconds, publishers that wait
 * for their PUBACK come back as a group, and the store waits for the group rather than splitting it into two
 * batches that take turns. The disk is made slow for the gateway process only, by preloading bench/slow-sync.c
 * (every fsync/fdatasync 50 ms longer, so that a group is back long before the flush even on a busy machine).
 * Measured: how many messages each commit carries (`edgeferry_store_commits_total`), and that every acknowledged
 * message reaches the persistent subscriber.
 */
import { execFileSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MqttClient } from 'mqtt';
import { beforeAll, describe, expect, it } from 'vitest';
import { checkSequence, collect, connectClient, publishSequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway } from '../helpers/gateway.js';
import { freePort } from '../helpers/ports.js';
import { removeDir, tempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const d = useDisposer();

const PUBLISHERS = 10;
const IN_FLIGHT = 16;
const PER_PUBLISHER = 600;

async function commits(metricsPort: number): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const m = /^edgeferry_store_commits_total (\d+)$/m.exec(text);
  if (!m) throw new Error('edgeferry_store_commits_total missing from /metrics');
  return Number(m[1]);
}

describe('group commit on a slow disk', () => {
  let slowSync = '';
  beforeAll(() => {
    const dir = tempDir('edgeferry-slow-sync-');
    d.defer(() => removeDir(dir));
    slowSync = join(dir, 'slow-sync.so');
    execFileSync('cc', ['-O2', '-shared', '-fPIC', '-o', slowSync, join(ROOT, 'bench/slow-sync.c'), '-ldl']);
  });

  it('fills each commit with the whole returning group of publishers, and delivers every acknowledged message', async () => {
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway(
        { metrics: { host: '127.0.0.1', port: metricsPort }, broker: { maxQueuedMessages: 0, sysIntervalS: 0 } },
        { env: { LD_PRELOAD: slowSync, SLOW_SYNC_US: '50000' } },
      ),
    );
    // A persistent subscriber, offline while the publishers run: every message goes into its queue in the store.
    const sub = await collect(gw.url, 'plant/#', { qos: 1, clientId: 'historian', clean: false });
    await sub.stop();

    const publishers: MqttClient[] = [];
    for (let p = 0; p < PUBLISHERS; p++) publishers.push(await connectClient(gw.url, { clientId: `plc-${p}` }));
    d.defer(async () => {
      await Promise.all(publishers.map((c) => c.endAsync(true)));
    });
    const before = await commits(metricsPort);
    const acked = await Promise.all(
      publishers.map((c, p) =>
        publishSequence(c, `plant/line${p}`, PER_PUBLISHER, { qos: 1, prefix: `p${p}-`, concurrency: IN_FLIGHT }),
      ),
    );
    const perCommit = (PUBLISHERS * PER_PUBLISHER) / ((await commits(metricsPort)) - before);
    console.info(
      `[group-commit] ${PUBLISHERS} publishers x ${IN_FLIGHT} in flight, flush +50 ms: ${perCommit.toFixed(0)} messages per commit`,
    );
    // Split into two groups that take turns, a commit carries about half of the 160 in flight; waiting for the
    // group, nearly all of them (the first commits, before the store has measured its flush, are split).
    expect(perCommit).toBeGreaterThan(100);

    const drained = d.add(await collect(gw.url, 'plant/#', { qos: 1, clientId: 'historian', clean: false }));
    const total = PUBLISHERS * PER_PUBLISHER;
    await waitFor(() => drained.messages.length >= total, 30_000, {
      message: () => `${drained.messages.length}/${total} delivered`,
    });
    for (let p = 0; p < PUBLISHERS; p++) {
      const got = drained.messages.filter((m) => m.topic === `plant/line${p}`).map((m) => m.payload.toString());
      expect(checkSequence(got, acked[p])).toEqual({ missing: [], unexpected: [], duplicates: 0, outOfOrder: 0 });
    }
  });
});
