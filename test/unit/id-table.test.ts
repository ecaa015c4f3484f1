/** The in-flight table of sessions and bridges (src/util/id-table.ts): a Map's behaviour without a Map. */
import { describe, expect, it } from 'vitest';
import { IdTable } from '../../src/util/id-table.js';

function entries<T>(t: IdTable<T>): [number, T][] {
  const out: [number, T][] = [];
  t.forEach((item, id) => out.push([id, item]));
  return out;
}

describe('IdTable', () => {
  it('finds, counts and removes entries by id, and keeps the order they were added in', () => {
    const t = new IdTable<string>();
    for (const id of [7, 3, 65535, 1]) t.add(id, `m${id}`);
    expect(t.size).toBe(4);
    expect([t.get(3), t.get(4), t.has(65535), t.has(2)]).toEqual(['m3', undefined, true, false]);
    expect(t.delete(3)).toBe(true);
    expect(t.delete(3)).toBe(false);
    expect(t.size).toBe(3);
    t.add(3, 'again');
    expect(entries(t)).toEqual([[7, 'm7'], [65535, 'm65535'], [1, 'm1'], [3, 'again']]);
  });

  it('lets forEach delete the entry it is on and others, as a resend after a reconnect does', () => {
    const t = new IdTable<number>();
    for (let id = 1; id <= 6; id++) t.add(id, id * 10);
    const seen: number[] = [];
    t.forEach((_, id) => {
      seen.push(id);
      if (id % 2 === 0) t.delete(id);
      if (id === 3) t.delete(5);
    });
    expect(seen).toEqual([1, 2, 3, 4, 6]);
    expect(entries(t)).toEqual([[1, 10], [3, 30]]);
    t.forEach((_, id) => t.delete(id));
    expect([t.size, entries(t)]).toEqual([0, []]);
  });

  it('stays small while one old entry is never acknowledged and thousands of others come and go', () => {
    const t = new IdTable<number>();
    t.add(1, 1);
    for (let id = 2; id < 10_000; id++) {
      t.add(id, id);
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
