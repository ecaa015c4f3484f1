import { describe, expect, it } from 'vitest';
import { decodeRegisters, encodeRegisters, EncodeError, sparkplugDatatype } from '../../connectors/modbus/registers.js';
import type { RegisterTag } from '../../connectors/modbus/registers.js';
import type { ByteOrder, ModbusDatatype } from '../../connectors/modbus/schema.js';

const tag = (
  datatype: ModbusDatatype,
  byteOrder: ByteOrder = 'ABCD',
  extra: Partial<RegisterTag> = {},
): RegisterTag => ({
  table: 'holding',
  datatype,
  byteOrder,
  scale: 1,
  offset: 0,
  ...extra,
});

/** Known register images: value → registers as they travel on the wire, per byte order. */
const IMAGES: { datatype: ModbusDatatype; value: number | bigint; images: Partial<Record<ByteOrder, number[]>> }[] = [
  { datatype: 'int16', value: -2, images: { ABCD: [0xfffe], BADC: [0xfeff], CDAB: [0xfffe], DCBA: [0xfeff] } },
  { datatype: 'uint16', value: 0x1234, images: { ABCD: [0x1234], BADC: [0x3412] } },
  {
    datatype: 'int32',
    value: -123456789, // 0xF8A432EB
    images: { ABCD: [0xf8a4, 0x32eb], BADC: [0xa4f8, 0xeb32], CDAB: [0x32eb, 0xf8a4], DCBA: [0xeb32, 0xa4f8] },
  },
  {
    datatype: 'uint32',
    value: 0x11223344,
    images: { ABCD: [0x1122, 0x3344], BADC: [0x2211, 0x4433], CDAB: [0x3344, 0x1122], DCBA: [0x4433, 0x2211] },
  },
  {
    datatype: 'float32',
    value: 12.5, // 0x41480000
    images: { ABCD: [0x4148, 0x0000], BADC: [0x4841, 0x0000], CDAB: [0x0000, 0x4148], DCBA: [0x0000, 0x4841] },
  },
  {
    datatype: 'int64',
    value: 0x0102030405060708n,
    images: {
      ABCDEFGH: [0x0102, 0x0304, 0x0506, 0x0708],
      BADCFEHG: [0x0201, 0x0403, 0x0605, 0x0807],
      GHEFCDAB: [0x0708, 0x0506, 0x0304, 0x0102],
      HGFEDCBA: [0x0807, 0x0605, 0x0403, 0x0201],
      ABCD: [0x0102, 0x0304, 0x0506, 0x0708],
      CDAB: [0x0708, 0x0506, 0x0304, 0x0102],
    },
  },
  {
    datatype: 'int64',
    value: -2n,
    images: { ABCDEFGH: [0xffff, 0xffff, 0xffff, 0xfffe], HGFEDCBA: [0xfeff, 0xffff, 0xffff, 0xffff] },
  },
  {
    datatype: 'uint64',
    value: 0xfedcba9876543210n,
    images: { ABCDEFGH: [0xfedc, 0xba98, 0x7654, 0x3210], GHEFCDAB: [0x3210, 0x7654, 0xba98, 0xfedc] },
  },
  {
    datatype: 'float64',
    value: -1.5, // 0xBFF8000000000000
    images: {
      ABCDEFGH: [0xbff8, 0, 0, 0],
      BADCFEHG: [0xf8bf, 0, 0, 0],
      GHEFCDAB: [0, 0, 0, 0xbff8],
      HGFEDCBA: [0, 0, 0, 0xf8bf],
    },
  },
];

describe('Modbus register images', () => {
  for (const { datatype, value, images } of IMAGES) {
    for (const [order, registers] of Object.entries(images) as [ByteOrder, number[]][]) {
      it(`decodes ${datatype} ${String(value)} from its ${order} image and encodes it back`, () => {
        const t = tag(datatype, order);
        // An offset into a longer read, as in a coalesced block.
        expect(decodeRegisters(t, [0xdead, ...registers, 0xbeef], 1)).toEqual(value);
        expect(encodeRegisters(t, value)).toEqual(registers);
      });
    }
  }

  it('decodes strings of N registers, high byte first (ABCD) or swapped (BADC), cut at the first NUL', () => {
    expect(decodeRegisters(tag('string', 'ABCD', { length: 3 }), [0x4845, 0x4c4c, 0x4f00], 0)).toBe('HELLO');
    expect(decodeRegisters(tag('string', 'BADC', { length: 3 }), [0x4548, 0x4c4c, 0x004f], 0)).toBe('HELLO');
    expect(encodeRegisters(tag('string', 'ABCD', { length: 3 }), 'HI')).toEqual([0x4849, 0, 0]);
    expect(() => encodeRegisters(tag('string', 'ABCD', { length: 1 }), 'ABC')).toThrow(EncodeError);
  });

  it('decodes bit N of a register and a register as a boolean', () => {
    expect(decodeRegisters(tag('bit', 'ABCD', { bit: 3 }), [0x0008], 0)).toBe(true);
    expect(decodeRegisters(tag('bit', 'ABCD', { bit: 2 }), [0x0008], 0)).toBe(false);
    expect(decodeRegisters(tag('bit', 'ABCD', { bit: 15 }), [0x8000], 0)).toBe(true);
    expect(decodeRegisters(tag('bool'), [0], 0)).toBe(false);
    expect(decodeRegisters(tag('bool'), [5], 0)).toBe(true);
    expect(encodeRegisters(tag('bool'), true)).toEqual([1]);
  });

  it('applies scale and offset, publishes scaled values as Double and writes the exact raw integer back', () => {
    const t = tag('uint16', 'ABCD', { scale: 0.1, offset: -10 });
    expect(sparkplugDatatype(t)).toBe('Double');
    expect(decodeRegisters(t, [250], 0)).toBeCloseTo(15);
    expect(encodeRegisters(t, 15)).toEqual([250]);
    // 21.5 computes as 214.99999999999997 raw counts: the exact register value 215, not a fraction of one.
    expect(encodeRegisters(tag('int16', 'ABCD', { scale: 0.1 }), 21.5)).toEqual([215]);
    expect(encodeRegisters(tag('int32', 'ABCD', { scale: 0.01, offset: 273.15 }), 293.15)).toEqual([0, 2000]);
    expect(() => encodeRegisters(t, -11)).toThrow(/outside uint16/);
    expect(sparkplugDatatype(tag('uint16'))).toBe('UInt16');
    expect(sparkplugDatatype(tag('float32'))).toBe('Float');
    expect(sparkplugDatatype(tag('int64'))).toBe('Int64');
  });

  it('rounds a scaled integer to the decimals of scale and offset: no floating-point noise', () => {
    // 207 * 0.1 is 20.700000000000003 in float arithmetic.
    expect(decodeRegisters(tag('int16', 'ABCD', { scale: 0.1 }), [207], 0)).toBe(20.7);
    expect(decodeRegisters(tag('int16', 'ABCD', { scale: 0.1 }), [0xff8d], 0)).toBe(-11.5); // -115
    expect(decodeRegisters(tag('uint16', 'ABCD', { scale: 0.25 }), [3], 0)).toBe(0.75);
    expect(decodeRegisters(tag('uint16', 'ABCD', { scale: 0.01, offset: 273.15 }), [3], 0)).toBe(273.18);
    expect(decodeRegisters(tag('int32', 'ABCD', { scale: 1e-7 }), [0, 3], 0)).toBe(3e-7);
    expect(decodeRegisters(tag('uint16', 'ABCD', { scale: 0.1, offset: 0.05 }), [7], 0)).toBe(0.75);
    expect(decodeRegisters(tag('uint16', 'ABCD', { scale: 3 }), [7], 0)).toBe(21);
    // The refusal names the nearest value as it would read.
    expect(() => encodeRegisters(tag('int16', 'ABCD', { scale: 0.1 }), 20.74)).toThrow(
      '(the nearest, 207, reads as 20.7;',
    );
  });

  it('refuses a scaled value between two register values, or rounds it with roundWrites', () => {
    const t = tag('uint16', 'ABCD', { scale: 0.1, offset: -10 });
    expect(() => encodeRegisters(t, 15.04)).toThrow(
      '15.04 is no exact uint16 register value with scale 0.1 and offset -10 (the nearest, 250, reads as 15; set roundWrites to round)',
    );
    expect(() => encodeRegisters(tag('int16', 'ABCD', { scale: 0.5 }), 0.25)).toThrow(/no exact int16 register value/);
    expect(encodeRegisters({ ...t, roundWrites: true }, 15.04)).toEqual([250]);
    expect(encodeRegisters({ ...t, roundWrites: true }, 15.06)).toEqual([251]);
    // Rounding never widens the range.
    expect(() => encodeRegisters({ ...t, roundWrites: true }, 6543.6)).toThrow(/65536 is outside uint16/);
    expect(() => encodeRegisters(t, Number.NaN)).toThrow(/not a finite number/);
  });

  it('range-checks every integer register type at both ends, and NaN/Infinity', () => {
    const bounds: [ModbusDatatype, number | bigint, number | bigint][] = [
      ['int16', -32_768, 32_767],
      ['uint16', 0, 65_535],
      ['int32', -2_147_483_648, 2_147_483_647],
      ['uint32', 0, 4_294_967_295],
      ['int64', -(2n ** 63n), 2n ** 63n - 1n],
      ['uint64', 0n, 2n ** 64n - 1n],
    ];
    for (const [datatype, min, max] of bounds) {
      const t = tag(datatype, datatype.endsWith('64') ? 'ABCDEFGH' : 'ABCD');
      expect(decodeRegisters(t, encodeRegisters(t, min), 0)).toBe(min);
      expect(decodeRegisters(t, encodeRegisters(t, max), 0)).toBe(max);
      const below = typeof min === 'bigint' ? min - 1n : min - 1;
      const above = typeof max === 'bigint' ? max + 1n : max + 1;
      expect(() => encodeRegisters(t, below), `${datatype} ${below}`).toThrow(new RegExp(`outside ${datatype}`));
      expect(() => encodeRegisters(t, above), `${datatype} ${above}`).toThrow(new RegExp(`outside ${datatype}`));
      expect(() => encodeRegisters(t, Number.NaN)).toThrow(/not a finite number/);
      expect(() => encodeRegisters(t, -Infinity)).toThrow(/not a finite number/);
    }
    // The case that reached a PLC as 4464: 70000 for an int16 register.
    expect(() => encodeRegisters(tag('int16'), 70_000)).toThrow('70000 is outside int16 (-32768..32767)');
    // A string register block holds 2 characters per register, no more.
    expect(encodeRegisters(tag('string', 'ABCD', { length: 2 }), 'ABCD')).toEqual([0x4142, 0x4344]);
    expect(() => encodeRegisters(tag('string', 'ABCD', { length: 2 }), 'ABCDE')).toThrow(
      '5 characters do not fit 2 registers',
    );
  });

  it('refuses writes out of range or of the wrong type', () => {
    expect(() => encodeRegisters(tag('int16'), 40_000)).toThrow(/outside int16/);
    expect(() => encodeRegisters(tag('uint16'), -1)).toThrow(/outside uint16/);
    expect(() => encodeRegisters(tag('int32'), 1.5)).toThrow(/not an integer/);
    expect(() => encodeRegisters(tag('uint64'), -1n)).toThrow(/outside uint64/);
    expect(() => encodeRegisters(tag('int64'), 2n ** 63n)).toThrow(/outside int64/);
    expect(() => encodeRegisters(tag('float32'), 1e39)).toThrow(/outside float32/);
    expect(() => encodeRegisters(tag('float32'), 'x')).toThrow(/expects a number/);
    expect(() => encodeRegisters(tag('bool'), 1)).toThrow(/expects a boolean/);
    expect(() => encodeRegisters(tag('bit', 'ABCD', { bit: 1 }), true)).toThrow(/read-only/);
    expect(encodeRegisters(tag('int16'), -32_768)).toEqual([0x8000]);
    expect(encodeRegisters(tag('uint64'), 2n ** 64n - 1n)).toEqual([0xffff, 0xffff, 0xffff, 0xffff]);
  });
});
