/**
 * Store format 1 → 2: the outboxes of format 1 each kept their own chunks (under the outbox's owner prefix in the
 * `outbox` database); format 2 has one journal with a cursor per outbox (journal.ts). At the first open, each
 * old outbox's live entries are appended to the journal with its bit, a few chunks per transaction; the same
 * transaction deletes what it copied and records where it stopped (`legacyFloor` in the outbox's counters), so a
 * crash resumes there and every entry ends up in exactly one of the two layouts. The schema record becomes 2 in
 * the last transaction. Entries keep their order and append times; they get journal seqs, so a message in flight
 * across the migration may go again with another message id (`edgeferry-id`).
 */
import type { Database, RootDatabase } from 'lmdb';
import type { Logger } from '../../util/logger.js';
import { decodeJsonValue, encodeJsonValue, keySeq, MARK, ownerPrefix, prefixEnd, seqKey } from '../codec.js';
import { JOURNAL_META_KEY, JOURNAL_PREFIX, MAX_CURSORS, type JournalMeta } from './journal.js';
import { Chunk, chunkCount, chunkEnd, chunkKey, chunkStart, encodeChunk } from './outbox-chunk.js';
import { OUTBOX_META_END, OUTBOX_META_PREFIX, outboxMetaKey, type OutboxMeta } from './outbox.js';
import type { SteadyClock } from '../../util/clock.js';
import { StoreError } from '../../util/errors.js';

/** Old chunks copied per transaction (up to 128 entries each). */
const CHUNKS_PER_TRANSACTION = 32;

/** An outbox's counters while its entries move to the journal. */
interface MigratingMeta extends OutboxMeta {
  /** The first old seq not copied yet. */
  legacyFloor?: number;
  /** The old outbox's last seq: its marks have seqs up to here, the journal's are above. */
  legacyLastSeq?: number;
}

export interface MigrationDatabases {
  readonly meta: Database<Buffer, string>;
  readonly outboxDb: Database<Buffer, Buffer>;
  readonly outboxRemovedDb: Database<Buffer, Buffer>;
  readonly outboxReleasedDb: Database<Buffer, Buffer>;
}

/** Moves every outbox of format 1 into the journal; resumes a migration cut short. Nothing to do: no write. */
export function migrateOutboxesToJournal(
  env: RootDatabase,
  dbs: MigrationDatabases,
  clock: SteadyClock,
  log: Logger,
): void {
  const read = <T>(key: string): T | undefined => {
    const value = dbs.meta.get(key);
    return value === undefined ? undefined : decodeJsonValue<T>(value);
  };
  const write = (key: string, value: unknown): void => void dbs.meta.putSync(key, encodeJsonValue(value));
  const metas = new Map<string, MigratingMeta>();
  for (const key of dbs.meta.getKeys({ start: OUTBOX_META_PREFIX, end: OUTBOX_META_END, snapshot: false })) {
    metas.set(String(key).slice(OUTBOX_META_PREFIX.length), read<MigratingMeta>(String(key))!);
  }
  // Journal seqs go above every seq an old outbox used, so that new marks never meet old ones under one name.
  let lastSeq = read<JournalMeta>(JOURNAL_META_KEY)?.lastSeq ?? 0;
  for (const key of dbs.outboxDb.getKeys({
    start: prefixEnd(JOURNAL_PREFIX),
    end: JOURNAL_PREFIX,
    reverse: true,
    limit: 1,
    snapshot: false,
  })) {
    lastSeq = Math.max(lastSeq, chunkStart(key, JOURNAL_PREFIX.length) + chunkCount(key, JOURNAL_PREFIX.length) - 1);
  }
  for (const meta of metas.values())
    lastSeq = Math.max(lastSeq, meta.legacyLastSeq ?? (meta.slot === undefined ? meta.lastSeq : 0));
  const used = new Set([...metas.values()].flatMap((m) => (m.slot === undefined ? [] : [m.slot])));
  for (const [name, old] of metas) {
    if (old.slot !== undefined && old.legacyFloor === undefined) continue; // a cursor already
    let slot = old.slot;
    if (slot === undefined) {
      slot = 0;
      while (used.has(slot)) slot++;
      if (slot >= MAX_CURSORS) {
        throw new StoreError(
          'EF_STORE_OPEN',
          `outbox "${name}" cannot move to the journal: more than ${MAX_CURSORS} outboxes`,
        );
      }
      used.add(slot);
    }
    const resumed = old.legacyFloor !== undefined;
    const prefix = ownerPrefix(name);
    const end = prefixEnd(prefix);
    const bit = 1 << slot;
    const legacyLastSeq = old.legacyLastSeq ?? old.lastSeq;
    let meta: MigratingMeta = resumed
      ? old
      : {
          lastSeq: 0,
          messages: 0,
          bytes: 0,
          dropped: old.dropped,
          floor: lastSeq + 1,
          slot,
          legacyFloor: old.floor ?? 0,
          legacyLastSeq,
        };
    let lost = 0;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set inside the transaction callback
    for (let done = false; !done;) {
      env.transactionSync(() => {
        const removed = new Set<number>();
        const released = new Set<number>();
        for (const key of dbs.outboxRemovedDb.getKeys({
          start: prefix,
          end: seqKey(prefix, legacyLastSeq + 1),
          snapshot: false,
        }))
          removed.add(keySeq(key));
        for (const key of dbs.outboxReleasedDb.getKeys({
          start: prefix,
          end: seqKey(prefix, legacyLastSeq + 1),
          snapshot: false,
        }))
          released.add(keySeq(key));
        const values: Buffer[] = [];
        const wasReleased: boolean[] = [];
        let chunks = 0;
        let next = meta.legacyFloor ?? 0;
        for (const { key, value } of dbs.outboxDb.getRange({
          start: prefix,
          end,
          limit: CHUNKS_PER_TRANSACTION,
          snapshot: false,
        })) {
          const chunk = new Chunk(key, prefix.length, value, clock);
          if (chunk.damaged) lost += chunk.count;
          for (let seq = Math.max(chunk.start, next); seq < chunk.end && !chunk.damaged; seq++) {
            if (removed.has(seq)) continue;
            values.push(Buffer.from(chunk.value(seq)));
            wasReleased.push(released.has(seq));
          }
          for (let seq = chunk.start; seq < chunk.end; seq++) {
            if (removed.has(seq)) dbs.outboxRemovedDb.removeSync(seqKey(prefix, seq));
            if (released.has(seq)) dbs.outboxReleasedDb.removeSync(seqKey(prefix, seq));
          }
          dbs.outboxDb.removeSync(key);
          next = chunk.end;
          chunks++;
        }
        const masks = values.map(() => bit);
        for (let i = 0; i < values.length;) {
          const to = chunkEnd(values, i);
          dbs.outboxDb.putSync(chunkKey(JOURNAL_PREFIX, lastSeq + 1 + i, to - i), encodeChunk(values, i, to, masks));
          i = to;
        }
        values.forEach((value, i) => {
          if (wasReleased[i]) dbs.outboxReleasedDb.putSync(seqKey(prefix, lastSeq + 1 + i), MARK);
          meta.bytes += value.length;
        });
        if (values.length > 0) meta.lastSeq = lastSeq + values.length;
        meta.messages += values.length;
        lastSeq += values.length;
        done = chunks < CHUNKS_PER_TRANSACTION;
        if (done) {
          // Removal marks above the last entry (none are expected) have nothing left to mark.
          for (const key of dbs.outboxRemovedDb.getKeys({
            start: prefix,
            end: seqKey(prefix, legacyLastSeq + 1),
            snapshot: false,
          })) {
            dbs.outboxRemovedDb.removeSync(key);
          }
          const { legacyFloor: _f, legacyLastSeq: _l, ...cursor } = meta;
          meta = cursor;
        } else {
          meta = { ...meta, legacyFloor: next };
        }
        write(outboxMetaKey(name), meta);
        const cursors = { ...read<JournalMeta>(JOURNAL_META_KEY)?.cursors, [name]: slot };
        write(JOURNAL_META_KEY, { lastSeq, cursors } satisfies JournalMeta);
      });
    }
    if (lost > 0)
      log.error({ outbox: name, lost }, 'damaged outbox chunks skipped while moving the outbox to the journal');
    log.info(
      { outbox: name, messages: meta.messages, resumed },
      'outbox moved to the one journal (store format 2); messages in flight may go once more with a new edgeferry-id',
    );
  }
}
