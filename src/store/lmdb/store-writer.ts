/**
 * The write path as the stored entities (outbox.ts, sessions.ts, retained.ts) see it: `StoreWriter`, implemented
 * by `LmdbStore` (store.ts), and the `Batch` their operations run in (one LMDB transaction). `DelayedFlush`
 * collects deletes after acknowledgements into one batch every few ms. The entities never import store.ts.
 */
import type { Database } from 'lmdb';
import type { SteadyClock } from '../../util/clock.js';
import type { Logger } from '../../util/logger.js';
import type { StoreError } from '../../util/errors.js';

/** How long deletes after acknowledgements are collected before they are committed (see DelayedFlush). */
const ACK_DELAY_MS = 5;

/** A queued change. `run` applies it to the JS state and issues its lmdb writes; it throws to reject. */
export interface Op {
  run(b: Batch): unknown;
  resolve(value: unknown): void;
  reject(err: unknown): void;
  /** The result of `run`, delivered once the batch is durable. */
  value?: unknown;
}

/**
 * An entity with state of its own per batch (counters to undo, writes held until the batch is finished). It
 * joins the batch it changes; only one batch is built or in flight at a time (store.ts), so that state lives on
 * the entity, from its first change in a batch until `committed` or `rollback`.
 */
export interface BatchMember {
  /** End of building the batch: the writes held until now (chunks, counters, collected deletes). */
  finishBatch(b: Batch): void;
  committed(): void;
  /** The batch failed: its changes to the JS state are undone. */
  rollback(): void;
}

/** The state of one batch while it is built and until its transaction settles. */
export class Batch {
  /** Operations that ran; they settle with the transaction. */
  readonly done: Op[] = [];
  /** The entities this batch changed, in the order they joined. */
  readonly members = new Set<BatchMember>();
  /** Entities finished after all `members`: the outbox journal, whose deletes follow its cursors' floors. */
  readonly lastMembers = new Set<BatchMember>();
  /** Estimate of the store's used bytes (pages in use + bytes added in this batch), computed on demand. */
  usedBytes: number | undefined;
  /** Bytes reserved in this batch (`free` not subtracted), for the estimate between page-count reads. */
  reservedBytes = 0;
  /** Bytes of them queued for persistent sessions (`admitQueued`), for the estimate of the sessions' share. */
  sessionBytes = 0;
  /** Operations that asked for room (`reserve`): what a failed commit refuses, for the episode's count. */
  reservations = 0;
  storeFull = false;
  /** While the disk is full, this batch is the one allowed to try whether it has room again. */
  probe = false;
  /** The batch deletes something: once committed, a full disk may have room again. */
  deletes = false;
  /** When it was issued (`performance.now()`): how long its commit took is the group's wait (group-commit.ts). */
  issuedAtMs = 0;

  /** Adds `member` to this batch; true the first time, when it keeps what a rollback needs. */
  join(member: BatchMember): boolean {
    if (this.members.has(member)) return false;
    this.members.add(member);
    return true;
  }

  /** Adds `member` to the entities finished last (see `lastMembers`); true the first time. */
  joinLast(member: BatchMember): boolean {
    if (this.lastMembers.has(member)) return false;
    this.lastMembers.add(member);
    return true;
  }
}

/** A record whose value did not check out, under its database and key. */
export interface DamagedRecord {
  readonly db: Database<unknown, Buffer | string>;
  readonly key: Buffer;
}

/** The named databases of the environment (store.ts opens them). */
export interface StoreDatabases {
  /**
   * The store's own records: `schema` (plain JSON, so that every release can read which format it is) and the
   * counters (`sessionSeq`, `outbox:<name>`, `clock`), checksummed JSON like session records (codec.ts).
   */
  readonly meta: Database<Buffer, string>;
  readonly outboxDb: Database<Buffer, Buffer>;
  readonly retainedDb: Database<Buffer, Buffer>;
  /** Session records and subscriptions: checksummed JSON (codec.ts encodeJsonValue). */
  readonly sessionDb: Database<Buffer, Buffer>;
  readonly subscriptionDb: Database<Buffer, Buffer>;
  readonly queueDb: Database<Buffer, Buffer>;
  /** Incoming QoS 2 packet ids awaiting PUBREL, keyed like the queue (owner prefix + id). */
  readonly releaseDb: Database<Buffer, Buffer>;
  /** Delayed wills waiting out their delay, keyed by client id (stamped with their due time). */
  readonly willDb: Database<Buffer, Buffer>;
  /** Outbox entries the central broker has received (QoS 2 PUBREC), keyed like the outbox. */
  readonly outboxReleasedDb: Database<Buffer, Buffer>;
  /** Outbox entries removed out of order, above their outbox's floor (see outbox-chunk.ts), keyed like the outbox. */
  readonly outboxRemovedDb: Database<Buffer, Buffer>;
}

/** What the entities write through: operations queued into batches, writes inside them, the byte budget. */
export interface StoreWriter extends StoreDatabases {
  readonly log: Logger;
  /** Stamps append times and converts message expiry for storage (codec.ts). */
  readonly clock: SteadyClock;
  readonly maxKeyBytes: number;
  /** Closing: new operations are refused. */
  readonly isClosing: boolean;
  /** The disk is full (quota.ts): writes that can wait, wait. */
  readonly diskFull: boolean;
  /** Queues an operation; the promise settles once its batch is durable (or the op is refused). */
  schedule<T>(run: (b: Batch) => T): Promise<T>;
  /**
   * Writes `value` under `key` in the batch. `append`: the caller knows `key` is greater than every key in `db`
   * (LMDB's MDB_APPEND: a full page is then split by starting a new one, not in halves; a key that is not the
   * greatest would fail the write).
   */
  put(b: Batch, db: Database<unknown, Buffer | string>, key: Buffer | string, value: unknown, append?: boolean): void;
  /** A counter record of `meta`, checked (CorruptValueError when damaged; open.ts refuses such a store). */
  readMeta<T>(key: string): T | undefined;
  /** Writes a counter record of `meta` with its checksum. */
  putMeta(b: Batch, key: string, value: unknown): void;
  del(b: Batch, db: Database<unknown, Buffer | string>, key: Buffer | string): void;
  /**
   * The decision on a new message against `storage.maxBytes`, the same for the rest of the synchronous section:
   * EF_STORE_FULL when the store is at the limit (but for a writer that `canMakeRoom`), else undefined.
   */
  quotaRefusal(canMakeRoom?: boolean): StoreError | undefined;
  /** Schedules the write of a new value of `bytes` once `quotaRefusal` admits it; rejects with its error otherwise. */
  admit<T>(bytes: number, run: (b: Batch) => T, canMakeRoom?: boolean): Promise<T>;
  /** `admit` for a message queued for a persistent session, which `sessionsFull` refuses too; counted in their share. */
  admitQueued<T>(bytes: number, run: (b: Batch) => T): Promise<T>;
  /** Whether the persistent sessions hold their share of the store (`SessionStore.sessionsFull`). */
  sessionsFull(): boolean;
  /**
   * Accounts `bytes` more in this batch; refused (EF_STORE_FULL) only while the disk is full. Past
   * `storage.maxBytes`, `makeRoom` (drop-oldest) frees what it can and returns the bytes it freed, 0 when it cannot.
   */
  reserve(b: Batch, bytes: number, makeRoom?: () => number): void;
  /** Tells the byte estimate of this batch that `bytes` were removed. */
  free(b: Batch, bytes: number): void;
  /** Damaged records a read met and skipped: counted, logged, and deleted. */
  reportCorrupt(what: string, where: Record<string, unknown>, records: number, damaged: readonly DamagedRecord[]): void;
}

/**
 * Deletes after acknowledgements (an outbox entry the central broker acked, a queued message a subscriber
 * acked) need no commit of their own: a crash before they commit only sends those messages once more, which
 * QoS 1 allows (QoS 2 resumes from its recorded state, so nothing is delivered twice). They are collected for
 * ACK_DELAY_MS and committed in one batch. While a queue drains or a backlog replays, that saves a commit (two
 * fsyncs) per event turn (docs/architecture.md#durability). Flash storage wears less too.
 */
export class DelayedFlush {
  private pending: { promise: Promise<void>; now(): void } | undefined;

  constructor(
    private readonly writer: StoreWriter,
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
        this.writer
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
