/**
 * One event-loop turn's deferred work, delivery first: connections queue encoded packets during a turn and every
 * connection with pending bytes is written once, in one syscall, when the turn's I/O is done (at once after the
 * read when the gateway is quiet, see `readDone`; a read's replies to its own client are written by the connection
 * at the end of that read); only then do the connections that yielded their read budget
 * (`Connection.canTakeMore`) go on reading (docs/architecture.md#back-pressure, #hot-path).
 */
import { SlotList } from '../util/slot-list.js';

export interface TurnWork {
  flush(): void;
  continueReading(): void;
  /** True while listed for the next flush: the flusher's own mark, so a connection is listed once. */
  flushListed: boolean;
}

export class WriteFlusher {
  /**
   * Connections written to since the last flush: a list, not a Set cleared each turn (a cleared Set's old table
   * points to its new one, a chain that keeps garbage alive through scavenges, util/id-table.ts), emptied by
   * clearing its slots (util/slot-list.ts).
   */
  private readonly dirty = new SlotList<TurnWork>();
  /** Connections to read on after the writes, and the spare list swapped in while they run. */
  private readers = new SlotList<TurnWork>();
  private spare = new SlotList<TurnWork>();
  private scheduled = false;
  /** Reads handled in this turn so far, and in the turn before (see `readDone`). */
  private reads = 0;
  private readsBefore = 0;

  schedule(target: TurnWork): void {
    if (target.flushListed) return;
    target.flushListed = true;
    this.dirty.push(target);
    this.arm();
  }

  /** `target` yielded its read: it reads on after this turn's writes went out. */
  scheduleRead(target: TurnWork): void {
    this.readers.push(target);
    this.arm();
  }

  /**
   * A connection handled one read. When the turn before had at most one read (the gateway is quiet), this first
   * read's writes go out now rather than after the rest of the poll phase: there is nothing to batch them with,
   * and the wait would be latency. Under load (more reads per turn) the turn's writes are batched as before.
   */
  readDone(): void {
    if (++this.reads === 1 && this.readsBefore <= 1) this.flushDirty();
    this.arm(); // the turn's end counts the reads
  }

  private arm(): void {
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.run);
    }
  }

  private flushDirty(): void {
    // A flush may make another connection write (a close publishing a will): `drain` flushes it here too.
    this.dirty.drain(flushTarget);
  }

  private readonly run = (): void => {
    this.scheduled = false;
    this.readsBefore = this.reads;
    this.reads = 0;
    this.flushDirty();
    // Readers that yield again are scheduled for the next turn, after its poll phase (subscribers' acks).
    const readers = this.readers;
    if (readers.length === 0) return;
    this.readers = this.spare;
    this.spare = readers;
    readers.drain(continueTarget);
  };
}

function flushTarget(target: TurnWork): void {
  target.flushListed = false;
  target.flush();
}

function continueTarget(target: TurnWork): void {
  target.continueReading();
}
