/**
 * `npm run bench:store`: the rate the LMDB store itself commits durable writes at, with a given number of writes
 * in flight and no network, broker or client in the way. It is the ceiling for every durable ingest path: QoS 1
 * publishes into a persistent session's offline queue and into a bridge outbox can be
 * acknowledged no faster, whatever the rest of the gateway does.
 *
 * Each of `--in-flight` writers queues one 64-byte message, waits until the store says it is durable (as the
 * broker does before a PUBACK), and queues the next; `--messages` in all, into a session queue and into an outbox.
 * With `storage.sync: full` every commit waits for the disk, so the rate is about in-flight / (commit latency).
 */
import { parseArgs } from 'node:util';
import { createMessage } from '../src/protocol/message.js';
import { openLmdbStore } from '../src/store/lmdb/open.js';
import type { Store } from '../src/store/types.js';
import { silentLogger } from '../src/util/logger.js';
import { parseOrExit, positiveInt, runMain, scratchDir } from './harness.js';
import { formatNumber, median } from './report.js';

const usage = `Usage: npm run bench:store -- [options]
  --in-flight N        writes waiting for durability at any time, default 160 (bench:persistence: 10 publishers x 16)
  --messages N         messages per run, default 50000
  --reps N             repetitions (median reported), default 5
  --sync full|relaxed  storage.sync, default full
  -h, --help`;

interface Options {
  inFlight: number;
  messages: number;
  reps: number;
  sync: 'full' | 'relaxed';
}

const kinds = ['session queue', 'bridge outbox'] as const;
type Kind = (typeof kinds)[number];

function parse(): Options | null {
  const { values } = parseArgs({
    options: {
      'in-flight': { type: 'string' },
      messages: { type: 'string' },
      reps: { type: 'string' },
      sync: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return null;
  const sync = values.sync ?? 'full';
  if (sync !== 'full' && sync !== 'relaxed') throw new Error(`--sync must be full or relaxed, not ${sync}`);
  return {
    inFlight: positiveInt(values['in-flight'], 160, 'in-flight'),
    messages: positiveInt(values.messages, 50_000, 'messages'),
    reps: positiveInt(values.reps, 5, 'reps'),
    sync,
  };
}

/** Messages per second through `write`, keeping `inFlight` writes waiting for durability at any time. */
async function measure(opts: Options, write: (i: number) => Promise<unknown>): Promise<number> {
  let next = 0;
  const writer = async (): Promise<void> => {
    while (next < opts.messages) await write(next++);
  };
  const startedMs = performance.now();
  await Promise.all(Array.from({ length: opts.inFlight }, writer));
  return (opts.messages * 1000) / (performance.now() - startedMs);
}

async function run(opts: Options, kind: Kind, dir: string): Promise<number> {
  const store: Store = await openLmdbStore({ path: dir, sync: opts.sync, maxBytes: 0, log: silentLogger });
  try {
    const payload = Buffer.alloc(64, 0x61);
    const message = (i: number) => createMessage({ topic: `bench/${i % 10}`, payload, qos: 1, origin: 'bench' });
    if (kind === 'session queue') {
      await store.sessions.putSession('bench-subscriber', { expiryIntervalS: 3600 });
      return await measure(opts, (i) => store.sessions.enqueue('bench-subscriber', message(i)));
    }
    const outbox = store.outbox('bench', { maxMessages: 0, maxBytes: 0, maxAgeS: 0, overflow: 'drop-oldest' });
    return await measure(opts, (i) => outbox.append(message(i)));
  } finally {
    await store.close();
  }
}

async function main(): Promise<void> {
  const opts = parseOrExit(usage, parse);
  const { tmpDir, cleanup } = scratchDir('edgeferry-store-bench-', () => undefined, 'store bench interrupted');
  try {
    process.stdout.write(`store ceiling: ${opts.inFlight} writes in flight, ${formatNumber(opts.messages)} x 64 B, sync ${opts.sync}, ${opts.reps} rep(s)\n`);
    const rates = new Map<Kind, number[]>(kinds.map((k) => [k, []]));
    for (let rep = 1; rep <= opts.reps; rep++) {
      for (const kind of kinds) {
        const rate = await run(opts, kind, `${tmpDir}/${rep}-${kind.replace(' ', '-')}`);
        rates.get(kind)!.push(rate);
        process.stdout.write(`[rep ${rep}] ${kind.padEnd(13)} ${formatNumber(Math.round(rate))} msg/s\n`);
      }
    }
    for (const [kind, list] of rates) {
      process.stdout.write(`${kind.padEnd(13)} median ${formatNumber(Math.round(median(list)))} msg/s\n`);
    }
  } finally {
    cleanup();
  }
}

runMain('store bench', main, () => undefined);
