/**
 * When the store issues its next batch (docs/architecture.md#durability, "Group commit").
 *
 * Batches commit one at a time and each commit waits for the disk, so a write waits for the commit in flight when it
 * is queued, then for its own. The writers a commit releases (the publishers its PUBACKs answer) come back one
 * round trip later, not all at once: issuing at the first of them splits the group into a small batch and a large
 * one, which then take turns, and every write waits for two commits (measured: batches of 16 and 144 alternating,
 * 160 writes in flight). Waiting for the rest pays only when they are back within a fraction of a commit: then the
 * next batch waits until as many operations are queued as the last one held, for at most half as long as the last
 * commit took, counted from its end. The next batch goes at once when the group's last return took longer than
 * that (a slow network: waiting would not join it), when commits are too fast for a timer to wait a fraction of
 * one (a fast disk), and for a lone writer (a batch of one is always back in full).
 */

/** The share of the last commit's duration that the next batch may wait for its group. */
const HOLD_SHARE = 0.5;
/**
 * No wait shorter than this: Node's timers count whole milliseconds, so a shorter one would last a millisecond
 * anyway, about a whole commit on a disk that fast, where waiting did not pay (measured: the same rate, or less).
 */
const MIN_HOLD_MS = 1;

export class GroupCommit {
  /** Operations in the last committed batch: its writers, when they come back. */
  private target = 0;
  private releasedAtMs = 0;
  private holdMs = 0;
  /** Operations queued since the last commit ended, and how long the last group took to come back whole. */
  private arrived = 0;
  private returnMs = Number.POSITIVE_INFINITY;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** A batch of `ops` operations committed, `tookMs` after it was issued. */
  committed(ops: number, tookMs: number): void {
    this.target = ops;
    this.releasedAtMs = this.now();
    this.holdMs = tookMs * HOLD_SHARE;
    this.arrived = 0;
  }

  /** An operation was queued. */
  queued(): void {
    if (++this.arrived === this.target) this.returnMs = this.now() - this.releasedAtMs;
  }

  /** A batch failed: the next one goes at once. */
  reset(): void {
    this.target = 0;
  }

  /** How long the next batch should still wait with `queued` operations queued; 0 to issue it now. */
  waitMs(queued: number): number {
    if (queued >= this.target || this.holdMs < MIN_HOLD_MS || this.returnMs > this.holdMs) return 0;
    return Math.max(0, this.releasedAtMs + this.holdMs - this.now());
  }
}
