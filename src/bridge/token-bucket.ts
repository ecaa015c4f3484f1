/**
 * Token buckets for pacing backlog replay (messages/s and bytes/s), so a reconnect after a long outage does not
 * flood the backbone. Time is monotonic (`performance.now()`), so wall-clock jumps do not matter.
 */

/** Burst allowance in seconds of rate: small, so replay is smooth rather than one big burst per second. */
const BURST_S = 0.1;

export class TokenBucket {
  private tokens: number;
  private lastMs: number;
  private readonly capacity: number;

  /** `ratePerS` 0 means unlimited. */
  constructor(
    private readonly ratePerS: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.capacity = Math.max(1, ratePerS * BURST_S);
    this.tokens = this.capacity;
    this.lastMs = now();
  }

  get unlimited(): boolean {
    return this.ratePerS <= 0;
  }

  /**
   * Milliseconds until `cost` may be taken, 0 if now. A cost larger than the burst capacity is allowed once the
   * bucket is full and leaves it in debt, so a single message bigger than the burst is slowed, never stuck.
   */
  waitMs(cost: number): number {
    if (this.unlimited) return 0;
    this.refill();
    const needed = Math.min(cost, this.capacity);
    if (this.tokens >= needed) return 0;
    return Math.ceil(((needed - this.tokens) / this.ratePerS) * 1000);
  }

  /** Takes `cost` tokens (call after `waitMs(cost)` returned 0). */
  take(cost: number): void {
    if (this.unlimited) return;
    this.refill();
    this.tokens -= cost;
  }

  private refill(): void {
    const nowMs = this.now();
    const elapsedMs = nowMs - this.lastMs;
    this.lastMs = nowMs;
    if (elapsedMs > 0) this.tokens = Math.min(this.capacity, this.tokens + (elapsedMs / 1000) * this.ratePerS);
  }
}

/** Both replay limits at once: a message goes when it fits in the message bucket and the byte bucket. */
export class ReplayPacer {
  private readonly messages: TokenBucket;
  private readonly bytes: TokenBucket;

  constructor(limits: { messagesPerS: number; bytesPerS: number }, now?: () => number) {
    this.messages = new TokenBucket(limits.messagesPerS, now);
    this.bytes = new TokenBucket(limits.bytesPerS, now);
  }

  /** Milliseconds until a message of `bytes` may go, 0 if now. */
  waitMs(bytes: number): number {
    return Math.max(this.messages.waitMs(1), this.bytes.waitMs(bytes));
  }

  take(bytes: number): void {
    this.messages.take(1);
    this.bytes.take(bytes);
  }
}
