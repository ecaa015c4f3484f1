/**
 * Sends the retained messages of clients' new subscriptions paced: a few at a time across event-loop turns, each
 * subscriber only while its write buffer and queue have room, so that a `#` over a hundred thousand retained
 * messages neither stalls other clients nor floods its own (docs/architecture.md#retained-messages).
 */
import type { RetainedMeta } from '../store/types.js';
import type { RetainedIndex } from './retained.js';

/** How a subscriber paces the retained messages of one subscription (`Subscriber.retainedPace`). */
export interface RetainedPace {
  /** False once the subscription is gone or replaced, or its client disconnected: its delivery stops. */
  wanted(): boolean;
  /** Whether it can take another message now. */
  ready(): boolean;
}

/** Delivers one retained message to the subscription; returns the payload bytes sent (0: none). */
export type SendRetained = (entry: RetainedMeta) => number;

/**
 * One turn's budget, for all subscriptions together: messages, their payload bytes, and walk steps (each step
 * LEVELS_PER_STEP topic levels visited without a match). About a millisecond of work on the reference machine.
 */
const MESSAGES_PER_TURN = 256;
const BYTES_PER_TURN = 1024 * 1024;
const STEPS_PER_TURN = 64;
/** Messages one subscription gets before the next one's turn (round robin, in no particular order). */
const SLICE = 32;
/**
 * When every subscription waits for room, the next look is after WAIT_MS rather than at once (no busy loop), twice
 * as long after each look that found none, up to MAX_WAIT_MS (a client that stops reading costs 20 looks a second).
 */
const WAIT_MS = 1;
const MAX_WAIT_MS = 50;

interface Job {
  readonly walk: Generator<RetainedMeta | undefined, void, undefined>;
  readonly pace: RetainedPace;
  readonly send: SendRetained;
}

export class RetainedSender {
  private jobs: Job[] = [];
  /** Where the next turn begins in `jobs`. */
  private next = 0;
  private armed = false;
  private timer: NodeJS.Timeout | undefined;
  private waitMs = WAIT_MS;

  constructor(private readonly index: RetainedIndex) {}

  /** Starts sending the retained messages matching `filter`, from the next turn on (after the SUBACK). */
  start(filter: string, pace: RetainedPace, send: SendRetained): void {
    this.jobs.push({ walk: this.index.matching(filter), pace, send });
    if (this.timer !== undefined) {
      // Waiting for room elsewhere: this one may have room now.
      clearTimeout(this.timer);
      this.timer = undefined;
      this.armed = false;
    }
    this.arm(false);
  }

  /** Shutdown: what is not sent yet is not. */
  close(): void {
    for (const job of this.jobs) job.walk.return();
    this.jobs = [];
    clearTimeout(this.timer);
  }

  private arm(waiting: boolean): void {
    if (this.armed) return;
    this.armed = true;
    if (!waiting) {
      this.waitMs = WAIT_MS;
      setImmediate(this.run);
      return;
    }
    this.timer = setTimeout(this.run, this.waitMs).unref();
    this.waitMs = Math.min(this.waitMs * 2, MAX_WAIT_MS);
  }

  private readonly run = (): void => {
    this.armed = false;
    this.timer = undefined;
    const jobs = this.jobs;
    let messages = 0;
    let bytes = 0;
    let steps = 0;
    let progressed = false;
    /** Jobs looked at in a row that could not go on (no room): once that is all of them, the turn ends. */
    let stuck = 0;
    let i = this.next;
    while (
      jobs.length > 0 &&
      stuck < jobs.length &&
      messages < MESSAGES_PER_TURN &&
      bytes < BYTES_PER_TURN &&
      steps < STEPS_PER_TURN
    ) {
      if (i >= jobs.length) i = 0;
      const job = jobs[i];
      let done = !job.pace.wanted();
      let moved = false;
      for (let sent = 0; !done && sent < SLICE && steps < STEPS_PER_TURN && job.pace.ready();) {
        const next = job.walk.next();
        moved = true;
        if (next.done === true) done = true;
        else if (next.value === undefined) steps++;
        else {
          bytes += job.send(next.value);
          messages++;
          sent++;
        }
      }
      if (done) {
        // Starting and ending a walk is work too: a SUBSCRIBE of a thousand filters is spread over turns.
        steps++;
        job.walk.return();
        // Swapped out, not spliced: thousands of finished walks cost no copying of the list.
        jobs[i] = jobs[jobs.length - 1];
        jobs.pop();
        stuck = 0;
        progressed = true;
        continue;
      }
      if (moved) {
        stuck = 0;
        progressed = true;
      } else stuck++;
      i++;
    }
    // The next turn goes on where this one stopped (round robin across turns).
    this.next = i;
    if (jobs.length > 0) this.arm(!progressed);
  };
}
