import { describe, expect, it } from 'vitest';
import { SlotList } from '../../src/util/slot-list.js';

describe('SlotList', () => {
  it('drains in order, items pushed while draining included, and is empty after', () => {
    const list = new SlotList<number>();
    for (const n of [1, 2, 3]) list.push(n);
    const seen: number[] = [];
    list.drain((n) => {
      seen.push(n);
      if (n === 2) list.push(4);
    });
    expect(seen).toEqual([1, 2, 3, 4]);
    expect(list.length).toBe(0);
  });

  it('reads by index until cleared, then starts over from the first slot', () => {
    const list = new SlotList<string>();
    for (const s of ['a', 'b', 'c']) list.push(s);
    expect([list.at(0), list.at(2), list.length]).toEqual(['a', 'c', 3]);
    list.clear();
    list.push('d');
    expect([list.at(0), list.length]).toEqual(['d', 1]);
  });
});
