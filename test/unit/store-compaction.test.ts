/**
 * Compaction of the journal (docs/architecture.md#compaction): chunks that stay are merged and stored compressed,
 * what a 24 h outage of a reference site needs to fit its disk; a damaged compacted chunk is skipped, counted and
 * reported like a damaged plain one; a store of format 2 (plain chunks only) opens, and its chunks are compacted.
 * The crash tests are in test/integration/store-lmdb-crash.test.ts, salvage in store-compaction.test.ts there.
 */
import { describe, expect, it } from 'vitest';
import { JOURNAL_PREFIX } from '../../src/store/lmdb/journal.js';
import { openLmdbStore, SCHEMA_VERSION } from '../../src/store/lmdb/open.js';
import { chunkCount, chunkStart } from '../../src/store/lmdb/outbox-chunk.js';
import type { LmdbStore, LmdbStoreOptions } from '../../src/store/lmdb/store.js';
import type { OutboxLimits } from '../../src/store/types.js';
import { silentLogger } from '../../src/util/logger.js';
import { recordingLogger, type LoggedError } from '../helpers/logger.js';
import { bufferTraffic, SimulatedClock, SparkplugTraffic } from '../helpers/sparkplug-traffic.js';
import { useDisposer } from '../helpers/disposer.js';
import { waitFor } from '../helpers/wait.js';

const UNLIMITED: OutboxLimits = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'reject-new' };
/** The reference site's rate (msg/s): one message per batch. */
const RATE = 100;
const d = useDisposer();

const tempDir = (): string => d.tempDir('edgeferry-compaction-');

async function openStore(
  dir: string,
  opts: Partial<LmdbStoreOptions> = {},
  internal: { schemaVersion?: number } = {},
): Promise<LmdbStore> {
  const s = await openLmdbStore({ path: dir, sync: 'relaxed', maxBytes: 0, log: silentLogger, ...opts }, internal);
  d.add({ stop: () => s.close() }); // closing one closed already does nothing
  return s as LmdbStore;
}

/** Bytes of the `outbox` database's pages: what the journal takes on disk. */
function pageBytes(store: LmdbStore): number {
  const stats = store.outboxDb.getStats() as Record<string, number>;
  return (stats.treeBranchPageCount + stats.treeLeafPageCount + stats.overflowPages) * stats.pageSize;
}

/** The journal's chunks as stored: key, and whether compressed (format byte 5). */
function storedChunks(store: LmdbStore): { key: Buffer; compressed: boolean }[] {
  return [...store.outboxDb.getRange({ snapshot: false })].map(({ key, value }) => ({
    key: Buffer.from(key),
    compressed: value[0] === 5,
  }));
}

describe('journal compaction', () => {
  it('stores Sparkplug traffic like a reference site at less than half its bytes, its pages included', async () => {
    const clock = new SimulatedClock();
    const store = await openStore(tempDir(), { clock, compactAfterMs: 0 });
    const box = store.outbox('central', UNLIMITED);
    const messages = 2000;
    await bufferTraffic(box, clock, new SparkplugTraffic(), messages, RATE);
    const journal = store.journalDepth();
    const perMessage = pageBytes(store) / messages;
    console.log(
      `reference traffic: ${(box.depth.bytes / messages).toFixed(0)} B per entry, ${perMessage.toFixed(0)} B of ` +
        `pages per message, compression ${(journal.logicalBytes / journal.bytes).toFixed(2)}x`,
    );
    // Measured (bench/journal-size.ts): 2.5x, about 350 B of pages per message of 875 B (1,374 B uncompacted).
    expect(journal.logicalBytes / journal.bytes).toBeGreaterThanOrEqual(2);
    expect(perMessage).toBeLessThan(600);
    // Nothing lost, changed or reordered on the way: the traffic again, at the times its entries were appended.
    const traffic = new SparkplugTraffic();
    const entries = box.peek(messages + 1);
    expect(entries.map((e) => e.seq)).toEqual(Array.from({ length: messages }, (_, i) => i + 1));
    for (const e of entries) expect(e.msg).toEqual(traffic.next(e.appendedAtMs));
  }, 60_000);

  it('leaves chunks younger than its age as they are: the live path pays nothing', async () => {
    const clock = new SimulatedClock();
    const store = await openStore(tempDir(), { clock, compactAfterMs: 60_000 });
    await bufferTraffic(store.outbox('central', UNLIMITED), clock, new SparkplugTraffic(), 300, RATE);
    expect(storedChunks(store).filter((c) => c.compressed)).toEqual([]);
    // A minute later, the next batch compacts the oldest run.
    clock.atMs += 60_000;
    await bufferTraffic(store.outbox('central', UNLIMITED), clock, new SparkplugTraffic(), 1, RATE);
    expect(storedChunks(store).filter((c) => c.compressed)).toHaveLength(1);
  });

  it('skips, counts and reports every entry of a damaged compacted chunk, delivering the rest', async () => {
    const dir = tempDir();
    const clock = new SimulatedClock();
    let store = await openStore(dir, { clock, compactAfterMs: 0 });
    await bufferTraffic(store.outbox('central', UNLIMITED), clock, new SparkplugTraffic(), 300, RATE);
    const [first, second] = storedChunks(store).filter((c) => c.compressed);
    expect(second).toBeDefined();
    // One byte of the compressed body flipped, as a damaged page would.
    const value = Buffer.from(store.outboxDb.get(second.key)!);
    value[value.length >> 1] ^= 0xff;
    store.outboxDb.putSync(second.key, value);
    await store.close();

    const errors: LoggedError[] = [];
    store = await openStore(dir, { log: recordingLogger(errors) });
    const box = store.outbox('central', UNLIMITED);
    const from = chunkStart(second.key, JOURNAL_PREFIX.length);
    const count = chunkCount(second.key, JOURNAL_PREFIX.length);
    expect(chunkStart(first.key, JOURNAL_PREFIX.length)).toBe(1);
    const seqs = box.peek(1000).map((e) => e.seq);
    const expected = Array.from({ length: 300 }, (_, i) => i + 1).filter((s) => s < from || s >= from + count);
    expect(seqs).toEqual(expected);
    expect(store.corruptRecords).toBe(count);
    expect(errors[0].obj).toMatchObject({ what: 'outbox entries', outbox: 'central', records: count });
    await waitFor(() => box.depth.messages === 300 - count, 5000, { message: 'the damaged entries removed' });
  });

  it('opens a store of format 2 (plain chunks), reads it, and compacts its chunks', async () => {
    const dir = tempDir();
    const clock = new SimulatedClock();
    let store = await openStore(dir, { clock, compactAfterMs: Infinity }, { schemaVersion: 2 });
    await bufferTraffic(store.outbox('central', UNLIMITED), clock, new SparkplugTraffic(), 300, RATE);
    const before = store.outbox('central', UNLIMITED).peek(1000);
    expect(storedChunks(store).some((c) => c.compressed)).toBe(false);
    await store.close();

    clock.atMs += 120_000; // older than compaction's age (a minute)
    store = await openStore(dir, { clock });
    expect(JSON.parse(store.meta.get('schema')!.toString())).toMatchObject({ version: SCHEMA_VERSION });
    const box = store.outbox('central', UNLIMITED);
    expect(box.peek(1000)).toEqual(before);
    await bufferTraffic(box, clock, new SparkplugTraffic(7), 1, RATE);
    expect(storedChunks(store).filter((c) => c.compressed)).toHaveLength(1);
    await store.close();
    store = await openStore(dir, { clock });
    expect(store.outbox('central', UNLIMITED).peek(300)).toEqual(before);
  });
});
