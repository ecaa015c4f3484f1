/**
 * Batches socket writes: connections queue encoded packets during an event-loop turn and every connection with
 * pending bytes is written once, in one syscall, when the turn's I/O is done.
 */
export class WriteFlusher {
  private readonly dirty = new Set<{ flush(): void }>();
  private scheduled = false;

  schedule(target: { flush(): void }): void {
    this.dirty.add(target);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.run);
    }
  }

  private readonly run = (): void => {
    this.scheduled = false;
    for (const target of this.dirty) target.flush();
    this.dirty.clear();
  };
}
