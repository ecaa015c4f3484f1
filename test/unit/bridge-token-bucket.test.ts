import { describe, expect, it } from 'vitest';
import { ReplayPacer, TokenBucket } from '../../src/bridge/token-bucket.js';

describe('replay token bucket', () => {
  it('lets a burst of a tenth of the rate through, then paces at the rate', () => {
    let now = 0;
    const bucket = new TokenBucket(1000, () => now);
    let sent = 0;
    while (bucket.waitMs(1) === 0) {
      bucket.take(1);
      sent++;
    }
    expect(sent).toBe(100);
    expect(bucket.waitMs(1)).toBe(1);
    now += 500;
    sent = 0;
    while (bucket.waitMs(1) === 0) {
      bucket.take(1);
      sent++;
    }
    expect(sent).toBe(100); // capped at capacity, not 500
  });

  it('is unlimited at rate 0', () => {
    const bucket = new TokenBucket(0, () => 0);
    for (let i = 0; i < 10_000; i++) bucket.take(1);
    expect(bucket.waitMs(1_000_000)).toBe(0);
  });

  it('lets a message larger than the burst go once the bucket is full, leaving it in debt', () => {
    let now = 0;
    const bucket = new TokenBucket(1000, () => now); // capacity 100 bytes
    expect(bucket.waitMs(5000)).toBe(0);
    bucket.take(5000);
    expect(bucket.waitMs(10)).toBeGreaterThan(4000);
    now += 5000;
    expect(bucket.waitMs(10)).toBe(0);
  });

  it('paces by whichever of messages/s and bytes/s is tighter', () => {
    let now = 0;
    const pacer = new ReplayPacer({ messagesPerS: 1000, bytesPerS: 10_000 }, () => now);
    let sent = 0;
    while (pacer.waitMs(100) === 0) {
      pacer.take(100);
      sent++;
    }
    expect(sent).toBe(10); // 1000 bytes of burst / 100 bytes
    now += 1000;
    let total = 0;
    for (let ms = 0; ms < 1000; ms++) {
      now += 1;
      while (pacer.waitMs(100) === 0) {
        pacer.take(100);
        total++;
      }
    }
    expect(total).toBeGreaterThanOrEqual(99);
    expect(total).toBeLessThanOrEqual(111);
  });
});
