import { describe, expect, it } from 'vitest';
import { decodePlainCommand, plainJson } from '../../src/sparkplug/plain-value.js';
import { commandValueProblem } from '../../src/sparkplug/command-value.js';
import type { TagDatatype } from '../../connectors/contract.js';

const decode = (datatype: TagDatatype, text: string) => decodePlainCommand(datatype, Buffer.from(text));
/** What a /set payload becomes after the DCMD checks: the value to write, or why not. */
const checked = (datatype: TagDatatype, text: string) => {
  const c = decode(datatype, text);
  if ('why' in c) return { why: c.why };
  const why = commandValueProblem(datatype, { value: c.value });
  return why === undefined ? { value: c.value } : { why };
};

describe('plain JSON values', () => {
  it('writes every kind of tag value as JSON, 64-bit integers exact', () => {
    expect(plainJson(21.5)).toBe('21.5');
    expect(plainJson(-9_000_000_000_000_000_001n)).toBe('-9000000000000000001');
    expect(plainJson(true)).toBe('true');
    expect(plainJson('a "quoted" é')).toBe('"a \\"quoted\\" é"');
    expect(plainJson(Buffer.from([0xde, 0xad]))).toBe('"3q0="');
    expect(plainJson([1n, 2, 'x', false])).toBe('[1,2,"x",false]');
    expect(plainJson(null)).toBe('null');
    expect([NaN, Infinity, -Infinity].map(plainJson)).toEqual(['"NaN"', '"Infinity"', '"-Infinity"']);
    // Valid JSON where JSON can say it.
    expect(JSON.parse(`{"value":${plainJson([0.5, 'a'])}}`)).toEqual({ value: [0.5, 'a'] });
  });

  it('reads a /set payload as {"value": ...} or a bare value, by the tag datatype', () => {
    expect(checked('Int16', '{"value": -42}')).toEqual({ value: -42 });
    expect(checked('Int16', '-42')).toEqual({ value: -42 });
    expect(checked('Int64', '42')).toEqual({ value: 42n });
    expect(checked('UInt64', '"18000000000000000000"')).toEqual({ value: 18_000_000_000_000_000_000n });
    expect(checked('Int32', '"-7"')).toEqual({ value: -7 });
    expect(checked('Double', '{"value": 1.25}')).toEqual({ value: 1.25 });
    expect(checked('Boolean', 'true')).toEqual({ value: true });
    expect(checked('String', '"OK"')).toEqual({ value: 'OK' });
    expect(checked('Bytes', '"3q0="')).toEqual({ value: Buffer.from([0xde, 0xad]) });
    expect(checked('Int64Array', '[1, "-9000000000000000001"]')).toEqual({ value: [1n, -9_000_000_000_000_000_001n] });
    expect(checked('FloatArray', '[0.5, 1]')).toEqual({ value: [0.5, 1] });
  });

  it('refuses what does not fit, never rounding or narrowing it', () => {
    expect(checked('Int16', '70000')).toEqual({ why: '70000 is outside Int16 (-32768..32767)' });
    expect(checked('Int32', '"99999999999999999999"')).toEqual({
      why: '99999999999999999999 is outside Int32 (-2147483648..2147483647)',
    });
    expect(checked('Int64', '9007199254740993')).toEqual({
      why: '9007199254740992 is beyond 2^53 and was rounded by JSON: send it as a string of digits',
    });
    expect(checked('Int16', '1.5')).toEqual({ why: '1.5 is not an integer (Int16)' });
    expect(checked('Boolean', '"true"')).toEqual({ why: 'wrong type: Boolean expected' });
    expect(checked('Double', '[1]')).toEqual({ why: 'wrong type: Double expected' });
    expect(checked('Double', '{"value": {"x": 1}}')).toEqual({ why: 'wrong type: Double expected' });
    expect(checked('Double', 'null')).toEqual({ why: 'no value' });
    expect(checked('Bytes', '"not base64!"')).toEqual({ why: 'wrong type: Bytes expected as base64' });
    expect(checked('Int64Array', '[1, 1.5]')).toEqual({ why: 'wrong type: Int64Array expected' });
    expect(checked('StringArray', '[{"a": 1}]')).toEqual({ why: 'wrong type: StringArray expected' });
    expect(checked('Double', '{"val": 1}')).toEqual({ why: 'a JSON object needs a "value"' });
    expect(checked('Double', '21,5')).toEqual({ why: 'not JSON: send {"value": ...} or a bare JSON value' });
  });
});
