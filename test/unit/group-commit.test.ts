/** When the store issues its next batch: wait for the writers the last commit released, only when that pays. */
import { describe, expect, it } from 'vitest';
import { GroupCommit } from '../../src/store/lmdb/group-commit.js';

function clock(): { now: () => number; advance: (ms: number) => void } {
  let t = 1000;
  return { now: () => t, advance: (ms) => (t += ms) };
}

/** A commit of `ops` that took `tookMs`, whose writers all came back `returnMs` later. */
function roundTrip(group: GroupCommit, c: ReturnType<typeof clock>, ops: number, tookMs: number, returnMs: number): void {
  group.committed(ops, tookMs);
  c.advance(returnMs);
  for (let i = 0; i < ops; i++) group.queued();
}

describe('group commit', () => {
  it('issues at once while no group has come back yet (a first batch, a fresh store)', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    expect(group.waitMs(1)).toBe(0);
    group.committed(160, 8);
    c.advance(1);
    expect(group.waitMs(16)).toBe(0); // how long this group takes to come back is not known yet
  });

  it('waits for the rest of a group that came back within half a commit, at most until half a commit after it ended', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    roundTrip(group, c, 160, 8, 2); // commits of 8 ms, writers back after 2
    group.committed(160, 8);
    c.advance(1);
    for (let i = 0; i < 16; i++) group.queued();
    expect(group.waitMs(16)).toBe(3); // 4 ms allowed from the commit's end, 1 gone
    for (let i = 16; i < 159; i++) group.queued();
    expect(group.waitMs(159)).toBe(3);
    group.queued();
    expect(group.waitMs(160)).toBe(0); // the whole group is back
  });

  it('ends the wait when its time is up, though the group is not complete', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    roundTrip(group, c, 160, 8, 2);
    group.committed(160, 8);
    c.advance(4);
    expect(group.waitMs(144)).toBe(0);
  });

  it('does not wait for a group whose last return took longer than half a commit (it would not join)', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    roundTrip(group, c, 160, 8, 5);
    group.committed(160, 8);
    expect(group.waitMs(16)).toBe(0);
  });

  it('does not wait when commits are too fast for a timer to wait a fraction of one', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    roundTrip(group, c, 160, 1.5, 0.2);
    group.committed(160, 1.5);
    expect(group.waitMs(16)).toBe(0);
  });

  it('never holds a lone writer, and goes at once after a failed commit', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    roundTrip(group, c, 1, 8, 0.5);
    group.committed(1, 8);
    expect(group.waitMs(1)).toBe(0);
    roundTrip(group, c, 160, 8, 2);
    group.committed(160, 8);
    expect(group.waitMs(16)).toBeGreaterThan(0);
    group.reset();
    expect(group.waitMs(16)).toBe(0);
  });
});
