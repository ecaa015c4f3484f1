/**
 * OPC UA Variant ↔ edgeferry TagValue. Pure: it works on the plain shape of a node-opcua Variant
 * (`{ dataType, arrayType, value }`) and the built-in type ids of OPC UA Part 6 §5.1.2, which are fixed by the
 * specification, so this module needs no node-opcua code at runtime (node-opcua takes seconds to load).
 *
 * node-opcua represents 64-bit integers as `[high, low]` pairs of unsigned 32-bit words (two's complement for
 * Int64); edgeferry carries them as bigint so no precision is lost. DateTime travels as epoch milliseconds.
 */
import { DATATYPES, type TagDatatype, type TagValue } from '../contract.js';

/** OPC UA built-in type ids (Part 6 §5.1.2); the numbers equal node-opcua's `DataType` enum. */
export const BuiltInType = {
  Null: 0,
  Boolean: 1,
  SByte: 2,
  Byte: 3,
  Int16: 4,
  UInt16: 5,
  Int32: 6,
  UInt32: 7,
  Int64: 8,
  UInt64: 9,
  Float: 10,
  Double: 11,
  String: 12,
  DateTime: 13,
  Guid: 14,
  ByteString: 15,
  XmlElement: 16,
  NodeId: 17,
  ExpandedNodeId: 18,
  StatusCode: 19,
  QualifiedName: 20,
  LocalizedText: 21,
  ExtensionObject: 22,
  DataValue: 23,
  Variant: 24,
  DiagnosticInfo: 25,
} as const;

export type BuiltInTypeName = keyof typeof BuiltInType;

const builtInNames = new Map<number, BuiltInTypeName>(
  Object.entries(BuiltInType).map(([name, id]) => [id, name as BuiltInTypeName]),
);

/** The name of a built-in type id, e.g. `11` → `Double`; `Unknown(99)` for ids outside the specification. */
export function builtInTypeName(id: number): string {
  return builtInNames.get(id) ?? `Unknown(${id})`;
}

/** node-opcua's `VariantArrayType`. */
export const ArrayKind = { Scalar: 0, Array: 1, Matrix: 2 } as const;

/** The plain shape of a node-opcua Variant (and of its `VariantOptions`). */
export interface VariantLike {
  readonly dataType: number;
  readonly arrayType?: number;
  readonly value: unknown;
}

/** Scalar Sparkplug datatype for each OPC UA built-in type that has one. */
const scalarDatatypes = new Map<number, TagDatatype>([
  [BuiltInType.Boolean, 'Boolean'],
  [BuiltInType.SByte, 'Int8'],
  [BuiltInType.Byte, 'UInt8'],
  [BuiltInType.Int16, 'Int16'],
  [BuiltInType.UInt16, 'UInt16'],
  [BuiltInType.Int32, 'Int32'],
  [BuiltInType.UInt32, 'UInt32'],
  [BuiltInType.Int64, 'Int64'],
  [BuiltInType.UInt64, 'UInt64'],
  [BuiltInType.Float, 'Float'],
  [BuiltInType.Double, 'Double'],
  [BuiltInType.String, 'String'],
  [BuiltInType.DateTime, 'DateTime'],
  [BuiltInType.ByteString, 'Bytes'],
]);

/** Array Sparkplug datatype for each built-in type whose one-dimensional arrays have one (no Bytes arrays). */
const arrayDatatypes = new Map<number, TagDatatype>([
  [BuiltInType.Boolean, 'BooleanArray'],
  [BuiltInType.SByte, 'Int8Array'],
  [BuiltInType.Byte, 'UInt8Array'],
  [BuiltInType.Int16, 'Int16Array'],
  [BuiltInType.UInt16, 'UInt16Array'],
  [BuiltInType.Int32, 'Int32Array'],
  [BuiltInType.UInt32, 'UInt32Array'],
  [BuiltInType.Int64, 'Int64Array'],
  [BuiltInType.UInt64, 'UInt64Array'],
  [BuiltInType.Float, 'FloatArray'],
  [BuiltInType.Double, 'DoubleArray'],
  [BuiltInType.String, 'StringArray'],
  [BuiltInType.DateTime, 'DateTimeArray'],
]);

/**
 * The Sparkplug datatype for a node's built-in type and value rank (Part 3 §5.6.2: -1 scalar, 1 one
 * dimension, 0 one or more, -2 any, -3 scalar or one dimension, ≥2 that many dimensions). Undefined when
 * there is none: an unmapped type or a matrix. For the ranks that allow both scalar and array, `preferArray`
 * (what the operator declared) decides.
 */
export function sparkplugDatatypeFor(builtIn: number, valueRank: number, preferArray = false): TagDatatype | undefined {
  if (valueRank >= 2) return undefined;
  const isArray = valueRank === 1 || ((valueRank === 0 || valueRank === -2 || valueRank === -3) && preferArray);
  return (isArray ? arrayDatatypes : scalarDatatypes).get(builtIn);
}

export function isArrayDatatype(datatype: TagDatatype): boolean {
  return datatype.endsWith('Array');
}

/**
 * True when a tag declared as `declared` can carry the node's values: the same datatype, or `Text` for an
 * OPC UA String (Sparkplug has both names for text).
 */
export function isCompatibleDatatype(declared: TagDatatype, actual: TagDatatype): boolean {
  return declared === actual || (declared === 'Text' && actual === 'String');
}

/** The value a tag shows when the server gives a bad status and no value: zero of its datatype. */
export function zeroValue(datatype: TagDatatype): TagValue {
  return DATATYPES[datatype].zero();
}

/** The variant's value does not fit the tag (a server changed a node's type, or sent a matrix). */
export class VariantMismatchError extends Error {}

/**
 * Converts a received Variant to the tag's value. Null values (a bad status often comes with one) return
 * undefined; the caller substitutes the last value or `zeroValue`. Throws VariantMismatchError when the
 * variant cannot be the tag's datatype.
 */
export function variantToTagValue(variant: VariantLike, datatype: TagDatatype): TagValue | undefined {
  if (variant.dataType === BuiltInType.Null || variant.value === null || variant.value === undefined) {
    return undefined;
  }
  const wantArray = isArrayDatatype(datatype);
  const isArray = (variant.arrayType ?? ArrayKind.Scalar) !== ArrayKind.Scalar;
  if (variant.arrayType === ArrayKind.Matrix) {
    throw new VariantMismatchError('a matrix (multi-dimensional array) has no Sparkplug datatype');
  }
  if (wantArray !== isArray) {
    throw new VariantMismatchError(
      `expected ${wantArray ? 'an array' : 'a scalar'}, got ${isArray ? 'an array' : 'a scalar'}`,
    );
  }
  const actual = sparkplugDatatypeFor(variant.dataType, isArray ? 1 : -1);
  if (actual === undefined || !isCompatibleDatatype(datatype, actual)) {
    throw new VariantMismatchError(
      `expected ${datatype}, got OPC UA ${builtInTypeName(variant.dataType)}${isArray ? ' array' : ''}`,
    );
  }
  if (!isArray) return scalarToTagValue(variant.dataType, variant.value);
  const items = variant.value as ArrayLike<unknown>;
  const out: (number | bigint | boolean | string)[] = new Array(items.length);
  for (let i = 0; i < items.length; i++) {
    out[i] = scalarToTagValue(variant.dataType, items[i]) as number | bigint | boolean | string;
  }
  return out;
}

function scalarToTagValue(builtIn: number, value: unknown): TagValue {
  switch (builtIn) {
    case BuiltInType.Int64:
      return BigInt.asIntN(64, wordsToBigInt(value));
    case BuiltInType.UInt64:
      return wordsToBigInt(value);
    case BuiltInType.DateTime:
      return value instanceof Date ? value.getTime() : Number(value);
    case BuiltInType.ByteString:
      return value === null ? Buffer.alloc(0) : Buffer.from(value as Uint8Array);
    case BuiltInType.String:
      return value === null ? '' : String(value);
    case BuiltInType.Boolean:
      return Boolean(value);
    default:
      return value as number;
  }
}

/** `[high, low]` unsigned words → unsigned 64-bit bigint (node-opcua may also hand a plain number). */
function wordsToBigInt(value: unknown): bigint {
  if (Array.isArray(value)) return (BigInt(value[0] >>> 0) << 32n) | BigInt(value[1] >>> 0);
  if (typeof value === 'bigint') return BigInt.asUintN(64, value);
  return BigInt(Math.trunc(Number(value)));
}

/** unsigned/signed 64-bit bigint → node-opcua's `[high, low]` words. */
function bigIntToWords(value: bigint): [number, number] {
  const u = BigInt.asUintN(64, value);
  return [Number(u >> 32n), Number(u & 0xffffffffn)];
}

/** The value cannot be written as the node's type. The message says why, for the operator. */
export class WriteTypeError extends Error {}

const intRanges: Partial<Record<number, readonly [bigint, bigint]>> = {
  [BuiltInType.SByte]: [-128n, 127n],
  [BuiltInType.Byte]: [0n, 255n],
  [BuiltInType.Int16]: [-32768n, 32767n],
  [BuiltInType.UInt16]: [0n, 65535n],
  [BuiltInType.Int32]: [-2147483648n, 2147483647n],
  [BuiltInType.UInt32]: [0n, 4294967295n],
  [BuiltInType.Int64]: [-(2n ** 63n), 2n ** 63n - 1n],
  [BuiltInType.UInt64]: [0n, 2n ** 64n - 1n],
};

const FLOAT32_MAX = 3.4028234663852886e38;

/**
 * Builds the Variant to write `value` to a node of built-in type `builtIn` (scalar or one-dimensional array),
 * so the write always uses the node's own type. Throws WriteTypeError when the value does not fit: a
 * string for a number, a fraction or out-of-range number for an integer, a scalar for an array.
 */
export function tagValueToVariant(value: TagValue, builtIn: number, isArray: boolean): VariantLike {
  const typeName = builtInTypeName(builtIn);
  if (isArray) {
    if (!Array.isArray(value)) throw new WriteTypeError(`the node is an array of ${typeName}; got ${describe(value)}`);
    const items = (value as readonly unknown[]).map((item, i) => scalarForWrite(item, builtIn, `[${i}]`));
    return { dataType: builtIn, arrayType: ArrayKind.Array, value: typedArrayFor(builtIn, items) };
  }
  if (Array.isArray(value)) throw new WriteTypeError(`the node is a scalar ${typeName}; got an array`);
  return { dataType: builtIn, arrayType: ArrayKind.Scalar, value: scalarForWrite(value, builtIn, '') };
}

function scalarForWrite(value: unknown, builtIn: number, where: string): unknown {
  const typeName = builtInTypeName(builtIn);
  const fail = (): never => {
    throw new WriteTypeError(`the node is ${typeName}; got ${describe(value)}${where ? ` at ${where}` : ''}`);
  };
  const range = intRanges[builtIn];
  if (range !== undefined) {
    let n: bigint;
    if (typeof value === 'bigint') n = value;
    else if (typeof value === 'number' && Number.isInteger(value)) n = BigInt(value);
    else return fail();
    if (n < range[0] || n > range[1]) {
      throw new WriteTypeError(
        `${n} is out of range for ${typeName} (${range[0]}..${range[1]})${where ? ` at ${where}` : ''}`,
      );
    }
    return builtIn === BuiltInType.Int64 || builtIn === BuiltInType.UInt64 ? bigIntToWords(n) : Number(n);
  }
  switch (builtIn) {
    case BuiltInType.Boolean:
      return typeof value === 'boolean' ? value : fail();
    case BuiltInType.Float:
    case BuiltInType.Double:
      // NaN and infinities are Float values; a finite number beyond float32 would arrive as infinity.
      if (
        builtIn === BuiltInType.Float &&
        typeof value === 'number' &&
        Number.isFinite(value) &&
        Math.abs(value) > FLOAT32_MAX
      ) {
        throw new WriteTypeError(`${value} is out of range for Float${where ? ` at ${where}` : ''}`);
      }
      if (typeof value === 'number') return value;
      // A whole bigint that a double holds exactly is a number in all but name (Sparkplug decoders vary).
      if (typeof value === 'bigint' && BigInt(Number(value)) === value) return Number(value);
      return fail();
    case BuiltInType.String:
      return typeof value === 'string' ? value : fail();
    case BuiltInType.DateTime:
      if (typeof value === 'number' && Number.isFinite(value)) return new Date(value);
      if (typeof value === 'bigint') return new Date(Number(value));
      return fail();
    case BuiltInType.ByteString:
      return Buffer.isBuffer(value) ? value : fail();
    default:
      throw new WriteTypeError(`writing OPC UA ${typeName} is not supported`);
  }
}

function typedArrayFor(builtIn: number, items: unknown[]): unknown {
  switch (builtIn) {
    case BuiltInType.SByte:
      return Int8Array.from(items as number[]);
    case BuiltInType.Byte:
      return Uint8Array.from(items as number[]);
    case BuiltInType.Int16:
      return Int16Array.from(items as number[]);
    case BuiltInType.UInt16:
      return Uint16Array.from(items as number[]);
    case BuiltInType.Int32:
      return Int32Array.from(items as number[]);
    case BuiltInType.UInt32:
      return Uint32Array.from(items as number[]);
    case BuiltInType.Float:
      return Float32Array.from(items as number[]);
    case BuiltInType.Double:
      return Float64Array.from(items as number[]);
    default:
      return items;
  }
}

/**
 * Whether a value read back from a node of built-in type `builtIn` is the one written: a Float node keeps
 * float32 precision, so 0.1 written reads back as 0.10000000149 and still matches.
 */
export function sameValue(written: TagValue, readBack: TagValue, builtIn: number): boolean {
  if (Array.isArray(written) && Array.isArray(readBack)) {
    return written.length === readBack.length && written.every((w, i) => sameValue(w, readBack[i], builtIn));
  }
  if (Buffer.isBuffer(written) && Buffer.isBuffer(readBack)) return written.equals(readBack);
  if (typeof written === 'number' && typeof readBack === 'number') {
    const f = builtIn === BuiltInType.Float ? Math.fround : (n: number): number => n;
    return Object.is(f(written), f(readBack)) || f(written) === f(readBack);
  }
  // 64-bit nodes: a number may have been written, a bigint comes back.
  const integer = (v: TagValue): v is number | bigint => typeof v === 'bigint' || Number.isInteger(v);
  if (integer(written) && integer(readBack)) return BigInt(written) === BigInt(readBack);
  return written === readBack;
}

function describe(value: unknown): string {
  if (Buffer.isBuffer(value)) return 'bytes';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'number' && Number.isFinite(value) && !Number.isInteger(value)) return `the fraction ${value}`;
  if (typeof value === 'string')
    return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  return `${typeof value} ${String(value)}`;
}
