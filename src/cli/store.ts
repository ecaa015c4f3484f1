/**
 * `edgeferry store list | delete-outbox NAME | requeue NAME | salvage`: what the data directory holds, the way to
 * delete the outbox of a bridge that was removed from the configuration (its backlog stays on disk until someone
 * decides), the way to send a bridge's dead letters (messages the central broker refused) again once the cause is
 * fixed, and the way out of a damaged store. Runs while edgeferry is stopped: one process at a time may open the
 * store, and the refusal names the one that holds it (EF_STORE_IN_USE).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { asError, describeError, StoreError } from '../util/errors.js';
import { requeueDeadLetters } from '../bridge/dead-letters.js';
import { deadLetterOutbox, type OutboxLimits, type Store } from '../store/types.js';
import type { SalvageResult } from '../store/lmdb/salvage.js';
import { silentLogger } from '../util/logger.js';
import { loadConfigOrReport, takeConfigOption } from './config-file.js';
import { EXIT } from './errors.js';

export const storeUsage = `  edgeferry store list [-c FILE]
                           outboxes (messages, bytes, oldest entry, dropped), persistent sessions and retained
                           messages in the data directory of FILE; edgeferry must be stopped
  edgeferry store delete-outbox NAME [-c FILE]
                           delete outbox NAME and its backlog (for a bridge removed from the configuration)
  edgeferry store requeue NAME [-c FILE]
                           move the dead letters of bridge NAME (messages the central broker refused) to the end
                           of its outbox, to be sent again at the next start
  edgeferry store salvage [-c FILE]
                           copy every record of a damaged data directory that still reads into a new one, move
                           the damaged one aside (<path>.damaged-<time>) and list what was lost
`;

/** Limits only matter for appends, which only `requeue` makes: it moves what the operator asks for, unbounded. */
const READ_ONLY: OutboxLimits = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'reject-new' };

interface StoreCommandContext {
  /** Opens the store of the configuration's `storage.path`; undefined when there is no data directory yet. */
  open(): Promise<Store | undefined>;
  /** Salvages the data directory (salvage.ts), holding its lock; undefined when there is none. */
  salvage(): Promise<SalvageResult | undefined>;
  /** The bridges of the configuration: their outboxes are in use. */
  readonly bridgeNames: readonly string[];
  readonly storePath: string;
  stdout(text: string): void;
  stderr(text: string): void;
}

/** `edgeferry store ...` on the data directory of the configuration file (`-c FILE`); returns the exit code. */
export async function storeCommand(argv: string[]): Promise<number> {
  const config = loadConfigOrReport(takeConfigOption(argv));
  if (config === undefined) return EXIT.config;
  const { path: storePath, sync, maxBytes } = config.storage;
  const { openLmdbStore } = await import('../store/lmdb/open.js'); // the native module only when needed
  return runStoreCommand(argv, {
    // Never creates a store: a typo in storage.path must not leave an empty one behind.
    open: async () =>
      existsSync(storePath) ? openLmdbStore({ path: storePath, sync, maxBytes, log: silentLogger }) : undefined,
    salvage: async () => {
      if (!existsSync(resolve(storePath, 'data.mdb'))) return undefined;
      const { acquireLock, SCHEMA_VERSION } = await import('../store/lmdb/open.js');
      const { salvageStore } = await import('../store/lmdb/salvage.js');
      const lock = acquireLock(resolve(storePath)); // refused while edgeferry runs on it
      try {
        return await salvageStore(resolve(storePath), SCHEMA_VERSION);
      } finally {
        lock.release();
      }
    },
    bridgeNames: config.bridges.map((b) => b.name),
    storePath,
    stdout: (t) => process.stdout.write(t),
    stderr: (t) => process.stderr.write(t),
  });
}

/** Returns the exit code: 0 done, 2 usage, 3 the store cannot be opened or written. */
async function runStoreCommand(argv: string[], ctx: StoreCommandContext): Promise<number> {
  let positionals: string[];
  try {
    ({ positionals } = parseArgs({ args: argv, options: {}, allowPositionals: true }));
  } catch (err) {
    ctx.stderr(`edgeferry store: ${asError(err).message}\n${storeUsage}`);
    return EXIT.config;
  }
  const [command, name] = positionals;
  const usable =
    ((command === 'list' || command === 'salvage') && positionals.length === 1) ||
    ((command === 'delete-outbox' || command === 'requeue') && positionals.length === 2);
  if (!usable) {
    ctx.stderr(`Usage:\n${storeUsage}`);
    return EXIT.config;
  }
  if (command === 'salvage') return salvage(ctx);
  let store: Store | undefined;
  try {
    store = await ctx.open();
  } catch (err) {
    ctx.stderr(`edgeferry store: ${describeError(err)}\n`);
    return EXIT.store;
  }
  if (store === undefined) {
    ctx.stdout(`store ${ctx.storePath}: no data directory yet, nothing stored\n`);
    return 0;
  }
  try {
    if (command === 'list') list(store, ctx);
    else if (command === 'requeue') {
      const moved = await requeue(store, name);
      ctx.stdout(
        moved === 0
          ? `bridge "${name}" has no dead letters\n`
          : `moved ${moved} dead letters of bridge "${name}" to its outbox\n`,
      );
    } else {
      if (ctx.bridgeNames.includes(name)) {
        ctx.stderr(
          `edgeferry store: bridge "${name}" is still in the configuration; remove it there first, or its backlog ` +
            'would only be deleted until the next start\n',
        );
        return EXIT.config;
      }
      const deleted = await store.deleteOutbox(name);
      ctx.stdout(
        deleted === 0
          ? `outbox "${name}" was empty or unknown\n`
          : `deleted outbox "${name}" with ${deleted} messages\n`,
      );
    }
    return 0;
  } catch (err) {
    if (!(err instanceof StoreError)) throw err;
    ctx.stderr(`edgeferry store: ${describeError(err)}\n`);
    return EXIT.store;
  } finally {
    await store.close();
  }
}

async function salvage(ctx: StoreCommandContext): Promise<number> {
  let result: SalvageResult | undefined;
  try {
    result = await ctx.salvage();
  } catch (err) {
    if (!(err instanceof StoreError)) throw err;
    ctx.stderr(`edgeferry store: ${describeError(err)}\n`);
    return EXIT.store;
  }
  if (result === undefined) {
    ctx.stdout(`store ${ctx.storePath}: no data directory, nothing to salvage\n`);
    return 0;
  }
  ctx.stdout(
    `salvaged ${ctx.storePath}: ${result.copied} records copied into a new data directory; the damaged one is ` +
      `${result.damagedDir}\n${result.lost.length === 0 ? 'nothing was lost\n' : `lost:\n  ${result.lost.join('\n  ')}\n`}`,
  );
  return 0;
}

function list(store: Store, ctx: StoreCommandContext): void {
  const nowMs = store.clock.nowMs();
  ctx.stdout(`store ${ctx.storePath}\n`);
  const names = store.outboxNames().sort();
  if (names.length === 0) ctx.stdout('outboxes: none\n');
  for (const name of names) {
    const d = store.outbox(name, READ_ONLY).depth;
    const oldest = d.oldestAppendedAtMs === undefined ? '-' : `${Math.round((nowMs - d.oldestAppendedAtMs) / 1000)} s`;
    const dropped = Object.entries(d.dropped)
      .filter(([, n]) => n > 0)
      .map(([reason, n]) => `${reason} ${n}`)
      .join(', ');
    const deadOf = ctx.bridgeNames.find((bridge) => deadLetterOutbox(bridge) === name);
    const note = ctx.bridgeNames.includes(name)
      ? ''
      : deadOf !== undefined
        ? `  (refused by the central broker; send again with "edgeferry store requeue ${deadOf}")`
        : '  (no bridge of this name in the configuration)';
    const c = d.cursor;
    const cursor =
      c === undefined
        ? ''
        : `; cursor slot ${c.slot}, floor ${c.floor}, marks ${c.removedMarks} removed / ${c.releasedMarks} released`;
    ctx.stdout(
      `outbox ${name}: ${d.messages} messages, ${d.bytes} bytes, oldest ${oldest}, dropped ${dropped || 'none'}${cursor}${note}\n`,
    );
  }
  const j = store.journalDepth?.();
  if (j !== undefined) {
    const range = j.firstSeq === undefined ? 'empty' : `seq ${j.firstSeq}..${j.lastSeq}`;
    // Compacted chunks are stored compressed (docs/architecture.md#compaction): what they hold, and the ratio.
    const compression =
      j.logicalBytes === j.bytes ? '' : ` (${j.logicalBytes} uncompressed, ${(j.logicalBytes / j.bytes).toFixed(2)}x)`;
    ctx.stdout(
      `journal (shared by the outboxes): ${j.entries} entries in ${j.chunks} chunks, ${j.bytes} bytes${compression}, ${range}\n`,
    );
  }
  let sessions = 0;
  let queued = 0;
  // Counted, not loaded: a queue may hold millions of messages.
  for (const s of store.sessions.loadAll({ messages: 0, bytes: 0 })) {
    sessions++;
    queued += s.queue.length + (s.queueTail?.count ?? 0);
  }
  ctx.stdout(
    `persistent sessions: ${sessions} (${queued} queued messages)\nretained messages: ${store.retained.count}\n`,
  );
}

/** Moves the dead letters of bridge `name` to the end of its outbox (requeueDeadLetters). */
async function requeue(store: Store, name: string): Promise<number> {
  if (!store.outboxNames().includes(deadLetterOutbox(name))) return 0;
  return requeueDeadLetters(store.outbox(deadLetterOutbox(name), READ_ONLY), store.outbox(name, READ_ONLY));
}
