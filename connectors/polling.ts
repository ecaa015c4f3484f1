/**
 * The one poll loop every polling connector uses: a fixed interval (cycles start on a fixed grid, so the rate
 * does not drift with the time a cycle takes), never overlapping (a cycle that overruns its slot makes the loop
 * skip the missed slots, counted), and a deadline on every read (`withDeadline`).
 */

export class DeadlineError extends Error {
  constructor(what: string, deadlineMs: number) {
    super(`${what}: no answer within ${deadlineMs} ms`);
    this.name = 'DeadlineError';
  }
}

/** Rejects with a DeadlineError when `promise` has not settled after `deadlineMs`; `onTimeout` cleans up. */
export function withDeadline<T>(
  promise: Promise<T>,
  deadlineMs: number,
  what: string,
  onTimeout?: () => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      onTimeout?.();
      reject(new DeadlineError(what, deadlineMs));
    }, deadlineMs);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

export interface PollStats {
  readonly cycles: number;
  /** Slots skipped because a cycle took longer than the interval. */
  readonly overruns: number;
  readonly lastDurationMs: number;
  readonly maxDurationMs: number;
}

/** Durations of the last cycles kept for percentiles. */
const DURATION_WINDOW = 1024;

export class PollLoop {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private active = false;
  private nextAtMs = 0;
  private cycles = 0;
  private overruns = 0;
  private lastDurationMs = 0;
  private maxDurationMs = 0;
  private readonly durations = new Float64Array(DURATION_WINDOW);

  /** `cycle` must not throw for expected device errors (it reports them itself); anything thrown goes to `onError`. */
  constructor(
    private readonly intervalMs: number,
    private readonly cycle: () => Promise<void>,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Starts polling; the first cycle runs after `initialDelayMs` (e.g. one interval after a probe read). */
  start(initialDelayMs = 0): void {
    if (this.active) return;
    this.active = true;
    this.nextAtMs = performance.now() + initialDelayMs;
    this.schedule(initialDelayMs);
  }

  /** Stops the loop and waits for a cycle in progress to end. */
  async stop(): Promise<void> {
    this.active = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  get stats(): PollStats {
    return {
      cycles: this.cycles,
      overruns: this.overruns,
      lastDurationMs: this.lastDurationMs,
      maxDurationMs: this.maxDurationMs,
    };
  }

  /** The `p`-quantile (0..1) of the recent cycle durations in ms. */
  durationQuantileMs(p: number): number {
    const n = Math.min(this.cycles, DURATION_WINDOW);
    if (n === 0) return 0;
    const sorted = Array.from(this.durations.subarray(0, n)).sort((a, b) => a - b);
    return sorted[Math.min(n - 1, Math.floor(p * n))];
  }

  private schedule(delayMs: number): void {
    this.timer = setTimeout(() => this.runCycle(), delayMs);
  }

  private runCycle(): void {
    this.timer = undefined;
    if (!this.active) return;
    const startedMs = performance.now();
    this.running = this.cycle()
      .catch((err: unknown) => this.onError(err))
      .finally(() => {
        const endMs = performance.now();
        const durationMs = endMs - startedMs;
        this.durations[this.cycles % DURATION_WINDOW] = durationMs;
        this.cycles++;
        this.lastDurationMs = durationMs;
        if (durationMs > this.maxDurationMs) this.maxDurationMs = durationMs;
        this.running = undefined;
        if (!this.active) return;
        this.nextAtMs += this.intervalMs;
        if (this.nextAtMs < endMs) {
          const missed = Math.ceil((endMs - this.nextAtMs) / this.intervalMs);
          this.overruns += missed;
          this.nextAtMs += missed * this.intervalMs;
        }
        this.schedule(this.nextAtMs - endMs);
      });
  }
}
