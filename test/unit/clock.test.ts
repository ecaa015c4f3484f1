/** The steady clock (src/util/clock.ts): its base per boot, taken over from the store. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { adoptClockBase, steadyNowMs } from '../../src/util/clock.js';

describe('steady clock', () => {
  it('starts at the system clock and takes over a base recorded in this boot, not one of another boot', () => {
    expect(Math.abs(steadyNowMs() - Date.now())).toBeLessThan(1000);
    const bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const own = adoptClockBase(undefined);
    expect(own?.bootId).toBe(bootId);
    // Another boot's base is not ours: ours is returned, to be recorded.
    expect(adoptClockBase({ bootId: 'another-boot', baseMs: 0 })).toEqual(own);
    expect(adoptClockBase({ bootId, baseMs: Number.NaN })).toEqual(own);
    // This boot's base, recorded by a process that saw the system clock an hour behind: taken over.
    const before = steadyNowMs();
    expect(adoptClockBase({ bootId, baseMs: own!.baseMs - 3_600_000 })).toBeUndefined();
    expect(before - steadyNowMs()).toBeGreaterThan(3_599_000);
    expect(before - steadyNowMs()).toBeLessThan(3_600_000);
  });
});
