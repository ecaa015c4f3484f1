/**
 * A bridge's dead letters (what the central broker refused, `deadLetterOutbox`; docs/architecture.md#limits-and-dead-letters):
 * kept, and sent again once the cause is fixed (`edgeferry store requeue NAME` with the gateway stopped, the web
 * console while it runs) or deleted.
 */
import type { Message } from '../protocol/message.js';
import type { Outbox } from '../store/types.js';
import type { Logger } from '../util/logger.js';

/** Dead letters moved per batch: one transaction of bounded size, however many there are. */
const REQUEUE_CHUNK = 1000;

/**
 * Moves the dead letters held now to the end of `outbox`, oldest first, REQUEUE_CHUNK per batch. Each batch is
 * one `Outbox.moveTo`, one transaction: after a crash at any point an entry is in exactly one of the two. Letters
 * refused again while this runs come after those counted at the start and stay. Stops early when `outbox` is full
 * (the rest stay dead letters). Resolves with how many moved.
 */
export async function requeueDeadLetters(dead: Outbox, outbox: Outbox): Promise<number> {
  const held = dead.depth.messages;
  let moved = 0;
  while (moved < held) {
    const n = await dead.moveTo(outbox, Math.min(REQUEUE_CHUNK, held - moved));
    if (n === 0) break;
    moved += n;
  }
  return moved;
}

/** Deletes the dead letters held now, REQUEUE_CHUNK per batch; resolves with how many were deleted. */
export async function deleteDeadLetters(dead: Outbox): Promise<number> {
  const held = dead.depth.messages;
  let deleted = 0;
  while (deleted < held) {
    const seqs = dead.peek(Math.min(REQUEUE_CHUNK, held - deleted)).map((entry) => entry.seq);
    if (seqs.length === 0) break;
    await dead.remove(seqs);
    deleted += seqs.length;
  }
  return deleted;
}

/** A running bridge's dead-letter outbox, when it keeps one (`queue.deadLetter`). */
export class DeadLetters {
  /** The requeue or delete under way: one at a time, so that both never take the same letters. */
  private work: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly dead: Outbox | undefined,
    /** The bridge's outbox: where requeued letters go, and where drops are counted. */
    private readonly outbox: Outbox,
    private readonly log: Logger,
  ) {}

  /** The letters held now. */
  get messages(): number {
    return this.dead?.depth.messages ?? 0;
  }

  /** Queues a refused message as a dead letter; false when there is no dead-letter outbox (or no message to keep). */
  keep(msg: Message | undefined): boolean {
    if (msg === undefined || this.dead === undefined) return false;
    this.dead.append(msg).catch((err: unknown) => {
      void this.outbox.countDropped('rejected_upstream', 1);
      this.log.error({ err, topic: msg.topic }, 'a refused message could not be kept as a dead letter; dropped');
    });
    return true;
  }

  /**
   * Moves the letters to the end of the outbox in order, crash-safe (`requeueDeadLetters`); `moved` runs once they
   * are there. `left`: those still dead letters (the outbox was full, or the central broker refused them again).
   */
  requeue(moved: () => void): Promise<{ moved: number; left: number }> {
    return this.turn(
      async (dead) => {
        const count = await requeueDeadLetters(dead, this.outbox);
        moved();
        return { moved: count, left: dead.depth.messages };
      },
      { moved: 0, left: 0 },
    );
  }

  /** Deletes the letters, counted as dropped (`dead_letter_deleted`); resolves with how many. */
  delete(): Promise<number> {
    return this.turn(async (dead) => {
      const deleted = await deleteDeadLetters(dead);
      // The operator's answer and the card after it show the drop.
      if (deleted > 0) await this.outbox.countDropped('dead_letter_deleted', deleted);
      return deleted;
    }, 0);
  }

  /** Runs `work` after the one under way; without a dead-letter outbox there is nothing to do. */
  private turn<T>(work: (dead: Outbox) => Promise<T>, nothing: T): Promise<T> {
    const dead = this.dead;
    if (dead === undefined) return Promise.resolve(nothing);
    const turn = this.work.then(() => work(dead));
    this.work = turn.catch(() => undefined);
    return turn;
  }
}
