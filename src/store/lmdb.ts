/**
 * The durable store: one LMDB environment (lmdb-js) in `storage.path` with named databases for the bridge
 * outboxes, persistent sessions and retained messages. The only module that imports `lmdb`.
 *
 * How writes work (see RELIABILITY.md §1):
 * - Every change is an operation queued in JS. On the next `setImmediate`, all queued operations are turned
 *   into asynchronous lmdb-js puts/removes inside ONE explicit `batch()` call, which lmdb-js commits as one
 *   transaction: one commit and one fsync however many operations it holds (group commit). Counters in the
 *   `meta` database are written in the same batch, hence in the same transaction as the entries.
 *   (lmdb-js's automatic event-turn batching is switched off: it creates a commit promise nobody holds, which
 *   rejects unhandled when a commit fails, e.g. on a full disk, and would kill the process. Verified.)
 * - Only one batch is in flight at a time: the next one is issued once the previous transaction has
 *   *committed* (its fsync may still be running; `overlappingSync` overlaps it with the next transaction).
 *   So when a batch is built, the committed database is exactly what the JS state describes, decisions
 *   (limits, drops, sequence numbers) are made against it, and a failed commit can be rolled back in JS by
 *   restoring the few counters it touched.
 * - lmdb-js async transaction callbacks (`db.transaction(fn)`) are NOT used: with lmdb 3.5.6 on this platform
 *   the callback never ran and the process could not even exit (verified; see the report of the store work).
 * - A write promise resolves once its transaction is flushed (`sync: 'full'`): lmdb-js resolves writes at
 *   commit, before the fsync, so the flush promise (`env.flushed`, captured when the batch is issued) is
 *   awaited too. Only then may the caller acknowledge (PUBACK/PUBREC).
 * - `sync: 'relaxed'` resolves at commit. Loss window: a process crash (kill -9, OOM) loses nothing that was
 *   resolved, because a committed transaction is in the OS page cache; a power loss or kernel crash can lose
 *   the transactions committed since the last completed fsync, i.e. roughly the writes of the last one or two
 *   batches (milliseconds on an SSD, up to the device's sync latency on SD cards). The database itself stays
 *   consistent (LMDB's meta pages). It also opens LMDB with MDB_NOMETASYNC: one fsync per commit instead of two,
 *   and an OS crash may undo the last transaction, which is inside that window. (Measured with lmdb 3.5.6 here:
 *   the commit callback comes after the data fsync anyway, so `relaxed` gains mostly from the second one.)
 * - Not used, on purpose: `noSync` (loses data on an OS crash), `useWritemap` (SIGBUS on a full disk, stray
 *   writes corrupt), compression (lmdb-js#324 leaks in queue-like use), long read transactions (scans pass
 *   `snapshot: false`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import type { Message } from '../protocol/message.js';
import { asError, StoreError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import {
  decodeMessage,
  encodeStampedValue,
  decodeQueuedValue,
  encodePlainValue,
  encodeQueuedValue,
  FLIGHT_HEADER_BYTES,
  keyOwner,
  keySeq,
  nameKey,
  STAMPED_HEADER_BYTES,
  stampedValueMs,
  ownerPrefix,
  PLAIN_HEADER_BYTES,
  prefixEnd,
  seqKey,
} from './codec.js';
import { QueueSplit } from './queue-window.js';
import { closedError, emptyDropped, entryTooLargeError, isLimited, outboxInUseError, queueFullError } from './outbox-limits.js';
import {
  fitsWindow,
  type DropReason,
  type FlightState,
  type Outbox,
  type OutboxDepth,
  type OutboxEntry,
  type OutboxLimits,
  type PendingWill,
  type QueuedRecord,
  type QueueWindow,
  type RetainedStore,
  type SessionRecord,
  type SessionStore,
  type Store,
  type SubscriptionRecord,
} from './types.js';
import { adoptClockBase, steadyNowMs } from '../util/clock.js';

/** See `usedBytesEstimate`: page counts are re-read when older than this, or above this share of the limit. */
const PAGE_STATS_MAX_AGE_MS = 1000;
const PAGE_STATS_EXACT_ABOVE = 0.9;
/** Pages per value byte, generously: 64-byte values with 8-byte keys fill pages about 2:1. */
const RESERVE_MARGIN = 3;

/** Outbox counters live in `meta` under `outbox:<name>`; the range of those keys lists the outboxes. */
const OUTBOX_META_PREFIX = 'outbox:';
const OUTBOX_META_END = 'outbox;';
const outboxMetaKey = (name: string): string => OUTBOX_META_PREFIX + name;
/** Outbox entries read per step when looking for the oldest live one. */
const HEAD_CHUNK = 64;
/** How long deletes after acknowledgements are collected before they are committed (see DelayedFlush). */
const ACK_DELAY_MS = 5;
/** The value of a mark record (a QoS 2 id awaiting PUBREL, a released outbox entry): only its key matters. */
const RELEASE_MARK = Buffer.from([1]);
/** Entries deleted per transaction when a whole outbox is deleted. */
const DELETE_CHUNK = 10_000;

/** Layout version of the databases below; stored in `meta` at creation, refused when different. */
export const SCHEMA_VERSION = 1;

export interface LmdbStoreOptions {
  /** Data directory; created if missing. */
  readonly path: string;
  readonly sync: 'full' | 'relaxed';
  /** Bound on the B-tree pages in use (live data plus tree overhead); 0 = unbounded. */
  readonly maxBytes: number;
  readonly log: Logger;
}

type Bin = Buffer;

/** `batch()` exists on every lmdb-js database but is missing from its typings. */
interface LmdbBatcher {
  batch(action: () => void): Promise<unknown>;
}

interface OutboxMeta {
  lastSeq: number;
  messages: number;
  bytes: number;
  dropped: Record<DropReason, number>;
}

interface SessionFields {
  expiryIntervalS: number;
  disconnectedAtMs?: number;
}

/** A queued change. `run` applies it to the JS state and issues its lmdb writes; it throws to reject. */
interface Op {
  run(b: Batch): unknown;
  resolve(value: unknown): void;
  reject(err: unknown): void;
  /** The result of `run`, delivered once the batch is durable. */
  value?: unknown;
}

interface HeadEntry {
  seq: number;
  bytes: number;
  appendedAtMs: number;
}

/** The state of one batch while it is built and until its transaction settles. */
class Batch {
  /** Operations that ran; they settle with the transaction. */
  readonly done: Op[] = [];
  readonly outboxes = new Set<LmdbOutbox>();
  sessionSeqBefore: number | undefined;
  retainedCountBefore: number | undefined;
  /** The collected session acks are deleted in this batch (see DelayedFlush). */
  flushAcks = false;
  /** Client ids whose session was dropped in this batch (the committed keys are still readable). */
  readonly droppedSessions = new Set<string>();
  /** Keys written for a client in this batch, so a `drop` later in the same batch removes them too. */
  readonly sessionKeys = new Map<string, { db: Database<any, any>; key: Bin }[]>();
  /** Whether a retained topic exists after the writes so far in this batch. */
  readonly retainedExists = new Map<string, boolean>();
  /** Estimate of the store's used bytes (pages in use + bytes added in this batch), computed on demand. */
  usedBytes: number | undefined;
  /** Bytes reserved in this batch (releases not subtracted), for the estimate between page-count reads. */
  reservedBytes = 0;
  storeFull = false;
}

class LmdbStoreImpl implements Store {
  readonly retained: LmdbRetainedStore;
  readonly sessions: LmdbSessionStore;
  readonly env: RootDatabase;
  readonly meta: Database<unknown, string>;
  readonly outboxDb: Database<Bin, Bin>;
  readonly retainedDb: Database<Bin, Bin>;
  readonly sessionDb: Database<SessionFields, Bin>;
  readonly subscriptionDb: Database<SubscriptionRecord, Bin>;
  readonly queueDb: Database<Bin, Bin>;
  /** Incoming QoS 2 packet ids awaiting PUBREL, keyed like the queue (owner prefix + id). */
  readonly releaseDb: Database<Bin, Bin>;
  /** Delayed wills waiting out their delay, keyed by client id (stamped with their due time). */
  readonly willDb: Database<Bin, Bin>;
  /** Outbox entries the central broker has received (QoS 2 PUBREC), keyed like the outbox. */
  readonly outboxReleasedDb: Database<Bin, Bin>;
  readonly durable = true;
  readonly log: Logger;
  readonly path: string;
  readonly maxKeyBytes: number;
  private readonly relaxed: boolean;
  private readonly maxBytes: number;
  private readonly outboxes = new Map<string, LmdbOutbox>();
  private readonly lock: StoreLock;

  private queue: Op[] = [];
  private inFlight: Batch | undefined;
  private issueScheduled = false;
  /** Settles (never rejects) when every batch issued so far has settled; keeps resolutions in order. */
  private lastSettled: Promise<void> = Promise.resolve();
  private closing = false;
  private closed: Promise<void> | undefined;
  private commitFailing = false;
  private storeFullEpisode = false;
  private pageBytes = { used: 0, readAtMs: -Infinity, reservedSince: 0 };

  constructor(env: RootDatabase, opts: LmdbStoreOptions, lock: StoreLock, log: Logger) {
    this.env = env;
    this.log = log;
    this.path = opts.path;
    this.lock = lock;
    this.relaxed = opts.sync === 'relaxed';
    this.maxBytes = opts.maxBytes;
    // Not in lmdb-js's typings; 1978 is LMDB's compiled-in default.
    this.maxKeyBytes = (env as unknown as { maxKeySize?: number }).maxKeySize ?? 1978;
    this.meta = env.openDB<unknown, string>('meta', { encoding: 'json' });
    this.outboxDb = env.openDB<Bin, Bin>('outbox', { encoding: 'binary', keyEncoding: 'binary' });
    this.retainedDb = env.openDB<Bin, Bin>('retained', { encoding: 'binary', keyEncoding: 'binary' });
    this.sessionDb = env.openDB<SessionFields, Bin>('sessions', { encoding: 'json', keyEncoding: 'binary' });
    this.subscriptionDb = env.openDB<SubscriptionRecord, Bin>('subscriptions', {
      encoding: 'json',
      keyEncoding: 'binary',
    });
    this.queueDb = env.openDB<Bin, Bin>('session-queue', { encoding: 'binary', keyEncoding: 'binary' });
    this.releaseDb = env.openDB<Bin, Bin>('session-qos2', { encoding: 'binary', keyEncoding: 'binary' });
    // Added after schema 1 shipped without it: opening creates it empty, which is what an older store means.
    this.willDb = env.openDB<Bin, Bin>('session-will', { encoding: 'binary', keyEncoding: 'binary' });
    this.outboxReleasedDb = env.openDB<Bin, Bin>('outbox-released', { encoding: 'binary', keyEncoding: 'binary' });
    this.retained = new LmdbRetainedStore(this);
    this.sessions = new LmdbSessionStore(this);
  }

  get isClosing(): boolean {
    return this.closing;
  }

  outbox(name: string, limits: OutboxLimits): Outbox {
    if (this.closing) throw closedError();
    let box = this.outboxes.get(name);
    if (box === undefined) {
      try {
        box = new LmdbOutbox(this, name, limits);
      } catch (err) {
        if (err instanceof StoreError) throw err;
        throw new StoreError('EF_STORE_OPEN', `outbox "${name}" in ${this.path} is unreadable: ${asError(err).message}`, {
          cause: err,
        });
      }
      this.outboxes.set(name, box);
    } else {
      box.limits = limits; // a config reload may change limits; content stays
    }
    return box;
  }

  outboxNames(): string[] {
    const names: string[] = [];
    for (const key of this.meta.getKeys({ start: OUTBOX_META_PREFIX, end: OUTBOX_META_END, snapshot: false })) {
      names.push(String(key).slice(OUTBOX_META_PREFIX.length));
    }
    return names;
  }

  async deleteOutbox(name: string): Promise<number> {
    if (this.closing) throw closedError();
    if (this.outboxes.has(name)) throw outboxInUseError(name);
    const prefix = ownerPrefix(name);
    const end = prefixEnd(prefix);
    let deleted = 0;
    // In chunks, one transaction each: an outbox may hold millions of entries. Each chunk reads the keys the
    // previous chunk's commit left.
    for (;;) {
      const n = await this.schedule((b) => {
        let count = 0;
        for (const key of this.outboxDb.getKeys({ start: prefix, end, limit: DELETE_CHUNK, snapshot: false })) {
          this.del(b, this.outboxDb, key);
          count++;
        }
        if (count < DELETE_CHUNK) {
          // At most a window's worth of marks: the last chunk takes them all.
          for (const key of this.outboxReleasedDb.getKeys({ start: prefix, end, snapshot: false })) {
            this.del(b, this.outboxReleasedDb, key);
          }
          this.del(b, this.meta, outboxMetaKey(name));
        }
        return count;
      });
      deleted += n;
      if (n < DELETE_CHUNK) return deleted;
    }
  }

  /** Queues an operation; the promise settles once its batch is durable (or the op is refused). */
  schedule<T>(run: (b: Batch) => T): Promise<T> {
    if (this.closing) return Promise.reject(closedError());
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ run, resolve: resolve as (v: unknown) => void, reject });
      this.scheduleIssue();
    });
  }

  /**
   * Issues a write in the batch being built. Called only inside `env.batch()` (see `issue`), where lmdb-js
   * returns an already-resolved placeholder; the batch's own promise reports the commit.
   */
  put(_b: Batch, db: Database<any, any>, key: Bin | string, value: unknown): void {
    void db.put(key, value);
  }

  del(_b: Batch, db: Database<any, any>, key: Bin | string): void {
    void db.remove(key);
  }

  /**
   * Accounts `bytes` more against `storage.maxBytes` in this batch. `makeRoom` may free space (drop-oldest)
   * and returns the bytes it freed, 0 when it cannot. Throws EF_STORE_FULL when the store stays full.
   */
  reserve(b: Batch, bytes: number, makeRoom?: () => number): void {
    if (!isLimited(this.maxBytes)) return;
    b.usedBytes ??= this.usedBytesEstimate();
    b.reservedBytes += bytes;
    while (b.usedBytes + bytes > this.maxBytes) {
      const freed = makeRoom === undefined ? 0 : makeRoom();
      if (freed === 0) {
        b.storeFull = true;
        if (!this.storeFullEpisode) {
          this.storeFullEpisode = true;
          this.log.warn(
            { maxBytes: this.maxBytes, usedBytes: b.usedBytes },
            'store full (storage.maxBytes): new messages are refused until space is freed',
          );
        }
        throw new StoreError(
          'EF_STORE_FULL',
          `the store in ${this.path} reached storage.maxBytes (${this.maxBytes} bytes); ${bytes} more bytes refused`,
        );
      }
    }
    b.usedBytes += bytes;
  }

  /** Tells the byte estimate of this batch that `bytes` were removed. */
  release(b: Batch, bytes: number): void {
    if (b.usedBytes !== undefined) b.usedBytes -= bytes;
  }

  /**
   * The store's used bytes as of the last commit. Reading the page counts costs a `getStats` call per database, a few
   * per cent of the CPU at one batch per millisecond, so they are read at most once a second while far below
   * the limit, and on every batch near it (exact where it matters). In between, what committed batches
   * reserved is added with a margin for keys and page fill, so the estimate only errs high.
   */
  private usedBytesEstimate(): number {
    const estimate = this.pageBytes.used + this.pageBytes.reservedSince * RESERVE_MARGIN;
    const nowMs = performance.now();
    if (nowMs - this.pageBytes.readAtMs < PAGE_STATS_MAX_AGE_MS && estimate < this.maxBytes * PAGE_STATS_EXACT_ABOVE) {
      return estimate;
    }
    this.pageBytes = { used: this.usedPageBytes(), readAtMs: nowMs, reservedSince: 0 };
    return this.pageBytes.used;
  }

  /** Bytes of the B-tree pages in use by our databases (free pages are reusable and not counted). */
  private usedPageBytes(): number {
    let pages = 0;
    let pageSize = 4096;
    for (const db of [
      this.meta,
      this.outboxDb,
      this.retainedDb,
      this.sessionDb,
      this.subscriptionDb,
      this.queueDb,
      this.releaseDb,
      this.willDb,
      this.outboxReleasedDb,
    ]) {
      const s = db.getStats() as {
        pageSize: number;
        treeBranchPageCount: number;
        treeLeafPageCount: number;
        overflowPages: number;
      };
      pages += s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages;
      pageSize = s.pageSize;
    }
    return pages * pageSize;
  }

  private scheduleIssue(): void {
    if (this.issueScheduled || this.inFlight !== undefined) return;
    this.issueScheduled = true;
    // setImmediate rather than a microtask: operations from every I/O callback of this loop iteration join.
    setImmediate(() => this.issue());
  }

  private issue(): void {
    this.issueScheduled = false;
    if (this.inFlight !== undefined || this.queue.length === 0) return;
    const ops = this.queue;
    this.queue = [];
    const b = new Batch();
    this.inFlight = b;
    // One explicit lmdb-js batch = one transaction, and its promise is the only one lmdb-js creates for it.
    // (With lmdb-js's default event-turn batching it also creates a commit promise that nobody holds; when a
    // commit fails, e.g. on a full disk, that one rejects unhandled and kills the process. Verified.)
    let commit: Promise<unknown>;
    try {
      commit = (this.env as unknown as LmdbBatcher).batch(() => this.build(b, ops));
    } catch (err) {
      commit = Promise.reject(err);
    }
    // Captured now, so it is the flush of the transaction just queued (what `separateFlushed` would give).
    // It never rejects: a failed commit is reported by `commit`.
    const flushed = this.relaxed
      ? undefined
      : new Promise<void>((resolve) => {
          this.env.flushed.then(
            () => resolve(),
            () => resolve(),
          );
        });
    const previous = this.lastSettled;
    let settle!: () => void;
    this.lastSettled = new Promise<void>((resolve) => (settle = resolve));
    commit.then(
      () => {
        this.afterCommit(b);
        void Promise.all([previous, flushed]).then(() => {
          for (const op of b.done) op.resolve(op.value);
          settle();
        });
      },
      (err: unknown) => {
        this.afterFailedCommit(b, err);
        void previous.then(() => {
          const failure = new StoreError(
            'EF_STORE_WRITE',
            `a write to the store in ${this.path} failed: ${asError(err).message}`,
            { cause: err },
          );
          for (const op of b.done) op.reject(failure);
          settle();
        });
      },
    );
  }

  /** Runs the queued operations and writes the counters they changed, all inside one lmdb-js batch. */
  private build(b: Batch, ops: Op[]): void {
    for (const op of ops) {
      try {
        op.value = op.run(b);
        b.done.push(op);
      } catch (err) {
        op.reject(err instanceof StoreError ? err : new StoreError('EF_STORE_WRITE', asError(err).message, { cause: err }));
      }
    }
    try {
      for (const box of b.outboxes) box.finishBatch(b);
      this.sessions.finishBatch(b);
      if (b.sessionSeqBefore !== undefined) this.put(b, this.meta, 'sessionSeq', this.sessions.lastSeq);
    } catch (err) {
      // Queueing a counter write fails only if the environment is broken; the commit then fails as well and
      // rejects the batch. Logged here because it is the first sign.
      this.log.error({ err }, 'failed to queue store counters');
    }
    if (!b.storeFull && this.storeFullEpisode && b.usedBytes !== undefined) {
      this.storeFullEpisode = false;
      this.log.info('store below storage.maxBytes again');
    }
  }

  private afterCommit(b: Batch): void {
    this.pageBytes.reservedSince += b.reservedBytes;
    for (const box of b.outboxes) box.committed();
    if (this.commitFailing) {
      this.commitFailing = false;
      this.log.info('store writes succeed again');
    }
    this.inFlight = undefined;
    if (this.queue.length > 0) this.scheduleIssue();
  }

  private afterFailedCommit(b: Batch, err: unknown): void {
    // lmdb-js attaches a second promise with the OS error (EIO on a full disk) and rejects it separately;
    // unhandled, that rejection would kill the process.
    const detail = (err as { commitError?: Promise<unknown> } | undefined)?.commitError;
    if (detail !== undefined && typeof detail.then === 'function') {
      detail.then(undefined, (cause: unknown) => {
        this.log.error({ err: cause }, 'store commit error detail');
      });
    }
    if (!this.commitFailing) {
      this.commitFailing = true;
      this.log.error({ err }, 'store commit failed: writes are refused until a commit succeeds');
    }
    for (const box of b.outboxes) box.rollback();
    if (b.sessionSeqBefore !== undefined) this.sessions.lastSeq = b.sessionSeqBefore;
    if (b.retainedCountBefore !== undefined) this.retained.setCount(b.retainedCountBefore);
    this.inFlight = undefined;
    if (this.queue.length > 0) this.scheduleIssue();
  }

  async flushed(): Promise<void> {
    if (this.closing) return this.closed;
    await this.drain();
  }

  /** Settles after every operation queued so far, then after the flush of everything committed. */
  private async drain(): Promise<void> {
    // A no-op through the queue settles after every earlier batch (resolutions are ordered).
    await new Promise<unknown>((resolve, reject) => {
      this.queue.push({ run: () => undefined, resolve, reject });
      this.scheduleIssue();
    });
    await new Promise<void>((resolve) => {
      this.env.flushed.then(
        () => resolve(),
        () => resolve(), // a failed commit was already reported to the writes it affected
      );
    });
  }

  close(): Promise<void> {
    if (this.closed === undefined) {
      this.sessions.flushAcks();
      for (const box of this.outboxes.values()) box.flushRemovals();
      this.closing = true; // refuse new operations; those already queued still complete
      this.closed = this.doClose();
    }
    return this.closed;
  }

  private async doClose(): Promise<void> {
    try {
      await this.drain();
    } catch (err) {
      this.log.error({ err }, 'store writes pending at close failed');
    }
    try {
      await this.env.close();
    } finally {
      this.lock.release();
    }
    this.log.info('store closed');
  }
}

/**
 * Deletes after acknowledgements (an outbox entry the central broker acked, a queued message a subscriber
 * acked) need no commit of their own: a crash before they commit only sends those messages once more, which
 * QoS 1 allows (QoS 2 resumes from its recorded state, so nothing is delivered twice). They are collected for
 * ACK_DELAY_MS and committed in one batch. While a queue drains or a backlog replays, that saves a commit (two
 * fsyncs) per event turn; measured on two cores: the session drain ran 20 % faster, the bridge replay 10-15 %.
 * Flash storage wears less too.
 */
class DelayedFlush {
  private pending: { promise: Promise<void>; now(): void } | undefined;

  constructor(
    private readonly store: LmdbStoreImpl,
    /** Applies what was collected, inside the batch that commits it. */
    private readonly apply: (b: Batch) => void,
  ) {}

  /** Settles once the batch carrying everything collected so far is durable. */
  wait(): Promise<void> {
    return (this.pending ??= this.arm()).promise;
  }

  /** Commits what was collected with the next batch instead of after the delay (close). */
  now(): void {
    this.pending?.now();
  }

  private arm(): { promise: Promise<void>; now(): void } {
    let now!: () => void;
    const promise = new Promise<void>((resolve, reject) => {
      let started = false;
      now = () => {
        if (started) return;
        started = true;
        clearTimeout(timer);
        this.store
          .schedule((b) => {
            this.pending = undefined; // collected from here on: the next flush
            this.apply(b);
          })
          .then(resolve, reject);
      };
    });
    // Not unref'd: whoever waits for the promise keeps the process alive for these few ms.
    const timer = setTimeout(now, ACK_DELAY_MS);
    return { promise, now };
  }
}

class LmdbOutbox implements Outbox {
  readonly name: string;
  limits: OutboxLimits;
  private readonly store: LmdbStoreImpl;
  private readonly db: Database<Bin, Bin>;
  private readonly prefix: Bin;
  private readonly end: Bin;
  private readonly metaKey: string;
  private lastSeq: number;
  private messages: number;
  private bytes: number;
  private dropped: Record<DropReason, number>;
  private oldestAppendedAtMs: number | undefined;
  /** Seqs with a committed `released` mark (QoS 2 received upstream); at most a window's worth. */
  private readonly released = new Set<number>();

  // Per batch (see Batch): undo data, changes not yet visible to readers, head scanning.
  private snapshot: (OutboxMeta & { oldest: number | undefined }) | undefined;
  /** Seqs removed or dropped by the batch in flight; hidden from `peek` until it commits. */
  private removedInFlight = new Set<number>();
  /** Seqs passed to `remove()` whose op has not run yet; hidden from `peek` too. */
  private readonly removalsQueued = new Map<number, number>();
  /**
   * Sizes of the committed entries `peek` returned, until they are removed: a removal then needs no read to
   * keep `bytes` exact. Holds what the bridge read ahead and has in flight, a window's worth.
   */
  private readonly peekedBytes = new Map<number, number>();
  /** Seqs passed to `remove()`, in order, until `removalFlush` applies them. */
  private removals: number[] = [];
  private readonly removalFlush: DelayedFlush;
  /** Seqs and values appended in this batch (not readable from the database before the commit). */
  private batchSeqs: number[] = [];
  private batchValues: Bin[] = [];
  /** Index in `batchSeqs` before which every entry was removed again (drop-oldest on a tiny queue). */
  private batchHead = 0;
  private headBuffer: HeadEntry[] = [];
  private headScanFrom = 0;
  /** No committed entry has a lower seq: where the scan for the head starts. */
  private headFloor: number;
  /** The head found by this batch, the new floor once it commits. */
  private nextHeadFloor: number | undefined;
  private committedExhausted = false;
  private headChanged = false;
  /** Counters changed in this batch, so they must be written. */
  private dirty = false;
  /** `released` marks written and deleted by the batch in flight, applied to `released` when it commits. */
  private marking: { added: number[]; deleted: number[] } = { added: [], deleted: [] };

  constructor(store: LmdbStoreImpl, name: string, limits: OutboxLimits) {
    this.store = store;
    this.name = name;
    this.limits = limits;
    this.db = store.outboxDb;
    try {
      this.prefix = ownerPrefix(name);
    } catch (err) {
      throw new StoreError('EF_STORE_OPEN', `invalid outbox name ${JSON.stringify(name)}`, { cause: err });
    }
    this.end = prefixEnd(this.prefix);
    this.metaKey = outboxMetaKey(name);
    this.removalFlush = new DelayedFlush(store, (b) => this.applyRemovals(b));
    const meta = store.meta.get(this.metaKey) as OutboxMeta | undefined;
    let lastKeySeq = 0;
    for (const key of this.db.getKeys({ start: this.end, end: this.prefix, reverse: true, limit: 1, snapshot: false })) {
      lastKeySeq = keySeq(key);
    }
    if (meta !== undefined) {
      this.messages = meta.messages;
      this.bytes = meta.bytes;
      this.dropped = { ...emptyDropped(), ...meta.dropped };
      this.lastSeq = Math.max(meta.lastSeq, lastKeySeq);
    } else {
      // No counters yet (new outbox): count what is there, normally nothing.
      this.messages = 0;
      this.bytes = 0;
      for (const { value } of this.db.getRange({ start: this.prefix, end: this.end, snapshot: false })) {
        this.messages++;
        this.bytes += value.length;
      }
      this.dropped = emptyDropped();
      this.lastSeq = lastKeySeq;
    }
    const head = this.readCommittedHead();
    this.oldestAppendedAtMs = head?.appendedAtMs;
    this.headFloor = head?.seq ?? this.lastSeq + 1;
    for (const key of store.outboxReleasedDb.getKeys({ start: this.prefix, end: this.end, snapshot: false })) {
      this.released.add(keySeq(key));
    }
  }

  append(msg: Message): Promise<void> {
    let value: Bin;
    try {
      value = encodeStampedValue(msg, steadyNowMs());
    } catch (err) {
      return Promise.reject(new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }));
    }
    return this.store.schedule((b) => this.applyAppend(b, value));
  }

  private applyAppend(b: Batch, value: Bin): void {
    this.touch(b);
    const bytes = value.length;
    const { maxBytes, maxMessages, overflow } = this.limits;
    if (isLimited(maxBytes) && bytes > maxBytes) throw entryTooLargeError(this.name, this.limits, bytes);
    const overLimit = (): boolean =>
      (isLimited(maxMessages) && this.messages + 1 > maxMessages) || (isLimited(maxBytes) && this.bytes + bytes > maxBytes);
    if (overLimit()) {
      if (overflow === 'reject-new') throw queueFullError(this.name, this.limits, bytes);
      while (overLimit() && this.makeRoom(b) > 0);
    }
    this.store.reserve(b, bytes, overflow === 'drop-oldest' ? () => this.makeRoom(b) : undefined);
    const seq = this.lastSeq + 1;
    this.store.put(b, this.db, seqKey(this.prefix, seq), value);
    this.lastSeq = seq;
    this.messages++;
    this.bytes += bytes;
    this.batchSeqs.push(seq);
    this.batchValues.push(value);
    this.dirty = true;
    if (this.messages === 1) this.headChanged = true;
  }

  peek(limit: number, afterSeq?: number): readonly OutboxEntry[] {
    const out: OutboxEntry[] = [];
    if (limit <= 0) return out;
    const hidden = this.removedInFlight.size > 0 || this.removalsQueued.size > 0;
    const start = afterSeq === undefined ? this.prefix : seqKey(this.prefix, Math.floor(afterSeq) + 1);
    // Without `limit` in the range when entries may be hidden; the iteration is lazy and stops below.
    const range = this.db.getRange({ start, end: this.end, snapshot: false, ...(hidden ? {} : { limit }) });
    for (const { key, value } of range) {
      const seq = keySeq(key);
      if (hidden && (this.removedInFlight.has(seq) || this.removalsQueued.has(seq))) continue;
      this.peekedBytes.set(seq, value.length);
      out.push({
        seq,
        msg: decodeMessage(value, STAMPED_HEADER_BYTES),
        appendedAtMs: stampedValueMs(value),
        bytes: value.length,
        ...(this.released.size > 0 && this.released.has(seq) ? { released: true } : {}),
      });
      if (out.length >= limit) break;
    }
    return out;
  }

  remove(seqs: readonly number[]): Promise<void> {
    if (this.store.isClosing) return Promise.reject(closedError());
    for (const seq of seqs) {
      this.removalsQueued.set(seq, (this.removalsQueued.get(seq) ?? 0) + 1);
      this.removals.push(seq);
    }
    return this.removalFlush.wait();
  }

  /** Close: collected removals go now, so a graceful stop sends nothing twice. */
  flushRemovals(): void {
    this.removalFlush.now();
  }

  private applyRemovals(b: Batch): void {
    const list = this.removals;
    this.removals = [];
    for (const seq of list) {
      const n = (this.removalsQueued.get(seq) ?? 1) - 1;
      if (n > 0) this.removalsQueued.set(seq, n);
      else this.removalsQueued.delete(seq);
    }
    this.touch(b);
    for (const seq of list) this.removeOne(b, seq);
  }

  markReleased(seq: number): Promise<void> {
    if (this.store.isClosing) return Promise.reject(closedError());
    return this.store.schedule((b) => {
      if (!Number.isSafeInteger(seq) || seq <= 0 || seq > this.lastSeq || this.removedInFlight.has(seq) || this.released.has(seq)) return;
      const key = seqKey(this.prefix, seq);
      if (!this.batchSeqs.includes(seq) && this.db.getBinaryFast(key) === undefined) return; // unknown: ignored
      this.touch(b);
      this.store.put(b, this.store.outboxReleasedDb, key, RELEASE_MARK);
      this.marking.added.push(seq);
    });
  }

  private removeOne(b: Batch, seq: number): number {
    if (!Number.isSafeInteger(seq) || seq <= 0 || seq > this.lastSeq || this.removedInFlight.has(seq)) return 0;
    let bytes = this.peekedBytes.get(seq);
    if (bytes === undefined) {
      const inBatch = this.batchSeqs.length > 0 && seq >= this.batchSeqs[0] ? this.batchSeqs.indexOf(seq) : -1;
      if (inBatch >= 0) bytes = this.batchValues[inBatch].length;
      else bytes = this.db.getBinaryFast(seqKey(this.prefix, seq))?.length;
      if (bytes === undefined) return 0; // unknown or already removed: ignored by contract
    } else {
      this.peekedBytes.delete(seq);
    }
    const key = seqKey(this.prefix, seq);
    this.store.del(b, this.db, key);
    if (this.released.has(seq) || this.marking.added.includes(seq)) {
      this.store.del(b, this.store.outboxReleasedDb, key);
      this.marking.deleted.push(seq);
    }
    this.removedInFlight.add(seq);
    this.messages--;
    this.bytes -= bytes;
    this.store.release(b, bytes);
    this.headChanged = true;
    this.dirty = true;
    return bytes;
  }

  expire(nowMs: number = steadyNowMs()): Promise<number> {
    const maxAgeS = this.limits.maxAgeS;
    if (this.store.isClosing) return Promise.reject(closedError());
    const cutoffMs = nowMs - maxAgeS * 1000;
    // Called periodically: skip the batch (a commit) when even the oldest entry is young enough. Appends still
    // queued are younger, removals still queued only make the head younger, so this answer is exact.
    if (!isLimited(maxAgeS) || this.oldestAppendedAtMs === undefined || this.oldestAppendedAtMs >= cutoffMs) {
      return Promise.resolve(0);
    }
    return this.store.schedule((b) => {
      this.touch(b);
      // Acknowledged entries whose delete is pending are delivered, not expired.
      if (this.removals.length > 0) this.applyRemovals(b);
      let n = 0;
      for (;;) {
        const head = this.firstLive();
        if (head === undefined || head.appendedAtMs >= cutoffMs) break;
        this.dropHead(b, 'expired');
        n++;
      }
      return n;
    });
  }

  countDropped(reason: DropReason, n: number): void {
    this.store
      .schedule((b) => {
        this.touch(b);
        this.dropped[reason] += n;
        this.dirty = true;
      })
      .catch((err: unknown) => {
        // Only the persisted copy of a statistic is lost; the in-memory count was rolled back with the batch.
        this.store.log.warn({ err, outbox: this.name, reason, n }, 'could not persist dropped count');
      });
  }

  get depth(): OutboxDepth {
    return {
      messages: this.messages,
      bytes: this.bytes,
      oldestAppendedAtMs: this.oldestAppendedAtMs,
      dropped: { ...this.dropped },
    };
  }

  /** Registers this outbox in the batch and keeps its counters for a rollback. */
  private touch(b: Batch): void {
    if (b.outboxes.has(this)) return;
    b.outboxes.add(this);
    this.snapshot = {
      lastSeq: this.lastSeq,
      messages: this.messages,
      bytes: this.bytes,
      dropped: { ...this.dropped },
      oldest: this.oldestAppendedAtMs,
    };
  }

  /**
   * Frees room for an append past the limits: acknowledged entries whose delete is pending (DelayedFlush) go
   * first, as they are no loss; else the oldest live entry is dropped. Returns the bytes freed, 0 when none.
   */
  private makeRoom(b: Batch): number {
    if (this.removals.length > 0) {
      const before = this.bytes;
      this.applyRemovals(b);
      if (this.bytes < before) return before - this.bytes;
    }
    return this.dropHead(b, 'queue_full');
  }

  /** Drops the oldest live entry; returns its bytes, 0 when the outbox is empty. */
  private dropHead(b: Batch, reason: DropReason): number {
    const head = this.firstLive();
    if (head === undefined) return 0;
    this.headBuffer.shift();
    const freed = this.removeOne(b, head.seq);
    if (freed > 0) this.dropped[reason]++;
    return freed;
  }

  /**
   * The oldest entry not removed in this batch: committed entries (read ahead in chunks, as the committed
   * database does not change while the batch is built), then those appended in this batch.
   */
  private firstLive(): HeadEntry | undefined {
    for (;;) {
      while (this.headBuffer.length > 0) {
        const e = this.headBuffer[0];
        if (!this.removedInFlight.has(e.seq)) return e;
        this.headBuffer.shift();
      }
      if (this.committedExhausted) break;
      let limit = HEAD_CHUNK;
      if (this.headScanFrom === 0) {
        // Entries removed in this batch are still committed, normally as a run at the head (acknowledgements
        // come in order): the first read starts past that run and takes just enough to pass any other removed
        // ones (the head's age is needed after every batch of acknowledgements).
        let from = this.headFloor;
        while (this.removedInFlight.has(from)) from++;
        limit = Math.min(HEAD_CHUNK, this.removedInFlight.size - (from - this.headFloor) + 1);
        this.headScanFrom = from;
      }
      let n = 0;
      for (const { key, value } of this.db.getRange({
        start: seqKey(this.prefix, this.headScanFrom),
        end: this.end,
        limit,
        snapshot: false,
      })) {
        const seq = keySeq(key);
        this.headBuffer.push({ seq, bytes: value.length, appendedAtMs: stampedValueMs(value) });
        this.headScanFrom = seq + 1;
        n++;
      }
      if (n < limit) this.committedExhausted = true;
    }
    while (this.batchHead < this.batchSeqs.length && this.removedInFlight.has(this.batchSeqs[this.batchHead])) {
      this.batchHead++;
    }
    if (this.batchHead === this.batchSeqs.length) return undefined;
    const value = this.batchValues[this.batchHead];
    return { seq: this.batchSeqs[this.batchHead], bytes: value.length, appendedAtMs: stampedValueMs(value) };
  }

  private readCommittedHead(): HeadEntry | undefined {
    for (const { key, value } of this.db.getRange({ start: this.prefix, end: this.end, limit: 1, snapshot: false })) {
      return { seq: keySeq(key), bytes: value.length, appendedAtMs: stampedValueMs(value) };
    }
    return undefined;
  }

  /** End of building a batch: persist counters in the same transaction, recompute the head's age. */
  finishBatch(b: Batch): void {
    if (this.dirty) {
      const meta: OutboxMeta = { lastSeq: this.lastSeq, messages: this.messages, bytes: this.bytes, dropped: this.dropped };
      this.store.put(b, this.store.meta, this.metaKey, meta);
    }
    this.dirty = false;
    if (this.headChanged) {
      const head = this.firstLive();
      this.oldestAppendedAtMs = head?.appendedAtMs;
      this.nextHeadFloor = head?.seq ?? this.lastSeq + 1;
    }
    this.batchSeqs = [];
    this.batchValues = [];
    this.batchHead = 0;
    this.headBuffer = [];
    this.headScanFrom = 0;
    this.committedExhausted = false;
    this.headChanged = false;
  }

  committed(): void {
    for (const seq of this.marking.added) this.released.add(seq);
    for (const seq of this.marking.deleted) this.released.delete(seq);
    if (this.nextHeadFloor !== undefined) this.headFloor = this.nextHeadFloor;
    this.forgetBatch();
  }

  private forgetBatch(): void {
    this.snapshot = undefined;
    this.nextHeadFloor = undefined;
    this.removedInFlight = new Set();
    if (this.marking.added.length > 0 || this.marking.deleted.length > 0) this.marking = { added: [], deleted: [] };
  }

  rollback(): void {
    const s = this.snapshot;
    if (s !== undefined) {
      this.lastSeq = s.lastSeq;
      this.messages = s.messages;
      this.bytes = s.bytes;
      this.dropped = s.dropped;
      this.oldestAppendedAtMs = s.oldest;
    }
    this.forgetBatch();
  }
}

class LmdbSessionStore implements SessionStore {
  lastSeq: number;
  private readonly store: LmdbStoreImpl;
  private readonly prefixes = new Map<string, Bin>();
  private ackKeys: Bin[] = [];
  /** The deletes of acked messages go at the end of the batch that flushes them, after any flight state in it. */
  private readonly ackFlush: DelayedFlush;

  constructor(store: LmdbStoreImpl) {
    this.store = store;
    this.ackFlush = new DelayedFlush(store, (b) => {
      b.flushAcks = true;
    });
    this.lastSeq = (store.meta.get('sessionSeq') as number | undefined) ?? 0;
  }

  loadAll(window?: QueueWindow): Iterable<SessionRecord> {
    const { sessionDb, subscriptionDb, queueDb, releaseDb, willDb } = this.store;
    const byId = new Map<
      string,
      {
        fields: SessionFields;
        subscriptions: SubscriptionRecord[];
        queue: QueueSplit;
        awaitingRelease: number[];
        will?: PendingWill;
      }
    >();
    const get = (clientId: string) => {
      let s = byId.get(clientId);
      if (s === undefined) {
        s = { fields: { expiryIntervalS: 0 }, subscriptions: [], queue: new QueueSplit(window), awaitingRelease: [] };
        byId.set(clientId, s);
      }
      return s;
    };
    for (const { key, value } of sessionDb.getRange({ snapshot: false })) get(key.toString('utf8')).fields = value;
    for (const { key, value } of subscriptionDb.getRange({ snapshot: false })) get(keyOwner(key)).subscriptions.push(value);
    for (const key of releaseDb.getKeys({ snapshot: false })) get(keyOwner(key)).awaitingRelease.push(keySeq(key));
    for (const { key, value } of queueDb.getRange({ snapshot: false })) {
      // A message of the tail is decoded only for its payload size: nothing of it stays in memory.
      const record = { seq: keySeq(key), ...decodeQueuedValue(value) };
      const { queue } = get(keyOwner(key));
      if (queue.keeps(record.msg.payload.length, record.flight !== undefined)) queue.queue.push(record);
    }
    for (const { key, value } of willDb.getRange({ snapshot: false })) {
      get(key.toString('utf8')).will = { msg: decodeMessage(value, STAMPED_HEADER_BYTES), dueAtMs: stampedValueMs(value) };
    }
    const out: SessionRecord[] = [];
    for (const [clientId, s] of byId) {
      out.push({
        clientId,
        expiryIntervalS: s.fields.expiryIntervalS,
        ...(s.fields.disconnectedAtMs === undefined ? {} : { disconnectedAtMs: s.fields.disconnectedAtMs }),
        subscriptions: s.subscriptions,
        queue: s.queue.queue,
        ...(s.queue.tail.count > 0 ? { queueTail: s.queue.tail } : {}),
        awaitingRelease: s.awaitingRelease,
        ...(s.will === undefined ? {} : { will: s.will }),
      });
    }
    return out;
  }

  readQueue(clientId: string, afterSeq: number, window: QueueWindow): QueuedRecord[] {
    const out: QueuedRecord[] = [];
    const prefix = this.prefixOf(clientId);
    const limit = Number.isFinite(window.messages) ? window.messages : undefined;
    const range = this.store.queueDb.getRange({ start: seqKey(prefix, afterSeq + 1), end: prefixEnd(prefix), limit, snapshot: false });
    let bytes = 0;
    for (const { key, value } of range) {
      const record = { seq: keySeq(key), ...decodeQueuedValue(value) };
      const size = record.msg.payload.length;
      if (!fitsWindow(window, out.length, bytes, size)) break;
      out.push(record);
      bytes += size;
    }
    return out;
  }

  putSession(clientId: string, fields: { expiryIntervalS: number; disconnectedAtMs?: number }): Promise<void> {
    const value: SessionFields = { expiryIntervalS: fields.expiryIntervalS };
    if (fields.disconnectedAtMs !== undefined) value.disconnectedAtMs = fields.disconnectedAtMs;
    return this.keyed(clientId, (b, key) => this.store.put(b, this.store.sessionDb, key, value), Buffer.from(clientId, 'utf8'));
  }

  drop(clientId: string): Promise<void> {
    this.prefixes.delete(clientId);
    return this.keyed(clientId, (b, key) => {
      const { sessionDb, subscriptionDb, queueDb, releaseDb, willDb } = this.store;
      b.droppedSessions.add(clientId);
      this.store.del(b, sessionDb, key);
      this.store.del(b, willDb, key);
      const prefix = ownerPrefix(clientId);
      const end = prefixEnd(prefix);
      for (const db of [subscriptionDb, queueDb, releaseDb] as Database<unknown, Bin>[]) {
        const keys = [...db.getKeys({ start: prefix, end, snapshot: false })];
        for (const k of keys) this.store.del(b, db, k);
      }
      // Written earlier in this same batch, so not in the committed keys above.
      for (const written of b.sessionKeys.get(clientId) ?? []) this.store.del(b, written.db, written.key);
      b.sessionKeys.delete(clientId);
    }, Buffer.from(clientId, 'utf8'));
  }

  putSubscription(clientId: string, sub: SubscriptionRecord): Promise<void> {
    const value: SubscriptionRecord = { ...sub };
    return this.keyed(clientId, (b, key) => {
      this.store.put(b, this.store.subscriptionDb, key, value);
      this.remember(b, clientId, this.store.subscriptionDb, key);
    }, () => nameKey(ownerPrefix(clientId), sub.filter));
  }

  deleteSubscription(clientId: string, filter: string): Promise<void> {
    return this.keyed(clientId, (b, key) => this.store.del(b, this.store.subscriptionDb, key), () =>
      nameKey(ownerPrefix(clientId), filter),
    );
  }

  enqueue(clientId: string, msg: Message): Promise<number> {
    let value: Bin;
    let prefix: Bin;
    try {
      value = encodePlainValue(msg);
      prefix = this.prefixOf(clientId);
    } catch (err) {
      return Promise.reject(new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }));
    }
    if (prefix.length + 8 > this.store.maxKeyBytes) return Promise.reject(keyTooLong(clientId));
    return this.store.schedule((b) => {
      this.store.reserve(b, value.length);
      const seq = this.lastSeq + 1;
      const key = seqKey(prefix, seq);
      this.store.put(b, this.store.queueDb, key, value);
      b.sessionSeqBefore ??= this.lastSeq;
      this.lastSeq = seq;
      this.remember(b, clientId, this.store.queueDb, key);
      return seq;
    });
  }

  putAwaitingRelease(clientId: string, packetId: number): Promise<void> {
    return this.keyed(clientId, (b, key) => {
      this.store.put(b, this.store.releaseDb, key, RELEASE_MARK);
      this.remember(b, clientId, this.store.releaseDb, key);
    }, () => seqKey(ownerPrefix(clientId), packetId));
  }

  deleteAwaitingRelease(clientId: string, packetId: number): Promise<void> {
    return this.keyed(clientId, (b, key) => this.store.del(b, this.store.releaseDb, key), () =>
      seqKey(ownerPrefix(clientId), packetId),
    );
  }

  putWill(clientId: string, will: PendingWill): Promise<void> {
    let value: Bin;
    try {
      value = encodeStampedValue(will.msg, will.dueAtMs);
    } catch (err) {
      return Promise.reject(new StoreError('EF_STORE_WRITE', `cannot store will: ${asError(err).message}`, { cause: err }));
    }
    return this.keyed(clientId, (b, key) => {
      this.store.reserve(b, value.length);
      this.store.put(b, this.store.willDb, key, value);
      this.remember(b, clientId, this.store.willDb, key);
    }, Buffer.from(clientId, 'utf8'));
  }

  deleteWill(clientId: string): Promise<void> {
    return this.keyed(clientId, (b, key) => this.store.del(b, this.store.willDb, key), Buffer.from(clientId, 'utf8'));
  }

  markInFlight(clientId: string, seq: number, msg: Message, flight: FlightState): Promise<void> {
    let value: Bin;
    let key: Bin;
    try {
      value = encodeQueuedValue(msg, flight);
      key = seqKey(this.prefixOf(clientId), seq);
    } catch (err) {
      return Promise.reject(new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }));
    }
    return this.store.schedule((b) => {
      // Only while still queued. Called once the enqueue is durable, so a missing key was acknowledged or dropped
      // in an earlier batch; a drop in this batch is not visible yet. Acks of this batch run after it (finishBatch).
      if (b.droppedSessions.has(clientId) || !this.store.queueDb.doesExist(key)) return;
      this.store.reserve(b, FLIGHT_HEADER_BYTES - PLAIN_HEADER_BYTES);
      this.store.put(b, this.store.queueDb, key, value);
    });
  }

  ack(clientId: string, seq: number): Promise<void> {
    if (this.store.isClosing) return Promise.reject(closedError());
    let key: Bin;
    try {
      key = seqKey(this.prefixOf(clientId), seq);
    } catch (err) {
      return Promise.reject(new StoreError('EF_STORE_WRITE', `invalid client id: ${asError(err).message}`, { cause: err }));
    }
    this.ackKeys.push(key);
    return this.ackFlush.wait();
  }

  /** Close: collected acks go now, so a graceful stop delivers nothing twice. */
  flushAcks(): void {
    this.ackFlush.now();
  }

  /** End of building a batch: the deletes of the collected acks, when the batch flushes them. */
  finishBatch(b: Batch): void {
    if (!b.flushAcks) return;
    for (const k of this.ackKeys) this.store.del(b, this.store.queueDb, k);
    this.ackKeys = [];
  }

  /** The key prefix of a client id, kept while the session lives: every queued message and ack needs it. */
  private prefixOf(clientId: string): Bin {
    let prefix = this.prefixes.get(clientId);
    if (prefix === undefined) this.prefixes.set(clientId, (prefix = ownerPrefix(clientId)));
    return prefix;
  }

  private remember(b: Batch, clientId: string, db: Database<any, any>, key: Bin): void {
    let keys = b.sessionKeys.get(clientId);
    if (keys === undefined) b.sessionKeys.set(clientId, (keys = []));
    keys.push({ db, key });
  }

  /** Builds the key up front (invalid ids and over-long keys reject at once), then schedules `run`. */
  private keyed(clientId: string, run: (b: Batch, key: Bin) => void, key: Bin | (() => Bin)): Promise<void> {
    let k: Bin;
    try {
      k = typeof key === 'function' ? key() : key;
    } catch (err) {
      return Promise.reject(new StoreError('EF_STORE_WRITE', `invalid client id: ${asError(err).message}`, { cause: err }));
    }
    if (k.length > this.store.maxKeyBytes) return Promise.reject(keyTooLong(clientId));
    return this.store.schedule((b) => run(b, k));
  }
}

function keyTooLong(clientId: string): StoreError {
  return new StoreError(
    'EF_STORE_WRITE',
    `client id (${Buffer.byteLength(clientId)} bytes) plus topic filter exceed the store's key limit`,
  );
}

class LmdbRetainedStore implements RetainedStore {
  private readonly store: LmdbStoreImpl;
  private n: number;

  constructor(store: LmdbStoreImpl) {
    this.store = store;
    this.n = (store.retainedDb.getStats() as { entryCount: number }).entryCount;
  }

  *loadAll(): Iterable<Message> {
    for (const { value } of this.store.retainedDb.getRange({ snapshot: false })) {
      yield decodeMessage(value, PLAIN_HEADER_BYTES);
    }
  }

  set(msg: Message): Promise<void> {
    const key = Buffer.from(msg.topic, 'utf8');
    if (key.length > this.store.maxKeyBytes) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `retained topic of ${key.length} bytes exceeds the store's key limit`),
      );
    }
    let value: Bin | undefined;
    if (msg.payload.length > 0) {
      try {
        value = encodePlainValue(msg);
      } catch (err) {
        return Promise.reject(new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }));
      }
    }
    return this.store.schedule((b) => {
      const existed = b.retainedExists.get(msg.topic) ?? this.store.retainedDb.doesExist(key);
      if (value === undefined) {
        if (!existed) return;
        this.store.del(b, this.store.retainedDb, key);
        b.retainedCountBefore ??= this.n;
        this.n--;
        b.retainedExists.set(msg.topic, false);
      } else {
        this.store.reserve(b, value.length);
        this.store.put(b, this.store.retainedDb, key, value);
        b.retainedCountBefore ??= this.n;
        if (!existed) this.n++;
        b.retainedExists.set(msg.topic, true);
      }
    });
  }

  get count(): number {
    return this.n;
  }

  setCount(n: number): void {
    this.n = n;
  }
}

// --- Opening ----------------------------------------------------------------------------------------------

function openError(dir: string, what: string, cause?: unknown): StoreError {
  return new StoreError(
    'EF_STORE_OPEN',
    `cannot open the data directory ${dir}: ${what}. Nothing was changed. Restore a backup, or start once ` +
      `with --reset-store, which moves the directory aside (kept for analysis) and starts with an empty store.`,
    cause === undefined ? undefined : { cause },
  );
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
interface StoreLock {
  release(): void;
}

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

function bootId(): string {
  try {
    return fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch (err) {
    // Not Linux: without a boot id a stale lock is recognised by its pid alone.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'unknown';
    throw err;
  }
}

function acquireLock(dir: string): StoreLock {
  const file = path.join(dir, 'edgeferry.lock');
  const me = { pid: process.pid, bootId: bootId(), start: processIdentity(process.pid) ?? 'unknown' };
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
    if (start !== undefined && start === existing.start) {
      throw openError(
        dir,
        existing.pid === process.pid
          ? 'it is already open in this process'
          : `it is in use by process ${existing.pid} (another edgeferry?); stop that process first`,
      );
    }
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
export async function openLmdbStore(
  opts: LmdbStoreOptions,
  internal: { schemaVersion?: number } = {},
): Promise<Store> {
  const schemaVersion = internal.schemaVersion ?? SCHEMA_VERSION;
  const dir = path.resolve(opts.path);
  const log = opts.log.child({ mod: 'store', path: dir });
  try {
    fs.mkdirSync(dir, { recursive: true });
  } catch (err) {
    throw openError(dir, `the directory cannot be created (${asError(err).message})`, err);
  }
  checkDataFile(dir);
  let lock: StoreLock;
  try {
    lock = acquireLock(dir);
  } catch (err) {
    throw err instanceof StoreError ? err : openError(dir, `edgeferry.lock cannot be written (${asError(err).message})`, err);
  }
  let env: RootDatabase | undefined;
  try {
    try {
      // eventTurnBatching off: every write goes through one explicit `batch()` per store batch (see issue()).
      // relaxed: MDB_NOMETASYNC (see the top of this file).
      env = open({ path: dir, maxDbs: 12, eventTurnBatching: false, noMetaSync: opts.sync === 'relaxed' });
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
      throw openError(dir, `it holds an LMDB environment that is not an edgeferry store (databases: ${rootNames.join(', ')})`);
    }
    let store: LmdbStoreImpl;
    try {
      store = new LmdbStoreImpl(env, { ...opts, path: dir }, lock, log);
    } catch (err) {
      throw err instanceof StoreError ? err : openError(dir, `its databases are unreadable (${asError(err).message})`, err);
    }
    if (fresh) {
      await store.meta.put('schema', { version: schemaVersion, createdAtMs: Date.now() });
      await store.meta.flushed;
      log.info({ schemaVersion }, 'created a new store');
    } else {
      const schema = store.meta.get('schema') as { version?: unknown } | undefined;
      if (schema === undefined || schema.version !== schemaVersion) {
        throw openError(
          dir,
          `its schema version is ${String(schema?.version ?? 'missing')}, this edgeferry reads version ${schemaVersion}` +
            ' (a store written by another edgeferry release needs that release or a migration)',
        );
      }
    }
    // Stamps stored by an earlier process of this boot compare exactly with ours (see util/clock.ts).
    const clockBase = adoptClockBase(store.meta.get('clock'));
    if (clockBase !== undefined) await store.meta.put('clock', clockBase);
    log.info({ sync: opts.sync, maxBytes: opts.maxBytes }, 'store open');
    return store;
  } catch (err) {
    if (env !== undefined) {
      await env.close().catch((closeErr: unknown) => log.warn({ err: closeErr }, 'closing a store that failed to open'));
    }
    lock.release();
    throw err;
  }
}
