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
  | 'Int8' | 'Int16' | 'Int32' | 'Int64'
  | 'UInt8' | 'UInt16' | 'UInt32' | 'UInt64'
  | 'Float' | 'Double' | 'Boolean' | 'String' | 'DateTime' | 'Text' | 'Bytes'
  | 'Int8Array' | 'Int16Array' | 'Int32Array' | 'Int64Array'
  | 'UInt8Array' | 'UInt16Array' | 'UInt32Array' | 'UInt64Array'
  | 'FloatArray' | 'DoubleArray' | 'BooleanArray' | 'StringArray' | 'DateTimeArray';

/** 64-bit integers travel as bigint so no precision is lost; DateTime as epoch milliseconds. */
export type TagValue = number | bigint | boolean | string | Buffer | readonly (number | bigint | boolean | string)[];

export interface TagDefinition {
  /** The Sparkplug metric name, unique within the connector. */
  readonly name: string;
  readonly datatype: TagDatatype;
  readonly writable: boolean;
  /** Report-by-exception deadband: a numeric change smaller than this is not published. */
  readonly deadband?: number;
  readonly description?: string;
}

export interface TagSample {
  readonly name: string;
  readonly value: TagValue;
  /** Epoch ms when the value was read (or the source timestamp the device gave). */
  readonly timestamp: number;
  /** False for a bad or uncertain reading: published with a quality property, never as a good value. */
  readonly good: boolean;
}

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

/** Socket and serial port errors by their Node.js code, in words an operator reads. */
const SYSTEM_ERRORS: Readonly<Record<string, string>> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by the device',
  EPIPE: 'connection closed by the device',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'host name not found',
  EAI_AGAIN: 'host name lookup failed',
  ENOENT: 'no such serial port',
  EACCES: 'permission denied',
  EBUSY: 'serial port in use',
};

/**
 * The reason for a socket or serial port error in a few words (`connection refused`), from its `code` or, as
 * device libraries wrap them in their own sentences, the code named in its message; undefined for other errors.
 */
export function systemErrorReason(err: unknown): string | undefined {
  const e = (typeof err === 'object' && err !== null ? err : {}) as { code?: unknown; message?: unknown };
  if (typeof e.code === 'string' && SYSTEM_ERRORS[e.code] !== undefined) return SYSTEM_ERRORS[e.code];
  if (typeof e.message !== 'string') return undefined;
  for (const [word] of e.message.matchAll(/\bE[A-Z_]+\b/g)) if (SYSTEM_ERRORS[word] !== undefined) return SYSTEM_ERRORS[word];
  return undefined;
}

export interface TagSink {
  data(samples: readonly TagSample[]): void;
  /** The device is lost (connection dropped, repeated timeouts); the runtime restarts the connector later. */
  lost(err: ConnectorError): void;
}

export interface Connector {
  /** The Sparkplug device id. */
  readonly id: string;
  /** Known before start, so the DBIRTH can be built. */
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
