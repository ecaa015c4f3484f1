/**
 * The clock for every time edgeferry stores or turns into an age: outbox append stamps, message expiry deadlines,
 * will due times, session disconnect times, and the ages in metrics and `edgeferry store list`.
 *
 * It reads like the wall clock (ms since the epoch) but advances with the monotonic clock. So a step of the
 * system clock while edgeferry runs neither ages nor rejuvenates anything. Steps happen: NTP correcting a box
 * that booted with a flat RTC battery at 1970, an operator setting the time. Without this clock, a forward step
 * of years made `queue.maxAgeS` drop the whole backlog at the next tick, and expired every queued message with
 * a message expiry interval.
 *
 * Its base is fixed once per boot. The first process of a boot that opens the store records the base there
 * (with the boot id), and every later process of that boot takes it over (`SteadyClock.adopt`): Linux's monotonic
 * clock counts from boot, so times stored by a process that crashed or restarted still compare exactly. After a
 * reboot the timeline goes on from where it stopped plus the time spent down, by the system clock, unless the
 * system clock was wrong then or is behind now (see `SteadyClock.adopt`).
 *
 * So it may differ from the system clock: by a step seen while running (a timeline started at 1970 stays 56
 * years behind), and by what adjusts the system clock without stepping it (a drifting VM clock: docs/architecture.md#time).
 * Nothing shows its absolute value; only differences between
 * its readings are used (ages, deadlines), and those stay right.
 *
 * Not for timestamps that say when something happened outside (Sparkplug metric timestamps, log lines): those
 * are the system clock's.
 */
import { readFileSync } from 'node:fs';

/** The monotonic clock in ms since boot (Linux; since some fixed point elsewhere) minus `performance.now()`. */
const monotonicOffsetMs = Number(process.hrtime.bigint() / 1000n) / 1000 - performance.now();

/** The steady clock as recorded in the store: this boot's base, and how far the clock got (updated as it runs). */
export interface ClockRecord {
  readonly bootId: string;
  readonly baseMs: number;
  /** The steady time when the record was last written (store open, every minute, close). */
  readonly lastSeenMs: number;
  /** The system clock at that moment: the next boot counts the time spent down from it. */
  readonly lastSeenSystemMs: number;
}

/**
 * No clock that was right can read earlier than this (this code did not exist before). A system clock reading
 * below it came from a wrong clock (a flat RTC battery at 1970).
 */
const CLOCK_FLOOR_MS = Date.UTC(2026, 0, 1);

/** This boot's id (Linux), or undefined where there is none. */
export function currentBootId(): string | undefined {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * One steady timeline (see the top). The gateway makes one and hands it to the store, which sets its base from
 * its record (`adopt`), and to everything that compares times with stored ones. A new one starts at the system
 * clock.
 */
export class SteadyClock {
  /** The wall-clock time at monotonic 0 (boot): `nowMs()` = base + monotonic ms. */
  private baseMs = Date.now() - (performance.now() + monotonicOffsetMs);
  /** The boot the base belongs to, once `adopt` ran (undefined: nothing is recorded). */
  private bootId: string | undefined;

  /** Now, by the steady clock: ms since the epoch, immune to steps of the system clock (see the top). */
  nowMs(): number {
    return this.baseMs + monotonicOffsetMs + performance.now();
  }

  /**
   * Sets the base from the store's record, so that times stored earlier compare with ours:
   * - the same boot: its base, exactly (Linux's monotonic clock counts from boot);
   * - a new boot: the recorded timeline goes on from where it stopped plus the time spent down, counted by the
   *   system clock from the recorded `lastSeenSystemMs` to now. Unless that count cannot be trusted: the system
   *   clock was wrong then (below CLOCK_FLOOR_MS) or is behind it now (wrong now, e.g. a flat RTC battery).
   *   Then no time is counted as spent down: stored times keep their ages rather than jumping by decades, which
   *   would expire everything (or nothing). A timeline that started on a wrong clock (1970) thus stays behind the
   *   system clock, but counts the time spent down once the system clock is right.
   * Where there are no boot ids, the base stays the system clock's and nothing is recorded (`record`).
   */
  adopt(recorded: unknown, bootId = currentBootId()): void {
    if (bootId === undefined) return;
    const r = recorded as Partial<ClockRecord> | undefined;
    const monotonicMs = monotonicOffsetMs + performance.now();
    if (r !== undefined && finite(r.baseMs)) {
      if (r.bootId === bootId) {
        this.baseMs = r.baseMs;
      } else {
        const lastSeenMs = finite(r.lastSeenMs) ? r.lastSeenMs : r.baseMs;
        // Records written before lastSeenSystemMs existed: the timeline then restarted from the system clock.
        const systemThenMs = finite(r.lastSeenSystemMs) ? r.lastSeenSystemMs : lastSeenMs;
        const systemNowMs = Date.now();
        const downMs = systemThenMs >= CLOCK_FLOOR_MS && systemNowMs >= systemThenMs ? systemNowMs - systemThenMs : 0;
        this.baseMs = lastSeenMs + downMs - monotonicMs;
      }
    }
    this.bootId = bootId;
  }

  /** The record to keep in the store (see ClockRecord), undefined before `adopt` or without boot ids. */
  record(): ClockRecord | undefined {
    if (this.bootId === undefined) return undefined;
    return { bootId: this.bootId, baseMs: this.baseMs, lastSeenMs: this.nowMs(), lastSeenSystemMs: Date.now() };
  }
}

const finite = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** A difference between the system clock and the steady clock that moves by this much at once is a step. */
const STEP_THRESHOLD_MS = 2000;

/**
 * Calls `onStep` (with the step in ms, positive forward) when the system clock steps, checked every `everyMs`.
 * For the log: whoever reads Sparkplug timestamps or log times at 3 a.m. should know the clock jumped, and that
 * ages, expiry and will delays did not. Returns the function that stops watching.
 */
export function watchClockSteps(clock: SteadyClock, onStep: (stepMs: number) => void, everyMs = 1000): () => void {
  let offsetMs = Date.now() - clock.nowMs();
  const timer = setInterval(() => {
    const nowOffsetMs = Date.now() - clock.nowMs();
    const stepMs = nowOffsetMs - offsetMs;
    offsetMs = nowOffsetMs;
    if (Math.abs(stepMs) >= STEP_THRESHOLD_MS) onStep(stepMs);
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
