/**
 * Decorrelated-jitter backoff (AWS architecture blog, "Exponential Backoff And Jitter"): each delay is
 * random in [base, previous * 3], capped. Spreads reconnect storms of many gateways.
 */
export class Backoff {
  private previousMs: number;

  constructor(
    private readonly baseMs: number,
    private readonly capMs: number,
    private readonly random: () => number = Math.random,
  ) {
    this.previousMs = baseMs;
  }

  next(): number {
    const upper = Math.min(this.capMs, this.previousMs * 3);
    const delay = Math.min(this.capMs, this.baseMs + this.random() * Math.max(0, upper - this.baseMs));
    this.previousMs = delay;
    return Math.round(delay);
  }

  reset(): void {
    this.previousMs = this.baseMs;
  }
}
