/**
 * A list that is emptied by clearing its slots, never truncated: `array.length = 0` hands V8's backing store back,
 * and the next push allocates a new one of 17 slots, about 150 bytes of garbage each time a per-turn or per-write
 * list refills (docs/architecture.md#hot-path). Its capacity is what it ever held at once.
 */
export class SlotList<T> {
  private readonly slots: (T | undefined)[] = [];
  private count = 0;

  get length(): number {
    return this.count;
  }

  push(item: T): void {
    this.slots[this.count++] = item;
  }

  /** The item at `index` (below `length`). */
  at(index: number): T {
    return this.slots[index]!;
  }

  /** Calls `fn` for each item in order, those pushed while it runs included, and empties the list. */
  drain(fn: (item: T) => void): void {
    for (let i = 0; i < this.count; i++) {
      const item = this.slots[i]!;
      this.slots[i] = undefined;
      fn(item);
    }
    this.count = 0;
  }

  /** Empties the list, letting go of its items. */
  clear(): void {
    this.slots.fill(undefined, 0, this.count);
    this.count = 0;
  }
}
