/**
 * S7 memory images ↔ tag values (big-endian, as every S7 CPU stores them), and the checks of writes. Pure
 * functions: the tests feed them known images.
 *
 * STRING is the S7 string: a byte with the declared maximum, a byte with the current length, then the characters
 * (Latin-1). DATE_AND_TIME is 8 BCD bytes (year, month, day, hour, minute, second, milliseconds and weekday) without
 * a time zone: read and written as UTC (docs/configuration.md#s7-addresses).
 */
import type { TagDatatype, TagValue } from '../contract.js';
import type { S7Address, S7Type } from './address.js';
import { byteLength, elementStride } from './address.js';

const SCALAR: Readonly<Record<S7Type, TagDatatype>> = {
  BOOL: 'Boolean',
  BYTE: 'UInt8',
  CHAR: 'String',
  WORD: 'UInt16',
  INT: 'Int16',
  DWORD: 'UInt32',
  DINT: 'Int32',
  REAL: 'Float',
  LREAL: 'Double',
  STRING: 'String',
  DATE_AND_TIME: 'DateTime',
};

const ARRAY: Readonly<Record<S7Type, TagDatatype>> = {
  BOOL: 'BooleanArray',
  BYTE: 'UInt8Array',
  CHAR: 'String', // CHAR[n] reads as the text it holds
  WORD: 'UInt16Array',
  INT: 'Int16Array',
  DWORD: 'UInt32Array',
  DINT: 'Int32Array',
  REAL: 'FloatArray',
  LREAL: 'DoubleArray',
  STRING: 'StringArray',
  DATE_AND_TIME: 'DateTimeArray',
};

/** The Sparkplug datatype a tag is published with. */
export function sparkplugDatatype(address: S7Address): TagDatatype {
  return (address.array ? ARRAY : SCALAR)[address.type];
}

export function isNumeric(address: S7Address): boolean {
  return !address.array && !['BOOL', 'CHAR', 'STRING', 'DATE_AND_TIME'].includes(address.type);
}

const bcd = (b: number): number => (b >> 4) * 10 + (b & 0x0f);
const toBcd = (n: number): number => ((Math.floor(n / 10) % 10) << 4) | (n % 10);

function decodeDateTime(buf: Buffer, at: number): number {
  const yy = bcd(buf[at]);
  const ms = bcd(buf[at + 6]) * 10 + (buf[at + 7] >> 4);
  return Date.UTC(
    yy < 90 ? 2000 + yy : 1900 + yy,
    bcd(buf[at + 1]) - 1,
    bcd(buf[at + 2]),
    bcd(buf[at + 3]),
    bcd(buf[at + 4]),
    bcd(buf[at + 5]),
    ms,
  );
}

function decodeElement(type: S7Type, buf: Buffer, at: number, maxLength: number): number | boolean | string {
  switch (type) {
    case 'BOOL':
      return buf[at] !== 0;
    case 'BYTE':
      return buf[at];
    case 'CHAR':
      return String.fromCharCode(buf[at]);
    case 'WORD':
      return buf.readUInt16BE(at);
    case 'INT':
      return buf.readInt16BE(at);
    case 'DWORD':
      return buf.readUInt32BE(at);
    case 'DINT':
      return buf.readInt32BE(at);
    case 'REAL':
      return buf.readFloatBE(at);
    case 'LREAL':
      return buf.readDoubleBE(at);
    case 'STRING': {
      // A length beyond the maximum (an uninitialised string) is cut to what the string can hold.
      const length = Math.min(buf[at + 1], maxLength);
      return buf.toString('latin1', at + 2, at + 2 + length);
    }
    case 'DATE_AND_TIME':
      return decodeDateTime(buf, at);
  }
}

/** Decodes a tag from `buf`, where its first byte is at `at`. */
export function decodeValue(address: S7Address, buf: Buffer, at: number): TagValue {
  const { type, count, maxLength } = address;
  if (type === 'BOOL') {
    const bits: boolean[] = [];
    for (let i = 0; i < count; i++) {
      const n = address.bit + i;
      bits.push(((buf[at + (n >> 3)] >> (n & 7)) & 1) === 1);
    }
    return address.array ? bits : bits[0];
  }
  if (type === 'CHAR' && address.array) {
    const text = buf.toString('latin1', at, at + count);
    const end = text.indexOf('\u0000');
    return end < 0 ? text : text.slice(0, end);
  }
  if (!address.array) return decodeElement(type, buf, at, maxLength);
  const stride = elementStride(address);
  const out: (number | boolean | string)[] = [];
  for (let i = 0; i < count; i++) out.push(decodeElement(type, buf, at + i * stride, maxLength));
  return out;
}

/** Why a value cannot be written; the message goes to the audit line and the refusing error. */
export class EncodeError extends Error {
  override readonly name = 'EncodeError';
}

const RANGES: Partial<Record<S7Type, readonly [number, number]>> = {
  BYTE: [0, 255],
  WORD: [0, 65_535],
  INT: [-32_768, 32_767],
  DWORD: [0, 4_294_967_295],
  DINT: [-2_147_483_648, 2_147_483_647],
};
const FLOAT32_MAX = 3.4028234663852886e38;
/** DATE_AND_TIME holds 1990-01-01 to 2089-12-31 23:59:59.999. */
const DT_RANGE = [Date.UTC(1990, 0, 1), Date.UTC(2090, 0, 1) - 1] as const;

function latin1(value: string, max: number, what: string): Buffer {
  if (/[^\u0000-\u00ff]/.test(value)) throw new EncodeError('only Latin-1 characters fit an S7 string');
  if (value.length > max) throw new EncodeError(`${value.length} characters do not fit ${what}`);
  return Buffer.from(value, 'latin1');
}

function encodeElement(address: S7Address, value: unknown, buf: Buffer, at: number): void {
  const { type } = address;
  const range = RANGES[type];
  if (range !== undefined) {
    const n = typeof value === 'bigint' ? Number(value) : value;
    if (typeof n !== 'number' || !Number.isInteger(n))
      throw new EncodeError(`expects an integer for ${type}, got ${String(value)}`);
    if (n < range[0] || n > range[1]) throw new EncodeError(`${n} is outside ${type} (${range[0]}..${range[1]})`);
    if (type === 'BYTE') buf.writeUInt8(n, at);
    else if (type === 'WORD') buf.writeUInt16BE(n, at);
    else if (type === 'INT') buf.writeInt16BE(n, at);
    else if (type === 'DWORD') buf.writeUInt32BE(n, at);
    else buf.writeInt32BE(n, at);
    return;
  }
  switch (type) {
    case 'REAL':
    case 'LREAL': {
      if (typeof value !== 'number') throw new EncodeError(`expects a number for ${type}, got ${typeof value}`);
      if (type === 'LREAL') buf.writeDoubleBE(value, at);
      else if (Number.isFinite(value) && Math.abs(value) > FLOAT32_MAX)
        throw new EncodeError(`${value} is outside REAL`);
      else buf.writeFloatBE(value, at);
      return;
    }
    case 'CHAR':
      if (typeof value !== 'string' || value.length !== 1) throw new EncodeError('expects one character for CHAR');
      latin1(value, 1, 'a CHAR').copy(buf, at);
      return;
    case 'STRING': {
      if (typeof value !== 'string') throw new EncodeError(`expects a string, got ${typeof value}`);
      const bytes = latin1(value, address.maxLength, `STRING[${address.maxLength}]`);
      buf[at] = address.maxLength;
      buf[at + 1] = bytes.length;
      bytes.copy(buf, at + 2);
      return;
    }
    case 'DATE_AND_TIME': {
      if (typeof value !== 'number' || !Number.isInteger(value))
        throw new EncodeError('expects epoch milliseconds for DATE_AND_TIME');
      if (value < DT_RANGE[0] || value > DT_RANGE[1])
        throw new EncodeError(`${new Date(value).toISOString()} is outside DATE_AND_TIME (1990..2089)`);
      const d = new Date(value);
      const ms = d.getUTCMilliseconds();
      const fields = [
        d.getUTCFullYear() % 100,
        d.getUTCMonth() + 1,
        d.getUTCDate(),
        d.getUTCHours(),
        d.getUTCMinutes(),
        d.getUTCSeconds(),
      ];
      fields.forEach((f, i) => (buf[at + i] = toBcd(f)));
      buf[at + 6] = toBcd(Math.floor(ms / 10));
      buf[at + 7] = ((ms % 10) << 4) | (d.getUTCDay() + 1); // weekday: 1 = Sunday
      return;
    }
    default:
      throw new EncodeError(`${type} cannot be written`); // BOOL goes through encodeValue
  }
}

/**
 * The bytes to write for a tag (from its first byte), or, for a single BOOL, the bit. Throws an EncodeError when
 * the value does not fit: wrong type, out of range, too long, an array of the wrong length.
 */
export function encodeValue(address: S7Address, value: TagValue): Buffer | boolean {
  const { type, count } = address;
  if (type === 'BOOL' && !address.array) {
    if (typeof value !== 'boolean') throw new EncodeError(`expects a boolean, got ${typeof value}`);
    return value;
  }
  const buf = Buffer.alloc(byteLength(address));
  if (type === 'CHAR' && address.array) {
    if (typeof value !== 'string') throw new EncodeError(`expects a string, got ${typeof value}`);
    latin1(value, count, `CHAR[${count}]`).copy(buf); // the rest stays NUL
    return buf;
  }
  if (!address.array) {
    encodeElement(address, value, buf, 0);
    return buf;
  }
  if (!Array.isArray(value)) throw new EncodeError(`expects an array of ${count}, got ${typeof value}`);
  const items = value as readonly unknown[];
  if (items.length !== count) throw new EncodeError(`expects ${count} elements, got ${items.length}`);
  if (type === 'BOOL') {
    items.forEach((item, i) => {
      if (typeof item !== 'boolean') throw new EncodeError(`element ${i}: expects a boolean`);
      if (item) buf[i >> 3] |= 1 << (i & 7);
    });
    return buf;
  }
  const stride = elementStride(address);
  items.forEach((item, i) => {
    try {
      encodeElement(address, item, buf, i * stride);
    } catch (err) {
      throw err instanceof EncodeError ? new EncodeError(`element ${i}: ${err.message}`) : err;
    }
  });
  return buf;
}
