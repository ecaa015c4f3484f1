import { describe, expect, it } from 'vitest';
import { BufferBatch } from '../../src/util/buffer-batch.js';

describe('BufferBatch', () => {
  it('hands a single Buffer back as it is, and joins several in the order pushed', () => {
    const batch = new BufferBatch();
    expect(batch.empty).toBe(true);
    const one = Buffer.from('a');
    batch.push(one);
    expect(batch.bytes).toBe(1);
    expect(batch.take()).toBe(one);
    expect(batch.empty).toBe(true);
    for (const part of ['bc', '', 'def', 'g']) batch.push(Buffer.from(part));
    expect(batch.bytes).toBe(6);
    expect(batch.take().toString()).toBe('bcdefg');
    expect(batch.bytes).toBe(0);
  });

  it('is reused from take to take without leftovers of an earlier, longer batch', () => {
    const batch = new BufferBatch();
    for (let round = 0; round < 50; round++) {
      // Some rounds past the 1,024 slots a batch keeps.
      const parts = Array.from({ length: round % 10 === 9 ? 1500 : ((round * 7) % 23) + 1 }, (_, i) =>
        Buffer.from(`${round}.${i};`),
      );
      for (const part of parts) batch.push(part);
      expect(batch.take()).toEqual(Buffer.concat(parts));
    }
  });

  it('refuses to take from an empty batch', () => {
    expect(() => new BufferBatch().take()).toThrow(/empty/);
  });
});
