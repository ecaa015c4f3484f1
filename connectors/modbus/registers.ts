/**
 * Register images ↔ tag values, by datatype and byte order (see BYTE_ORDERS in schema.ts), plus scale/offset
 * and the range checks of writes. Pure functions: the tests feed them known register images.
 */
import type { TagDatatype, TagValue } from '../contract.js';
import type { ByteOrder, ModbusDatatype, ModbusTagConfig } from './schema.js';
import { widthOf } from './schema.js';

/** The subset of a tag these functions need. */
export type RegisterTag = Pick<ModbusTagConfig, 'table' | 'datatype' | 'byteOrder' | 'scale' | 'offset'> & {
  readonly length?: number;
  readonly bit?: number;
  /** Scaled integer tags: write the nearest register value instead of refusing one that is not exact. */
  readonly roundWrites?: boolean;
};

const NATIVE_DATATYPE: Readonly<Record<ModbusDatatype, TagDatatype>> = {
  bool: 'Boolean',
  bit: 'Boolean',
  int16: 'Int16',
  uint16: 'UInt16',
  int32: 'Int32',
  uint32: 'UInt32',
  int64: 'Int64',
  uint64: 'UInt64',
  float32: 'Float',
  float64: 'Double',
  string: 'String',
};

export function isScaled(tag: RegisterTag): boolean {
  return tag.scale !== 1 || tag.offset !== 0;
}

/** The Sparkplug datatype the tag is published with: a scaled value is always a Double. */
export function sparkplugDatatype(tag: RegisterTag): TagDatatype {
  return isScaled(tag) ? 'Double' : NATIVE_DATATYPE[tag.datatype];
}

function swaps(order: ByteOrder): { bytes: boolean; words: boolean } {
  const first = order[0];
  const second = order[1];
  // A.. / C.. (G..): big-endian bytes in each register; B.. / D.. (H..): swapped. The first letter in a later
  // register than the first (C/D in 4-letter, G/H in 8-letter names) means the registers are in reverse order.
  return { bytes: first > second, words: first === 'C' || first === 'D' || first === 'G' || first === 'H' };
}

/** The value's bytes in big-endian order, from its registers as they came off the wire. */
function toBigEndian(registers: ArrayLike<number>, offset: number, width: number, order: ByteOrder): Buffer {
  const { bytes, words } = swaps(order);
  const out = Buffer.allocUnsafe(width * 2);
  for (let i = 0; i < width; i++) {
    const reg = registers[offset + (words ? width - 1 - i : i)] & 0xffff;
    if (bytes) out.writeUInt16LE(reg, i * 2);
    else out.writeUInt16BE(reg, i * 2);
  }
  return out;
}

/** Registers for the wire from the value's big-endian bytes (the inverse of toBigEndian). */
function fromBigEndian(be: Buffer, order: ByteOrder): number[] {
  const { bytes, words } = swaps(order);
  const width = be.length / 2;
  const out = new Array<number>(width);
  for (let i = 0; i < width; i++) {
    const reg = bytes ? be.readUInt16LE(i * 2) : be.readUInt16BE(i * 2);
    out[words ? width - 1 - i : i] = reg;
  }
  return out;
}

/** Decodes a register-table tag from `registers` starting at `offset` (its first register). */
export function decodeRegisters(tag: RegisterTag, registers: ArrayLike<number>, offset: number): TagValue {
  const width = widthOf(tag);
  switch (tag.datatype) {
    case 'bool':
      return (registers[offset] & 0xffff) !== 0;
    case 'bit':
      return ((registers[offset] >> (tag.bit ?? 0)) & 1) === 1;
    case 'string': {
      const raw = toBigEndian(
        registers,
        offset,
        width,
        tag.byteOrder === 'BADC' || tag.byteOrder === 'DCBA' ? 'BADC' : 'ABCD',
      );
      const end = raw.indexOf(0);
      return raw.subarray(0, end < 0 ? raw.length : end).toString('latin1');
    }
    default:
      break;
  }
  const be = toBigEndian(registers, offset, width, tag.byteOrder);
  let raw: number | bigint;
  switch (tag.datatype) {
    case 'int16':
      raw = be.readInt16BE(0);
      break;
    case 'uint16':
      raw = be.readUInt16BE(0);
      break;
    case 'int32':
      raw = be.readInt32BE(0);
      break;
    case 'uint32':
      raw = be.readUInt32BE(0);
      break;
    case 'float32':
      raw = be.readFloatBE(0);
      break;
    case 'float64':
      raw = be.readDoubleBE(0);
      break;
    case 'int64':
      raw = be.readBigInt64BE(0);
      break;
    case 'uint64':
      raw = be.readBigUInt64BE(0);
      break;
  }
  if (!isScaled(tag)) return raw;
  return tag.datatype === 'float32' || tag.datatype === 'float64'
    ? Number(raw) * tag.scale + tag.offset
    : scaledInteger(tag, Number(raw));
}

/**
 * An integer register's published value: raw * scale + offset rounded to the decimals that scale and offset
 * have, so 207 with scale 0.1 is 20.7 and not the 20.700000000000003 of the float arithmetic. (A float register
 * has decimals of its own, which the scale says nothing about: its value is left as computed.)
 */
function scaledInteger(tag: RegisterTag, raw: number): number {
  let factor = decimalFactors.get(tag);
  if (factor === undefined) {
    factor = 10 ** Math.max(decimalsOf(tag.scale), decimalsOf(tag.offset));
    decimalFactors.set(tag, factor);
  }
  const value = raw * tag.scale + tag.offset;
  const units = Math.round(value * factor);
  // Past 2^53 a double has no decimals to clean up.
  return Number.isSafeInteger(units) ? units / factor : value;
}

/** 10^decimals of each scaled tag, worked out at its first value. */
const decimalFactors = new WeakMap<RegisterTag, number>();

/** The decimal places of a number as written: 0.1 → 1, 0.25 → 2, 1e-7 → 7, 100 → 0. */
function decimalsOf(n: number): number {
  const [mantissa, exponent = '0'] = String(Math.abs(n)).split('e');
  const fraction = mantissa.split('.')[1]?.length ?? 0;
  return Math.min(Math.max(0, fraction - Number(exponent)), 15);
}

/** Why a value cannot be written; the message goes to the log and to the refusing ConnectorError. */
export class EncodeError extends Error {
  override readonly name = 'EncodeError';
}

const INT_RANGES: Partial<Record<ModbusDatatype, [bigint, bigint]>> = {
  int16: [-32_768n, 32_767n],
  uint16: [0n, 65_535n],
  int32: [-2_147_483_648n, 2_147_483_647n],
  uint32: [0n, 4_294_967_295n],
  int64: [-(2n ** 63n), 2n ** 63n - 1n],
  uint64: [0n, 2n ** 64n - 1n],
};

const FLOAT32_MAX = 3.4028234663852886e38;

/**
 * Slack for the float arithmetic of undoing scale/offset, in register counts relative to the operands: 21.5
 * with scale 0.1 computes as 214.99999999999997 and is the exact register value 215; 21.55 (215.5) is not.
 */
const UNSCALE_SLACK = 1e-12;

/**
 * The raw integer for an integer datatype: scale/offset undone (a value between two register values is refused,
 * or rounded with `roundWrites`), range-checked against the register type.
 */
function toRawInteger(tag: RegisterTag, value: TagValue): bigint {
  let raw: bigint;
  if (isScaled(tag)) {
    if (typeof value !== 'number' && typeof value !== 'bigint')
      throw new EncodeError(`expects a number, got ${typeof value}`);
    const engineering = Number(value);
    const unscaled = (engineering - tag.offset) / tag.scale;
    if (!Number.isFinite(unscaled)) throw new EncodeError(`${String(value)} is not a finite number`);
    const nearest = Math.round(unscaled);
    const slack = UNSCALE_SLACK * Math.max(1, (Math.abs(engineering) + Math.abs(tag.offset)) / Math.abs(tag.scale));
    if (Math.abs(unscaled - nearest) > slack && !tag.roundWrites) {
      throw new EncodeError(
        `${engineering} is no exact ${tag.datatype} register value with scale ${tag.scale} and offset ${tag.offset} ` +
          `(the nearest, ${nearest}, reads as ${scaledInteger(tag, nearest)}; set roundWrites to round)`,
      );
    }
    raw = BigInt(nearest);
  } else if (typeof value === 'bigint') {
    raw = value;
  } else if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new EncodeError(`${value} is not a finite number`);
    if (!Number.isInteger(value)) throw new EncodeError(`${value} is not an integer`);
    raw = BigInt(value);
  } else {
    throw new EncodeError(`expects an integer, got ${typeof value}`);
  }
  const [min, max] = INT_RANGES[tag.datatype] as [bigint, bigint];
  if (raw < min || raw > max) throw new EncodeError(`${String(raw)} is outside ${tag.datatype} (${min}..${max})`);
  return raw;
}

/** Registers to write for a register-table tag (holding registers). Throws EncodeError when out of range. */
export function encodeRegisters(tag: RegisterTag, value: TagValue): number[] {
  const width = widthOf(tag);
  switch (tag.datatype) {
    case 'bool':
      if (typeof value !== 'boolean') throw new EncodeError(`expects a boolean, got ${typeof value}`);
      return [value ? 1 : 0];
    case 'bit':
      throw new EncodeError('single bits of a register are read-only');
    case 'string': {
      if (typeof value !== 'string') throw new EncodeError(`expects a string, got ${typeof value}`);
      const bytes = Buffer.from(value, 'latin1');
      if (Buffer.byteLength(value, 'latin1') !== value.length || /[^\u0000-\u00ff]/.test(value)) {
        throw new EncodeError('only Latin-1 characters fit a register string');
      }
      if (bytes.length > width * 2) throw new EncodeError(`${bytes.length} characters do not fit ${width} registers`);
      const be = Buffer.alloc(width * 2);
      bytes.copy(be);
      return fromBigEndian(be, tag.byteOrder === 'BADC' || tag.byteOrder === 'DCBA' ? 'BADC' : 'ABCD');
    }
    default:
      break;
  }
  const be = Buffer.alloc(width * 2);
  switch (tag.datatype) {
    case 'float32':
    case 'float64': {
      if (typeof value !== 'number' && typeof value !== 'bigint')
        throw new EncodeError(`expects a number, got ${typeof value}`);
      const v = (Number(value) - tag.offset) / tag.scale;
      if (!Number.isFinite(v)) throw new EncodeError(`${String(value)} is not a finite number`);
      if (tag.datatype === 'float32') {
        if (Math.abs(v) > FLOAT32_MAX) throw new EncodeError(`${v} is outside float32`);
        be.writeFloatBE(v, 0);
      } else be.writeDoubleBE(v, 0);
      break;
    }
    case 'int16':
      be.writeInt16BE(Number(toRawInteger(tag, value)), 0);
      break;
    case 'uint16':
      be.writeUInt16BE(Number(toRawInteger(tag, value)), 0);
      break;
    case 'int32':
      be.writeInt32BE(Number(toRawInteger(tag, value)), 0);
      break;
    case 'uint32':
      be.writeUInt32BE(Number(toRawInteger(tag, value)), 0);
      break;
    case 'int64':
      be.writeBigInt64BE(toRawInteger(tag, value), 0);
      break;
    case 'uint64':
      be.writeBigUInt64BE(toRawInteger(tag, value), 0);
      break;
  }
  return fromBigEndian(be, tag.byteOrder);
}

/** The coil state to write; only booleans are accepted (a DCMD with the declared Boolean type). */
export function encodeCoil(value: TagValue): boolean {
  if (typeof value !== 'boolean') throw new EncodeError(`expects a boolean, got ${typeof value}`);
  return value;
}
