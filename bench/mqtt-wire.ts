/**
 * The few MQTT 3.1.1 packets the load generator needs, encoded by hand. The benchmark encodes every packet
 * once and writes the same Buffer again and again, so the generator costs almost nothing per message; it
 * also keeps `mqtt-packet` inside `src/protocol/` as docs/architecture.md#dependency-rules asks.
 */

export const PacketType = {
  connect: 1,
  connack: 2,
  publish: 3,
  puback: 4,
  subscribe: 8,
  suback: 9,
  disconnect: 14,
} as const;

function encodeRemainingLength(length: number): Buffer {
  const bytes: number[] = [];
  let rest = length;
  do {
    let byte = rest % 128;
    rest = Math.floor(rest / 128);
    if (rest > 0) byte |= 0x80;
    bytes.push(byte);
  } while (rest > 0);
  return Buffer.from(bytes);
}

function utf8String(value: string): Buffer {
  const body = Buffer.from(value, 'utf8');
  const out = Buffer.allocUnsafe(2 + body.length);
  out.writeUInt16BE(body.length, 0);
  body.copy(out, 2);
  return out;
}

function packet(firstByte: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([firstByte]), encodeRemainingLength(body.length), body]);
}

/**
 * CONNECT, protocol level 4 (3.1.1), clean session unless `cleanSession` is false (a persistent session);
 * keepalive 0 disables the keep-alive timer.
 */
export function encodeConnect(clientId: string, keepaliveS = 0, cleanSession = true): Buffer {
  const flags = cleanSession ? 0x02 : 0x00;
  const header = Buffer.from([0x00, 0x04, 0x4d, 0x51, 0x54, 0x54, 0x04, flags, keepaliveS >> 8, keepaliveS & 0xff]);
  return packet(0x10, Buffer.concat([header, utf8String(clientId)]));
}

export function encodeSubscribe(packetId: number, filter: string, qos: 0 | 1): Buffer {
  const id = Buffer.from([packetId >> 8, packetId & 0xff]);
  return packet(0x82, Buffer.concat([id, utf8String(filter), Buffer.from([qos])]));
}

/** PUBLISH; `packetId` is required for QoS 1 and ignored for QoS 0. */
export function encodePublish(topic: string, payload: Buffer, qos: 0 | 1, packetId = 0): Buffer {
  const parts = [utf8String(topic)];
  if (qos > 0) parts.push(Buffer.from([packetId >> 8, packetId & 0xff]));
  parts.push(payload);
  return packet(0x30 | (qos << 1), Buffer.concat(parts));
}

/** Offset of the payload inside a PUBLISH built by `encodePublish` with the same topic and QoS. */
export function publishPayloadOffset(topic: string, payloadBytes: number, qos: 0 | 1): number {
  const bodyBytes = 2 + Buffer.byteLength(topic) + (qos > 0 ? 2 : 0) + payloadBytes;
  return 1 + encodeRemainingLength(bodyBytes).length + 2 + Buffer.byteLength(topic) + (qos > 0 ? 2 : 0);
}

export function encodePuback(packetId: number): Buffer {
  return Buffer.from([0x40, 0x02, packetId >> 8, packetId & 0xff]);
}

export const disconnectPacket = Buffer.from([0xe0, 0x00]);

/** Called once per complete packet; the body is `buf[bodyStart, bodyEnd)` and is only valid during the call. */
export type PacketHandler = (type: number, flags: number, buf: Buffer, bodyStart: number, bodyEnd: number) => void;

/**
 * Splits a byte stream into MQTT packets without copying complete packets: only a packet cut by a chunk
 * boundary is carried over (and then concatenated with the next chunk).
 */
export class PacketReader {
  private pending: Buffer | null = null;

  constructor(private readonly onPacket: PacketHandler) {}

  push(chunk: Buffer): void {
    const buf = this.pending === null ? chunk : Buffer.concat([this.pending, chunk]);
    this.pending = null;
    const length = buf.length;
    let pos = 0;
    while (length - pos >= 2) {
      let remaining = 0;
      let multiplier = 1;
      let i = pos + 1;
      let complete = false;
      while (i < length && i < pos + 5) {
        const byte = buf[i++];
        remaining += (byte & 0x7f) * multiplier;
        multiplier *= 128;
        if ((byte & 0x80) === 0) {
          complete = true;
          break;
        }
      }
      if (!complete || length - i < remaining) break;
      const first = buf[pos];
      this.onPacket(first >> 4, first & 0x0f, buf, i, i + remaining);
      pos = i + remaining;
    }
    // Copy the tail so the (possibly large) chunk it came from can be collected.
    if (pos < length) this.pending = Buffer.from(buf.subarray(pos));
  }
}
