/**
 * One event-loop turn's deferred work, delivery first: connections queue encoded packets during a turn and every
 * connection with pending bytes is written once, in one syscall, when the turn's I/O is done; only then do the
 * connections that yielded their read budget (`Connection.canTakeMore`) go on reading
 * (docs/architecture.md#back-pressure).
 */
export interface TurnWork {
  flush(): void;
  continueReading(): void;
}

export class WriteFlusher {
  private readonly dirty = new Set<TurnWork>();
  /** Connections to read on after the writes, and the spare array swapped in while they run (no allocation per turn). */
  private readers: TurnWork[] = [];
  private spare: TurnWork[] = [];
  private scheduled = false;

  schedule(target: TurnWork): void {
    this.dirty.add(target);
    this.arm();
  }

  /** `target` yielded its read: it reads on after this turn's writes went out. */
  scheduleRead(target: TurnWork): void {
    this.readers.push(target);
    this.arm();
  }

  private arm(): void {
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.run);
    }
  }

  private readonly run = (): void => {
    this.scheduled = false;
    for (const target of this.dirty) target.flush();
    this.dirty.clear();
    // Readers that yield again are scheduled for the next turn, after its poll phase (subscribers' acks).
    const readers = this.readers;
    if (readers.length === 0) return;
    this.readers = this.spare;
    this.spare = readers;
    for (const target of readers) target.continueReading();
    readers.length = 0;
  };
}
