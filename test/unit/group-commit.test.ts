/**
 * When the store issues its next batch (docs/architecture.md#durability, "Group commit"): it waits for the writers
 * the last commit released only when that pays, i.e. when a commit's fixed cost (the disk's flush, measured on a
 * small batch) is longer than the group takes to come back, and never longer than that cost.
 */
import { describe, expect, it } from 'vitest';
import { GroupCommit } from '../../src/store/lmdb/group-commit.js';

function clock(): { now: () => number; advance: (ms: number) => void } {
  let t = 1000;
  return { now: () => t, advance: (ms) => (t += ms) };
}

/** A commit of `ops` that took `tookMs`, whose writers all came back `returnMs` after it. */
function roundTrip(group: GroupCommit, c: ReturnType<typeof clock>, ops: number, tookMs: number, returnMs: number): void {
  group.committed(ops, tookMs);
  c.advance(returnMs);
  for (let i = 0; i < ops; i++) group.queued();
}

/** A group of 144 split from 16 by a disk whose flush takes `flushMs`, then back whole after `returnMs`. */
function splitGroup(flushMs: number, returnMs: number): { group: GroupCommit; c: ReturnType<typeof clock> } {
  const c = clock();
  const group = new GroupCommit(c.now);
  roundTrip(group, c, 144, flushMs + 1, returnMs);
  roundTrip(group, c, 16, flushMs, returnMs); // 16 after 144: a small batch, which costs the flush alone
  return { group, c };
}

describe('group commit', () => {
  it('issues at once while no small batch has shown what a commit costs (a fresh store)', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    expect(group.waitMs(1)).toBe(0);
    roundTrip(group, c, 160, 8, 1);
    group.committed(160, 8);
    expect(group.waitMs(16)).toBe(0);
  });

  it('waits for the rest of a group that comes back within a flush, at most until a flush after the commit ended', () => {
    const { group, c } = splitGroup(6, 2);
    group.committed(160, 7);
    c.advance(1);
    for (let i = 0; i < 16; i++) group.queued();
    expect(group.waitMs(16)).toBe(5); // 6 ms allowed from the commit's end, 1 gone
    for (let i = 16; i < 159; i++) group.queued();
    expect(group.waitMs(159)).toBe(5);
    group.queued();
    expect(group.waitMs(160)).toBe(0); // the whole group is back
  });

  it('ends the wait when its time is up, though the group is not complete', () => {
    const { group, c } = splitGroup(6, 2);
    group.committed(160, 7);
    c.advance(6);
    expect(group.waitMs(144)).toBe(0);
  });

  it('does not wait for a group whose last return took as long as a flush (it would not join in time)', () => {
    const { group } = splitGroup(6, 6);
    group.committed(160, 7);
    expect(group.waitMs(16)).toBe(0);
  });

  it('does not wait where a small batch commits in under 2 ms, however long large ones take (their writes, not the flush)', () => {
    const { group } = splitGroup(1.9, 0.2);
    group.committed(640, 5);
    expect(group.waitMs(16)).toBe(0);
    const slow = splitGroup(2, 0.2).group;
    slow.committed(160, 3);
    expect(slow.waitMs(16)).toBe(2);
  });

  it('never holds a lone writer, and goes at once after a failed commit', () => {
    const { group, c } = splitGroup(6, 2);
    roundTrip(group, c, 1, 6, 0.5);
    group.committed(1, 6);
    expect(group.waitMs(1)).toBe(0);
    roundTrip(group, c, 160, 7, 2);
    group.committed(160, 7);
    expect(group.waitMs(16)).toBeGreaterThan(0);
    group.reset();
    expect(group.waitMs(16)).toBe(0);
  });
});
