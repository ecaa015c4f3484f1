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
function roundTrip(
  group: GroupCommit,
  c: ReturnType<typeof clock>,
  ops: number,
  tookMs: number,
  returnMs: number,
): void {
  group.committed(ops, tookMs);
  c.advance(returnMs);
  for (let i = 0; i < ops; i++) group.queued();
}

/** What a commit of `ops` costs on a disk whose flush takes `flushMs`, each write 1/16 ms. */
const commitMs = (flushMs: number, ops: number): number => flushMs + ops / 16;

/** Batches of 144 and 16 (a group split) on a disk whose flush takes `flushMs`, each group back after `returnMs`. */
function splitGroup(flushMs: number, returnMs: number): { group: GroupCommit; c: ReturnType<typeof clock> } {
  const c = clock();
  const group = new GroupCommit(c.now);
  roundTrip(group, c, 144, commitMs(flushMs, 144), returnMs);
  roundTrip(group, c, 16, commitMs(flushMs, 16), returnMs);
  return { group, c };
}

describe('group commit', () => {
  it('issues at once while no two batches of different sizes have shown what a commit costs (a fresh store)', () => {
    const c = clock();
    const group = new GroupCommit(c.now);
    expect(group.waitMs(1)).toBe(0);
    roundTrip(group, c, 160, 8, 1);
    group.committed(160, 8);
    expect(group.waitMs(16)).toBe(0);
  });

  it('waits for the rest of a group that comes back within a flush, at most until a flush after the commit ended', () => {
    const { group, c } = splitGroup(6, 2);
    group.committed(160, commitMs(6, 160));
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
    group.committed(160, commitMs(6, 160));
    c.advance(6);
    expect(group.waitMs(144)).toBe(0);
  });

  it('does not wait for a group whose last return took as long as a flush (it would not join in time)', () => {
    const { group } = splitGroup(6, 6);
    group.committed(160, commitMs(6, 160));
    expect(group.waitMs(16)).toBe(0);
  });

  it('does not wait where the flush takes under 2 ms, however long large batches take (their writes, not the flush)', () => {
    const { group } = splitGroup(1.9, 0.2);
    group.committed(640, commitMs(1.9, 640)); // 41.9 ms
    expect(group.waitMs(16)).toBe(0);
    const slow = splitGroup(2, 0.2).group;
    slow.committed(160, commitMs(2, 160));
    expect(slow.waitMs(16)).toBe(2);
  });

  it('keeps what it learnt while every batch is the same size (the group waited for is whole each time)', () => {
    const { group, c } = splitGroup(6, 2);
    for (let i = 0; i < 5; i++) roundTrip(group, c, 160, commitMs(6, 160), 2);
    group.committed(160, commitMs(6, 160));
    expect(group.waitMs(16)).toBe(6);
  });

  it('never holds a lone writer, and goes at once after a failed commit', () => {
    const { group, c } = splitGroup(6, 2);
    roundTrip(group, c, 1, commitMs(6, 1), 0.5);
    group.committed(1, commitMs(6, 1));
    expect(group.waitMs(1)).toBe(0);
    roundTrip(group, c, 160, commitMs(6, 160), 2);
    group.committed(160, commitMs(6, 160));
    expect(group.waitMs(16)).toBeGreaterThan(0);
    group.reset();
    expect(group.waitMs(16)).toBe(0);
  });
});
