/**
 * DCMD values as Sparkplug hosts really send them, built with `sparkplug-payload` (the Tahu JS library), decoded
 * by our decoder and checked against the metric's declared datatype: every encoding a host legitimately uses is
 * accepted with its exact value; a value outside the datatype is refused, never narrowed.
 */
import { describe, expect, it } from 'vitest';
import Long from 'long';
import { get as getSparkplug } from 'sparkplug-payload';
import sparkplugProto from 'sparkplug-payload/lib/sparkplugPayloadProto.js';
import { commandValueProblem } from '../../src/sparkplug/command-value.js';
import { decodePayload } from '../../src/sparkplug/payload.js';
import type { MetricDatatype } from '../../src/sparkplug/payload.js';
import type { TagDatatype, TagValue } from '../../connectors/contract.js';

const tahu = getSparkplug('spBv1.0');
if (!tahu) throw new Error('sparkplug-payload has no spBv1.0');
const Payload = sparkplugProto.org.eclipse.tahu.protobuf.Payload;

/** A DCMD as a Tahu JS host builds it (datatype in the metric, value where the library puts it). */
function tahuCommand(type: TagDatatype, value: unknown): Buffer {
  return Buffer.from(tahu!.encodePayload({ timestamp: Date.now(), metrics: [{ name: 'm', type, value } as never] }));
}

/** A DCMD with the value in a chosen protobuf field (as other hosts send it), no datatype (alias-only hosts). */
function rawCommand(field: 'intValue' | 'longValue', value: number | Long): Buffer {
  return Buffer.from(Payload.encode({ timestamp: 1, metrics: [{ name: 'm', [field]: value }] } as never).finish());
}

function check(buf: Buffer, type: TagDatatype): { value: TagValue | null; problem: string | undefined } {
  const metric = decodePayload(buf, () => type as MetricDatatype).metrics[0];
  return { value: metric.value, problem: commandValueProblem(type, metric) };
}

// A DCMD MUST carry a value compatible with the metric it writes [tck-id-operational-behavior-data-commands-dcmd-metric-value]:
// the edge node checks that, and refuses rather than narrows what does not fit.
describe('DCMD values from sparkplug-payload (Tahu JS) hosts', () => {
  const accepted: [TagDatatype, unknown, TagValue][] = [
    ['Int8', -128, -128],
    ['Int8', 127, 127],
    ['Int16', -32_768, -32_768],
    ['Int16', 32_767, 32_767],
    ['Int32', -2_147_483_648, -2_147_483_648],
    ['Int32', 2_147_483_647, 2_147_483_647],
    ['Int64', -5, -5n],
    ['Int64', Long.fromString('-9223372036854775808'), -(2n ** 63n)],
    ['Int64', Long.fromString('9223372036854775807'), 2n ** 63n - 1n],
    ['UInt8', 255, 255],
    ['UInt16', 65_535, 65_535],
    // The library puts UInt32 into long_value (Sparkplug 3.0 says int_value; both are accepted).
    ['UInt32', 4_294_967_295, 4_294_967_295],
    ['UInt32', 0, 0],
    ['UInt64', Long.fromString('18446744073709551615', true), 2n ** 64n - 1n],
    ['UInt64', 7, 7n],
    ['Float', 1.5, 1.5],
    ['Double', Math.PI, Math.PI],
    ['Boolean', true, true],
    ['Boolean', false, false],
    ['String', 'grüße', 'grüße'],
    ['DateTime', 1_700_000_000_123, 1_700_000_000_123],
  ];
  for (const [type, sent, expected] of accepted) {
    it(`accepts ${type} ${String(sent)} with its exact value`, () => {
      expect(check(tahuCommand(type, sent), type)).toEqual({ value: expected, problem: undefined });
    });
  }

  const refused: [TagDatatype, unknown, string][] = [
    ['Int16', 70_000, '70000 is outside Int16 (-32768..32767)'],
    ['Int16', -32_769, '-32769 is outside Int16 (-32768..32767)'],
    ['Int8', 128, '128 is outside Int8 (-128..127)'],
    ['UInt8', 256, '256 is outside UInt8 (0..255)'],
    ['UInt16', 65_536, '65536 is outside UInt16 (0..65535)'],
    ['UInt16', -1, '4294967295 is outside UInt16 (0..65535)'],
    ['UInt32', 4_294_967_296, '4294967296 is outside UInt32 (0..4294967295)'],
    ['UInt32', -1, '18446744073709551615 is outside UInt32 (0..4294967295)'],
  ];
  for (const [type, sent, why] of refused) {
    it(`refuses ${type} ${String(sent)} instead of narrowing it`, () => {
      expect(check(tahuCommand(type, sent), type).problem).toBe(why);
    });
  }
});

describe('DCMD integer encodings of other hosts', () => {
  it("reads Int8/16/32 as sign-extended 32-bit two's complement in int_value (Tahu Java)", () => {
    expect(check(rawCommand('intValue', 0xffff_ffd6), 'Int8')).toEqual({ value: -42, problem: undefined });
    expect(check(rawCommand('intValue', 0xffff_8000), 'Int16')).toEqual({ value: -32_768, problem: undefined });
    expect(check(rawCommand('intValue', 0x8000_0000), 'Int32')).toEqual({ value: -2_147_483_648, problem: undefined });
    // An unsigned 16-bit pattern is not an Int16: 0x8000 is 32768, outside, not -32768.
    expect(check(rawCommand('intValue', 0x8000), 'Int16').problem).toBe('32768 is outside Int16 (-32768..32767)');
  });

  it('reads UInt32 from int_value (Sparkplug 3.0) and long_value (Tahu), Int64/UInt64 from long_value, without a datatype in the command [tck-id-payloads-metric-datatype-not-req]', () => {
    expect(check(rawCommand('intValue', 0xffff_ffff), 'UInt32')).toEqual({ value: 4_294_967_295, problem: undefined });
    expect(check(rawCommand('longValue', Long.fromNumber(4_294_967_295, true)), 'UInt32')).toEqual({
      value: 4_294_967_295,
      problem: undefined,
    });
    expect(check(rawCommand('longValue', Long.fromNumber(-3)), 'Int64')).toEqual({ value: -3n, problem: undefined });
    expect(check(rawCommand('longValue', Long.fromNumber(-3)), 'Int16')).toEqual({ value: -3, problem: undefined });
    expect(check(rawCommand('longValue', 12), 'UInt64')).toEqual({ value: 12n, problem: undefined });
  });

  it("refuses a wrong kind of value and a declared datatype other than the metric's", () => {
    expect(check(tahuCommand('String', 'hot'), 'Int16').problem).toBe(
      'wrong type: the metric is Int16, the command says String',
    );
    expect(check(tahuCommand('Double', 1.5), 'Double').problem).toBeUndefined();
    const fraction = decodePayload(tahuCommand('Double', 1.5), () => 'Int16').metrics[0];
    expect(commandValueProblem('Int16', { ...fraction, datatype: undefined })).toBe('1.5 is not an integer (Int16)');
    expect(commandValueProblem('Int32', { ...fraction, datatype: undefined, value: Number.NaN })).toBe(
      'NaN is not an integer (Int32)',
    );
    expect(commandValueProblem('Int32', { ...fraction, datatype: undefined, value: Infinity })).toBe(
      'Infinity is not an integer (Int32)',
    );
    // A Float in double_value (some hosts): beyond float32 it would reach the device as infinity.
    expect(commandValueProblem('Float', { ...fraction, datatype: undefined, value: 1e39 })).toBe(
      '1e+39 is outside Float',
    );
    expect(commandValueProblem('Float', { ...fraction, datatype: undefined, value: Number.NaN })).toBeUndefined();
  });
});
