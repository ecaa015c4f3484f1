/**
 * Back-pressure on the publishers that feed one online session (docs/architecture.md#back-pressure): while its
 * queue is at the high-water mark, the publishers of the messages it queues stop reading; they resume when it is
 * down to the low-water mark, goes offline or is cleared (`end`), or when it has been stuck at the mark too long
 * (`giveUpIfStuck`: then it overflows, dropping what passes the mark, until it is down to the low-water mark).
 * A session makes its `PublisherHold` the first time its queue reaches the mark.
 */

/** A publisher that stopped reading because a session it fed is above its high-water mark. */
export interface HeldPublisher {
  /** The hold ended (the session drained, went offline, or gave up holding publishers): read on. */
  holdEnded(): void;
}

export class PublisherHold {
  /** When the queue, online, last reached the high-water mark without draining to the low-water mark since. */
  private highSinceMs: number | undefined;
  /** Publishers paused for this session. */
  private held: HeldPublisher[] | undefined;
  /**
   * Held publishers for slowClientTimeoutMs without draining: it holds none any more, and what passes the
   * high-water mark is dropped (`slow_client`) until it is down to the low-water mark.
   */
  overflowing = false;

  /** The queue is at the high-water mark (again): the clock of `giveUpIfStuck` runs from the first time. */
  reachedHighWater(nowMs: number): void {
    this.highSinceMs ??= nowMs;
  }

  /** Whether the queue reached the mark and has not been down to the low-water mark since. */
  get isHigh(): boolean {
    return this.highSinceMs !== undefined;
  }

  /** Pauses `publisher` until the hold ends or `giveUpIfStuck` gives up on it. */
  add(publisher: HeldPublisher): void {
    (this.held ??= []).push(publisher);
  }

  /**
   * Asked by held publishers' timers: at the high-water mark for `timeoutMs` without draining to the low-water
   * mark, it stops holding them and overflows instead. True when that happened now.
   */
  giveUpIfStuck(nowMs: number, timeoutMs: number): boolean {
    if (this.overflowing || this.highSinceMs === undefined || nowMs - this.highSinceMs <= timeoutMs) return false;
    this.overflowing = true;
    this.resumeHeld();
    return true;
  }

  /** Down to the low-water mark, or offline (an offline session never holds publishers): publishers go on. */
  end(): void {
    this.highSinceMs = undefined;
    this.overflowing = false;
    this.resumeHeld();
  }

  private resumeHeld(): void {
    const held = this.held;
    if (held === undefined) return;
    this.held = undefined;
    // Next turn: not inside the acknowledgement (or timer) being handled now.
    setImmediate(resumeAll, held);
  }
}

function resumeAll(held: HeldPublisher[]): void {
  for (const publisher of held) publisher.holdEnded();
}
