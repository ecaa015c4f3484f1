/**
 * Binary (de)serialisation of a `Message` for the LMDB store, and the byte-wise keys it uses.
 *
 * Hand-written rather than msgpack: the outbox append is the hot path (tens of thousands per second), and a
 * fixed layout costs one allocation and a few `write` calls. The memory store uses `encodedMessageBytes` so
 * both stores count the same bytes against `maxBytes`.
 *
 * Message layout (all integers big-endian):
 *   u8  flags        bits 0-1 QoS, bit 2 retain, bit 3 has expiry, bit 4 has properties
 *   f64 expiresAtMs  only with bit 3: ms since the epoch by the steady clock (util/clock.ts), which steps of
 *                    the system clock do not move. `Message.expiresAt` is on the `performance.now()` clock,
 *                    which restarts with the process, so it is converted on write and back on read with the
 *                    store's `SteadyClock`; time spent down then counts towards expiry.
 *   u16 topic length, topic (UTF-8)
 *   u16 origin length, origin (UTF-8)
 *   u32 properties length, properties (see encodeProperties), only with bit 4
 *   payload          the rest of the value
 *
 * Values are prefixed by a u8 format version (`VALUE_FORMAT`); stamped values (outbox entries, delayed wills)
 * also carry an f64 time (ms since the epoch by the steady clock, util/clock.ts) right after it (append time, due
 * time), readable without decoding.
 *
 * Checksums: LMDB checks no page checksums, and flash storage gets damaged by power cuts. Every message value
 * ends in a u32 CRC-32 of everything before it, and its format byte carries SEALED to say so; `unseal` checks
 * it on every read. Values written before checksums (format byte without SEALED) are read as they are.
 */
import type { Message, PublishProperties, QoS, UserProperties } from '../protocol/message.js';
import { crc32 } from 'node:zlib';
import type { FlightState } from './types.js';
import type { SteadyClock } from '../util/clock.js';

/** Format byte at the start of every stored message value; bump with a schema migration. */
export const VALUE_FORMAT = 1;
/** Set in the format byte of a value that ends in its checksum. */
const SEALED = 0x80;
/** The checksum at the end of a sealed value: CRC-32 of the bytes before it. */
export const CHECKSUM_BYTES = 4;

/** A stored value whose checksum or layout does not hold: damaged on disk. */
export class CorruptValueError extends RangeError {}

/** Writes the checksum into the last CHECKSUM_BYTES of `buf` (left free by its encoder) and marks its format byte. */
function seal(buf: Buffer): Buffer {
  buf[0] |= SEALED;
  const end = buf.length - CHECKSUM_BYTES;
  buf.writeUInt32BE(crc32(buf.subarray(0, end)), end);
  return buf;
}

/**
 * The end (exclusive) of the content of the value at `at`..`end` of `buf`, after checking its checksum: `end` minus
 * the checksum, or `end` for a value from before checksums. Throws CorruptValueError when it does not hold.
 */
export function unseal(buf: Buffer, at = 0, end = buf.length): number {
  if (!(at >= 0 && end <= buf.length && end > at))
    throw new CorruptValueError(`value bounds ${at}..${end} outside ${buf.length} bytes`);
  if ((buf[at] & SEALED) === 0) return end;
  const content = end - CHECKSUM_BYTES;
  if (content <= at || crc32(buf.subarray(at, content)) !== buf.readUInt32BE(content)) {
    throw new CorruptValueError('checksum mismatch');
  }
  return content;
}

/** The format byte of a value, without the SEALED flag. */
function formatOf(buf: Buffer, at = 0): number {
  return buf[at] & ~SEALED;
}

const FLAG_RETAIN = 0x04;
const FLAG_EXPIRY = 0x08;
const FLAG_PROPS = 0x10;

/** Bytes before the message in a stamped value: format byte + f64 ms (steady clock). */
export const STAMPED_HEADER_BYTES = 9;
/** Bytes before the message in a retained or session-queue value: the format byte. */
export const PLAIN_HEADER_BYTES = 1;
/** The value of a mark record (a QoS 2 id awaiting PUBREL, a released or removed outbox entry): only its key matters. */
export const MARK = Buffer.from([1]);

const MAX_U16 = 0xffff;

// Property tags of the compact properties encoding.
const P_FORMAT = 1;
const P_EXPIRY_INTERVAL = 2;
const P_CONTENT_TYPE = 3;
const P_RESPONSE_TOPIC = 4;
const P_CORRELATION = 5;
const P_USER_STRING = 6;
const P_USER_ARRAY = 7;

/** Converts a `performance.now()` deadline into wall-clock ms of the steady clock (for storage). */
export function monoToWallMs(monoMs: number, nowWallMs: number, nowMonoMs = performance.now()): number {
  return nowWallMs + (monoMs - nowMonoMs);
}

/** Converts a stored deadline (steady clock) back onto this process's `performance.now()` clock. */
export function wallToMonoMs(wallMs: number, nowWallMs: number, nowMonoMs = performance.now()): number {
  return nowMonoMs + (wallMs - nowWallMs);
}

function propertiesBytes(p: PublishProperties): number {
  let n = 0;
  if (p.payloadFormatIndicator !== undefined) n += 2;
  if (p.messageExpiryInterval !== undefined) n += 5;
  if (p.contentType !== undefined) n += 5 + Buffer.byteLength(p.contentType);
  if (p.responseTopic !== undefined) n += 5 + Buffer.byteLength(p.responseTopic);
  if (p.correlationData !== undefined) n += 5 + p.correlationData.length;
  const user = p.userProperties;
  if (user !== undefined) {
    for (const name of Object.keys(user)) {
      const value = user[name];
      n += 5 + Buffer.byteLength(name);
      if (Array.isArray(value)) {
        n += 4;
        for (const v of value) n += 4 + Buffer.byteLength(v);
      } else {
        n += 4 + Buffer.byteLength(value);
      }
    }
  }
  return n;
}

function hasProperties(msg: Message): msg is Message & { properties: PublishProperties } {
  return msg.properties !== undefined && Object.keys(msg.properties).length > 0;
}

/** Encoded size of `msg` without any value header: what a stored message costs (its checksum included). */
export function encodedMessageBytes(msg: Message): number {
  let n =
    1 + 2 + Buffer.byteLength(msg.topic) + 2 + Buffer.byteLength(msg.origin) + msg.payload.length + CHECKSUM_BYTES;
  if (msg.expiresAt !== undefined) n += 8;
  if (hasProperties(msg)) n += 4 + propertiesBytes(msg.properties);
  return n;
}

function writeString32(buf: Buffer, offset: number, s: string): number {
  const len = buf.write(s, offset + 4, 'utf8');
  buf.writeUInt32BE(len, offset);
  return offset + 4 + len;
}

function writeProperties(buf: Buffer, offset: number, p: PublishProperties): number {
  let o = offset;
  if (p.payloadFormatIndicator !== undefined) {
    buf[o++] = P_FORMAT;
    buf[o++] = p.payloadFormatIndicator ? 1 : 0;
  }
  if (p.messageExpiryInterval !== undefined) {
    buf[o++] = P_EXPIRY_INTERVAL;
    buf.writeUInt32BE(p.messageExpiryInterval, o);
    o += 4;
  }
  if (p.contentType !== undefined) {
    buf[o++] = P_CONTENT_TYPE;
    o = writeString32(buf, o, p.contentType);
  }
  if (p.responseTopic !== undefined) {
    buf[o++] = P_RESPONSE_TOPIC;
    o = writeString32(buf, o, p.responseTopic);
  }
  if (p.correlationData !== undefined) {
    buf[o++] = P_CORRELATION;
    buf.writeUInt32BE(p.correlationData.length, o);
    o += 4;
    o += p.correlationData.copy(buf, o);
  }
  const user = p.userProperties;
  if (user !== undefined) {
    for (const name of Object.keys(user)) {
      const value = user[name];
      if (Array.isArray(value)) {
        buf[o++] = P_USER_ARRAY;
        o = writeString32(buf, o, name);
        buf.writeUInt32BE(value.length, o);
        o += 4;
        for (const v of value) o = writeString32(buf, o, v);
      } else {
        buf[o++] = P_USER_STRING;
        o = writeString32(buf, o, name);
        o = writeString32(buf, o, value);
      }
    }
  }
  return o;
}

/**
 * Encodes `msg` into a new buffer after `headerBytes` bytes left for the caller (format byte, append time), and
 * before CHECKSUM_BYTES left for `seal`. Throws RangeError when the topic or origin exceeds 65535 bytes (MQTT's own limit).
 */
export function encodeMessage(msg: Message, headerBytes: number, clock: SteadyClock): Buffer {
  const topicBytes = Buffer.byteLength(msg.topic);
  const originBytes = Buffer.byteLength(msg.origin);
  if (topicBytes > MAX_U16) throw new RangeError(`topic is ${topicBytes} bytes; at most ${MAX_U16} can be stored`);
  if (originBytes > MAX_U16) throw new RangeError(`origin is ${originBytes} bytes; at most ${MAX_U16} can be stored`);
  const props = hasProperties(msg) ? msg.properties : undefined;
  const propBytes = props === undefined ? 0 : propertiesBytes(props);
  const size =
    headerBytes +
    1 +
    (msg.expiresAt === undefined ? 0 : 8) +
    2 +
    topicBytes +
    2 +
    originBytes +
    (props === undefined ? 0 : 4 + propBytes) +
    msg.payload.length +
    CHECKSUM_BYTES;
  const buf = Buffer.allocUnsafe(size);
  let o = headerBytes;
  let flags = msg.qos & 0x03;
  if (msg.retain) flags |= FLAG_RETAIN;
  if (msg.expiresAt !== undefined) flags |= FLAG_EXPIRY;
  if (props !== undefined) flags |= FLAG_PROPS;
  buf[o++] = flags;
  if (msg.expiresAt !== undefined) {
    buf.writeDoubleBE(monoToWallMs(msg.expiresAt, clock.nowMs()), o);
    o += 8;
  }
  buf.writeUInt16BE(topicBytes, o);
  o += 2;
  o += buf.write(msg.topic, o, 'utf8');
  buf.writeUInt16BE(originBytes, o);
  o += 2;
  o += buf.write(msg.origin, o, 'utf8');
  if (props !== undefined) {
    buf.writeUInt32BE(propBytes, o);
    o += 4;
    o = writeProperties(buf, o, props);
  }
  msg.payload.copy(buf, o);
  return buf;
}

function readString32(buf: Buffer, o: number): [string, number] {
  const len = buf.readUInt32BE(o);
  return [buf.toString('utf8', o + 4, o + 4 + len), o + 4 + len];
}

function readProperties(buf: Buffer, start: number, end: number): PublishProperties {
  const p: PublishProperties = {};
  let o = start;
  while (o < end) {
    const tag = buf[o++];
    switch (tag) {
      case P_FORMAT:
        p.payloadFormatIndicator = buf[o++] === 1;
        break;
      case P_EXPIRY_INTERVAL:
        p.messageExpiryInterval = buf.readUInt32BE(o);
        o += 4;
        break;
      case P_CONTENT_TYPE:
        [p.contentType, o] = readString32(buf, o);
        break;
      case P_RESPONSE_TOPIC:
        [p.responseTopic, o] = readString32(buf, o);
        break;
      case P_CORRELATION: {
        const len = buf.readUInt32BE(o);
        p.correlationData = Buffer.from(buf.subarray(o + 4, o + 4 + len));
        o += 4 + len;
        break;
      }
      case P_USER_STRING: {
        let name: string;
        let value: string;
        [name, o] = readString32(buf, o);
        [value, o] = readString32(buf, o);
        (p.userProperties ??= {} as UserProperties)[name] = value;
        break;
      }
      case P_USER_ARRAY: {
        let name: string;
        [name, o] = readString32(buf, o);
        const count = buf.readUInt32BE(o);
        o += 4;
        const values: string[] = [];
        for (let i = 0; i < count; i++) {
          let v: string;
          [v, o] = readString32(buf, o);
          values.push(v);
        }
        (p.userProperties ??= {} as UserProperties)[name] = values;
        break;
      }
      default:
        throw new RangeError(`unknown stored property tag ${tag}`);
    }
  }
  return p;
}

/**
 * Decodes a message stored by `encodeMessage` from `offset` to `end`. The payload is a view into `buf`, so the
 * caller must pass a buffer it owns (lmdb-js `get`/`getRange` return copies for `encoding: 'binary'`).
 */
export function decodeMessage(buf: Buffer, offset: number, end: number, clock: SteadyClock): Message {
  let o = offset;
  const flags = buf[o++];
  let expiresAt: number | undefined;
  if (flags & FLAG_EXPIRY) {
    expiresAt = wallToMonoMs(buf.readDoubleBE(o), clock.nowMs());
    o += 8;
  }
  const topicLen = buf.readUInt16BE(o);
  o += 2;
  const topic = buf.toString('utf8', o, o + topicLen);
  o += topicLen;
  const originLen = buf.readUInt16BE(o);
  o += 2;
  const origin = buf.toString('utf8', o, o + originLen);
  o += originLen;
  let properties: PublishProperties | undefined;
  if (flags & FLAG_PROPS) {
    const len = buf.readUInt32BE(o);
    o += 4;
    properties = readProperties(buf, o, o + len);
    o += len;
  }
  // Every field present, in createMessage's order: one object shape for all messages keeps the hot paths that
  // read them (encoding, routing) monomorphic.
  return {
    topic,
    payload: buf.subarray(o, end),
    qos: (flags & 0x03) as QoS,
    retain: (flags & FLAG_RETAIN) !== 0,
    properties,
    origin,
    expiresAt,
  };
}

/** Encodes a stamped value: format byte, a steady-clock time (an outbox entry's append, a will's due time), message. */
export function encodeStampedValue(msg: Message, stampMs: number, clock: SteadyClock): Buffer {
  const buf = encodeMessage(msg, STAMPED_HEADER_BYTES, clock);
  buf[0] = VALUE_FORMAT;
  buf.writeDoubleBE(stampMs, 1);
  return seal(buf);
}

/** Decodes the stamped value at `at`..`end` of `buf`, checked (CorruptValueError when damaged). */
export function decodeStampedValue(
  buf: Buffer,
  clock: SteadyClock,
  at = 0,
  end = buf.length,
): { msg: Message; stampMs: number } {
  const content = unseal(buf, at, end);
  if (formatOf(buf, at) !== VALUE_FORMAT) throw new CorruptValueError(`unknown value format ${buf[at]}`);
  return { msg: decodeChecked(buf, at + STAMPED_HEADER_BYTES, content, clock), stampMs: stampedValueMs(buf, at) };
}

/** Reads the steady-clock time of a stamped value (starting at `at` in `value`) without decoding the message. */
export function stampedValueMs(value: Buffer, at = 0): number {
  return value.readDoubleBE(at + 1);
}

/** Format byte of a session-queue value with a flight state: u16 packet id and u8 released follow. */
const FLIGHT_FORMAT = 2;
export const FLIGHT_HEADER_BYTES = 4;

/** Encodes a session-queue value: the plain layout, or with the flight state of a QoS 2 delivery. */
export function encodeQueuedValue(msg: Message, clock: SteadyClock, flight?: FlightState): Buffer {
  if (flight === undefined) return encodePlainValue(msg, clock);
  const buf = encodeMessage(msg, FLIGHT_HEADER_BYTES, clock);
  buf[0] = FLIGHT_FORMAT;
  buf.writeUInt16BE(flight.packetId, 1);
  buf[3] = flight.released ? 1 : 0;
  return seal(buf);
}

/** Decodes a session-queue value, checked (CorruptValueError when damaged). */
export function decodeQueuedValue(value: Buffer, clock: SteadyClock): { msg: Message; flight?: FlightState } {
  const content = unseal(value);
  const format = formatOf(value);
  if (format === VALUE_FORMAT) return { msg: decodeChecked(value, PLAIN_HEADER_BYTES, content, clock) };
  if (format !== FLIGHT_FORMAT) throw new CorruptValueError(`unknown value format ${value[0]}`);
  return {
    msg: decodeChecked(value, FLIGHT_HEADER_BYTES, content, clock),
    flight: { packetId: value.readUInt16BE(1), released: value[3] === 1 },
  };
}

/**
 * Format byte of a JSON value (session record, subscription, store counter in `meta`). One stored before checksums
 * is plain JSON text, whose first byte (`{`, a digit, `"`, ...) never has the SEALED bit.
 */
const JSON_FORMAT = 4;

/** Encodes a session record, subscription or store counter: format byte, JSON, checksum. */
export function encodeJsonValue(value: unknown): Buffer {
  const json = JSON.stringify(value);
  const buf = Buffer.allocUnsafe(1 + Buffer.byteLength(json) + CHECKSUM_BYTES);
  buf[0] = JSON_FORMAT;
  buf.write(json, 1, 'utf8');
  return seal(buf);
}

/** Decodes a value of `encodeJsonValue`, or plain JSON from before checksums, checked (CorruptValueError when damaged). */
export function decodeJsonValue<T>(value: Buffer): T {
  const content = unseal(value);
  const legacy = (value[0] & SEALED) === 0;
  if (!legacy && formatOf(value) !== JSON_FORMAT) throw new CorruptValueError(`unknown value format ${value[0]}`);
  try {
    return JSON.parse(value.toString('utf8', legacy ? 0 : 1, content)) as T;
  } catch (err) {
    throw new CorruptValueError(`undecodable JSON value (${(err as Error).message})`);
  }
}

/**
 * The `schema` record of `meta` (the store format), the one value left without a checksum: plain JSON, as every
 * release reads it, so an older one can still tell that a store is newer than it and refuse it in so many words.
 * `decodeJsonValue` reads it.
 */
export function encodeSchemaValue(version: number): Buffer {
  return Buffer.from(JSON.stringify({ version, createdAtMs: Date.now() }), 'utf8');
}

/** Encodes a retained or session-queue value: format byte, message, checksum. */
export function encodePlainValue(msg: Message, clock: SteadyClock): Buffer {
  const buf = encodeMessage(msg, PLAIN_HEADER_BYTES, clock);
  buf[0] = VALUE_FORMAT;
  return seal(buf);
}

/** Decodes a retained value, checked (CorruptValueError when damaged). */
export function decodePlainValue(value: Buffer, clock: SteadyClock): Message {
  const content = unseal(value);
  if (formatOf(value) !== VALUE_FORMAT) throw new CorruptValueError(`unknown value format ${value[0]}`);
  return decodeChecked(value, PLAIN_HEADER_BYTES, content, clock);
}

/**
 * `decodeMessage` for a value whose checksum held, or one from before checksums: a layout that does not parse
 * (possible only in the latter) is damage too.
 */
function decodeChecked(buf: Buffer, offset: number, end: number, clock: SteadyClock): Message {
  try {
    return decodeMessage(buf, offset, end, clock);
  } catch (err) {
    throw new CorruptValueError(`undecodable value (${(err as Error).message})`);
  }
}

/** Bytes an outbox entry for `msg` counts against `maxBytes`: exactly the stored value's length. */
export function outboxEntryBytes(msg: Message): number {
  return STAMPED_HEADER_BYTES + encodedMessageBytes(msg);
}

// --- Keys -------------------------------------------------------------------------------------------------
// Keys are raw bytes compared bytewise by LMDB. A per-owner prefix is `utf8(owner) 0x00`: MQTT client ids and
// bridge names cannot contain U+0000, so the prefix ends exactly there, and `utf8(owner) 0x01` is an exclusive
// upper bound for a range scan over one owner. Sequence numbers follow as 8-byte big-endian integers (2^53
// usable), so bytewise order is numeric order.

/** `utf8(owner) 0x00`, the start of every key belonging to `owner`. */
export function ownerPrefix(owner: string): Buffer {
  if (owner.includes('\u0000')) throw new RangeError('a store key owner cannot contain U+0000');
  const bytes = Buffer.byteLength(owner);
  const buf = Buffer.allocUnsafe(bytes + 1);
  buf.write(owner, 0, 'utf8');
  buf[bytes] = 0;
  return buf;
}

/** Exclusive upper bound of the keys starting with `prefix` (from `ownerPrefix`). */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  end[end.length - 1] = 1;
  return end;
}

/** `prefix` followed by `seq` as 8 bytes big-endian. */
export function seqKey(prefix: Buffer, seq: number): Buffer {
  const key = Buffer.allocUnsafe(prefix.length + 8);
  prefix.copy(key, 0);
  key.writeUInt32BE(Math.floor(seq / 0x1_0000_0000), prefix.length);
  key.writeUInt32BE(seq >>> 0, prefix.length + 4);
  return key;
}

/** The sequence number at the end of a key built by `seqKey`, or at byte `at` of a longer key. */
export function keySeq(key: Buffer, at = key.length - 8): number {
  return key.readUInt32BE(at) * 0x1_0000_0000 + key.readUInt32BE(at + 4);
}

/** `prefix` followed by the UTF-8 of `name` (subscription keys: client prefix + filter). */
export function nameKey(prefix: Buffer, name: string): Buffer {
  const bytes = Buffer.byteLength(name);
  const key = Buffer.allocUnsafe(prefix.length + bytes);
  prefix.copy(key, 0);
  key.write(name, prefix.length, 'utf8');
  return key;
}

/** The owner part of a key built from `ownerPrefix` (up to the first 0x00). */
export function keyOwner(key: Buffer): string {
  const end = key.indexOf(0);
  return key.toString('utf8', 0, end < 0 ? key.length : end);
}
