/**
 * Entries by packet identifier (or outbox seq), in the order they were added: the in-flight messages of a session
 * or a bridge.
 *
 * Plain and typed arrays, not a `Map`, because entries come and go with every message. V8 replaces a Map's or
 * Set's table when it grows, shrinks or is cleared, and the old table keeps pointing at the new one (for iterators
 * still on it). Once one such table is in the old generation, that chain keeps every later table, and every
 * message their entries point to, alive through each scavenge: all of them get promoted, and scavenges of a few MB
 * of live copies stall the loop 5-13 ms (docs/architecture.md#hot-path, "Garbage and the latency tail").
 *
 * Entries live in `ids`/`items` in the order added, up to `end`; removed ones leave a hole until `compact`. The
 * arrays are never truncated (`length = 0` would free V8's backing store and the next entry allocate one, garbage
 * per message for a window that empties and refills): positions past `end` are reused. The index from id
 * to position is an open-addressing hash table in typed arrays (linear probing, deletion by backward shift): no
 * JavaScript objects, so nothing for the collector to trace, and O(1) whatever the window (up to 65,535).
 */
const EMPTY = -1;
const MIN_CAPACITY = 8;

export class IdTable<T> {
  private readonly ids: number[] = [];
  private readonly items: (T | undefined)[] = [];
  /** Positions in use (live or holes) are [head, end); every item from `end` on is undefined. */
  private end = 0;
  /** Index of the oldest live entry (everything before it is removed). */
  private head = 0;
  private live = 0;
  /** Hash slot → id (EMPTY when free) and → position in `ids`/`items`. Created at the first entry. */
  private slotIds: Float64Array | undefined;
  private slotPos: Int32Array | undefined;

  get size(): number {
    return this.live;
  }

  /** Like `Map.set`: replaces the item of an `id` already in the table (in its place), else adds it as the newest. */
  set(id: number, item: T): void {
    const slot = this.slotOf(id);
    if (slot >= 0) {
      this.items[this.slotPos![slot]] = item;
      return;
    }
    // Removed slots are dropped here, never in `delete`, so iterating while deleting stays safe.
    if (this.end - this.live > Math.max(16, this.live)) this.compact();
    // At most half full, so probe runs stay short.
    const slotIds = this.slotIds;
    if (slotIds === undefined || 2 * (this.live + 1) > slotIds.length) this.reindex(2 * (this.live + 1));
    this.insert(id, this.end);
    this.ids[this.end] = id;
    this.items[this.end] = item;
    this.end++;
    this.live++;
  }

  get(id: number): T | undefined {
    const slot = this.slotOf(id);
    return slot < 0 ? undefined : this.items[this.slotPos![slot]];
  }

  has(id: number): boolean {
    return this.slotOf(id) >= 0;
  }

  delete(id: number): boolean {
    const slot = this.slotOf(id);
    if (slot < 0) return false;
    const i = this.slotPos![slot];
    this.unslot(slot);
    this.items[i] = undefined;
    this.live--;
    // Emptied: every item is undefined already, and the index is empty.
    if (this.live === 0) this.end = this.head = 0;
    else if (i === this.head) {
      while (this.items[this.head] === undefined) this.head++;
    }
    return true;
  }

  clear(): void {
    this.items.fill(undefined, this.head, this.end);
    this.end = this.head = this.live = 0;
    this.slotIds?.fill(EMPTY);
  }

  /** Calls `fn` for each entry, oldest first; `fn` may delete entries (its own or others), not add them. */
  forEach(fn: (item: T, id: number) => void): void {
    for (let i = this.head; i < this.end; i++) {
      const item = this.items[i];
      if (item !== undefined) fn(item, this.ids[i]);
    }
  }

  private home(id: number): number {
    // Packet ids and seqs are integers below 2^53: mix both 32-bit halves.
    return Math.imul((id | 0) ^ ((id / 4_294_967_296) | 0), 0x9e3779b1) >>> 0;
  }

  private slotOf(id: number): number {
    const slotIds = this.slotIds;
    if (slotIds === undefined) return -1;
    const mask = slotIds.length - 1;
    for (let s = this.home(id) & mask; ; s = (s + 1) & mask) {
      const at = slotIds[s];
      if (at === id) return s;
      if (at === EMPTY) return -1;
    }
  }

  private insert(id: number, pos: number): void {
    const slotIds = this.slotIds!;
    const mask = slotIds.length - 1;
    let s = this.home(id) & mask;
    while (slotIds[s] !== EMPTY) s = (s + 1) & mask;
    slotIds[s] = id;
    this.slotPos![s] = pos;
  }

  /** Frees `slot`, moving later entries of its probe run back so that every lookup still finds them. */
  private unslot(slot: number): void {
    const slotIds = this.slotIds!;
    const slotPos = this.slotPos!;
    const mask = slotIds.length - 1;
    let hole = slot;
    for (let s = (slot + 1) & mask; slotIds[s] !== EMPTY; s = (s + 1) & mask) {
      const home = this.home(slotIds[s]) & mask;
      // The entry at `s` may fill the hole if its home is not cyclically within (hole, s].
      if (((s - home) & mask) >= ((s - hole) & mask)) {
        slotIds[hole] = slotIds[s];
        slotPos[hole] = slotPos[s];
        hole = s;
      }
    }
    slotIds[hole] = EMPTY;
  }

  /** Builds the index for at least `capacity` slots; it never shrinks, so a window that comes and goes allocates once. */
  private reindex(capacity: number): void {
    let size = this.slotIds?.length ?? MIN_CAPACITY;
    while (size < capacity) size *= 2;
    if (this.slotIds?.length === size) this.slotIds.fill(EMPTY);
    else {
      this.slotIds = new Float64Array(size).fill(EMPTY);
      this.slotPos = new Int32Array(size);
    }
    for (let i = this.head; i < this.end; i++) if (this.items[i] !== undefined) this.insert(this.ids[i], i);
  }

  private compact(): void {
    let to = 0;
    for (let i = this.head; i < this.end; i++) {
      if (this.items[i] === undefined) continue;
      this.ids[to] = this.ids[i];
      this.items[to++] = this.items[i];
    }
    this.items.fill(undefined, to, this.end);
    this.end = to;
    this.head = 0;
    this.reindex(2 * (this.live + 1)); // positions moved
  }
}
