/**
 * A compacted journal (docs/architecture.md#compaction) through the real CLI (dist/): `store list` shows the
 * journal's compression, a damaged compacted chunk refuses the start with verifyOnStart: full like a damaged plain
 * one, and `store salvage` reports it lost, by outbox and seq range, and keeps everything else, intact and in order.
 * The store is written in this process on a simulated clock (test/helpers/sparkplug-traffic.ts) with compaction at
 * once, so that the test need not wait out its age.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { JOURNAL_PREFIX } from '../../src/store/lmdb/journal.js';
import { openLmdbStore } from '../../src/store/lmdb/open.js';
import { chunkCount, chunkStart } from '../../src/store/lmdb/outbox-chunk.js';
import type { LmdbStore } from '../../src/store/lmdb/store.js';
import type { OutboxLimits } from '../../src/store/types.js';
import { silentLogger } from '../../src/util/logger.js';
import { useDisposer } from '../helpers/disposer.js';
import { runCli } from '../helpers/gateway.js';
import { bufferTraffic, SimulatedClock, SparkplugTraffic } from '../helpers/sparkplug-traffic.js';

const d = useDisposer();
const UNLIMITED: OutboxLimits = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'reject-new' };
const MESSAGES = 600;

describe('a compacted journal', { timeout: 90_000 }, () => {
  it('is listed with its compression; a damaged compacted chunk refuses the start and salvage reports it lost, keeping the rest', async () => {
    const dir = d.tempDir('edgeferry-compaction-');
    const data = join(dir, 'data');
    const clock = new SimulatedClock();
    let store = (await openLmdbStore({
      path: data,
      sync: 'relaxed',
      maxBytes: 0,
      log: silentLogger,
      clock,
      compactAfterMs: 0,
    })) as LmdbStore;
    d.add({ stop: () => store.close() }); // the store open last (closing one closed already does nothing)
    await bufferTraffic(store.outbox('central', UNLIMITED), clock, new SparkplugTraffic(), MESSAGES, 100);
    // Copies: lmdb-js reuses the buffer a range read returns its values in.
    const compressed = [...store.outboxDb.getRange({ snapshot: false })]
      .filter(({ value }) => value[0] === 5)
      .map(({ key, value }) => ({ key: Buffer.from(key), value: Buffer.from(value) }));
    expect(compressed.length).toBeGreaterThanOrEqual(3);
    const configFile = join(dir, 'gw.yaml');
    writeFileSync(
      configFile,
      `listeners: [{ port: 0 }]\nstorage: { path: ${data}, verifyOnStart: full }\nlog: { format: json }\n`,
    );
    await store.close();

    const listed = await runCli(['store', 'list', '-c', configFile]);
    expect(listed, listed.stderr).toMatchObject({ code: 0 });
    const line =
      /journal \(shared by the outboxes\): (\d+) entries in \d+ chunks, (\d+) bytes \((\d+) uncompressed, ([\d.]+)x\)/.exec(
        listed.stdout,
      );
    expect(line, listed.stdout).not.toBeNull();
    const [, entries, bytes, uncompressed, ratio] = line!.map(Number);
    expect(entries).toBe(MESSAGES);
    expect(ratio).toBeCloseTo(uncompressed / bytes, 2);
    expect(ratio).toBeGreaterThanOrEqual(2);

    // One byte in the middle of the second compacted chunk flipped, as a damaged page would.
    const { key, value } = compressed[1];
    const from = chunkStart(key, JOURNAL_PREFIX.length);
    const count = chunkCount(key, JOURNAL_PREFIX.length);
    store = (await openLmdbStore({ path: data, sync: 'relaxed', maxBytes: 0, log: silentLogger })) as LmdbStore;
    const damaged = Buffer.from(value);
    damaged[damaged.length >> 1] ^= 0xff;
    store.outboxDb.putSync(key, damaged);
    await store.close();

    const start = await runCli(['--config', configFile]);
    expect(start.code, start.stdout + start.stderr).toBe(3);
    expect(start.stdout + start.stderr).toContain(
      `outbox journal: ${count} damaged records (seq ${from}-${from + count - 1})`,
    );

    const salvaged = await runCli(['store', 'salvage', '-c', configFile]);
    expect(salvaged, salvaged.stderr).toMatchObject({ code: 0 });
    // Like a damaged plain chunk, by LMDB's record count and by seqs; a compacted one is lost whole.
    expect(salvaged.stdout).toContain('outbox (all of them): 1 of');
    expect(salvaged.stdout).toContain(`outbox journal: ${count} damaged records (seq ${from}-${from + count - 1})`);

    // Everything else is there, intact, in order, and still compacted.
    store = (await openLmdbStore({ path: data, sync: 'relaxed', maxBytes: 0, log: silentLogger })) as LmdbStore;
    const kept = store.outbox('central', UNLIMITED).peek(MESSAGES);
    const traffic = new SparkplugTraffic();
    const expected = Array.from({ length: MESSAGES }, (_, i) => i + 1).filter((s) => s < from || s >= from + count);
    expect(kept.map((e) => e.seq)).toEqual(expected);
    const bySeq = new Map(kept.map((e) => [e.seq, e]));
    for (let seq = 1; seq <= MESSAGES; seq++) {
      const e = bySeq.get(seq);
      const message = traffic.next(e?.appendedAtMs ?? 0); // the walk goes on over the lost ones
      if (e !== undefined) expect(e.msg).toEqual(message);
    }
    const journal = store.journalDepth();
    expect(journal.logicalBytes / journal.bytes).toBeGreaterThanOrEqual(2);
  });
});
