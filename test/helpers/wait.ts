/** Bounded waiting: poll a condition with a deadline instead of sleeping a fixed time. */

export interface WaitOptions {
  /** Poll period, default 20 ms. */
  intervalMs?: number;
  /** Included in the timeout error, to say what was expected. */
  message?: string | (() => string);
}

/**
 * Resolves with the predicate's first truthy value; rejects after `timeoutMs` with `message` (and the last
 * error the predicate threw, if any).
 */
export async function waitFor<T>(
  predicate: () => T | Promise<T>,
  timeoutMs: number,
  options: WaitOptions = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  const intervalMs = options.intervalMs ?? 20;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await predicate();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const what = typeof options.message === 'function' ? options.message() : (options.message ?? 'condition');
      throw new Error(`waitFor timed out after ${timeoutMs} ms: ${what}`, { cause: lastError });
    }
    await delay(intervalMs);
  }
}

/**
 * To show that something does NOT arrive (docs/development.md#asserting-absence): `send` sends a marker that must
 * arrive after it would have (the same connection and ordering: a publish the subscriber also receives, a PINGREQ,
 * a log line the code writes after the decision), and this resolves once `arrived` sees the marker. Assert the
 * absence after it: no fixed sleep, which passes for the wrong reason on a slow machine.
 */
export async function afterMarker(
  send: () => unknown,
  arrived: () => unknown,
  timeoutMs = 10_000,
  what: string | (() => string) = 'the marker',
): Promise<void> {
  await send();
  await waitFor(arrived, timeoutMs, { message: what });
}

/** A plain delay, for pacing a test's actions (never as an assertion). */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
