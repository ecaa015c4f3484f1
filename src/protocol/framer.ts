/**
 * Splits a byte stream into whole MQTT control packets. The fixed header (type, flags, remaining length) is
 * checked by the caller before any body byte is buffered, so a packet declaring 256 MB allocates nothing
 * [RELIABILITY #1, #5]. Leftover bytes of an incomplete packet are kept as a list and joined once, when complete.
 */
import { Reason } from './reason-codes.js';
import { ProtocolError } from '../util/errors.js';

export interface FrameHandler {
  /** Called once per packet as soon as its fixed header is known; throw a ProtocolError to refuse it. */
  header(type: number, remainingLength: number): void;
  /** A whole packet: `data[start..end)` is the body after the fixed header; `first` is the first header byte. */
  packet(data: Buffer, first: number, packetStart: number, bodyStart: number, end: number): void;
  /** False once the connection is closed: stop framing. */
  isOpen(): boolean;
}

export class PacketFramer {
  private chunks: Buffer[] = [];
  private buffered = 0;
  /** Total length of the packet being assembled, once its header is known. */
  private needed = 0;

  /** Bytes held for an incomplete packet. */
  get pendingBytes(): number {
    return this.buffered;
  }

  push(chunk: Buffer, handler: FrameHandler): void {
    let data = chunk;
    if (this.buffered > 0) {
      this.chunks.push(chunk);
      this.buffered += chunk.length;
      if (this.needed > 0 && this.buffered < this.needed) return;
      data = Buffer.concat(this.chunks, this.buffered);
      this.chunks = [];
      this.buffered = 0;
    }
    this.needed = 0;
    let offset = 0;
    while (offset < data.length && handler.isOpen()) {
      const first = data[offset];
      let remaining = 0;
      let multiplier = 1;
      let i = offset + 1;
      let headerDone = false;
      while (i < data.length) {
        const byte = data[i++];
        remaining += (byte & 0x7f) * multiplier;
        if ((byte & 0x80) === 0) {
          headerDone = true;
          break;
        }
        multiplier *= 128;
        if (i - offset > 4) throw new ProtocolError(Reason.MalformedPacket, 'remaining length longer than 4 bytes');
      }
      if (!headerDone) break;
      handler.header(first >> 4, remaining);
      const end = i + remaining;
      if (end > data.length) {
        this.needed = end - offset;
        break;
      }
      handler.packet(data, first, offset, i, end);
      offset = end;
    }
    if (offset < data.length && handler.isOpen()) {
      const rest = data.subarray(offset);
      this.chunks.push(rest);
      this.buffered = rest.length;
    }
  }
}
