/**
 * The store's byte budget: `storage.maxBytes` over the B-tree pages in use (docs/reliability.md#full-disk), the
 * persistent sessions' share of it (docs/reliability.md#sessions-share), and a full disk. It decides whether a new
 * value is admitted and whether a batch has room, and logs each time the store is full as one episode, never per
 * message. The write path (store.ts) tells it what is in flight and when batches commit.
 */
import type { Logger } from '../../util/logger.js';
import { StoreError } from '../../util/errors.js';
import { isLimited } from '../outbox-limits.js';
import { SESSIONS_RESUME_BELOW } from '../types.js';
import { diskHasRoom, isDiskFull } from './commit-failure.js';
import { DISK_FULL_RETRY_MS, FullEpisodes, type FullEpisode } from './full-episodes.js';
import { PageUsage, RESERVE_MARGIN } from './page-usage.js';
import type { Batch } from './store-writer.js';

export interface QuotaLimits {
  /** The data directory, named in the errors. */
  readonly path: string;
  /** `storage.maxBytes`; 0 = unbounded. */
  readonly maxBytes: number;
  /** The sessions' share of it (`storage.sessionShare`); 0 = none of their own. */
  readonly maxSessionBytes: number;
}

export class StoreQuota {
  private readonly path: string;
  private readonly maxBytes: number;
  private readonly maxSessionBytes: number;
  private readonly episodes: FullEpisodes;
  /** Value bytes of writes admitted and not yet applied to a batch, and those of session queues among them. */
  private pendingBytes = 0;
  private pendingSessionBytes = 0;
  /** Whether the store is at `maxBytes`, as decided for the running synchronous section (see `refusal`). */
  private atLimit: boolean | undefined;
  private usedAtLimit = 0;
  private readonly forgetAtLimit = (): void => {
    this.atLimit = undefined;
  };

  constructor(
    limits: QuotaLimits,
    private readonly pages: PageUsage,
    log: Logger,
  ) {
    this.path = limits.path;
    this.maxBytes = limits.maxBytes;
    this.maxSessionBytes = limits.maxSessionBytes;
    this.episodes = new FullEpisodes(log);
  }

  /**
   * The one decision on a new message against `maxBytes`, made before any of its writes is scheduled: EF_STORE_FULL
   * when the store is at the limit, counting the batch `inFlight` and writes admitted but not in a batch yet;
   * undefined when there is room, or when `canMakeRoom` (a `drop-oldest` outbox with entries of its own to drop).
   * The answer holds until the running synchronous section ends, so every target of one routed message
   * (`Subscriber.refusal`, then the writes) hears the same, whatever the others scheduled meanwhile; the store may
   * pass the limit by what one section admits. `commits`: the store's commit count (a stale page reading).
   */
  refusal(canMakeRoom: boolean, inFlight: Batch | undefined, commits: number): StoreError | undefined {
    if (!isLimited(this.maxBytes)) return undefined;
    if (this.atLimit === undefined) {
      this.usedAtLimit = this.pages.usedBytes(commits) + (inFlight?.reservedBytes ?? 0) + this.pendingBytes;
      this.atLimit = this.usedAtLimit >= this.maxBytes;
      queueMicrotask(this.forgetAtLimit);
      if (!this.atLimit && this.full?.cause === 'maxBytes') this.episodes.end('store');
    }
    if (!this.atLimit || canMakeRoom) return undefined;
    this.episodes.begin('maxBytes', { maxBytes: this.maxBytes, usedBytes: this.usedAtLimit }).refused++;
    return new StoreError(
      'EF_STORE_FULL',
      `the store in ${this.path} reached storage.maxBytes (${this.maxBytes} bytes): new messages are refused`,
    );
  }

  /**
   * Whether the persistent sessions' databases hold `maxSessionBytes`, counting the batch in flight and what is
   * scheduled (and, once they did, until they are below SESSIONS_RESUME_BELOW of it): they then queue nothing
   * more, while the rest of the store takes new messages as before.
   */
  sessionsFull(inFlight: Batch | undefined, commits: number): boolean {
    if (!isLimited(this.maxSessionBytes)) return false;
    const used = this.pages.sessionBytes(commits) + (inFlight?.sessionBytes ?? 0) + this.pendingSessionBytes;
    if (used < this.maxSessionBytes * (this.episodes.sessions === undefined ? 1 : SESSIONS_RESUME_BELOW)) {
      this.episodes.end('sessions');
      return false;
    }
    this.episodes.begin('sessions', { maxSessionBytes: this.maxSessionBytes, sessionBytes: used }).refused++;
    return true;
  }

  sessionsFullError(): StoreError {
    return new StoreError(
      'EF_STORE_FULL',
      `the persistent sessions hold their share of the store in ${this.path} (storage.sessionShare, ${this.maxSessionBytes} bytes): they queue nothing more`,
    );
  }

  /** Page bytes of the persistent sessions' databases, read now. */
  sessionBytes(): number {
    return this.pages.read().sessions;
  }

  /** A write of `bytes` (`sessionBytes` of them for session queues) was admitted: pending until `applied`. */
  admitted(bytes: number, sessionBytes: number): void {
    this.pendingBytes += bytes;
    this.pendingSessionBytes += sessionBytes;
  }

  /** The admitted write runs in batch `b`. */
  applied(b: Batch, bytes: number, sessionBytes: number): void {
    this.pendingBytes -= bytes;
    this.pendingSessionBytes -= sessionBytes;
    b.sessionBytes += sessionBytes;
  }

  /**
   * Accounts `bytes` more in batch `b`. Admitted already, it is refused here only while the disk is full; past
   * `maxBytes`, `makeRoom` (a `drop-oldest` outbox) frees what it can and returns the bytes it freed, 0 when
   * nothing is left.
   */
  reserve(b: Batch, bytes: number, makeRoom: (() => number) | undefined, commits: number): void {
    const full = this.full;
    if (full?.cause === 'disk' && !b.probe) {
      // Refused without asking the disk, which LMDB would answer with a failed commit (and a stderr line) each time.
      const nowMs = performance.now();
      // Nor when the filesystem has no room and LMDB freed no pages of its own to write into (its stderr line).
      const mayTry =
        nowMs >= full.retryAtMs &&
        (full.pagesFreed === true || diskHasRoom(this.path, bytes * RESERVE_MARGIN) !== false);
      if (nowMs >= full.retryAtMs) full.retryAtMs = nowMs + DISK_FULL_RETRY_MS;
      if (!mayTry) {
        b.storeFull = true;
        full.refused++;
        throw this.diskFullError();
      }
      full.pagesFreed = false;
      b.probe = true;
    }
    b.reservations++;
    b.reservedBytes += bytes;
    if (!isLimited(this.maxBytes)) return;
    b.usedBytes ??= this.pages.usedBytes(commits);
    if (makeRoom !== undefined) while (b.usedBytes + bytes > this.maxBytes && makeRoom() > 0);
    b.usedBytes += bytes;
  }

  /** Tells the byte estimate of batch `b` that `bytes` were removed (what `reserve` counted, given back). */
  free(b: Batch, bytes: number): void {
    if (b.usedBytes !== undefined) b.usedBytes -= bytes;
  }

  /** Batch `b` committed. A `maxBytes` episode ends when `refusal` finds room again, a full disk's here. */
  committed(b: Batch): void {
    this.pages.committed(b.reservedBytes, b.sessionBytes);
    const full = this.full;
    if (full?.cause !== 'disk') return;
    if (b.reservations > 0 && !b.storeFull) this.episodes.end('store');
    else if (b.deletes) {
      // Freed pages: the next batch may try, even with the filesystem still full.
      full.retryAtMs = 0;
      full.pagesFreed = true;
    }
  }

  /** Batch `b` failed with the OS error `cause`: the error its writers get when the disk is full, else undefined. */
  commitFailed(b: Batch, cause: unknown): StoreError | undefined {
    if (!isDiskFull(cause, this.path, b.reservedBytes * RESERVE_MARGIN)) return undefined;
    this.episodes.begin('disk', { err: cause }).refused += b.reservations;
    return this.diskFullError(cause);
  }

  private diskFullError(cause?: unknown): StoreError {
    return new StoreError(
      'EF_STORE_FULL',
      `the disk of the store in ${this.path} is full; new messages are refused until there is room`,
      cause === undefined ? undefined : { cause },
    );
  }

  /** The disk is full (an episode running): only writes that probe for room go to it. */
  get diskFull(): boolean {
    return this.full?.cause === 'disk';
  }

  /** The whole store's episode running (`maxBytes` or a full disk), if any. */
  private get full(): FullEpisode | undefined {
    return this.episodes.store;
  }
}
