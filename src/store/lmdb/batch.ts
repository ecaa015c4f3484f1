/**
 * A store batch (one LMDB transaction, see store.ts) and the queued operations it runs; `DelayedFlush`, which
 * collects deletes after acknowledgements into one batch every few ms.
 */
import type { Database } from 'lmdb';
import type { LmdbOutbox } from './outbox.js';
import type { LmdbStoreImpl } from './store.js';

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

/** The state of one batch while it is built and until its transaction settles. */
export class Batch {
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
  readonly sessionKeys = new Map<string, { db: Database<any, any>; key: Buffer }[]>();
  /** Whether a retained topic exists after the writes so far in this batch. */
  readonly retainedExists = new Map<string, boolean>();
  /** Estimate of the store's used bytes (pages in use + bytes added in this batch), computed on demand. */
  usedBytes: number | undefined;
  /** Bytes reserved in this batch (releases not subtracted), for the estimate between page-count reads. */
  reservedBytes = 0;
  /** Operations that asked for room (`reserve`): what a failed commit refuses, for the episode's count. */
  reservations = 0;
  storeFull = false;
  /** While the disk is full, this batch is the one allowed to try whether it has room again. */
  probe = false;
  /** The batch deletes something: once committed, a full disk may have room again. */
  deletes = false;
}

/**
 * Deletes after acknowledgements (an outbox entry the central broker acked, a queued message a subscriber
 * acked) need no commit of their own: a crash before they commit only sends those messages once more, which
 * QoS 1 allows (QoS 2 resumes from its recorded state, so nothing is delivered twice). They are collected for
 * ACK_DELAY_MS and committed in one batch. While a queue drains or a backlog replays, that saves a commit (two
 * fsyncs) per event turn; measured on two cores: the session drain ran 20 % faster, the bridge replay 10-15 %.
 * Flash storage wears less too.
 */
export class DelayedFlush {
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
