/**
 * When the store issues its next batch (docs/architecture.md#durability, "Group commit", with what was measured).
 * Issuing it at the first writer the last commit released splits that group into a small batch and a large one,
 * which then take turns: every write waits for two commits. So the next batch waits until as many operations are
 * queued as the last one held, for at most a commit's fixed cost (the disk's flush) from the last commit's end: a
 * writer never waits longer than the split would have cost it. It goes at once where waiting cannot pay: the
 * group's last return took longer than that cost, the cost is below MIN_COMMIT_MS, or a lone writer.
 */

/**
 * No wait where a commit's fixed cost is below this: Node's timers count whole milliseconds, so a wait for a group
 * would last about as long as that cost, which is all that waiting could save.
 */
const MIN_COMMIT_MS = 2;
/** Two batches in a row whose sizes differ by this factor tell a commit's fixed cost from its cost per write. */
const SIZE_FACTOR = 2;

export class GroupCommit {
  /** Operations in the last committed batch: its writers, when they come back. */
  private target = 0;
  private releasedAtMs = 0;
  private lastTookMs = 0;
  /**
   * What a commit costs however little it holds (the disk's flush): what a split costs the writers left for the
   * next batch, so the longest worth waiting for them. From the last two batches of clearly different sizes (a line
   * through their durations, at zero writes); 0 until there were two. Where a commit's cost is mostly its writes,
   * a split costs little, and this is small.
   */
  private fixedMs = 0;
  /** Operations queued since the last commit ended, and how long the last group took to come back whole. */
  private arrived = 0;
  private returnMs = Number.POSITIVE_INFINITY;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** A batch of `ops` operations committed, `tookMs` after it was issued. */
  committed(ops: number, tookMs: number): void {
    const small = Math.min(ops, this.target);
    const large = Math.max(ops, this.target);
    if (small > 0 && large >= small * SIZE_FACTOR) {
      const smallMs = ops === small ? tookMs : this.lastTookMs;
      const perOpMs = ((ops === large ? tookMs : this.lastTookMs) - smallMs) / (large - small);
      // Measurements are noisy: never below zero, never above the small batch's own duration.
      this.fixedMs = Math.min(smallMs, Math.max(0, smallMs - perOpMs * small));
    }
    this.target = ops;
    this.lastTookMs = tookMs;
    this.releasedAtMs = this.now();
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
    if (queued >= this.target || this.fixedMs < MIN_COMMIT_MS || this.returnMs >= this.fixedMs) return 0;
    return Math.max(0, this.releasedAtMs + this.fixedMs - this.now());
  }
}
