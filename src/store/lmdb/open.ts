/**
 * Opening the durable store: one LMDB environment (lmdb-js) in `storage.path`, checked before use (data file,
 * lock, schema version). The store itself is in this folder: store.ts (batches and the write path), outbox.ts,
 * sessions.ts, retained.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { open, type RootDatabase } from 'lmdb';
import { asError, StoreError } from '../../util/errors.js';
import type { Store } from '../types.js';
import { currentBootId } from '../../util/clock.js';
import { LmdbStore, type LmdbStoreOptions, type StoreLock } from './store.js';
import { describeDamage, verifyInChild } from './verify.js';
import { CorruptValueError, decodeJsonValue, encodeSchemaValue } from '../codec.js';

export type { LmdbStoreOptions };

/** Layout version of the databases below; stored in `meta` at creation, refused when different. */
export const SCHEMA_VERSION = 3;
/**
 * Formats this release opens and updates: 1 had an outbox of its own per bridge, which the first open moves to the
 * one journal (migrate.ts); 2 is the journal without compacted chunks, which it reads as it is. The record
 * becomes 3 at their first open, so that a release of format 2, which would take a compacted chunk for a damaged
 * one, refuses the store instead (docs/architecture.md#compaction).
 */
const OLDER_VERSIONS: readonly unknown[] = [1, 2];

// --- Opening ----------------------------------------------------------------------------------------------

function openError(dir: string, what: string, cause?: unknown): StoreError {
  const plain = accessError(dir, what, cause) ?? notADirectoryError(dir, cause);
  if (plain !== undefined) return plain;
  return new StoreError(
    'EF_STORE_OPEN',
    `cannot open the data directory ${dir}: ${what}. Nothing was changed. Restore a backup, or start once ` +
      `with --reset-store, which moves the directory aside (kept for analysis) and starts with an empty store.`,
    cause === undefined ? undefined : { cause },
  );
}

/** `storage.path` (or a folder on the way to it) is a regular file: say so, no advice about damage. */
function notADirectoryError(dir: string, cause: unknown): StoreError | undefined {
  const code = (cause as NodeJS.ErrnoException | undefined)?.code;
  if (code !== 'EEXIST' && code !== 'ENOTDIR') return undefined;
  const what = fs.statSync(dir, { throwIfNoEntry: false })?.isFile()
    ? `${dir} is a file, not a directory`
    : `a part of ${dir} is a file, not a directory`;
  return new StoreError(
    'EF_STORE_OPEN',
    `storage.path ${dir} cannot be the data directory: ${what}. Set storage.path to a directory (edgeferry creates ` +
      `it when it is missing), or move the file away.`,
    { cause },
  );
}

/**
 * A data directory this process may not read or write (EACCES, EPERM): nothing is damaged, the owner or mode of
 * the directory or a file in it keeps the service's user out. The way out is to give it to that user, never to
 * move the data aside (--reset-store would meet the same wall). Undefined for any other cause.
 */
export function accessError(dir: string, what: string, cause: unknown): StoreError | undefined {
  if (cause === undefined) return undefined;
  const code = (cause as NodeJS.ErrnoException).code;
  // LMDB's own errors carry no code, only the system's text.
  const denied =
    code === 'EACCES' || code === 'EPERM' || /permission denied|operation not permitted/i.test(asError(cause).message);
  if (!denied) return undefined;
  const user = processUser();
  return new StoreError(
    'EF_STORE_OPEN',
    `cannot open the data directory ${dir}: ${what}. It is not damaged: it, or a file in it, belongs to another user ` +
      `or has a mode that keeps out the user edgeferry runs as (${user}). Give it to that user: chown -R ${user}: ${dir}`,
    { cause },
  );
}

/** The name of the user this process runs as (the service's), or its uid when it has no name. */
function processUser(): string {
  try {
    return os.userInfo().username;
  } catch {
    return String(process.getuid?.() ?? 'the service user');
  }
}

/** A store the integrity walk found damaged: what is damaged, and the two ways out. */
function damagedError(dir: string, damage: readonly string[]): StoreError {
  return new StoreError(
    'EF_STORE_OPEN',
    `the data directory ${dir} is damaged:\n  ${damage.join('\n  ')}\nNothing was changed. Two ways out, with edgeferry ` +
      `stopped: \`edgeferry store salvage\` copies every record that still reads into a new data directory and moves ` +
      `the damaged one aside (what is lost is listed), or start once with --reset-store, which moves the directory ` +
      `aside and starts with an empty store.`,
  );
}

/**
 * The records of `meta` whose checksum does not hold, as damage lines. Checked at every open, whatever
 * `storage.verifyOnStart` says: they are few, and a wrong counter (a seq used again) would do harm quietly.
 */
function damagedMeta(env: RootDatabase): string[] {
  const meta = env.openDB<Buffer, string>('meta', { encoding: 'binary' });
  const damaged = [];
  for (const { key, value } of meta.getRange({ snapshot: false })) {
    try {
      decodeJsonValue(value);
    } catch (err) {
      if (!(err instanceof CorruptValueError)) throw err;
      damaged.push({ what: 'store metadata', owner: String(key), records: 1 });
    }
  }
  return describeDamage({ records: 0, damaged, errors: [] });
}

const MDB_MAGIC = 0xbeefc0de;
const MDB_DATA_VERSION = 2;
const P_META = 0x08;
// Offsets in an LMDB meta page on 64-bit builds: 24-byte page header, then MDB_meta.
const META_FLAGS_OFFSET = 18;
const META_MAGIC_OFFSET = 24;
const META_VERSION_OFFSET = 28;
const META_PAGE_SIZE_OFFSET = 48; // mm_dbs[FREE_DBI].md_pad
const META_LAST_PAGE_OFFSET = 144;
const META_TXNID_OFFSET = 152;
const META_BYTES = 168;

/**
 * Checks `data.mdb` before lmdb-js sees it. lmdb-js 3.5.6 crashes the whole process (SIGSEGV, verified) when
 * asked to open a file whose meta page is garbage or that is truncated, which would be a crash loop under
 * systemd; here such a file becomes a clear EF_STORE_OPEN instead. Corruption deeper in the file is reported
 * by LMDB itself (MDB_PAGE_NOTFOUND, MDB_CORRUPTED) when the store reads it at open.
 */
export function checkDataFile(dir: string): void {
  const file = path.join(dir, 'data.mdb');
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // a new store
    throw openError(dir, `data.mdb cannot be read (${asError(err).message})`, err);
  }
  try {
    const size = fs.fstatSync(fd).size;
    if (size === 0) return; // created but never written (crash during creation): LMDB initialises it
    if (size < META_BYTES) throw openError(dir, `data.mdb is truncated (${size} bytes)`);
    const page0 = Buffer.alloc(META_BYTES);
    fs.readSync(fd, page0, 0, META_BYTES, 0);
    const meta0 = readMeta(page0);
    if (meta0 === undefined) throw openError(dir, 'data.mdb is not an LMDB data file (bad meta page)');
    if (meta0.version !== MDB_DATA_VERSION) {
      throw openError(dir, `data.mdb has LMDB format version ${meta0.version}, expected ${MDB_DATA_VERSION}`);
    }
    const pageSize = meta0.pageSize;
    if (pageSize < 512 || pageSize > 65536 || (pageSize & (pageSize - 1)) !== 0) {
      throw openError(dir, `data.mdb has an invalid page size (${pageSize})`);
    }
    if (size < 2 * pageSize) throw openError(dir, `data.mdb is truncated (${size} bytes)`);
    const page1 = Buffer.alloc(META_BYTES);
    fs.readSync(fd, page1, 0, META_BYTES, pageSize);
    const meta1 = readMeta(page1);
    if (meta1 === undefined || meta1.version !== MDB_DATA_VERSION) {
      throw openError(dir, 'data.mdb has a damaged second meta page');
    }
    // After a power loss the newest meta may point past what reached the disk; LMDB then falls back to the
    // older, flushed one (boot id check). So only a file too short for even the older meta is refused.
    const older = meta1.txnId > meta0.txnId ? meta0 : meta1;
    if ((older.lastPage + 1) * pageSize > size) {
      throw openError(
        dir,
        `data.mdb is truncated: it has ${size} bytes but its transactions use ${(older.lastPage + 1) * pageSize}`,
      );
    }
  } finally {
    fs.closeSync(fd);
  }
}

function readMeta(page: Buffer): { version: number; pageSize: number; lastPage: number; txnId: number } | undefined {
  if ((page.readUInt16LE(META_FLAGS_OFFSET) & P_META) === 0) return undefined;
  if (page.readUInt32LE(META_MAGIC_OFFSET) !== MDB_MAGIC) return undefined;
  return {
    version: page.readUInt32LE(META_VERSION_OFFSET) & 0xffff,
    pageSize: page.readUInt32LE(META_PAGE_SIZE_OFFSET),
    lastPage: Number(page.readBigUInt64LE(META_LAST_PAGE_OFFSET)),
    txnId: Number(page.readBigUInt64LE(META_TXNID_OFFSET)),
  };
}

/**
 * One process per data directory. The JS side keeps the counters and sequence numbers, so a second writer
 * (another edgeferry, or this one opening the directory twice) would corrupt them. `edgeferry.lock` records
 * pid, boot id and process start time; a lock whose process is gone (crash, kill -9, reboot) is taken over.
 */
function processIdentity(pid: number): string | undefined {
  try {
    // Field 22 of /proc/<pid>/stat is the start time in clock ticks since boot; the command name (field 2)
    // may contain spaces, so count fields after its closing parenthesis.
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19];
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** The directory is fine, only held: the way out is to stop the holder, never to move the data aside. */
function inUseError(dir: string, pid: number): StoreError {
  if (pid === process.pid)
    return new StoreError('EF_STORE_IN_USE', `the data directory ${dir} is already open in this process`);
  let command = '';
  try {
    command = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    // The holder just exited, or /proc is not readable: the pid alone says enough.
  }
  return new StoreError(
    'EF_STORE_IN_USE',
    `the data directory ${dir} is in use by another edgeferry, process ${pid}${command && ` (${command})`}: stop it ` +
      `first (systemctl stop edgeferry, or kill ${pid}), then run this again. Nothing was changed.`,
  );
}

export function acquireLock(dir: string): StoreLock {
  const file = path.join(dir, 'edgeferry.lock');
  // Not Linux: without a boot id a stale lock is recognised by its pid alone.
  const me = {
    pid: process.pid,
    bootId: currentBootId() ?? 'unknown',
    start: processIdentity(process.pid) ?? 'unknown',
  };
  let existing: { pid: number; bootId: string; start: string } | undefined;
  try {
    existing = JSON.parse(fs.readFileSync(file, 'utf8')) as typeof existing;
  } catch (err) {
    // Missing is the normal case; unreadable or garbled (crash while writing it) is treated as stale.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT' && !(err instanceof SyntaxError)) {
      throw openError(dir, `edgeferry.lock cannot be read (${asError(err).message})`, err);
    }
  }
  if (existing !== undefined && existing.bootId === me.bootId && typeof existing.pid === 'number') {
    const start = processIdentity(existing.pid);
    if (start !== undefined && start === existing.start) throw inUseError(dir, existing.pid);
  }
  fs.writeFileSync(file, JSON.stringify(me));
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      try {
        fs.unlinkSync(file);
      } catch (err) {
        // A missing lock file is what we wanted; anything else is stale-lock material for the next start.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    },
  };
}

/**
 * Opens (or creates) the store in `opts.path`. Throws StoreError EF_STORE_OPEN, naming the directory and what
 * to do, when it cannot be used; it never modifies a store it refuses.
 * `internal.schemaVersion` overrides the layout version written and expected (tests; future migrations).
 */
export async function openLmdbStore(opts: LmdbStoreOptions, internal: { schemaVersion?: number } = {}): Promise<Store> {
  const schemaVersion = internal.schemaVersion ?? SCHEMA_VERSION;
  const dir = path.resolve(opts.path);
  const log = opts.log.child({ mod: 'store', path: dir });
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (err) {
    throw openError(dir, `the directory cannot be created (${asError(err).message})`, err);
  }
  // The lock first: a directory another edgeferry is writing is neither checked nor walked, where a write under
  // way could look like damage; the answer is EF_STORE_IN_USE.
  let lock: StoreLock;
  try {
    lock = acquireLock(dir);
  } catch (err) {
    throw err instanceof StoreError
      ? err
      : openError(dir, `edgeferry.lock cannot be written (${asError(err).message})`, err);
  }
  let env: RootDatabase | undefined;
  try {
    checkDataFile(dir);
    const mode = opts.verify ?? 'off';
    if (mode !== 'off' && fs.existsSync(path.join(dir, 'data.mdb'))) {
      const startedMs = performance.now();
      const damage = verifyInChild(dir, mode);
      if (damage.length > 0) throw damagedError(dir, damage);
      log.info({ mode, durationMs: Math.round(performance.now() - startedMs) }, 'store verified');
    }
    try {
      // eventTurnBatching off: every write goes through one explicit `batch()` per store batch (see issue()).
      // relaxed: MDB_NOMETASYNC (see the top of this file).
      env = open({
        path: dir,
        noSubdir: false,
        maxDbs: 12,
        eventTurnBatching: false,
        noMetaSync: opts.sync === 'relaxed',
      });
    } catch (err) {
      throw openError(dir, `LMDB refused the environment (${asError(err).message})`, err);
    }
    const rootNames: string[] = [];
    try {
      for (const key of env.getKeys({ snapshot: false })) rootNames.push(String(key));
    } catch (err) {
      throw openError(dir, `its root database is unreadable (${asError(err).message})`, err);
    }
    const fresh = rootNames.length === 0;
    if (!fresh && !rootNames.includes('meta')) {
      throw openError(
        dir,
        `it holds an LMDB environment that is not an edgeferry store (databases: ${rootNames.join(', ')})`,
      );
    }
    if (!fresh) {
      const damage = damagedMeta(env);
      if (damage.length > 0) throw damagedError(dir, damage);
    }
    let store: LmdbStore;
    try {
      store = new LmdbStore(env, { ...opts, path: dir }, lock, log);
    } catch (err) {
      throw err instanceof StoreError
        ? err
        : openError(dir, `its databases are unreadable (${asError(err).message})`, err);
    }
    if (fresh) {
      await store.meta.put('schema', encodeSchemaValue(schemaVersion));
      await store.meta.flushed;
      log.info({ schemaVersion }, 'created a new store');
    } else {
      const schema = store.readMeta<{ version?: unknown }>('schema');
      const migrates = OLDER_VERSIONS.includes(schema?.version) && schemaVersion === SCHEMA_VERSION;
      if (schema === undefined || (schema.version !== schemaVersion && !migrates)) {
        const found = schema?.version;
        throw openError(
          dir,
          typeof found === 'number' && found > schemaVersion
            ? `its store format is version ${found}, written by a newer edgeferry release; this release reads format ` +
                `${schemaVersion} and cannot read it: install the newer release again (a downgrade keeps the store as it is)`
            : `its store format is version ${String(found ?? 'missing')}, this edgeferry reads format ${schemaVersion}` +
                ' (a store written by another edgeferry release needs that release or a migration)',
        );
      }
    }
    // Also when the format is current: `store salvage` copies outboxes of format 1 as they are.
    store.migrateOutboxes();
    if (!fresh && store.readMeta<{ version?: unknown }>('schema')?.version !== schemaVersion) {
      await store.meta.put('schema', encodeSchemaValue(schemaVersion));
      log.info({ schemaVersion }, 'store format updated');
    }
    // The steady clock goes on from the timeline the store recorded, so stored times keep their ages (util/clock.ts).
    store.clock.adopt(store.readMeta('clock'));
    await store.keepClockRecord();
    log.info({ sync: opts.sync, maxBytes: opts.maxBytes, maxSessionBytes: opts.maxSessionBytes }, 'store open');
    return store;
  } catch (err) {
    if (env !== undefined) {
      await env
        .close()
        .catch((closeErr: unknown) => log.warn({ err: closeErr }, 'closing a store that failed to open'));
    }
    lock.release();
    throw err;
  }
}
