/** The steady clock (src/util/clock.ts): its base per boot, and the timeline it continues across a reboot. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SteadyClock } from '../../src/util/clock.js';

const HOUR_MS = 3_600_000;
const thisBoot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();

/** |steady clock - expected| in ms. */
const clock = new SteadyClock();
const offBy = (expectedMs: number): number => Math.abs(clock.nowMs() - expectedMs);

describe('steady clock', () => {
  it('starts at the system clock and records this boot', () => {
    expect(offBy(Date.now())).toBeLessThan(1000);
    clock.adopt(undefined);
    const record = clock.record();
    expect(record?.bootId).toBe(thisBoot);
    expect(Math.abs((record?.lastSeenMs ?? 0) - Date.now())).toBeLessThan(1000);
  });

  it('takes over the base recorded in this boot exactly, whatever the system clock says now', () => {
    clock.adopt(undefined, thisBoot);
    const own = clock.record()!;
    // Recorded by a process of this boot that saw the system clock an hour behind: ages keep counting from it.
    clock.adopt({ bootId: thisBoot, baseMs: own.baseMs - HOUR_MS, lastSeenMs: Date.now() - HOUR_MS }, thisBoot);
    expect(offBy(Date.now() - HOUR_MS)).toBeLessThan(1000);
    clock.adopt({ bootId: thisBoot, baseMs: Number.NaN, lastSeenMs: 0 }, thisBoot); // garbage: ignored
    expect(offBy(Date.now() - HOUR_MS)).toBeLessThan(1000);
  });

  it('after a reboot counts the time down by the system clock when the recorded timeline is plausible', () => {
    const earlier = {
      bootId: 'an-earlier-boot',
      baseMs: Date.now() - 48 * HOUR_MS,
      lastSeenMs: Date.now() - 5 * HOUR_MS,
    };
    clock.adopt(earlier, thisBoot);
    expect(offBy(Date.now())).toBeLessThan(1000);
    // The same from a record that has the system clock too.
    clock.adopt({ ...earlier, lastSeenSystemMs: earlier.lastSeenMs }, thisBoot);
    expect(offBy(Date.now())).toBeLessThan(1000);
  });

  it('after a reboot counts the time down on a timeline that started on a wrong clock, once the system clock was right', () => {
    // The store's timeline began at 1970 (flat RTC battery); NTP then set the system clock while edgeferry ran (the
    // timeline did not step with it), and the record kept both. Down for 5 hours since: they count.
    const stoppedAt1970 = Date.UTC(1970, 0, 3);
    const systemThen = Date.now() - 5 * HOUR_MS;
    clock.adopt(
      {
        bootId: 'an-earlier-boot',
        baseMs: Date.UTC(1970, 0, 1),
        lastSeenMs: stoppedAt1970,
        lastSeenSystemMs: systemThen,
      },
      thisBoot,
    );
    expect(offBy(stoppedAt1970 + 5 * HOUR_MS)).toBeLessThan(1000);
    const record = clock.record()!;
    expect(Math.abs(record.lastSeenSystemMs - Date.now())).toBeLessThan(1000);
    expect(Math.abs(record.lastSeenMs - (stoppedAt1970 + 5 * HOUR_MS))).toBeLessThan(1000);
  });

  it('after a reboot goes on where the recorded timeline stopped when one of the clocks was wrong', () => {
    // The last boot counted on a clock at 1970 (flat RTC battery), this one on a right clock: without this, every
    // stored time would look 56 years old and expire.
    const stoppedAt1970 = Date.UTC(1970, 0, 3);
    clock.adopt({ bootId: 'an-earlier-boot', baseMs: Date.UTC(1970, 0, 1), lastSeenMs: stoppedAt1970 }, thisBoot);
    expect(offBy(stoppedAt1970)).toBeLessThan(1000);
    // The last boot ran on a right clock, this one on a wrong one (behind it): stored times would be in the future.
    const stoppedAhead = Date.now() + 56 * 365 * 24 * HOUR_MS;
    clock.adopt({ bootId: 'an-earlier-boot', baseMs: stoppedAhead - HOUR_MS, lastSeenMs: stoppedAhead }, thisBoot);
    expect(offBy(stoppedAhead)).toBeLessThan(1000);
    expect(clock.record()?.bootId).toBe(thisBoot);
  });
});
