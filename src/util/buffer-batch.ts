import { SlotList } from './slot-list.js';

/** The list of a batch with more packets than this is dropped after it, not reused. */
const KEPT_SLOTS = 1024;

/**
 * The Buffers queued for one socket write, in order, joined when taken. Reused from write to write without
 * allocating: the first Buffer waits in a field (a connection that writes one packet per turn, or only a CONNACK,
 * needs nothing more), the rest in a `SlotList`, which a flood's batch (past `KEPT_SLOTS`) does not keep for the
 * connection's life (docs/architecture.md#hot-path).
 */
export class BufferBatch {
  private first: Buffer | undefined;
  private rest: SlotList<Buffer> | undefined;
  /** Bytes queued. */
  bytes = 0;

  get empty(): boolean {
    return this.first === undefined;
  }

  push(data: Buffer): void {
    if (this.first === undefined) this.first = data;
    else (this.rest ??= new SlotList()).push(data);
    this.bytes += data.length;
  }

  /** Everything queued as one Buffer (the only one itself when there is one); the batch is empty after. */
  take(): Buffer {
    const first = this.first;
    if (first === undefined) throw new Error('BufferBatch.take on an empty batch');
    let data = first;
    const rest = this.rest;
    if (rest !== undefined && rest.length > 0) {
      data = Buffer.allocUnsafe(this.bytes);
      data.set(first, 0);
      let at = first.length;
      for (let i = 0; i < rest.length; i++) {
        const part = rest.at(i);
        data.set(part, at);
        at += part.length;
      }
      if (rest.length > KEPT_SLOTS) this.rest = undefined;
      else rest.clear();
    }
    this.first = undefined;
    this.bytes = 0;
    return data;
  }
}
