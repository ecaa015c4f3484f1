/**
 * Sparkplug B payload encoding (Sparkplug 3.0 §6.4): the only module that imports `sparkplug-payload`.
 *
 * The package's convenience layer (`encodePayload`/`decodePayload`) has known gaps, so only its generated
 * protobuf code is used and the value mapping lives here:
 * - it writes a `datatype` into every metric, but NDATA/DDATA/NCMD/DCMD should carry alias and value only
 *   [tck-id-payloads-alias-data-cmd-requirement]; here `datatype` is written only when the caller passes it;
 * - it puts UInt32 into `long_value`; Sparkplug 3.0 carries Int8..Int32 and UInt8..UInt32 in the 32-bit
 *   `int_value` (signed types as two's complement) and only Int64, UInt64 and DateTime in `long_value`;
 * - it knows no array types (22..34, packed little-endian into `bytes_value`) and cannot decode several
 *   DataSet column types; DataSets are not produced by edgeferry and are decoded as null.
 * Templates (§6.4.17) travel in `template` beside the value: definitions in the NBIRTH, instances (a device built
 * from a profile, with `sparkplug.templates`) in births, data and commands; their parameters are not used.
 * 64-bit integers are bigint on our side and never pass through a lossy JS number.
 *
 * The byte-level helpers at the end (`withSeq`, `readTimestamp`, ...) rewrite our own payloads for the uplink
 * without a full decode where that is cheap (the seq of every DATA message going upstream).
 */
import sparkplugProto from 'sparkplug-payload/lib/sparkplugPayloadProto.js';
import { DATATYPES, type DatatypeSpec, type TagDatatype, type TagValue } from '../../connectors/contract.js';

const Proto = sparkplugProto.org.eclipse.tahu.protobuf;
const ProtoPayload = Proto.Payload;

/** Every datatype a metric can declare here: the tag datatypes plus the few Sparkplug-only ones we read. */
export type MetricDatatype = TagDatatype | 'UUID' | 'DataSet' | 'File' | 'Template';

/** The Sparkplug datatypes no tag declares, which hosts may still send: how they travel (DataSet, Template: not decoded). */
const OTHER_DATATYPES: Readonly<
  Record<Exclude<MetricDatatype, TagDatatype>, Pick<DatatypeSpec, 'code'> & { field?: DatatypeSpec['field'] }>
> = {
  UUID: { code: 15, field: 'stringValue' },
  DataSet: { code: 16 },
  File: { code: 18, field: 'bytesValue' },
  Template: { code: 19 },
};

/** Sparkplug 3.0 DataType enum values (§6.4.16), from the datatype table (connectors/contract.ts). */
export const DATATYPE_CODES = Object.fromEntries(
  [...Object.entries(DATATYPES), ...Object.entries(OTHER_DATATYPES)].map(([name, spec]) => [name, spec.code]),
) as Readonly<Record<MetricDatatype, number>>;

/** The table's entry for a datatype: how it travels, its range. */
function specOf(type: MetricDatatype): { field?: DatatypeSpec['field']; range?: DatatypeSpec['range'] } {
  return type in DATATYPES
    ? DATATYPES[type as TagDatatype]
    : OTHER_DATATYPES[type as Exclude<MetricDatatype, TagDatatype>];
}

const DATATYPE_NAMES = new Map<number, MetricDatatype>(
  Object.entries(DATATYPE_CODES).map(([name, code]) => [code, name as MetricDatatype]),
);

export function datatypeName(code: number): MetricDatatype | undefined {
  return DATATYPE_NAMES.get(code);
}

/**
 * Sparkplug quality codes (§6.4.8 "Quality Codes"), carried in the metric property `Quality` (Int32): the OPC DA
 * values Ignition reads (0 bad, 64 uncertain, 192 good) and its 500 for stale.
 */
export const Quality = { Bad: 0, Uncertain: 64, Good: 192, Stale: 500 } as const;
export type QualityCode = (typeof Quality)[keyof typeof Quality];

export interface MetricOut {
  /** Births only [tck-id-payloads-alias-birth-requirement]; DATA and DEATH messages carry the alias alone. */
  readonly name?: string;
  readonly alias?: number;
  readonly timestamp?: number;
  /** Births only: how the value is encoded is always taken from here (or `valueType`). */
  readonly datatype?: MetricDatatype;
  /** The datatype used to encode `value` when `datatype` is not written (DATA messages). */
  readonly valueType?: MetricDatatype;
  /** Undefined or null: the metric is sent with `is_null` (a bad reading, or not read yet). */
  readonly value?: TagValue | null;
  readonly isHistorical?: boolean;
  readonly quality?: QualityCode;
  /** Births only: what the metric means (docs/architecture.md#tag-properties). */
  readonly properties?: BirthProperties;
  /** A Template definition or instance (datatype or valueType `Template`): carried instead of `value`. */
  readonly template?: TemplateOut;
}

/**
 * A Template (Sparkplug 3.0 §6.4.17). A definition names no template_ref [tck-id-payloads-template-ref-definition]
 * and its members carry no value; an instance names its definition [tck-id-payloads-template-instance-ref] and
 * sets is_definition false [tck-id-payloads-template-instance-is-definition].
 */
export type TemplateOut =
  | { readonly isDefinition: true; readonly members: readonly MetricOut[] }
  | { readonly isDefinition: false; readonly ref: string; readonly members: readonly MetricOut[] };

/**
 * Metric properties of a birth, by the names host applications read (Ignition's tag properties: `engUnit`,
 * `engLow`, `engHigh`, `documentation`, `readOnly`): Sparkplug 3.0 §6.4.8 defines only `Quality` and leaves
 * other keys to them; each value carries its type [tck-id-payloads-metric-propertyvalue-type-req].
 */
export interface BirthProperties {
  readonly engUnit?: string;
  readonly engLow?: number;
  readonly engHigh?: number;
  readonly documentation?: string;
  readonly readOnly?: boolean;
}

/** How each birth property travels: a PropertyValue type and its field. */
const PROPERTY_TYPES: Readonly<Record<keyof BirthProperties, 'String' | 'Double' | 'Boolean'>> = {
  engUnit: 'String',
  engLow: 'Double',
  engHigh: 'Double',
  documentation: 'String',
  readOnly: 'Boolean',
};

export interface PayloadOut {
  readonly timestamp: number;
  /** Omitted for NDEATH [tck-id-payloads-ndeath-seq] and commands. */
  readonly seq?: number;
  readonly metrics: readonly MetricOut[];
  /** With `body`: what the body is (the compressed payload convention, src/sparkplug/compression.ts). */
  readonly uuid?: string;
  readonly body?: Uint8Array;
}

export interface MetricIn {
  readonly name?: string;
  readonly alias?: number;
  readonly timestamp?: number;
  readonly datatype?: MetricDatatype;
  /** null when `is_null` is set, when no value field is present, or for types decoded as opaque. */
  readonly value: TagValue | null;
  readonly isNull: boolean;
  readonly isHistorical: boolean;
  readonly isTransient: boolean;
  readonly quality?: number;
  readonly properties: Readonly<Record<string, unknown>>;
  /** The Template a metric of datatype Template carries (its `value` is null). */
  readonly template?: TemplateIn;
}

export interface TemplateIn {
  readonly ref?: string;
  readonly isDefinition: boolean;
  /** Decoded with the same lookup as top-level metrics: by member name. */
  readonly members: readonly MetricIn[];
}

export interface PayloadIn {
  readonly timestamp?: number;
  readonly seq?: number;
  readonly metrics: readonly MetricIn[];
  readonly uuid?: string;
  readonly body?: Buffer;
}

/** Resolves the datatype of a DATA/CMD metric that carries no datatype (the birth declared it). */
export type DatatypeLookup = (metric: { name?: string; alias?: number }) => MetricDatatype | undefined;

// -------------------------------------------------------------------------------------------------------------
// Encoding

interface LongBits {
  low: number;
  high: number;
}

function longBits(value: bigint): LongBits {
  const u = BigInt.asUintN(64, value);
  return { low: Number(u & 0xffff_ffffn), high: Number(u >> 32n) };
}

/** protobufjs accepts `{low, high}` objects for 64-bit fields; its typings only name Long. */
type Long64 = number;
const asLong = (value: bigint | number): Long64 =>
  (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0
    ? value
    : longBits(BigInt(value))) as unknown as Long64;

/** An NDEATH: no seq [tck-id-payloads-ndeath-seq], only the bdSeq of the session it ends [tck-id-payloads-ndeath-bdseq]. */
export function nodeDeathPayload(bdSeq: number): PayloadOut {
  return { timestamp: Date.now(), metrics: [{ name: 'bdSeq', datatype: 'Int64', value: BigInt(bdSeq) }] };
}

export function encodePayload(payload: PayloadOut): Buffer {
  const metrics = payload.metrics.map((m) => encodeMetric(m, false));
  const message: Record<string, unknown> = { timestamp: asLong(payload.timestamp), metrics };
  if (payload.seq !== undefined) message.seq = payload.seq;
  if (payload.uuid !== undefined) message.uuid = payload.uuid;
  if (payload.body !== undefined) message.body = payload.body;
  return Buffer.from(ProtoPayload.encode(message).finish());
}

/** `inDefinition`: a member of a Template definition, which has no value, not even a null one. */
function encodeMetric(m: MetricOut, inDefinition: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (m.name !== undefined) out.name = m.name;
  if (m.alias !== undefined) out.alias = asLong(m.alias);
  if (m.timestamp !== undefined) out.timestamp = asLong(m.timestamp);
  if (m.datatype !== undefined) out.datatype = DATATYPE_CODES[m.datatype];
  if (m.isHistorical) out.isHistorical = true;
  if (m.quality !== undefined || m.properties !== undefined) out.properties = encodeProperties(m);
  const type = m.datatype ?? m.valueType;
  if (m.template !== undefined) {
    const { isDefinition, members } = m.template;
    const template: Record<string, unknown> = {
      isDefinition,
      metrics: members.map((member) => encodeMetric(member, isDefinition)),
    };
    if (!m.template.isDefinition) template.templateRef = m.template.ref;
    out.templateValue = template;
  } else if (m.value === undefined || m.value === null) {
    if (!inDefinition) out.isNull = true;
  } else {
    if (type === undefined) throw new TypeError(`metric ${m.name ?? m.alias}: no datatype to encode its value`);
    setValue(out, type, m.value);
  }
  return out;
}

/**
 * A metric's PropertySet: one value per key [tck-id-payloads-propertyset-keys-array-size]
 * [tck-id-payloads-propertyset-values-array-size], each with its type [tck-id-payloads-metric-propertyvalue-type-value].
 */
function encodeProperties(m: MetricOut): { keys: string[]; values: Record<string, unknown>[] } {
  const keys: string[] = [];
  const values: Record<string, unknown>[] = [];
  if (m.quality !== undefined) {
    keys.push('Quality');
    values.push({ type: DATATYPE_CODES.Int32, intValue: m.quality });
  }
  if (m.properties !== undefined) {
    for (const key of Object.keys(PROPERTY_TYPES) as (keyof BirthProperties)[]) {
      const value = m.properties[key];
      if (value === undefined) continue;
      const type = PROPERTY_TYPES[key];
      const property: Record<string, unknown> = { type: DATATYPE_CODES[type] };
      setValue(property, type, value);
      keys.push(key);
      values.push(property);
    }
  }
  return { keys, values };
}

function setValue(out: Record<string, unknown>, type: MetricDatatype, value: TagValue): void {
  switch (specOf(type).field) {
    case 'intValue':
      // uint32 on the wire; negative values travel as two's complement.
      out.intValue = Number(toBigInt(value) & 0xffff_ffffn);
      return;
    case 'longValue':
      out.longValue = longBits(toBigInt(value));
      return;
    case 'floatValue':
      out.floatValue = Number(value);
      return;
    case 'doubleValue':
      out.doubleValue = Number(value);
      return;
    case 'booleanValue':
      out.booleanValue = Boolean(value);
      return;
    case 'stringValue':
      out.stringValue = String(value);
      return;
    case 'bytesValue':
      if (type.endsWith('Array')) out.bytesValue = encodeArray(type, value);
      else out.bytesValue = Buffer.isBuffer(value) ? value : Buffer.from(String(value));
      return;
    default:
      throw new TypeError(`encoding ${type} values is not supported`);
  }
}

function toBigInt(value: TagValue): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'boolean') return value ? 1n : 0n;
  if (typeof value === 'number') return BigInt(Math.trunc(value));
  if (typeof value === 'string') return BigInt(value);
  throw new TypeError('not an integer value');
}

const ARRAY_ELEMENT: Partial<
  Record<
    MetricDatatype,
    {
      bytes: number;
      write: (b: Buffer, v: unknown, at: number) => void;
      read: (b: Buffer, at: number) => number | bigint;
    }
  >
> = {
  Int8Array: { bytes: 1, write: (b, v, at) => b.writeInt8(Number(v), at), read: (b, at) => b.readInt8(at) },
  UInt8Array: { bytes: 1, write: (b, v, at) => b.writeUInt8(Number(v), at), read: (b, at) => b.readUInt8(at) },
  Int16Array: { bytes: 2, write: (b, v, at) => b.writeInt16LE(Number(v), at), read: (b, at) => b.readInt16LE(at) },
  UInt16Array: { bytes: 2, write: (b, v, at) => b.writeUInt16LE(Number(v), at), read: (b, at) => b.readUInt16LE(at) },
  Int32Array: { bytes: 4, write: (b, v, at) => b.writeInt32LE(Number(v), at), read: (b, at) => b.readInt32LE(at) },
  UInt32Array: { bytes: 4, write: (b, v, at) => b.writeUInt32LE(Number(v), at), read: (b, at) => b.readUInt32LE(at) },
  Int64Array: {
    bytes: 8,
    write: (b, v, at) => b.writeBigInt64LE(BigInt(v as bigint), at),
    read: (b, at) => b.readBigInt64LE(at),
  },
  UInt64Array: {
    bytes: 8,
    write: (b, v, at) => b.writeBigUInt64LE(BigInt(v as bigint), at),
    read: (b, at) => b.readBigUInt64LE(at),
  },
  DateTimeArray: {
    bytes: 8,
    write: (b, v, at) => b.writeBigInt64LE(BigInt(v as bigint), at),
    read: (b, at) => Number(b.readBigInt64LE(at)),
  },
  FloatArray: { bytes: 4, write: (b, v, at) => b.writeFloatLE(Number(v), at), read: (b, at) => b.readFloatLE(at) },
  DoubleArray: { bytes: 8, write: (b, v, at) => b.writeDoubleLE(Number(v), at), read: (b, at) => b.readDoubleLE(at) },
};

/** Sparkplug 3.0 array encodings: packed little-endian; BooleanArray is a 4-byte count plus bits (MSB first). */
function encodeArray(type: MetricDatatype, value: TagValue): Buffer {
  if (!Array.isArray(value)) throw new TypeError(`${type} needs an array value`);
  const items = value as readonly (number | bigint | boolean | string)[];
  if (type === 'BooleanArray') {
    const out = Buffer.alloc(4 + Math.ceil(items.length / 8));
    out.writeUInt32LE(items.length, 0);
    items.forEach((v, i) => {
      if (v) out[4 + (i >> 3)] |= 0x80 >> (i & 7);
    });
    return out;
  }
  if (type === 'StringArray') {
    return Buffer.concat(items.map((s) => Buffer.from(`${String(s)}\u0000`, 'utf8')));
  }
  const element = ARRAY_ELEMENT[type];
  if (!element) throw new TypeError(`unknown array type ${type}`);
  const out = Buffer.alloc(items.length * element.bytes);
  items.forEach((v, i) => element.write(out, v, i * element.bytes));
  return out;
}

// -------------------------------------------------------------------------------------------------------------
// Decoding

interface ProtoLong {
  low: number;
  high: number;
  unsigned?: boolean;
}

function fromLong(value: unknown): bigint {
  if (typeof value === 'number') return BigInt(value);
  const l = value as ProtoLong;
  return (BigInt(l.high >>> 0) << 32n) | BigInt(l.low >>> 0);
}

function longToNumber(value: unknown): number {
  return Number(fromLong(value));
}

type ProtoMetric = Record<string, unknown>;

export function decodePayload(buf: Uint8Array, lookup?: DatatypeLookup): PayloadIn {
  const p = ProtoPayload.decode(buf) as unknown as Record<string, unknown>;
  const has = (k: string): boolean => Object.prototype.hasOwnProperty.call(p, k);
  const metrics = ((p.metrics as ProtoMetric[] | undefined) ?? []).map((m) => decodeMetric(m, lookup));
  return {
    timestamp: has('timestamp') ? longToNumber(p.timestamp) : undefined,
    seq: has('seq') ? longToNumber(p.seq) : undefined,
    metrics,
    uuid: has('uuid') ? (p.uuid as string) : undefined,
    body: has('body') ? Buffer.from(p.body as Uint8Array) : undefined,
  };
}

function decodeMetric(m: ProtoMetric, lookup: DatatypeLookup | undefined): MetricIn {
  const has = (k: string): boolean => Object.prototype.hasOwnProperty.call(m, k);
  const name = has('name') ? (m.name as string) : undefined;
  const alias = has('alias') ? longToNumber(m.alias) : undefined;
  const declared = has('datatype') ? datatypeName(m.datatype as number) : undefined;
  const datatype = declared ?? lookup?.({ name, alias });
  const isNull = m.isNull === true;
  const properties = has('properties') ? decodeProperties(m.properties as Record<string, unknown>) : {};
  const quality = typeof properties.Quality === 'number' ? properties.Quality : undefined;
  const template = has('templateValue') ? decodeTemplate(m.templateValue as ProtoMetric, lookup) : undefined;
  return {
    name,
    alias,
    timestamp: has('timestamp') ? longToNumber(m.timestamp) : undefined,
    datatype: declared,
    value: isNull ? null : readValue(m, datatype),
    isNull,
    isHistorical: m.isHistorical === true,
    isTransient: m.isTransient === true,
    quality,
    properties,
    template,
  };
}

function decodeTemplate(t: ProtoMetric, lookup: DatatypeLookup | undefined): TemplateIn {
  const members = ((t.metrics as ProtoMetric[] | undefined) ?? []).map((m) => decodeMetric(m, lookup));
  return {
    ref: Object.prototype.hasOwnProperty.call(t, 'templateRef') ? (t.templateRef as string) : undefined,
    isDefinition: t.isDefinition === true,
    members,
  };
}

/**
 * The value of a metric, never narrowed: an integer that does not fit its declared type stays out of range, so
 * a command check refuses it instead of writing its truncated bits. Hosts differ in where they put integers:
 * Int8..Int32 travel as 32-bit two's complement in `int_value` (sign-extended: Tahu Java and JS), UInt32 in
 * `int_value` (Sparkplug 3.0) or `long_value` (Tahu), 64-bit integers and DateTime in `long_value`.
 */
function readValue(m: ProtoMetric, type: MetricDatatype | undefined): TagValue | null {
  const has = (k: string): boolean => Object.prototype.hasOwnProperty.call(m, k);
  const spec = type === undefined ? undefined : specOf(type);
  const signed = spec?.range !== undefined && spec.range[0] < 0n;
  const wide = spec?.range !== undefined && spec.field === 'longValue'; // Int64, UInt64
  if (has('intValue')) {
    const raw = (m.intValue as number) >>> 0;
    if (type === 'Boolean') return raw !== 0;
    if (wide) return signed ? BigInt(raw | 0) : BigInt(raw);
    return signed ? raw | 0 : raw;
  }
  if (has('longValue')) {
    const raw = fromLong(m.longValue);
    if (type === 'Boolean') return raw !== 0n;
    if (type === 'DateTime') return Number(BigInt.asIntN(64, raw));
    if (spec?.range === undefined) return raw;
    const value = signed ? BigInt.asIntN(64, raw) : raw;
    return wide ? value : asNumberIfSafe(value);
  }
  if (has('floatValue')) return m.floatValue as number;
  if (has('doubleValue')) return m.doubleValue as number;
  if (has('booleanValue')) return m.booleanValue as boolean;
  if (has('stringValue')) return m.stringValue as string;
  if (has('bytesValue')) {
    const bytes = Buffer.from(m.bytesValue as Uint8Array);
    return type !== undefined && type.endsWith('Array') ? decodeArray(type, bytes) : bytes;
  }
  return null;
}

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** A number when exact (what 8-32 bit values are), else the bigint, so an out-of-range value is reported as sent. */
function asNumberIfSafe(n: bigint): number | bigint {
  return n >= MIN_SAFE && n <= MAX_SAFE ? Number(n) : n;
}

function decodeArray(type: MetricDatatype, bytes: Buffer): TagValue {
  if (type === 'BooleanArray') {
    const count = bytes.length >= 4 ? bytes.readUInt32LE(0) : 0;
    return Array.from({ length: count }, (_, i) => (bytes[4 + (i >> 3)] & (0x80 >> (i & 7))) !== 0);
  }
  if (type === 'StringArray') {
    const parts = bytes.toString('utf8').split('\u0000');
    parts.pop(); // the terminator of the last string
    return parts;
  }
  const element = ARRAY_ELEMENT[type];
  if (!element) return bytes;
  const out: (number | bigint)[] = [];
  for (let at = 0; at + element.bytes <= bytes.length; at += element.bytes) out.push(element.read(bytes, at));
  return out;
}

function decodeProperties(set: Record<string, unknown>): Record<string, unknown> {
  const keys = (set.keys as string[] | undefined) ?? [];
  const values = (set.values as (ProtoMetric | undefined)[] | undefined) ?? [];
  const out: Record<string, unknown> = {};
  keys.forEach((key, i) => {
    const v = values[i];
    if (!v) return;
    const type = typeof v.type === 'number' ? datatypeName(v.type) : undefined;
    out[key] = v.isNull === true ? null : readValue(v, type);
  });
  return out;
}

// -------------------------------------------------------------------------------------------------------------
// Rewriting our own payloads for the uplink

/** Reads a varint at `at`; returns [value, next offset]. Values beyond 2^53 are not expected in top-level fields. */
function readVarint(buf: Uint8Array, at: number): [number, number] {
  let value = 0;
  let factor = 1;
  for (let i = at; i < buf.length; i++) {
    const byte = buf[i];
    value += (byte & 0x7f) * factor;
    if ((byte & 0x80) === 0) return [value, i + 1];
    factor *= 128;
  }
  throw new RangeError('truncated varint');
}

function writeVarint(value: number): Buffer {
  const bytes: number[] = [];
  let v = value;
  while (v >= 0x80) {
    bytes.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  bytes.push(v);
  return Buffer.from(bytes);
}

/** [start, end) of every top-level field with `fieldNumber`, walking the payload without decoding metrics. */
function findTopLevel(buf: Uint8Array, fieldNumber: number): { start: number; valueAt: number; end: number }[] {
  const found: { start: number; valueAt: number; end: number }[] = [];
  let at = 0;
  while (at < buf.length) {
    const start = at;
    const [key, afterKey] = readVarint(buf, at);
    const wire = key & 7;
    let end: number;
    if (wire === 0) end = readVarint(buf, afterKey)[1];
    else if (wire === 2) {
      const [length, afterLength] = readVarint(buf, afterKey);
      end = afterLength + length;
    } else if (wire === 1) end = afterKey + 8;
    else if (wire === 5) end = afterKey + 4;
    else throw new RangeError(`unsupported wire type ${wire}`);
    if (end > buf.length) throw new RangeError('truncated field');
    if (key >>> 3 === fieldNumber) found.push({ start, valueAt: afterKey, end });
    at = end;
  }
  return found;
}

/** The payload with its `seq` replaced (or added): one pass over the top-level fields, metrics untouched. */
export function withSeq(buf: Buffer, seq: number): Buffer {
  const fields = findTopLevel(buf, 3);
  const seqField = Buffer.concat([Buffer.from([0x18]), writeVarint(seq)]);
  if (fields.length === 0) return Buffer.concat([buf, seqField]);
  const parts: Buffer[] = [];
  let at = 0;
  for (const f of fields) {
    parts.push(buf.subarray(at, f.start));
    at = f.end;
  }
  parts.push(buf.subarray(at), seqField);
  return Buffer.concat(parts);
}

/** The payload timestamp (ms), or undefined. */
export function readTimestamp(buf: Buffer): number | undefined {
  const f = findTopLevel(buf, 1).at(0);
  return f ? readVarint(buf, f.valueAt)[0] : undefined;
}

/** The payload `seq`, or undefined. */
export function readSeq(buf: Buffer): number | undefined {
  const f = findTopLevel(buf, 3).at(0);
  return f ? readVarint(buf, f.valueAt)[0] : undefined;
}

/**
 * The payload with every metric flagged `is_historical` and the given seq: stored data sent after an outage
 * must never look live to a host application.
 */
export function asHistorical(buf: Buffer, seq: number): Buffer {
  const p = ProtoPayload.decode(buf);
  for (const metric of p.metrics) metric.isHistorical = true;
  (p as unknown as Record<string, unknown>).seq = seq;
  return Buffer.from(ProtoPayload.encode(p).finish());
}

/** An NBIRTH or NDEATH payload with its `bdSeq` metric (and, if given, its seq) replaced. */
export function withBdSeq(buf: Buffer, bdSeq: number, seq?: number): Buffer {
  const p = ProtoPayload.decode(buf);
  for (const metric of p.metrics) {
    if (metric.name === 'bdSeq') metric.longValue = asLong(bdSeq);
  }
  if (seq !== undefined) (p as unknown as Record<string, unknown>).seq = seq;
  return Buffer.from(ProtoPayload.encode(p).finish());
}
