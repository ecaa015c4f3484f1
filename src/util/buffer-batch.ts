/**
 * The Buffers queued for one socket write, in order, joined when taken. Reused from write to write without
 * allocating: the first Buffer waits in a field (a connection that writes one packet per turn, or only a CONNACK,
 * needs nothing more), the rest in an array whose slots are cleared when taken, never truncated. `array.length = 0`
 * would hand V8's backing store back, and the next push would allocate a new one of 17 slots: 150 bytes of
 * garbage per write (docs/architecture.md#hot-path).
 */
/** The array of a batch with more packets than this is dropped after it, not reused. */
const KEPT_SLOTS = 1024;

export class BufferBatch {
  private first: Buffer | undefined;
  private rest: (Buffer | undefined)[] | undefined;
  private restCount = 0;
  /** Bytes queued. */
  bytes = 0;

  get empty(): boolean {
    return this.first === undefined;
  }

  push(data: Buffer): void {
    if (this.first === undefined) this.first = data;
    else (this.rest ??= [])[this.restCount++] = data;
    this.bytes += data.length;
  }

  /** Everything queued as one Buffer (the only one itself when there is one); the batch is empty after. */
  take(): Buffer {
    const first = this.first;
    if (first === undefined) throw new Error('BufferBatch.take on an empty batch');
    let data = first;
    const rest = this.rest;
    if (rest !== undefined && this.restCount > 0) {
      data = Buffer.allocUnsafe(this.bytes);
      data.set(first, 0);
      let at = first.length;
      for (let i = 0; i < this.restCount; i++) {
        const part = rest[i]!;
        data.set(part, at);
        at += part.length;
        rest[i] = undefined;
      }
      // A flood's batch is not kept for the connection's life: past this size the array goes with it.
      if (this.restCount > KEPT_SLOTS) this.rest = undefined;
      this.restCount = 0;
    }
    this.first = undefined;
    this.bytes = 0;
    return data;
  }
}
