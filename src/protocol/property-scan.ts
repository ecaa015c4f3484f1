/**
 * Counts the User Properties of an MQTT 5 packet from its bytes, before mqtt-packet builds its property lists:
 * a packet with 200,000 of them (one name repeated, or all different) is refused after a walk over its bytes
 * instead of costing the loop most of a second to parse and the broker the memory of the list (CVE-2021-41039).
 * The walk also finds a property that runs past its section, or one of an unknown identifier: a Malformed Packet.
 */
import { Reason } from './reason-codes.js';
import { ProtocolError } from '../util/errors.js';

/** How a property's value is laid out (MQTT 5 §2.2.2.2): a fixed size in bytes, or one of the variable kinds. */
const VBI = -1;
const LENGTH_PREFIXED = -2; // UTF-8 string or binary data
const STRING_PAIR = -3;
const USER_PROPERTY = 0x26;

const VALUE_SIZE: readonly (number | undefined)[] = (() => {
  const size: (number | undefined)[] = [];
  for (const id of [0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2a]) size[id] = 1;
  for (const id of [0x13, 0x21, 0x22, 0x23]) size[id] = 2;
  for (const id of [0x02, 0x11, 0x18, 0x27]) size[id] = 4;
  for (const id of [0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1a, 0x1c, 0x1f]) size[id] = LENGTH_PREFIXED;
  size[0x0b] = VBI;
  size[USER_PROPERTY] = STRING_PAIR;
  return size;
})();

function malformed(why: string): never {
  throw new ProtocolError(Reason.MalformedPacket, why);
}

/** A reading position in one packet's body; every read is checked against the packet's end. */
class Cursor {
  constructor(
    readonly data: Buffer,
    public at: number,
    readonly end: number,
  ) {}

  skip(bytes: number): void {
    this.at += bytes;
    if (this.at > this.end) malformed('packet shorter than its fields');
  }

  byte(): number {
    if (this.at >= this.end) malformed('packet shorter than its fields');
    return this.data[this.at++];
  }

  /** Skips a 2-byte length and that many bytes (a string or binary data). */
  skipLengthPrefixed(): void {
    if (this.at + 2 > this.end) malformed('packet shorter than its fields');
    this.skip(2 + this.data.readUInt16BE(this.at));
  }

  vbi(): number {
    let value = 0;
    for (let multiplier = 1, i = 0; i < 4; i++, multiplier *= 128) {
      const byte = this.byte();
      value += (byte & 0x7f) * multiplier;
      if ((byte & 0x80) === 0) return value;
    }
    return malformed('variable byte integer longer than 4 bytes');
  }

  /** Walks one property section (its length, then the properties); returns how many User Properties it holds. */
  userProperties(): number {
    const length = this.vbi();
    const end = this.at + length;
    if (end > this.end) malformed('properties longer than the packet');
    let count = 0;
    while (this.at < end) {
      const id = this.data[this.at++];
      const size = VALUE_SIZE[id];
      if (size === undefined) malformed(`unknown property identifier 0x${id.toString(16)}`);
      if (size > 0) this.at += size;
      else if (size === VBI) this.vbi();
      else {
        this.skipLengthPrefixed();
        if (size === STRING_PAIR) {
          this.skipLengthPrefixed();
          count++;
        }
      }
      if (this.at > end) malformed('property runs past the end of the properties');
    }
    return count;
  }
}

const CONNECT = 1;
const CONNACK = 2;
const PUBLISH = 3;
const PUBCOMP = 7;
const SUBSCRIBE = 8;
const UNSUBACK = 11;
const DISCONNECT = 14;
const AUTH = 15;

/**
 * The number of User Properties in the MQTT 5 packet `data[bodyStart..end)` whose first header byte is `first`,
 * all property sections together (a CONNECT's own and its will's). A CONNECT of another protocol level has none.
 * Packets of types without properties count 0. Throws a Malformed Packet ProtocolError where a section is cut.
 */
export function countUserProperties(data: Buffer, first: number, bodyStart: number, end: number): number {
  const type = first >> 4;
  const c = new Cursor(data, bodyStart, end);
  switch (type) {
    case CONNECT: {
      c.skipLengthPrefixed(); // protocol name
      if (c.byte() !== 5) return 0;
      const flags = c.byte();
      c.skip(2); // keep alive
      let count = c.userProperties();
      c.skipLengthPrefixed(); // client identifier
      if (flags & 0x04) count += c.userProperties();
      return count;
    }
    case CONNACK:
      c.skip(2);
      return c.userProperties();
    case PUBLISH:
      c.skipLengthPrefixed(); // topic
      if ((first & 0x06) !== 0) c.skip(2); // packet identifier
      return c.userProperties();
    case DISCONNECT:
    case AUTH:
      // Reason code and properties may be left out (MQTT 5 §3.14.2.2.1, §3.15.2.2.1).
      if (end - bodyStart < 2) return 0;
      c.skip(1);
      return c.userProperties();
    default:
      if (type > PUBLISH && type <= PUBCOMP) {
        // PUBACK..PUBCOMP: packet identifier, then reason code and properties unless left out (§3.4.2.2.1).
        if (end - bodyStart < 4) return 0;
        c.skip(3);
        return c.userProperties();
      }
      if (type >= SUBSCRIBE && type <= UNSUBACK) {
        c.skip(2); // packet identifier
        return c.userProperties();
      }
      return 0; // PINGREQ, PINGRESP
  }
}
