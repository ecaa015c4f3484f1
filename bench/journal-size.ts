/**
 * `node dist/bench/journal-size.js` (after `npm run build:bench`): the bytes on disk a bridge's journal takes per
 * buffered message and value through an uplink outage, for Sparkplug traffic like a reference site's
 * (test/helpers/sparkplug-traffic.ts: DDATA of 50 random-walk values, about 800 bytes), and the 24 h projection.
 *
 * The store runs on a simulated clock, `--rate` messages a second, one append per batch (what a gateway sees at
 * 100 msg/s: a message per commit), so that compaction (src/store/lmdb/compaction.ts) sees the ages and the time
 * it would in a real outage without the run taking that long. Two stores, same messages: `plain` never compacts
 * (the journal as before compaction), `compacted` as the gateway runs. Bytes on disk: the `outbox` database's
 * pages (branch, leaf, overflow) × page size, what `storage.maxBytes` counts; per message in the steady state,
 * what the pages grew by over the last two thirds of the run (the last minute stays plain until it ages), which
 * is what 24 h cost.
 *
 * Then the codecs weighed for a compacted chunk, on journal chunks of 128 of the same messages: DEFLATE (raw, as
 * node:zlib has it) per message and per chunk, Brotli per chunk at two qualities; ratio and CPU per message.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import zlib from 'node:zlib';
import { encodeStampedValue } from '../src/store/codec.js';
import { encodeChunk } from '../src/store/lmdb/outbox-chunk.js';
import { openLmdbStore } from '../src/store/lmdb/open.js';
import type { LmdbStore } from '../src/store/lmdb/store.js';
import { silentLogger } from '../src/util/logger.js';
import {
  bufferTraffic,
  SimulatedClock,
  SparkplugTraffic,
  VALUES_PER_MESSAGE,
} from '../test/helpers/sparkplug-traffic.js';

interface JournalSize {
  mode: 'plain' | 'compacted';
  messages: number;
  /** Bytes of the stored entries (header, topic, payload, checksum), what the outbox counts. */
  entryBytes: number;
  /** Bytes of the journal's chunk values as stored, and decompressed. */
  storedBytes: number;
  logicalBytes: number;
  /** Bytes of the `outbox` database's pages at the end, and how much they grew per message over the last 2/3. */
  pageBytes: number;
  steadyBytesPerMessage: number;
  /** CPU of the appends (and compactions), per message. */
  cpuUsPerMessage: number;
}

function pageBytes(store: LmdbStore): number {
  const stats = store.outboxDb.getStats() as Record<string, number>;
  return (stats.treeBranchPageCount + stats.treeLeafPageCount + stats.overflowPages) * stats.pageSize;
}

async function measure(mode: JournalSize['mode'], messages: number, rate: number): Promise<JournalSize> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'edgeferry-journal-size-'));
  const clock = new SimulatedClock();
  const store = (await openLmdbStore({
    path: dir,
    sync: 'relaxed',
    maxBytes: 0,
    log: silentLogger,
    clock,
    ...(mode === 'plain' ? { compactAfterMs: Infinity } : {}),
  })) as LmdbStore;
  try {
    const outbox = store.outbox('central', { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'reject-new' });
    const traffic = new SparkplugTraffic();
    const cpu = process.cpuUsage();
    const third = Math.floor(messages / 3);
    await bufferTraffic(outbox, clock, traffic, third, rate);
    const pagesAtThird = pageBytes(store);
    await bufferTraffic(outbox, clock, traffic, messages - third, rate);
    const used = process.cpuUsage(cpu);
    const journal = store.journalDepth();
    return {
      mode,
      messages,
      entryBytes: outbox.depth.bytes,
      storedBytes: journal.bytes,
      logicalBytes: journal.logicalBytes,
      pageBytes: pageBytes(store),
      steadyBytesPerMessage: (pageBytes(store) - pagesAtThird) / (messages - third),
      cpuUsPerMessage: (used.user + used.system) / messages,
    };
  } finally {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Ratio and µs per message of `compress` over `units` (buffers holding `perUnit` messages each). */
function codec(units: readonly Buffer[], perUnit: number, compress: (b: Buffer) => Buffer): string {
  let raw = 0;
  let packed = 0;
  const startedMs = performance.now();
  for (const unit of units) {
    raw += unit.length;
    packed += compress(unit).length;
  }
  const us = ((performance.now() - startedMs) * 1000) / (units.length * perUnit);
  return `${(raw / packed).toFixed(2)}x ${us.toFixed(0)} us/message`;
}

function compareCodecs(messages: number): void {
  const clock = new SimulatedClock();
  const traffic = new SparkplugTraffic();
  const entries = Array.from({ length: messages }, () => {
    clock.atMs += 10;
    return encodeStampedValue(traffic.next(clock.atMs), clock.atMs, clock);
  });
  const chunks: Buffer[] = [];
  for (let i = 0; i + 128 <= entries.length; i += 128)
    chunks.push(
      encodeChunk(
        entries,
        i,
        i + 128,
        entries.map(() => 1),
      ),
    );
  const brotli = (quality: number) => (b: Buffer) =>
    zlib.brotliCompressSync(b, {
      params: {
        [zlib.constants.BROTLI_PARAM_QUALITY]: quality,
        [zlib.constants.BROTLI_PARAM_LGWIN]: 18,
        [zlib.constants.BROTLI_PARAM_SIZE_HINT]: b.length,
      },
    });
  console.log(
    `codecs over ${chunks.length} chunks of 128: DEFLATE level 1 per message ` +
      `${codec(entries, 1, (b) => zlib.deflateRawSync(b, { level: 1 }))}, per chunk ` +
      `${codec(chunks, 128, (b) => zlib.deflateRawSync(b, { level: 1 }))}; DEFLATE level 6 per chunk ` +
      `${codec(chunks, 128, (b) => zlib.deflateRawSync(b, { level: 6 }))}; Brotli quality 2 per chunk ` +
      `${codec(chunks, 128, brotli(2))}, quality 5 ${codec(chunks, 128, brotli(5))}`,
  );
}

const { values } = parseArgs({
  options: {
    messages: { type: 'string', default: '30000' },
    rate: { type: 'string', default: '100' },
  },
});
const messages = Number(values.messages);
const rate = Number(values.rate);
const day = rate * 86_400;
console.log(`journal size: ${messages} Sparkplug DDATA messages of ${VALUES_PER_MESSAGE} values at ${rate} msg/s`);
for (const mode of ['plain', 'compacted'] as const) {
  const r = await measure(mode, messages, rate);
  const perMessage = r.steadyBytesPerMessage;
  console.log(
    `${mode.padEnd(9)} entry ${(r.entryBytes / r.messages).toFixed(0)} B; on disk ${perMessage.toFixed(0)} B/message ` +
      `${(perMessage / VALUES_PER_MESSAGE).toFixed(2)} B/value in the steady state (${(r.pageBytes / r.messages).toFixed(0)} ` +
      `B/message over the run); journal compression ${(r.logicalBytes / r.storedBytes).toFixed(2)}x; ` +
      `24 h at ${rate} msg/s: ${((perMessage * day) / 1e9).toFixed(2)} GB; CPU ${r.cpuUsPerMessage.toFixed(0)} us/message`,
  );
}
compareCodecs(messages);
