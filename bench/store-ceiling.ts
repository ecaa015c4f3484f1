/**
 * `npm run bench:store`: the LMDB store alone (bench/store-rate.ts), into a session queue and into a bridge outbox,
 * with `--in-flight` writes waiting for durability at any time. `npm run bench:persistence` measures the session
 * queue the same way in its own run, next to the brokers (its `store` row).
 */
import { parseArgs } from 'node:util';
import { parseOrExit, positiveInt, runMain, scratchDir } from './harness.js';
import { formatNumber, median } from './report.js';
import { storeRate, storeTargets, type StoreTarget } from './store-rate.js';

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

async function main(): Promise<void> {
  const opts = parseOrExit(usage, parse);
  const { tmpDir, cleanup } = scratchDir('edgeferry-store-bench-', () => undefined, 'store bench interrupted');
  try {
    process.stdout.write(
      `store ceiling: ${opts.inFlight} writes in flight, ${formatNumber(opts.messages)} x 64 B, sync ${opts.sync}, ${opts.reps} rep(s)\n`,
    );
    const rates = new Map<StoreTarget, number[]>(storeTargets.map((k) => [k, []]));
    for (let rep = 1; rep <= opts.reps; rep++) {
      for (const kind of storeTargets) {
        const rate = await storeRate(kind, { ...opts, payloadBytes: 64 }, `${tmpDir}/${rep}-${kind.replace(' ', '-')}`);
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
