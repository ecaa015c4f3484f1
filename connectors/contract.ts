/**
 * The whole surface a connector sees (docs/architecture.md#connectors). A connector reads its device and reports samples; it
 * never retries on its own: `sparkplug/device.ts` owns backoff, DDEATH/DBIRTH and restarts, so every connector
 * behaves the same.
 */
import type { z } from 'zod';
import type { Logger } from '../src/util/logger.js';
import { ConnectorError } from '../src/util/errors.js';

export { ConnectorError };

/** Sparkplug B datatypes a tag may declare (Sparkplug 3.0 §6.4.16). */
export type TagDatatype =
  | 'Int8'
  | 'Int16'
  | 'Int32'
  | 'Int64'
  | 'UInt8'
  | 'UInt16'
  | 'UInt32'
  | 'UInt64'
  | 'Float'
  | 'Double'
  | 'Boolean'
  | 'String'
  | 'DateTime'
  | 'Text'
  | 'Bytes'
  | 'Int8Array'
  | 'Int16Array'
  | 'Int32Array'
  | 'Int64Array'
  | 'UInt8Array'
  | 'UInt16Array'
  | 'UInt32Array'
  | 'UInt64Array'
  | 'FloatArray'
  | 'DoubleArray'
  | 'BooleanArray'
  | 'StringArray'
  | 'DateTimeArray';

/** 64-bit integers travel as bigint so no precision is lost; DateTime as epoch milliseconds. */
export type TagValue = number | bigint | boolean | string | Buffer | readonly (number | bigint | boolean | string)[];

/** How a datatype travels in a Sparkplug payload, what it holds, and what it shows with no value. */
export interface DatatypeSpec {
  /** Sparkplug 3.0 DataType enum value (§6.4.16). */
  readonly code: number;
  /** The Sparkplug Metric field its value travels in; arrays travel packed in `bytesValue` (§6.4.17). */
  readonly field:
    'intValue' | 'longValue' | 'floatValue' | 'doubleValue' | 'booleanValue' | 'stringValue' | 'bytesValue';
  /** Integers: the inclusive range of its values. */
  readonly range?: readonly [bigint, bigint];
  /** A new empty value: what a tag shows when its device gives a bad status and no value. */
  zero(): TagValue;
}

const integer = (code: number, field: 'intValue' | 'longValue', min: bigint, max: bigint): DatatypeSpec => ({
  code,
  field,
  range: [min, max],
  zero: field === 'longValue' ? () => 0n : () => 0,
});
const array = (code: number): DatatypeSpec => ({ code, field: 'bytesValue', zero: () => [] });

/**
 * Every datatype a tag may declare, in one table: the payload codec, the command checks and the connectors read
 * it instead of each keeping a switch of their own. 64-bit integers are bigint values; DateTime is epoch ms.
 */
export const DATATYPES: Readonly<Record<TagDatatype, DatatypeSpec>> = {
  Int8: integer(1, 'intValue', -128n, 127n),
  Int16: integer(2, 'intValue', -32_768n, 32_767n),
  Int32: integer(3, 'intValue', -2_147_483_648n, 2_147_483_647n),
  Int64: integer(4, 'longValue', -(2n ** 63n), 2n ** 63n - 1n),
  UInt8: integer(5, 'intValue', 0n, 255n),
  UInt16: integer(6, 'intValue', 0n, 65_535n),
  UInt32: integer(7, 'intValue', 0n, 4_294_967_295n),
  UInt64: integer(8, 'longValue', 0n, 2n ** 64n - 1n),
  Float: { code: 9, field: 'floatValue', zero: () => 0 },
  Double: { code: 10, field: 'doubleValue', zero: () => 0 },
  Boolean: { code: 11, field: 'booleanValue', zero: () => false },
  String: { code: 12, field: 'stringValue', zero: () => '' },
  DateTime: { code: 13, field: 'longValue', zero: () => 0 },
  Text: { code: 14, field: 'stringValue', zero: () => '' },
  Bytes: { code: 17, field: 'bytesValue', zero: () => Buffer.alloc(0) },
  Int8Array: array(22),
  Int16Array: array(23),
  Int32Array: array(24),
  Int64Array: array(25),
  UInt8Array: array(26),
  UInt16Array: array(27),
  UInt32Array: array(28),
  UInt64Array: array(29),
  FloatArray: array(30),
  DoubleArray: array(31),
  BooleanArray: array(32),
  StringArray: array(33),
  DateTimeArray: array(34),
};

/**
 * What a tag means to a person, published as metric properties in the births only (docs/architecture.md#tag-properties):
 * from the tag's config, or from the device itself where it says (OPC UA EUInformation, EURange, Description).
 */
export interface TagProperties {
  /** Engineering unit, e.g. `bar`. */
  readonly engUnit?: string;
  /** The normal range of the value, in engineering units. */
  readonly engLow?: number;
  readonly engHigh?: number;
  readonly description?: string;
}

export interface TagDefinition {
  /** The Sparkplug metric name, unique within the connector. */
  readonly name: string;
  readonly datatype: TagDatatype;
  readonly writable: boolean;
  /** Report-by-exception deadband: a numeric change smaller than this is not published. */
  readonly deadband?: number;
  readonly properties: TagProperties;
}

export interface TagSample {
  readonly name: string;
  readonly value: TagValue;
  /** Epoch ms when the value was read (or the source timestamp the device gave). */
  readonly timestamp: number;
  readonly quality: TagQuality;
}

/**
 * How far a reading can be trusted, as the device says (OPC UA's status severity): `good`; `uncertain`, a value
 * the device doubts but still gives (UncertainLastUsableValue), published with that quality; `bad`, no usable
 * value, published as null with quality BAD, never passed off as good.
 */
export type TagQuality = 'good' | 'uncertain' | 'bad';

/** A written tag as read back from the device right after the write. */
export interface ReadBack {
  readonly value: TagValue;
  /** Epoch ms of the read. */
  readonly timestamp: number;
  /** False when the device took the write but holds another value: it clamped it, or its program changed it. */
  readonly matches: boolean;
}

/**
 * A write refused before anything went to the device: the value does not fit the tag (its type, range, string
 * length, or no exact register value after scale/offset). `why` says which, for the audit line.
 */
export class ValueRefusedError extends ConnectorError {
  readonly why: string;
  constructor(connectorId: string, tag: string, why: string) {
    super('EF_CONNECTOR_WRITE', connectorId, `write ${tag} refused: ${why}`, { retryable: false });
    this.why = why;
  }
}

export interface TagSink {
  data(samples: readonly TagSample[]): void;
  /** The device is lost (connection dropped, repeated timeouts); the runtime restarts the connector later. */
  lost(err: ConnectorError): void;
}

export interface Connector {
  /** The Sparkplug device id. */
  readonly id: string;
  /**
   * Known before start, so aliases can be assigned. Names, datatypes and writability never change; `properties`
   * may be completed from the device during start() (OPC UA), and are read again once it resolved.
   */
  readonly tags: readonly TagDefinition[];
  /** Connects, then delivers samples until stop(); rejects with a ConnectorError if the device is unreachable. */
  start(sink: TagSink): Promise<void>;
  /**
   * Writes a tag (Sparkplug DCMD) and reads it back: resolves with what the device holds now, or undefined when
   * that read failed (the write itself was accepted). Rejects with a ValueRefusedError before any I/O when the
   * value does not fit the tag, else with a ConnectorError (unknown, read-only, device refused or unreachable).
   */
  write(tag: string, value: TagValue): Promise<ReadBack | undefined>;
  /** Idempotent; releases sockets and timers. */
  stop(): Promise<void>;
  /**
   * The `p`-quantile (0..1) in ms of how long its recent reads of the device took, for operators (the console); a
   * polling connector times its poll cycles. Absent where values are pushed (OPC UA subscriptions).
   */
  readLatencyMs?(p: number): number;
}

/** What the gateway hands a factory with each connector config. */
export interface ConnectorContext {
  /** A logger already bound to this connector (mod, connector id). */
  readonly log: Logger;
  /** The gateway's data directory (`storage.path`), where a connector keeps files of its own (the OPC UA PKI). */
  readonly dataDir: string;
}

export interface ConnectorFactory<C> {
  readonly type: string;
  readonly schema: z.ZodType<C>;
  create(config: C, context: ConnectorContext): Connector;
}

/** A commissioning request (the web console's test reads and browses) with a wrong field, named by its key path. */
export class RequestError extends Error {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(`${path}: ${message}`);
  }
}

/** `input` checked against `schema`; the first problem is a RequestError naming the key. */
export function parseRequest<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new RequestError(issue.path.join('.') || '(body)', issue.message);
}
