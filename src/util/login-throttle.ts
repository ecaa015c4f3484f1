/**
 * The one throttle for password logins: MQTT CONNECT, the web console and `/metrics` basic auth share it
 * (docs/architecture.md#security-model). It slows guessing down without becoming a lock-out tool:
 *
 * - Attempts are keyed by source address and user name; every name that is no user shares one key per address (a
 *   scan of made-up names costs one key). Failures of one key never slow another: a correct password for `admin`
 *   is not held up by failed logins for `alice`, for unknown names, or from another address. On an edge box every
 *   local program shares 127.0.0.1, so a per-address ban would let any of them lock the operator out.
 * - An attempt counts from the moment its check starts, not once its (asynchronous) password hash is done: of a
 *   burst sent at once, only as many are checked together as the key has free failures left.
 * - Attempts are slowed, not refused: a key with FREE_FAILURES failures checks one attempt at a time, each starting
 *   at least `delayMs(failures)` after the previous one ended (250 ms, doubling per further failure, at most 5 s:
 *   at most 12 guesses a minute per key). Only while a key is slowed and MAX_WAITING attempts already wait is a
 *   further one refused at once ('busy', for that key alone).
 * - A success clears its key; a key is forgotten FORGET_MS after its last failure.
 */

/** How a refused login's user name appears in logs when it is no user: people type passwords into the field. */
export const UNKNOWN_USER = '<unknown>';

/** Failures (with the attempts being checked) a key may have before its attempts are checked one at a time. */
export const FREE_FAILURES = 5;
/** The wait before the first slowed attempt; it doubles with each further failure, up to MAX_DELAY_MS. */
export const FIRST_DELAY_MS = 250;
export const MAX_DELAY_MS = 5_000;
/** Attempts that may wait for their turn while a key is slowed; more are refused without a check. */
export const MAX_WAITING = 10;
/** A key's failures are forgotten this long after the last one. */
export const FORGET_MS = 10 * 60_000;
/** Keys kept at most (memory); idle ones are dropped first, forgotten ones before others. */
const MAX_KEYS = 10_000;

export interface LoginAttempt {
  /** The client's source address. */
  readonly address: string;
  /** The user name when it is a user (its own key); undefined for any other name (one key per address). */
  readonly user: string | undefined;
  /** Whether the client still waits for the answer; asked when the attempt's turn comes (one gone is skipped). */
  readonly waiting: () => boolean;
}

/**
 * `accepted` / `refused`: the check ran and said so. `busy`: too many attempts of this key wait, refused without a
 * check. `gone`: the client left before its turn, nothing was checked.
 */
export type LoginVerdict = 'accepted' | 'refused' | 'busy' | 'gone';

/** The audit log's `why` for an attempt answered without a check. */
export const UNCHECKED_WHY = {
  busy: 'too many login attempts for this user from this address are waiting',
  gone: 'the client left before its password was checked',
} as const;

/** The monotonic clock and a timer; unit tests drive a manual one. */
export interface ThrottleTime {
  nowMs(): number;
  after(ms: number, fn: () => void): void;
}

const REAL_TIME: ThrottleTime = {
  nowMs: () => performance.now(),
  after: (ms, fn) => void setTimeout(fn, ms).unref(),
};

type Turn = 'start' | 'busy' | 'gone';

interface Waiter {
  readonly waiting: () => boolean;
  readonly resolve: (turn: Turn) => void;
}

interface Key {
  failures: number;
  /** Attempts whose password is being checked now. */
  checking: number;
  lastEndMs: number;
  lastFailureMs: number;
  readonly queue: Waiter[];
  timerArmed: boolean;
}

/** How long a key with `failures` failures waits after an attempt ended before it checks the next one. */
export function delayMs(failures: number): number {
  return failures < FREE_FAILURES ? 0 : Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** (failures - FREE_FAILURES));
}

export class LoginThrottle {
  private readonly keys = new Map<string, Key>();

  constructor(private readonly time: ThrottleTime = REAL_TIME) {}

  /** Keys held now (for tests of the memory bound). */
  get size(): number {
    return this.keys.size;
  }

  /**
   * Checks an attempt with `verify` (whether the login is accepted) when its key's turn comes. A `verify` that
   * throws counts neither way, and the error is passed on.
   */
  async check(attempt: LoginAttempt, verify: () => Promise<boolean>): Promise<LoginVerdict> {
    const id = attempt.user === undefined ? attempt.address : `${attempt.address}\n${attempt.user}`;
    const key = this.keyOf(id);
    if (key.queue.length > 0 || this.waitMs(key) > 0) {
      this.dropGone(key);
      if (key.failures >= FREE_FAILURES && key.queue.length >= MAX_WAITING) return 'busy';
      const turn = await new Promise<Turn>((resolve) => {
        key.queue.push({ waiting: attempt.waiting, resolve });
        this.pump(id, key);
      });
      if (turn !== 'start') return turn;
    } else {
      key.checking++;
    }
    let accepted: boolean | undefined;
    try {
      accepted = await verify();
    } finally {
      this.ended(id, key, accepted);
    }
    return accepted ? 'accepted' : 'refused';
  }

  private keyOf(id: string): Key {
    const now = this.time.nowMs();
    let key = this.keys.get(id);
    if (key === undefined) {
      if (this.keys.size >= MAX_KEYS) this.shrink(now);
      key = { failures: 0, checking: 0, lastEndMs: -Infinity, lastFailureMs: -Infinity, queue: [], timerArmed: false };
      this.keys.set(id, key);
    } else if (key.failures > 0 && now - key.lastFailureMs >= FORGET_MS) {
      key.failures = 0;
    }
    return key;
  }

  /** 0 when the key may start a check now; Infinity while it must wait for a check to end; else ms to wait. */
  private waitMs(key: Key): number {
    if (key.failures + key.checking < FREE_FAILURES) return 0;
    if (key.checking > 0) return Infinity;
    return Math.max(0, key.lastEndMs + delayMs(key.failures) - this.time.nowMs());
  }

  /** Starts the waiting attempts whose turn it is, arms the timer for the next one, refuses the excess. */
  private pump(id: string, key: Key): void {
    while (key.queue.length > 0) {
      const head = key.queue[0];
      if (!head.waiting()) {
        key.queue.shift();
        head.resolve('gone');
        continue;
      }
      const waitMs = this.waitMs(key);
      if (waitMs === 0) {
        key.queue.shift();
        key.checking++;
        head.resolve('start');
        continue;
      }
      if (waitMs !== Infinity && !key.timerArmed) {
        key.timerArmed = true;
        this.time.after(waitMs, () => {
          key.timerArmed = false;
          this.pump(id, key);
          this.forgetIfIdle(id, key);
        });
      }
      break;
    }
    // A key that has just become slowed keeps the oldest MAX_WAITING: the rest of a burst is answered at once.
    if (key.failures >= FREE_FAILURES) for (const waiter of key.queue.splice(MAX_WAITING)) waiter.resolve('busy');
  }

  private ended(id: string, key: Key, accepted: boolean | undefined): void {
    const now = this.time.nowMs();
    key.checking--;
    key.lastEndMs = now;
    if (accepted === true) key.failures = 0;
    if (accepted === false) {
      key.failures++;
      key.lastFailureMs = now;
    }
    this.pump(id, key);
    this.forgetIfIdle(id, key);
  }

  private dropGone(key: Key): void {
    for (let i = key.queue.length - 1; i >= 0; i--) {
      const waiter = key.queue[i];
      if (!waiter.waiting()) {
        key.queue.splice(i, 1);
        waiter.resolve('gone');
      }
    }
  }

  private isIdle(key: Key): boolean {
    return key.checking === 0 && key.queue.length === 0 && !key.timerArmed;
  }

  private forgetIfIdle(id: string, key: Key): void {
    if (key.failures === 0 && this.isIdle(key)) this.keys.delete(id);
  }

  /** Makes room for a new key: forgotten idle keys go first, then the oldest idle ones. */
  private shrink(now: number): void {
    for (const [id, key] of this.keys)
      if (this.isIdle(key) && now - key.lastFailureMs >= FORGET_MS) this.keys.delete(id);
    for (const [id, key] of this.keys) {
      if (this.keys.size < MAX_KEYS) return;
      if (this.isIdle(key)) this.keys.delete(id);
    }
  }
}
