/**
 * `edgeferry store list | delete-outbox NAME`: what the data directory holds, and the way to delete the outbox
 * of a bridge that was removed from the configuration (its backlog stays on disk until someone decides).
 * Runs while edgeferry is stopped: one process at a time may open the store, and the refusal names the one
 * that holds it.
 */
import { parseArgs } from 'node:util';
import { asError, StoreError } from '../util/errors.js';
import type { OutboxLimits, Store } from './types.js';
import { steadyNowMs } from '../util/clock.js';

export const storeUsage = `  edgeferry store list [-c FILE]
                           outboxes (messages, bytes, oldest entry, dropped), persistent sessions and retained
                           messages in the data directory of FILE; edgeferry must be stopped
  edgeferry store delete-outbox NAME [-c FILE]
                           delete outbox NAME and its backlog (for a bridge removed from the configuration)
`;

/** Limits only matter for appends, which these commands never make. */
const READ_ONLY: OutboxLimits = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'reject-new' };

export interface StoreCommandContext {
  /** Opens the store of the configuration's `storage.path`; undefined when there is no data directory yet. */
  open(): Promise<Store | undefined>;
  /** The bridges of the configuration: their outboxes are in use. */
  readonly bridgeNames: readonly string[];
  readonly storePath: string;
  stdout(text: string): void;
  stderr(text: string): void;
}

/** Returns the exit code: 0 done, 2 usage, 3 the store cannot be opened or written. */
export async function runStoreCommand(argv: string[], ctx: StoreCommandContext): Promise<number> {
  let positionals: string[];
  try {
    ({ positionals } = parseArgs({ args: argv, options: {}, allowPositionals: true }));
  } catch (err) {
    ctx.stderr(`edgeferry store: ${asError(err).message}\n${storeUsage}`);
    return 2;
  }
  const [command, name] = positionals;
  const usable = (command === 'list' && positionals.length === 1) || (command === 'delete-outbox' && positionals.length === 2);
  if (!usable) {
    ctx.stderr(`Usage:\n${storeUsage}`);
    return 2;
  }
  let store: Store | undefined;
  try {
    store = await ctx.open();
  } catch (err) {
    ctx.stderr(`edgeferry store: ${asError(err).message}\n`);
    return 3;
  }
  if (store === undefined) {
    ctx.stdout(`store ${ctx.storePath}: no data directory yet, nothing stored\n`);
    return 0;
  }
  try {
    if (command === 'list') list(store, ctx);
    else {
      if (ctx.bridgeNames.includes(name)) {
        ctx.stderr(
          `edgeferry store: bridge "${name}" is still in the configuration; remove it there first, or its backlog ` +
            'would only be deleted until the next start\n',
        );
        return 2;
      }
      const deleted = await store.deleteOutbox(name);
      ctx.stdout(deleted === 0 ? `outbox "${name}" was empty or unknown\n` : `deleted outbox "${name}" with ${deleted} messages\n`);
    }
    return 0;
  } catch (err) {
    if (!(err instanceof StoreError)) throw err;
    ctx.stderr(`edgeferry store: ${err.message}\n`);
    return 3;
  } finally {
    await store.close();
  }
}

function list(store: Store, ctx: StoreCommandContext): void {
  const nowMs = steadyNowMs();
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
    const note = ctx.bridgeNames.includes(name) ? '' : '  (no bridge of this name in the configuration)';
    ctx.stdout(
      `outbox ${name}: ${d.messages} messages, ${d.bytes} bytes, oldest ${oldest}, dropped ${dropped || 'none'}${note}\n`,
    );
  }
  let sessions = 0;
  let queued = 0;
  // Counted, not loaded: a queue may hold millions of messages.
  for (const s of store.sessions.loadAll({ messages: 0, bytes: 0 })) {
    sessions++;
    queued += s.queue.length + (s.queueTail?.count ?? 0);
  }
  ctx.stdout(`persistent sessions: ${sessions} (${queued} queued messages)\nretained messages: ${store.retained.count}\n`);
}
