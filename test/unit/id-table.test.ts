/** The in-flight table of sessions and bridges (src/util/id-table.ts): a Map's behaviour without a Map. */
import { describe, expect, it } from 'vitest';
import { IdTable } from '../../src/util/id-table.js';

function entries<T>(t: IdTable<T>): [number, T][] {
  const out: [number, T][] = [];
  t.forEach((item, id) => out.push([id, item]));
  return out;
}

describe('IdTable', () => {
  it('finds, counts, replaces and removes entries by id, and keeps the order they were added in', () => {
    const t = new IdTable<string>();
    for (const id of [7, 3, 65535, 1]) t.set(id, `m${id}`);
    expect(t.size).toBe(4);
    expect([t.get(3), t.get(4), t.has(65535), t.has(2)]).toEqual(['m3', undefined, true, false]);
    expect(t.delete(3)).toBe(true);
    expect(t.delete(3)).toBe(false);
    expect(t.size).toBe(3);
    t.set(3, 'again');
    t.set(65535, 'replaced'); // in its place, as Map.set does
    expect(t.size).toBe(4);
    expect(entries(t)).toEqual([
      [7, 'm7'],
      [65535, 'replaced'],
      [1, 'm1'],
      [3, 'again'],
    ]);
  });

  it('lets forEach delete the entry it is on and others, as a resend after a reconnect does', () => {
    const t = new IdTable<number>();
    for (let id = 1; id <= 6; id++) t.set(id, id * 10);
    const seen: number[] = [];
    t.forEach((_, id) => {
      seen.push(id);
      if (id % 2 === 0) t.delete(id);
      if (id === 3) t.delete(5);
    });
    expect(seen).toEqual([1, 2, 3, 4, 6]);
    expect(entries(t)).toEqual([
      [1, 10],
      [3, 30],
    ]);
    t.forEach((_, id) => t.delete(id));
    expect([t.size, entries(t)]).toEqual([0, []]);
  });

  it('stays small while one old entry is never acknowledged and thousands of others come and go', () => {
    const t = new IdTable<number>();
    t.set(1, 1);
    for (let id = 2; id < 10_000; id++) {
      t.set(id, id);
      if (id > 20) t.delete(id - 19);
    }
    expect(t.size).toBe(20);
    expect(t.get(1)).toBe(1);
    expect(entries(t).map(([id]) => id)).toEqual([1, ...Array.from({ length: 19 }, (_, i) => 9981 + i)]);
    // Removed slots are compacted away: the arrays hold at most about twice the live entries.
    const slots = (t as unknown as { items: unknown[] }).items.length;
    expect(slots).toBeLessThanOrEqual(2 * 20 + 17);
  });
});

describe('IdTable against a Map', () => {
  it('answers like a Map, in insertion order, through 60,000 random sets and deletes with ids reused and replaced and windows of every size', () => {
    let seed = 42;
    const random = (n: number): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
      return seed % n;
    };
    const t = new IdTable<number>();
    const m = new Map<number, number>();
    for (let step = 0; step < 60_000; step++) {
      // Phases of different windows and id ranges: packet ids, and seqs past 2^32.
      const phase = Math.floor(step / 6_000);
      const window = [1, 4, 20, 300, 2, 65, 1000, 16, 7, 100][phase];
      const base = phase % 2 === 0 ? 0 : 2 ** 40;
      const id = base + 1 + random(phase % 3 === 0 ? 65_535 : 3 * window);
      const op = random(3);
      if (op < 2 && (m.size < window || m.has(id))) {
        // A new id, or one in the table again: replaced in its place, as Map.set does.
        m.set(id, step);
        t.set(id, step);
      } else if (m.size > 0) {
        // Delete the oldest mostly (acks in order), else a random one (out of order), else one never added.
        const keys = [...m.keys()];
        const victim = random(4) === 0 ? keys[random(keys.length)] : random(8) === 0 ? id : keys[0];
        expect(t.delete(victim)).toBe(m.delete(victim));
      }
      expect(t.size).toBe(m.size);
      expect(t.has(id)).toBe(m.has(id));
      expect(t.get(id)).toBe(m.get(id));
      if (step % 997 === 0) expect(entries(t)).toEqual([...m.entries()]);
    }
    t.clear();
    expect([t.size, t.has(1), entries(t)]).toEqual([0, false, []]);
  });
});
