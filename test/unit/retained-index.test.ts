/**
 * RetainedIndex over the memory store: which retained messages a filter matches [MQTT-4.7.1-2/3] [MQTT-4.7.2-1],
 * expiry, the limits, and that a walk visits only the levels its filter names.
 */
import { describe, expect, it } from 'vitest';
import { LEVELS_PER_STEP, RetainedIndex } from '../../src/broker/retained.js';
import { createMessage, type Message } from '../../src/protocol/message.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { silentLogger } from '../../src/util/logger.js';

const TOPICS = ['a', 'a/b', 'a/b/c', 'a/x/c', 'a//c', 'b/b', '$SYS/uptime', '$SYS/a/b', '/lead'];

function retained(topic: string, payload = topic, extra: { expiryS?: number } = {}): Message {
  const properties = extra.expiryS === undefined ? undefined : { messageExpiryInterval: extra.expiryS };
  return createMessage({ topic, payload: Buffer.from(payload), retain: true, origin: 'c', properties });
}

function index(limits = { maxMessages: 1000, maxBytes: 1 << 20 }): RetainedIndex {
  const idx = new RetainedIndex(createMemoryStore().retained, limits, silentLogger);
  for (const topic of TOPICS) void idx.set(retained(topic));
  return idx;
}

function matches(idx: RetainedIndex, filter: string): string[] {
  return [...idx.matching(filter)]
    .filter((m) => m !== undefined)
    .map((m) => m!.topic)
    .sort();
}

describe('RetainedIndex', () => {
  it('matches as topicMatches does: + one level, # the parent and below, $-topics only when named [MQTT-4.7.1-2] [MQTT-4.7.2-1]', () => {
    const idx = index();
    expect(matches(idx, '#')).toEqual(['/lead', 'a', 'a//c', 'a/b', 'a/b/c', 'a/x/c', 'b/b']);
    expect(matches(idx, 'a/#')).toEqual(['a', 'a//c', 'a/b', 'a/b/c', 'a/x/c']);
    expect(matches(idx, 'a/+/c')).toEqual(['a//c', 'a/b/c', 'a/x/c']);
    expect(matches(idx, '+/b')).toEqual(['a/b', 'b/b']);
    expect(matches(idx, '+')).toEqual(['a']);
    expect(matches(idx, '+/+')).toEqual(['/lead', 'a/b', 'b/b']);
    expect(matches(idx, 'a/b')).toEqual(['a/b']);
    expect(matches(idx, 'a/b/c/#')).toEqual(['a/b/c']);
    expect(matches(idx, 'nothing/#')).toEqual([]);
    expect(matches(idx, '$SYS/#')).toEqual(['$SYS/a/b', '$SYS/uptime']);
    expect(matches(idx, '+/uptime')).toEqual([]);
    expect(matches(idx, '$SYS/+/b')).toEqual(['$SYS/a/b']);
  });

  it('deletes with an empty payload, replaces, counts messages and payload bytes, and serves the payload', () => {
    const idx = index();
    expect([idx.count, idx.bytes]).toEqual([TOPICS.length, TOPICS.join('').length]);
    void idx.set(retained('a/b', ''));
    void idx.set(retained('a', 'longer payload'));
    expect(matches(idx, 'a/#')).toEqual(['a', 'a//c', 'a/b/c', 'a/x/c']);
    expect(idx.count).toBe(TOPICS.length - 1);
    expect(idx.bytes).toBe(TOPICS.join('').length - 'a/b'.length - 'a'.length + 'longer payload'.length);
    const [entry] = idx.matching('a');
    expect(idx.message(entry!)?.payload.toString()).toBe('longer payload');
  });

  it('drops an expired retained message when a walk meets it', () => {
    const idx = index();
    const msg = retained('exp/1', 'x', { expiryS: 1 });
    void idx.set({ ...msg, expiresAt: performance.now() - 1 });
    void idx.set(retained('exp/2', 'y', { expiryS: 3600 }));
    expect(matches(idx, 'exp/+')).toEqual(['exp/2']);
    expect(idx.count).toBe(TOPICS.length + 1);
  });

  it('holds: a live retained message at exactly that topic (an expired, deleted or inner level is none)', () => {
    const idx = index();
    void idx.set({ ...retained('exp/1', 'x', { expiryS: 1 }), expiresAt: performance.now() - 1 });
    void idx.set(retained('a/b', ''));
    expect(['a', 'a/b/c', '$SYS/uptime'].map((t) => idx.holds(t))).toEqual([true, true, true]);
    expect(['a/b', 'exp/1', '$SYS', 'a/x', 'nothing'].map((t) => idx.holds(t))).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
  });

  it('refuses a new topic past maxMessages and bytes past maxBytes, counting a replacement by its difference', () => {
    const idx = new RetainedIndex(createMemoryStore().retained, { maxMessages: 2, maxBytes: 10 }, silentLogger);
    expect(idx.set(retained('t/1', 'aaaa'))).toBeDefined();
    expect(idx.set(retained('t/2', 'bbbb'))).toBeDefined();
    expect(idx.overLimit(retained('t/3', 'c'))).toBe(true);
    expect(idx.set(retained('t/3', 'c'))).toBeUndefined();
    expect(idx.overLimit(retained('t/1', 'aaaaaa'))).toBe(false); // 10 bytes in all
    expect(idx.overLimit(retained('t/1', 'aaaaaaa'))).toBe(true);
    expect(idx.overLimit(retained('t/1', ''))).toBe(false);
    expect([idx.count, idx.bytes, idx.refused]).toEqual([2, 8, 1]);
    expect(matches(idx, '#')).toEqual(['t/1', 't/2']);
  });

  it('walks only the levels a filter names, and reports progress on long wildcard walks', () => {
    const idx = new RetainedIndex(
      createMemoryStore().retained,
      { maxMessages: 100_000, maxBytes: 1 << 30 },
      silentLogger,
    );
    for (let i = 0; i < 10_000; i++) void idx.set(retained(`r/${i}/x`));
    // A filter whose levels exist only in part: no step over the 10,000 children of `r`.
    expect([...idx.matching('r/5/y')]).toEqual([]);
    expect([...idx.matching('q/+/x')]).toEqual([]);
    // `r/+/y` visits every child of `r` and finds nothing: it yields progress in between.
    const steps = [...idx.matching('r/+/y')];
    expect(steps.every((s) => s === undefined)).toBe(true);
    expect(steps.length).toBeGreaterThanOrEqual(10_000 / LEVELS_PER_STEP - 1);
  });
});
