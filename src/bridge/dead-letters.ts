/**
 * Sending a bridge's dead letters (what the central broker refused, `deadLetterOutbox`) again once the cause is
 * fixed: `edgeferry store requeue NAME` with the gateway stopped, and the web console's requeue while it runs.
 */
import type { Outbox } from '../store/types.js';

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
