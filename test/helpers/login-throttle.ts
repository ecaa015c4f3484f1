/**
 * What the login throttle (src/util/login-throttle.ts) promises about one key's password checks, asserted on the
 * times the gateway's audit log gives them: the server's own clock, so a busy test process cannot blur the gaps.
 */
import { expect } from 'vitest';
import { delayMs, FREE_FAILURES } from '../../src/util/login-throttle.js';

/**
 * How late an audit line may be written after its check ended: the end that slows a key also answers the rest of
 * a burst at once, and those answers are written first (26 ms measured with four test runs in parallel).
 */
const LATE_LOG_MS = 60;

/**
 * `endedAtMs`: when each failed check of one key ended (its audit line), in any order. The first FREE_FAILURES
 * may end together; each later one ends at least `delayMs(failures so far)` after the one before.
 */
export function expectSlowedChecks(endedAtMs: readonly number[]): void {
  const times = [...endedAtMs].sort((a, b) => a - b);
  const gaps = times.slice(FREE_FAILURES).map((t, i) => t - times[FREE_FAILURES + i - 1]);
  const least = gaps.map((_, i) => delayMs(FREE_FAILURES + i) - LATE_LOG_MS);
  expect(
    gaps.every((gap, i) => gap >= least[i]),
    `gaps after the first ${FREE_FAILURES} checks: ${gaps.join(', ')} ms, expected at least ${least.join(', ')} ms`,
  ).toBe(true);
}
