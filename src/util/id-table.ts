/**
 * Entries by packet identifier, in the order they were added: the in-flight messages of a session or a bridge.
 *
 * Plain arrays, not a `Map`, because entries come and go with every message. V8 replaces a Map's or Set's table
 * when it grows, shrinks or is cleared, and the old table keeps pointing at the new one (for iterators still on
 * it). Once one such table is in the old generation, that chain keeps every later table, and every message their
 * entries point to, alive through each scavenge: all of them get promoted, and scavenges of a few MB of live
 * copies stall the loop 5-13 ms (docs/architecture.md#hot-path, "Garbage and the latency tail").
 *
 * Lookups scan from the oldest entry: acknowledgements mostly come in order, so the entry is the first one, and
 * the table never holds more than a receive window.
 */
export class IdTable<T> {
  private ids: number[] = [];
  private items: (T | undefined)[] = [];
  /** Index of the oldest live entry (everything before it is removed). */
  private head = 0;
  private live = 0;

  get size(): number {
    return this.live;
  }

  /** Adds `id` as the newest entry; `id` must not be in the table. */
  add(id: number, item: T): void {
    // Removed slots are dropped here, never in `delete`, so iterating while deleting stays safe.
    if (this.items.length - this.live > Math.max(16, this.live)) this.compact();
    this.ids.push(id);
    this.items.push(item);
    this.live++;
  }

  get(id: number): T | undefined {
    const i = this.indexOf(id);
    return i < 0 ? undefined : this.items[i];
  }

  has(id: number): boolean {
    return this.indexOf(id) >= 0;
  }

  delete(id: number): boolean {
    const i = this.indexOf(id);
    if (i < 0) return false;
    this.items[i] = undefined;
    this.ids[i] = -1;
    this.live--;
    if (this.live === 0) this.clear(); // emptied in place: no new arrays
    else if (i === this.head) {
      while (this.items[this.head] === undefined) this.head++;
    }
    return true;
  }

  clear(): void {
    this.ids.length = 0;
    this.items.length = 0;
    this.head = 0;
    this.live = 0;
  }

  /** Calls `fn` for each entry, oldest first; `fn` may delete entries (its own or others), not add them. */
  forEach(fn: (item: T, id: number) => void): void {
    for (let i = this.head; i < this.items.length; i++) {
      const item = this.items[i];
      if (item !== undefined) fn(item, this.ids[i]);
    }
  }

  private indexOf(id: number): number {
    const ids = this.ids;
    for (let i = this.head; i < ids.length; i++) if (ids[i] === id) return i;
    return -1;
  }

  private compact(): void {
    let to = 0;
    for (let i = this.head; i < this.items.length; i++) {
      if (this.items[i] === undefined) continue;
      this.ids[to] = this.ids[i];
      this.items[to++] = this.items[i];
    }
    this.ids.length = to;
    this.items.length = to;
    this.head = 0;
  }
}
