/**
 * The login throttle (src/util/login-throttle.ts, docs/architecture.md#security-model) on a manual clock: keys
 * per address and user, attempts counted from their start, slowed rather than refused, bounded memory.
 */
import { describe, expect, it } from 'vitest';
import {
  FORGET_MS,
  FREE_FAILURES,
  LoginThrottle,
  MAX_WAITING,
  type LoginVerdict,
  type ThrottleTime,
} from '../../src/util/login-throttle.js';

/** A clock that moves only when told to, running the timers that fall due on the way. */
class ManualTime implements ThrottleTime {
  private now = 0;
  private timers: { atMs: number; fn: () => void }[] = [];

  nowMs(): number {
    return this.now;
  }

  after(ms: number, fn: () => void): void {
    this.timers.push({ atMs: this.now + ms, fn });
  }

  async advance(ms: number): Promise<void> {
    const target = this.now + ms;
    for (;;) {
      await settle();
      this.timers.sort((a, b) => a.atMs - b.atMs);
      const next = this.timers.at(0);
      if (next === undefined || next.atMs > target) break;
      this.timers.shift();
      this.now = next.atMs;
      next.fn();
    }
    this.now = target;
    await settle();
  }
}

/** Lets every resolved promise's continuations run (no real time passes that matters). */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A throttle on a manual clock, with a record of when each password check started. */
function setup() {
  const time = new ManualTime();
  const throttle = new LoginThrottle(time);
  const checks: { label: string; atMs: number }[] = [];
  const attempt = (
    label: string,
    address: string,
    user: string | undefined,
    correct: boolean,
    waiting = () => true,
  ): Promise<LoginVerdict> =>
    throttle.check({ address, user, waiting }, async () => {
      checks.push({ label, atMs: time.nowMs() });
      return correct;
    });
  return { time, throttle, checks, attempt };
}

describe('login throttle', () => {
  it('checks five of a burst of 100 at once, answers 85 busy once those failed, and the waiting ten one at a time, 250 ms doubling to 5 s apart', async () => {
    const { time, checks, attempt } = setup();
    // The right password at position 20, as in the review's burst.
    const verdicts: (LoginVerdict | undefined)[] = new Array(100);
    const all = Array.from({ length: 100 }, (_, i) =>
      attempt(`maint-${i}`, '127.0.0.1', 'maint', i === 19).then((v) => (verdicts[i] = v)),
    );
    await time.advance(0);
    expect(checks.map((c) => c.label)).toEqual(['maint-0', 'maint-1', 'maint-2', 'maint-3', 'maint-4']);
    expect(verdicts.slice(0, 5)).toEqual(Array(5).fill('refused'));
    expect(verdicts.filter((v) => v === 'busy')).toHaveLength(100 - FREE_FAILURES - MAX_WAITING);
    expect(verdicts[19]).toBe('busy');
    expect(verdicts.slice(5, 15)).toEqual(Array(10).fill(undefined));

    await time.advance(60_000);
    await Promise.all(all);
    expect(checks.slice(5).map((c) => c.atMs)).toEqual([250, 750, 1750, 3750, 7750, 12750, 17750, 22750, 27750, 32750]);
    expect(verdicts.filter((v) => v === 'refused')).toHaveLength(15);
    expect(verdicts).not.toContain('accepted');
  });

  it('never holds up another user, a name that is no user, or another address because of these failures', async () => {
    const { time, checks, attempt } = setup();
    for (let i = 0; i < 8; i++) void attempt(`alice-${i}`, '127.0.0.1', 'alice', false);
    await time.advance(0);
    expect(checks).toHaveLength(FREE_FAILURES);
    expect(await attempt('admin', '127.0.0.1', 'admin', true)).toBe('accepted');
    expect(await attempt('unknown', '127.0.0.1', undefined, false)).toBe('refused');
    expect(await attempt('alice elsewhere', '10.0.0.7', 'alice', true)).toBe('accepted');
    expect(checks.slice(FREE_FAILURES).map((c) => [c.label, c.atMs])).toEqual([
      ['admin', 0],
      ['unknown', 0],
      ['alice elsewhere', 0],
    ]);
  });

  it('gives every name that is no user one key per address', async () => {
    const { time, checks, attempt } = setup();
    for (let i = 0; i < FREE_FAILURES; i++)
      expect(await attempt(`name-${i}`, '127.0.0.1', undefined, false)).toBe('refused');
    const sixth = attempt('another name', '127.0.0.1', undefined, false);
    await time.advance(249);
    expect(checks).toHaveLength(FREE_FAILURES);
    await time.advance(1);
    expect(await sixth).toBe('refused');
    expect(checks.at(-1)).toEqual({ label: 'another name', atMs: 250 });
  });

  it('slows the right password after five failures of its user, never refuses it, and a success clears the key', async () => {
    const { time, checks, attempt } = setup();
    for (let i = 0; i < FREE_FAILURES; i++)
      expect(await attempt(`typo-${i}`, '127.0.0.1', 'maint', false)).toBe('refused');
    const right = attempt('right', '127.0.0.1', 'maint', true);
    await time.advance(250);
    expect(await right).toBe('accepted');
    expect(checks.at(-1)).toEqual({ label: 'right', atMs: 250 });
    // Cleared: five more may fail at once.
    for (let i = 0; i < FREE_FAILURES; i++) void attempt(`again-${i}`, '127.0.0.1', 'maint', false);
    await time.advance(0);
    expect(checks.filter((c) => c.atMs === 250)).toHaveLength(1 + FREE_FAILURES);
  });

  it('skips a waiting attempt whose client left, without a check and without counting it', async () => {
    const { time, checks, attempt } = setup();
    for (let i = 0; i < FREE_FAILURES; i++) await attempt(`typo-${i}`, '127.0.0.1', 'maint', false);
    let open = true;
    const left = attempt('left', '127.0.0.1', 'maint', false, () => open);
    const next = attempt('next', '127.0.0.1', 'maint', true);
    open = false;
    await time.advance(250);
    expect(await left).toBe('gone');
    expect(await next).toBe('accepted');
    expect(checks.at(-1)).toEqual({ label: 'next', atMs: 250 });
    expect(checks.map((c) => c.label)).not.toContain('left');
  });

  it('lets a storm of correct logins of one user through, five checked at a time, none refused', async () => {
    const { time, throttle } = setup();
    let checking = 0;
    let most = 0;
    const verdicts = Array.from({ length: 200 }, () =>
      throttle.check({ address: '127.0.0.1', user: 'sensor', waiting: () => true }, async () => {
        most = Math.max(most, ++checking);
        await settle();
        checking--;
        return true;
      }),
    );
    await time.advance(0);
    expect(new Set(await Promise.all(verdicts))).toEqual(new Set(['accepted']));
    expect(most).toBe(FREE_FAILURES);
    expect(throttle.size).toBe(0);
  });

  it('forgets a key ten minutes after its last failure', async () => {
    const { time, checks, attempt } = setup();
    for (let i = 0; i < FREE_FAILURES; i++) await attempt(`typo-${i}`, '127.0.0.1', 'maint', false);
    await time.advance(FORGET_MS);
    expect(await attempt('later', '127.0.0.1', 'maint', false)).toBe('refused');
    expect(checks.at(-1)).toEqual({ label: 'later', atMs: FORGET_MS });
  });

  it('keeps at most 10,000 keys: failures from 12,000 addresses do not grow it further', async () => {
    const { throttle, attempt } = setup();
    for (let i = 0; i < 12_000; i++) await attempt('scan', `10.0.${i >> 8}.${i & 255}`, undefined, false);
    expect(throttle.size).toBe(10_000);
  });
});
