/** The part of a session's queue loaded into memory (`QueueWindow`), shared by the stores. */
import { fitsWindow, type QueuedRecord, type QueueWindow } from './types.js';

/**
 * Splits a queue read oldest first: QoS 2 deliveries in flight (always the oldest) and what fits in the window
 * are kept, everything from the first message that does not fit on is only counted, so the order is kept.
 */
export class QueueSplit {
  readonly queue: QueuedRecord[] = [];
  readonly tail = { count: 0, bytes: 0 };
  private bytes = 0;

  constructor(private readonly window: QueueWindow | undefined) {}

  /** Whether the next message, of `size` payload bytes, is kept; if not, it is counted in the tail. */
  keeps(size: number, inFlight: boolean): boolean {
    const w = this.window;
    if (this.tail.count === 0 && (inFlight || w === undefined || fitsWindow(w, this.queue.length, this.bytes, size))) {
      this.bytes += size;
      return true;
    }
    this.tail.count++;
    this.tail.bytes += size;
    return false;
  }
}
