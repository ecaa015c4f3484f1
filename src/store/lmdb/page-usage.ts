/**
 * What the store uses, in B-tree pages: the unit of `storage.maxBytes` and of the persistent sessions' share of it
 * (`storage.sessionShare`). quota.ts asks it before admitting new values.
 */
import { isLimited } from '../outbox-limits.js';

/** Page counts are re-read when older than this, or above this share of a limit. */
const PAGE_STATS_MAX_AGE_MS = 1000;
const PAGE_STATS_EXACT_ABOVE = 0.9;
/** Pages per value byte, generously: 64-byte values with 8-byte keys fill pages about 2:1. */
export const RESERVE_MARGIN = 3;

/** A database, as far as its page counts go (lmdb-js's `getStats`). */
interface Counted {
  getStats(): unknown;
}

export interface PageLimits {
  /** `storage.maxBytes`; 0 = none. */
  readonly maxBytes: number;
  /** The sessions' share of it; 0 = none of their own. */
  readonly maxSessionBytes: number;
}

/**
 * The store's used bytes, and those of the sessions' databases, as of the last commit. Reading the page counts costs a
 * `getStats` call per database, a few per cent of the CPU at one batch per millisecond, so they are read at most once
 * a second while far below both limits, and after every commit near one (exact where it matters). In between, what
 * committed batches reserved is added with a margin for keys and page fill, so the estimates only err high.
 */
export class PageUsage {
  private used = 0;
  private sessions = 0;
  private readAtMs = -Infinity;
  private readAtCommit = -1;
  private reservedSince = 0;
  private sessionsReservedSince = 0;

  constructor(
    /** Every database but the sessions'. */
    private readonly others: readonly Counted[],
    /** The persistent sessions' databases: records, subscriptions, queues, QoS 2 ids, wills. */
    private readonly sessionDbs: readonly Counted[],
    private readonly limits: PageLimits,
  ) {}

  /** Estimate of the whole store's used bytes; `commits`: the store's commit count, which tells a stale reading. */
  usedBytes(commits: number): number {
    this.readIfStale(commits);
    return this.used + this.reservedSince * RESERVE_MARGIN;
  }

  /** The same for the persistent sessions' databases. */
  sessionBytes(commits: number): number {
    this.readIfStale(commits);
    return this.sessions + this.sessionsReservedSince * RESERVE_MARGIN;
  }

  /** A batch committed: its reserved bytes count until the next reading. */
  committed(reservedBytes: number, sessionBytes: number): void {
    this.reservedSince += reservedBytes;
    this.sessionsReservedSince += sessionBytes;
  }

  /** Bytes of the pages in use now (free pages are reusable and not counted), of all databases and of the sessions'. */
  read(): { used: number; sessions: number } {
    const pageSize = (this.sessionDbs[0].getStats() as { pageSize: number }).pageSize;
    const sessions = pagesInUse(this.sessionDbs);
    return { used: (pagesInUse(this.others) + sessions) * pageSize, sessions: sessions * pageSize };
  }

  private readIfStale(commits: number): void {
    if (this.readAtCommit === commits) return;
    const { maxBytes, maxSessionBytes } = this.limits;
    const near =
      (isLimited(maxBytes) && this.used + this.reservedSince * RESERVE_MARGIN >= maxBytes * PAGE_STATS_EXACT_ABOVE) ||
      (isLimited(maxSessionBytes) &&
        this.sessions + this.sessionsReservedSince * RESERVE_MARGIN >= maxSessionBytes * PAGE_STATS_EXACT_ABOVE);
    const nowMs = performance.now();
    if (nowMs - this.readAtMs < PAGE_STATS_MAX_AGE_MS && !near) return;
    ({ used: this.used, sessions: this.sessions } = this.read());
    this.readAtMs = nowMs;
    this.readAtCommit = commits;
    this.reservedSince = 0;
    this.sessionsReservedSince = 0;
  }
}

function pagesInUse(dbs: readonly Counted[]): number {
  let pages = 0;
  for (const db of dbs) {
    const s = db.getStats() as { treeBranchPageCount: number; treeLeafPageCount: number; overflowPages: number };
    pages += s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages;
  }
  return pages;
}
