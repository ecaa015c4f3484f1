/**
 * The CONNECT and CONNACK of MQTT 3.1.1 clients, decoded and encoded here rather than by mqtt-packet: its parser
 * (an event emitter, a buffer-list stream, a debug call per field) and its generator leave some 7 kB of garbage
 * per connection, and with thousands of clients connecting it is that garbage, as much as what a connection keeps,
 * that grows the heap (docs/architecture.md#what-a-connection-costs). Only the common, well-formed case is
 * decoded here: anything else (MQTT 3.1 and 5, a reserved bit set, lengths that do not add up, bytes after the
 * last field) returns undefined and goes through mqtt-packet, which says what is wrong.
 */
import type { IConnectPacket as ConnectPacket } from 'mqtt-packet';

const CONNECT_FIRST_BYTE = 0x10;
const CLEAN_SESSION = 0x02;
const WILL_FLAG = 0x04;
const WILL_RETAIN = 0x20;
const PASSWORD_FLAG = 0x40;
const USERNAME_FLAG = 0x80;
/** Protocol name "MQTT" with its length, and protocol level 4 (MQTT 3.1.1 §3.1.2.1-2). */
const PROTOCOL_V4 = [0x00, 0x04, 0x4d, 0x51, 0x54, 0x54, 0x04];
/** Protocol name and level, connect flags, keep alive, client id length. */
const MIN_BODY_BYTES = PROTOCOL_V4.length + 1 + 2 + 2;

/** Where the length-prefixed field at `at` ends, or -1 if it runs past `end`. */
function fieldEnd(data: Buffer, at: number, end: number): number {
  if (at + 2 > end) return -1;
  const fieldEnd = at + 2 + data.readUInt16BE(at);
  return fieldEnd > end ? -1 : fieldEnd;
}

/**
 * A well-formed MQTT 3.1.1 CONNECT (`data[bodyStart..end)` is its body), as mqtt-packet would return it;
 * undefined for anything else. Strings are checked for well-formed UTF-8 by the CONNECT handler, as for
 * mqtt-packet's. The will payload and password are views of `data`, as mqtt-packet's are.
 */
export function decodeConnectV4(
  data: Buffer,
  first: number,
  bodyStart: number,
  end: number,
): ConnectPacket | undefined {
  if (first !== CONNECT_FIRST_BYTE || end - bodyStart < MIN_BODY_BYTES) return undefined;
  for (let i = 0; i < PROTOCOL_V4.length; i++) if (data[bodyStart + i] !== PROTOCOL_V4[i]) return undefined;
  let at = bodyStart + PROTOCOL_V4.length;
  const flags = data[at];
  const willQos = (flags >> 3) & 3;
  // Reserved bit set [MQTT-3.1.2-3], will QoS/retain without a will [MQTT-3.1.2-13, 15], will QoS 3 [MQTT-3.1.2-14].
  if ((flags & 0x01) !== 0 || willQos === 3) return undefined;
  const hasWill = (flags & WILL_FLAG) !== 0;
  if (!hasWill && (willQos !== 0 || (flags & WILL_RETAIN) !== 0)) return undefined;
  const keepalive = data.readUInt16BE(at + 1);
  at += 3;

  let fieldStop = fieldEnd(data, at, end);
  if (fieldStop < 0) return undefined;
  const clientId = data.toString('utf8', at + 2, fieldStop);
  at = fieldStop;

  let will: ConnectPacket['will'];
  if (hasWill) {
    fieldStop = fieldEnd(data, at, end);
    if (fieldStop < 0) return undefined;
    const topic = data.toString('utf8', at + 2, fieldStop);
    at = fieldStop;
    fieldStop = fieldEnd(data, at, end);
    if (fieldStop < 0) return undefined;
    will = {
      topic,
      payload: data.subarray(at + 2, fieldStop),
      qos: willQos as 0 | 1 | 2,
      retain: (flags & WILL_RETAIN) !== 0,
    };
    at = fieldStop;
  }

  let username: string | undefined;
  if ((flags & USERNAME_FLAG) !== 0) {
    fieldStop = fieldEnd(data, at, end);
    if (fieldStop < 0) return undefined;
    username = data.toString('utf8', at + 2, fieldStop);
    at = fieldStop;
  }
  let password: Buffer | undefined;
  if ((flags & PASSWORD_FLAG) !== 0) {
    fieldStop = fieldEnd(data, at, end);
    if (fieldStop < 0) return undefined;
    password = data.subarray(at + 2, fieldStop);
    at = fieldStop;
  }
  if (at !== end) return undefined;

  return {
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 4,
    clean: (flags & CLEAN_SESSION) !== 0,
    keepalive,
    clientId,
    will,
    username,
    password,
    length: end - bodyStart,
  };
}

/** The two CONNACKs every MQTT 3.1.x connection that is accepted gets: shared, never written to. */
const ACCEPTED = Buffer.from([0x20, 0x02, 0x00, 0x00]);
const ACCEPTED_SESSION_PRESENT = Buffer.from([0x20, 0x02, 0x01, 0x00]);

/** An MQTT 3.1.x CONNACK (§3.2): the accepted ones are shared buffers, a refusal is built. */
export function encodeConnackV3(sessionPresent: boolean, returnCode: number): Buffer {
  if (returnCode === 0) return sessionPresent ? ACCEPTED_SESSION_PRESENT : ACCEPTED;
  return Buffer.from([0x20, 0x02, sessionPresent ? 0x01 : 0x00, returnCode]);
}
