/**
 * The web console's pure parts: a form or JSON value into the tag's datatype form (the DCMD checks then apply),
 * and the log ring that keeps warn/error and audit lines.
 */
import { describe, expect, it } from 'vitest';
import { parseTagValue } from '../../src/console/tag-value.js';
import { LogRing } from '../../src/ops/pino-logger.js';

describe('parseTagValue', () => {
  it('turns form strings and JSON numbers into the datatype form, 64-bit integers as bigint without losing digits', () => {
    expect(parseTagValue('UInt16', '250')).toEqual({ value: 250 });
    expect(parseTagValue('Int16', -3)).toEqual({ value: -3 });
    expect(parseTagValue('Int64', '9223372036854775807')).toEqual({ value: 9223372036854775807n });
    expect(parseTagValue('UInt64', 42)).toEqual({ value: 42n });
    expect(parseTagValue('Float', '1.5e3')).toEqual({ value: 1500 });
    expect(parseTagValue('Double', 0.1)).toEqual({ value: 0.1 });
    expect(parseTagValue('Boolean', 'true')).toEqual({ value: true });
    expect(parseTagValue('Boolean', false)).toEqual({ value: false });
    expect(parseTagValue('String', ' spaced ')).toEqual({ value: ' spaced ' });
  });

  it('says why a value cannot be one of the datatype; ranges are left to the DCMD check', () => {
    expect(parseTagValue('UInt16', '2.5')).toEqual({ problem: '"2.5" is not an integer (UInt16)' });
    expect(parseTagValue('Int64', 2 ** 60)).toEqual({ problem: `${2 ** 60} is not an integer (Int64)` });
    expect(parseTagValue('Float', 'abc')).toEqual({ problem: '"abc" is not a number (Float)' });
    expect(parseTagValue('Boolean', 1)).toEqual({ problem: '1 is not true or false (Boolean)' });
    expect(parseTagValue('String', 5)).toEqual({ problem: 'a string expected (String)' });
    expect(parseTagValue('Int16Array', '[1]')).toEqual({
      problem: 'Int16Array tags cannot be written from the console',
    });
    // 70000 parses as a UInt16 form; command-value.ts refuses it as out of range.
    expect(parseTagValue('UInt16', 70_000)).toEqual({ value: 70_000 });
  });
});

describe('LogRing', () => {
  const line = (level: number, msg: string, mod = 'broker') => JSON.stringify({ level, time: 1, mod, msg }) + '\n';

  it('keeps warn and above and audit lines, drops the rest, and returns the newest capacity lines oldest first', () => {
    const ring = new LogRing(3);
    ring.write(line(30, 'info'));
    ring.write(line(40, 'w1'));
    ring.write(line(30, 'login', 'audit'));
    ring.write(line(20, 'debug'));
    ring.write(line(50, 'e1'));
    expect(ring.entries().map((l) => l.msg)).toEqual(['w1', 'login', 'e1']);
    ring.write(line(60, 'f1'));
    ring.write(line(40, 'w2'));
    expect(ring.entries().map((l) => l.msg)).toEqual(['e1', 'f1', 'w2']);
  });
});
