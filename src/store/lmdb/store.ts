/**
 * The durable store: one LMDB environment (lmdb-js) in `storage.path` with named databases for the outboxes'
 * journal (journal.ts, outbox.ts), persistent sessions (sessions.ts) and retained messages (retained.ts); open.ts
 * opens it. This class owns the environment and the one write path they all share (docs/architecture.md#durability):
 * every change is an operation queued in JS and committed with the others of its turn in one explicit `batch()`,
 * one batch in flight, so that when a batch is built the committed database is what the JS state describes and a
 * failed commit can be rolled back in JS. Why lmdb-js is used this way and not otherwise (its event-turn batching,
 * transaction callbacks, `noSync`, `useWritemap`, compression): docs/reliability.md#lmdb-facts.
 */
import type { Database, RootDatabase } from 'lmdb';
import { asError, StoreError } from '../../util/errors.js';
import type { Logger } from '../../util/logger.js';
import { decodeJsonValue, encodeJsonValue, ownerPrefix, prefixEnd } from '../codec.js';
import { closedError, outboxInUseError } from '../outbox-limits.js';
import type { JournalDepth, Outbox, OutboxLimits, Store } from '../types.js';
import { Batch, type DamagedRecord, type Op, type StoreWriter } from './store-writer.js';
import {
  LmdbOutbox,
  OUTBOX_META_END,
  OUTBOX_META_PREFIX,
  outboxMetaKey,
  storedOutboxCursor,
  type OutboxMeta,
} from './outbox.js';
import { LmdbJournal } from './journal.js';
import { GroupCommit } from './group-commit.js';
import { migrateOutboxesToJournal } from './migrate.js';
import { LmdbRetainedStore } from './retained.js';
import { LmdbSessionStore } from './sessions.js';
import { SteadyClock } from '../../util/clock.js';
import { commitCause, muteLmdbCommitErrors } from './commit-failure.js';
import type { VerifyMode } from './verify.js';
import { PageUsage } from './page-usage.js';
import { StoreQuota } from './quota.js';

/** lmdb-js's put option for MDB_APPEND (see `put`). */
const APPEND = { append: true };
/** A failed commit is reported to the writers by its batch (see `issue`). */
const ignoreFailedCommit = (): void => {};
/** How often the steady clock's record is written (see keepClockRecord). */
const CLOCK_RECORD_EVERY_MS = 60_000;
/** Entries deleted per transaction when a whole outbox is deleted. */
const DELETE_CHUNK = 10_000;
export interface LmdbStoreOptions {
  /** Data directory; created if missing. */
  readonly path: string;
  readonly sync: 'full' | 'relaxed';
  /** Bound on the B-tree pages in use (live data plus tree overhead); 0 = unbounded. */
  readonly maxBytes: number;
  /**
   * Bound on the pages of the persistent sessions' databases (`storage.sessionShare` of `maxBytes`), so that they
   * leave the rest to the outboxes (docs/reliability.md#sessions-share); 0 or absent = none of their own.
   */
  readonly maxSessionBytes?: number;
  /** The integrity walk before opening an existing store (`storage.verifyOnStart`, see verify.ts); default off. */
  readonly verify?: VerifyMode;
  /**
   * The gateway's clock, whose base the store sets from its record (`SteadyClock.adopt`); a store opened on its
   * own (the store commands, tests) gets one of its own.
   */
  readonly clock?: SteadyClock;
  /** How old a journal chunk gets before it is compacted (compaction.ts); tests shorten it. */
  readonly compactAfterMs?: number;
  readonly log: Logger;
}

/** The data directory's lock file (open.ts), released when the store closes. */
export interface StoreLock {
  release(): void;
}

/** `batch()` exists on every lmdb-js database but is missing from its typings. */
interface LmdbBatcher {
  batch(action: () => void): Promise<unknown>;
}

export class LmdbStore implements Store, StoreWriter {
  readonly retained: LmdbRetainedStore;
  readonly sessions: LmdbSessionStore;
  readonly env: RootDatabase;
  readonly meta: Database<Buffer, string>;
  readonly outboxDb: Database<Buffer, Buffer>;
  readonly retainedDb: Database<Buffer, Buffer>;
  readonly sessionDb: Database<Buffer, Buffer>;
  readonly subscriptionDb: Database<Buffer, Buffer>;
  readonly queueDb: Database<Buffer, Buffer>;
  readonly releaseDb: Database<Buffer, Buffer>;
  readonly willDb: Database<Buffer, Buffer>;
  readonly outboxReleasedDb: Database<Buffer, Buffer>;
  readonly outboxRemovedDb: Database<Buffer, Buffer>;
  readonly durable = true;
  readonly clock: SteadyClock;
  readonly log: Logger;
  readonly path: string;
  readonly maxKeyBytes: number;
  private readonly relaxed: boolean;
  private readonly compactAfterMs: number | undefined;
  private readonly outboxes = new Map<string, LmdbOutbox>();
  private journalOpened: LmdbJournal | undefined;
  private readonly lock: StoreLock;

  private queue: Op[] = [];
  private inFlight: Batch | undefined;
  private issueScheduled = false;
  /** When the next batch is issued (group-commit.ts), and the timer that issues it when its group is late. */
  private readonly group = new GroupCommit();
  private groupTimer: NodeJS.Timeout | undefined;
  /** Settles (never rejects) when every batch issued so far has settled; keeps resolutions in order. */
  private lastSettled: Promise<void> = Promise.resolve();
  private closing = false;
  private closed: Promise<void> | undefined;
  private commitFailing = false;
  private readonly quota: StoreQuota;
  /** Committed batches: `edgeferry_store_commits_total`, and page counts are re-read only after a commit changed them. */
  commits = 0;
  /** Damaged records found while running (skipped, never delivered): `edgeferry_store_corrupt_records_total`. */
  corruptRecords = 0;
  private clockTimer: NodeJS.Timeout | undefined;

  constructor(env: RootDatabase, opts: LmdbStoreOptions, lock: StoreLock, log: Logger) {
    this.env = env;
    this.clock = opts.clock ?? new SteadyClock();
    this.log = log;
    this.path = opts.path;
    this.lock = lock;
    this.relaxed = opts.sync === 'relaxed';
    this.compactAfterMs = opts.compactAfterMs;
    // Not in lmdb-js's typings; 1978 is LMDB's compiled-in default.
    this.maxKeyBytes = (env as unknown as { maxKeySize?: number }).maxKeySize ?? 1978;
    this.meta = env.openDB<Buffer, string>('meta', { encoding: 'binary' });
    this.outboxDb = env.openDB<Buffer, Buffer>('outbox', { encoding: 'binary', keyEncoding: 'binary' });
    this.retainedDb = env.openDB<Buffer, Buffer>('retained', { encoding: 'binary', keyEncoding: 'binary' });
    this.sessionDb = env.openDB<Buffer, Buffer>('sessions', { encoding: 'binary', keyEncoding: 'binary' });
    this.subscriptionDb = env.openDB<Buffer, Buffer>('subscriptions', { encoding: 'binary', keyEncoding: 'binary' });
    this.queueDb = env.openDB<Buffer, Buffer>('session-queue', { encoding: 'binary', keyEncoding: 'binary' });
    this.releaseDb = env.openDB<Buffer, Buffer>('session-qos2', { encoding: 'binary', keyEncoding: 'binary' });
    // Added after schema 1 shipped without it: opening creates it empty, which is what an older store means.
    this.willDb = env.openDB<Buffer, Buffer>('session-will', { encoding: 'binary', keyEncoding: 'binary' });
    this.outboxReleasedDb = env.openDB<Buffer, Buffer>('outbox-released', {
      encoding: 'binary',
      keyEncoding: 'binary',
    });
    this.outboxRemovedDb = env.openDB<Buffer, Buffer>('outbox-removed', { encoding: 'binary', keyEncoding: 'binary' });
    this.retained = new LmdbRetainedStore(this);
    this.sessions = new LmdbSessionStore(this);
    const limits = { path: opts.path, maxBytes: opts.maxBytes, maxSessionBytes: opts.maxSessionBytes ?? 0 };
    const pages = new PageUsage(
      [this.meta, this.outboxDb, this.retainedDb, this.outboxReleasedDb, this.outboxRemovedDb],
      [this.sessionDb, this.subscriptionDb, this.queueDb, this.releaseDb, this.willDb],
      limits,
    );
    this.quota = new StoreQuota(limits, pages, log);
    muteLmdbCommitErrors();
  }

  get isClosing(): boolean {
    return this.closing;
  }

  get diskFull(): boolean {
    return this.quota.diskFull;
  }

  /** Moves outboxes of store format 1 into the journal (migrate.ts), before any outbox is opened. */
  migrateOutboxes(): void {
    if (this.journalOpened !== undefined) throw new Error('migrateOutboxes: the journal is open already');
    migrateOutboxesToJournal(this.env, this, this.clock, this.log);
  }

  /** The journal of every outbox, opened with the first outbox, with the cursors of those not opened yet. */
  private get journal(): LmdbJournal {
    if (this.journalOpened !== undefined) return this.journalOpened;
    const journal = new LmdbJournal(this, this.compactAfterMs);
    for (const name of this.outboxNames()) {
      const meta = this.readMeta<OutboxMeta>(outboxMetaKey(name));
      if (meta?.slot === undefined) continue;
      journal.attach(meta.slot, storedOutboxCursor(meta));
      journal.follow(meta.lastSeq);
    }
    return (this.journalOpened = journal);
  }

  journalDepth(): JournalDepth {
    return this.journal.depth();
  }

  outbox(name: string, limits: OutboxLimits): Outbox {
    if (this.closing) throw closedError();
    let box = this.outboxes.get(name);
    if (box === undefined) {
      try {
        box = new LmdbOutbox(this, this.journal, name, limits);
      } catch (err) {
        if (err instanceof StoreError) throw err;
        throw new StoreError(
          'EF_STORE_OPEN',
          `outbox "${name}" in ${this.path} is unreadable: ${asError(err).message}`,
          {
            cause: err,
          },
        );
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
    const meta = this.readMeta<OutboxMeta>(outboxMetaKey(name));
    if (meta === undefined) return 0; // unknown (the empty name is the journal's own prefix)
    const prefix = ownerPrefix(name);
    const end = prefixEnd(prefix);
    const entries = (meta.messages as number | undefined) ?? 0; // absent after `store salvage`
    // In parts, one transaction each: an outbox may hold millions of entries. Each part reads the keys the
    // previous part's commit left.
    for (;;) {
      const n = await this.schedule((b) => {
        let count = 0;
        for (const db of [this.outboxDb, this.outboxRemovedDb, this.outboxReleasedDb]) {
          for (const key of db.getKeys({ start: prefix, end, limit: DELETE_CHUNK - count, snapshot: false })) {
            this.del(b, db, key);
            count++;
          }
          if (count >= DELETE_CHUNK) return count;
        }
        this.del(b, this.meta, outboxMetaKey(name));
        // Its claims end: the journal deletes the chunks no other outbox holds in this transaction.
        if (meta.slot !== undefined) this.journal.detach(meta.slot);
        this.journal.forget(b, name);
        return count;
      });
      if (n < DELETE_CHUNK) return entries;
    }
  }

  /**
   * Damaged records one read came across (checksum or layout wrong), already skipped by the reader: counted,
   * logged with where they are (one line per read), and deleted, so that they are not met again.
   */
  reportCorrupt(
    what: string,
    where: Record<string, unknown>,
    records: number,
    damaged: readonly DamagedRecord[],
  ): void {
    if (records === 0) return;
    this.corruptRecords += records;
    this.log.error(
      { what, ...where, records },
      'damaged records in the store skipped (checksum mismatch): they are not delivered',
    );
    if (this.closing || damaged.length === 0) return;
    this.schedule((b) => {
      for (const { db, key } of damaged) this.del(b, db, key);
    }).catch((err: unknown) => this.log.warn({ err }, 'damaged records not deleted'));
  }

  /** Queues an operation; the promise settles once its batch is durable (or the op is refused). */
  schedule<T>(run: (b: Batch) => T): Promise<T> {
    if (this.closing) return Promise.reject(closedError());
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ run, resolve: resolve as (v: unknown) => void, reject });
      this.group.queued();
      this.scheduleIssue();
    });
  }

  /**
   * Issues a write in the batch being built. Called only inside `env.batch()` (see `issue`), where lmdb-js
   * returns an already-resolved placeholder; the batch's own promise reports the commit.
   */
  put(_b: Batch, db: Database<unknown, Buffer | string>, key: Buffer | string, value: unknown, append = false): void {
    if (!append) void db.put(key, value);
    // A conditional write, so lmdb-js makes it a promise of its own, which rejects when the commit fails (reported
    // by the batch) and resolves false when the key was not the greatest (which callers rule out).
    else (db.put(key, value, APPEND as unknown as number) as Promise<boolean>).then(this.appended, ignoreFailedCommit);
  }

  private readonly appended = (written: boolean): void => {
    if (!written)
      this.log.error('a write appended out of key order was not stored (MDB_APPEND): a bug in the queue bound');
  };

  readMeta<T>(key: string): T | undefined {
    const value = this.meta.get(key);
    return value === undefined ? undefined : decodeJsonValue<T>(value);
  }

  putMeta(b: Batch, key: string, value: unknown): void {
    this.put(b, this.meta, key, encodeJsonValue(value));
  }

  del(b: Batch, db: Database<unknown, Buffer | string>, key: Buffer | string): void {
    b.deletes = true;
    void db.remove(key);
  }

  /** The decision on a new message against `storage.maxBytes` (quota.ts), the same for the synchronous section. */
  quotaRefusal(canMakeRoom = false): StoreError | undefined {
    return this.quota.refusal(canMakeRoom, this.inFlight, this.commits);
  }

  /**
   * Schedules the write of a new value of `bytes` once `quotaRefusal` admits it (rejects with its error otherwise);
   * its bytes count as pending until `run` applies them to a batch.
   */
  admit<T>(bytes: number, run: (b: Batch) => T, canMakeRoom = false): Promise<T> {
    return this.admitFor(bytes, run, canMakeRoom, false);
  }

  /**
   * `admit` for a message queued for a persistent session: refused also while the sessions hold their share
   * (`sessionsFull`), and its bytes count towards that share.
   */
  admitQueued<T>(bytes: number, run: (b: Batch) => T): Promise<T> {
    return this.admitFor(bytes, run, false, true);
  }

  private admitFor<T>(bytes: number, run: (b: Batch) => T, canMakeRoom: boolean, queued: boolean): Promise<T> {
    if (this.closing) return Promise.reject(closedError());
    const refused =
      this.quotaRefusal(canMakeRoom) ?? (queued && this.sessionsFull() ? this.quota.sessionsFullError() : undefined);
    if (refused !== undefined) return Promise.reject(refused);
    const sessionBytes = queued ? bytes : 0;
    this.quota.admitted(bytes, sessionBytes);
    return this.schedule((b) => {
      this.quota.applied(b, bytes, sessionBytes);
      return run(b);
    });
  }

  /** Whether the persistent sessions hold their share of the store (docs/reliability.md#sessions-share). */
  sessionsFull(): boolean {
    return this.quota.sessionsFull(this.inFlight, this.commits);
  }

  /** Page bytes of the persistent sessions' databases, read now. */
  sessionBytes(): number {
    return this.quota.sessionBytes();
  }

  /** Accounts `bytes` more in this batch (quota.ts); `makeRoom`: a `drop-oldest` outbox past `storage.maxBytes`. */
  reserve(b: Batch, bytes: number, makeRoom?: () => number): void {
    this.quota.reserve(b, bytes, makeRoom, this.commits);
  }

  /** Tells the byte estimate of this batch that `bytes` were removed (what `reserve` counted, given back). */
  free(b: Batch, bytes: number): void {
    this.quota.free(b, bytes);
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
    const waitMs = this.closing ? 0 : this.group.waitMs(this.queue.length);
    if (waitMs > 0) {
      // Each new operation schedules another look (`schedule`); the timer issues what is queued when time is up.
      this.groupTimer ??= setTimeout(this.issueLate, waitMs);
      return;
    }
    if (this.groupTimer !== undefined) {
      clearTimeout(this.groupTimer);
      this.groupTimer = undefined;
    }
    const ops = this.queue;
    this.queue = [];
    const b = new Batch();
    b.issuedAtMs = performance.now();
    this.inFlight = b;
    // One explicit lmdb-js batch = one transaction, and its promise is the only one lmdb-js creates for it (the
    // event-turn batching's own would reject unhandled on a failed commit: docs/reliability.md#lmdb-facts).
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
        // The OS error decides what the writers hear (full disk: EF_STORE_FULL), so it is awaited first. The batch
        // stays in flight meanwhile: nothing is built on the state it is about to roll back.
        void commitCause(err).then((cause) => {
          const failure = this.afterFailedCommit(b, err, cause);
          void previous.then(() => {
            for (const op of b.done) op.reject(failure);
            settle();
          });
        });
      },
    );
  }

  private readonly issueLate = (): void => {
    this.groupTimer = undefined;
    this.issue();
  };

  /** Runs the queued operations and writes the counters they changed, all inside one lmdb-js batch. */
  private build(b: Batch, ops: Op[]): void {
    for (const op of ops) {
      try {
        op.value = op.run(b);
        b.done.push(op);
      } catch (err) {
        op.reject(
          err instanceof StoreError ? err : new StoreError('EF_STORE_WRITE', asError(err).message, { cause: err }),
        );
      }
    }
    try {
      for (const member of b.members) member.finishBatch(b);
      for (const member of b.lastMembers) member.finishBatch(b);
    } catch (err) {
      // Queueing a counter write fails only if the environment is broken; the commit then fails as well and
      // rejects the batch. Logged here because it is the first sign.
      this.log.error({ err }, 'failed to queue store counters');
    }
  }

  private afterCommit(b: Batch): void {
    this.group.committed(b.done.length, performance.now() - b.issuedAtMs);
    this.quota.committed(b);
    this.commits++;
    for (const member of b.members) member.committed();
    for (const member of b.lastMembers) member.committed();
    if (this.commitFailing) {
      this.commitFailing = false;
      this.log.info('store writes succeed again');
    }
    this.inFlight = undefined;
    // Issued now, not on the next setImmediate: lmdb-js starts the write thread from a setImmediate of its own,
    // and one issued from a setImmediate would start only after the next poll phase (the socket reads of a
    // whole loop iteration), while the disk sits idle.
    if (this.queue.length > 0) this.issue();
  }

  /** Rolls back what the batch changed in JS and returns the error its writers get. */
  private afterFailedCommit(b: Batch, err: unknown, cause: unknown): StoreError {
    let failure = this.quota.commitFailed(b, cause);
    if (failure === undefined) {
      if (!this.commitFailing) {
        this.commitFailing = true;
        this.log.error({ err: cause }, 'store commit failed: writes are refused until a commit succeeds');
      }
      failure = new StoreError(
        'EF_STORE_WRITE',
        `a write to the store in ${this.path} failed: ${asError(cause).message}`,
        {
          cause: err,
        },
      );
    }
    for (const member of b.members) member.rollback();
    for (const member of b.lastMembers) member.rollback();
    this.group.reset();
    this.inFlight = undefined;
    if (this.queue.length > 0) this.scheduleIssue();
    return failure;
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

  /**
   * Keeps the steady clock's record (util/clock.ts) in `meta`: now, every CLOCK_RECORD_EVERY_MS and at close, so
   * the next boot knows how far this timeline got. Settles when the first write is durable.
   */
  async keepClockRecord(): Promise<void> {
    if (this.clock.record() === undefined) return; // no boot ids here: nothing to record
    await this.recordClock();
    this.clockTimer ??= setInterval(() => {
      this.recordClock().catch((err: unknown) => this.log.warn({ err }, 'clock record not stored'));
    }, CLOCK_RECORD_EVERY_MS);
    this.clockTimer.unref();
  }

  private recordClock(): Promise<void> {
    return this.schedule((b) => {
      const record = this.clock.record();
      if (record !== undefined) this.putMeta(b, 'clock', record);
    });
  }

  close(): Promise<void> {
    if (this.closed === undefined) {
      if (this.clockTimer !== undefined) {
        clearInterval(this.clockTimer);
        this.recordClock().catch((err: unknown) => this.log.warn({ err }, 'clock record not stored at close'));
      }
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
