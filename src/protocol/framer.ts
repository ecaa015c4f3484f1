/**
 * Splits a byte stream into whole MQTT control packets. The fixed header (type, flags, remaining length) is
 * checked by the caller before any body byte is buffered, so a packet declaring 256 MB allocates nothing
 * [docs/reliability.md rules 1, 5]. A packet split across reads is assembled from the held bytes plus just the bytes it still
 * needs, so the rest of a large read is framed in place and never copied.
 */
import { Reason } from './reason-codes.js';
import { ProtocolError } from '../util/errors.js';

export interface FrameHandler {
  /** Called once per packet as soon as its fixed header is known; throw a ProtocolError to refuse it. */
  header(type: number, remainingLength: number): void;
  /** A whole packet: `data[bodyStart..end)` is the body after the fixed header; `first` is the first header byte. */
  packet(data: Buffer, first: number, packetStart: number, bodyStart: number, end: number): void;
  /** False once the connection is closed: stop framing and drop the rest. */
  isOpen(): boolean;
  /**
   * Asked before each packet: false stops framing for now (the connection is closed, or it yields the event loop
   * to others). The bytes not framed are held, and the next `push` (an empty one will do) frames them first.
   */
  canTakeMore(): boolean;
}

/**
 * The size of a whole packet (fixed header byte, remaining length bytes and body) from its remaining length:
 * what Maximum Packet Size limits (MQTT 5 §3.1.2.11.4).
 */
export function packetBytes(remainingLength: number): number {
  return (
    1 +
    (remainingLength < 128 ? 1 : remainingLength < 16_384 ? 2 : remainingLength < 2_097_152 ? 3 : 4) +
    remainingLength
  );
}

/**
 * A framer that holds nothing, lent to each read of a connection that has none; it is kept by the first connection
 * whose read leaves bytes held. Taken out while in use, so that a read framed from within a handler gets its own.
 */
let spare: PacketFramer | undefined;

/**
 * Frames `chunk` after what `framer` holds and returns the framer that now holds the rest: `framer`, or for a
 * connection that had none, the spare one once a read leaves bytes held, kept from then on. A connection whose
 * reads end on packet boundaries, as an idle one's CONNECT does, never has a framer of its own
 * (docs/architecture.md#what-a-connection-costs).
 */
export function pushChunk(
  framer: PacketFramer | undefined,
  chunk: Buffer,
  handler: FrameHandler,
): PacketFramer | undefined {
  if (framer !== undefined) {
    framer.push(chunk, handler);
    return framer;
  }
  const lent = spare ?? new PacketFramer();
  spare = undefined;
  lent.push(chunk, handler);
  if (lent.pendingBytes > 0) return lent;
  // A closed handler may have left a packet length behind: only an untouched framer is lent again.
  if (handler.isOpen()) spare = lent;
  return undefined;
}

/** Longest fixed header: 1 type byte and a 4-byte remaining length. */
const MAX_HEADER_BYTES = 5;

export class PacketFramer {
  private held: Buffer[] = [];
  private heldBytes = 0;
  /** Total length of the held packet once its header is known, else 0. */
  private needed = 0;

  /** Bytes held for an incomplete packet. */
  get pendingBytes(): number {
    return this.heldBytes;
  }

  push(chunk: Buffer, handler: FrameHandler): void {
    let data = chunk;
    let offset = 0;
    if (this.heldBytes > 0) {
      if (this.needed === 0) {
        // The held bytes are packets the handler was not ready for, or a split fixed header (rare): join and
        // frame from the start.
        // A rest held back by a yield alone (the common case) is framed as it is, not copied.
        data = this.held.length === 1 && chunk.length === 0 ? this.held[0] : Buffer.concat([...this.held, chunk]);
        this.held = [];
        this.heldBytes = 0;
      } else {
        // Complete the held packet with just the bytes it lacks; frame the rest of the chunk in place.
        const take = Math.min(this.needed - this.heldBytes, chunk.length);
        this.hold(chunk.subarray(0, take));
        if (this.heldBytes < this.needed) return;
        const packet = Buffer.concat(this.held, this.heldBytes);
        this.held = [];
        this.heldBytes = 0;
        this.needed = 0;
        const used = this.frame(packet, 0, handler);
        if (!handler.isOpen()) return;
        if (used < packet.length) {
          this.hold(packet.subarray(used));
          this.hold(chunk.subarray(take));
          return;
        }
        offset = take;
      }
    }
    const used = this.frame(data, offset, handler);
    if (used < data.length && handler.isOpen()) this.hold(data.subarray(used));
  }

  private hold(bytes: Buffer): void {
    this.held.push(bytes);
    this.heldBytes += bytes.length;
  }

  /** Frames whole packets from `data[offset..]`; returns where the first incomplete packet starts. */
  private frame(data: Buffer, offset: number, handler: FrameHandler): number {
    while (offset < data.length && handler.canTakeMore()) {
      const first = data[offset];
      let remaining = 0;
      let multiplier = 1;
      let i = offset + 1;
      for (;;) {
        if (i >= data.length) return offset;
        const byte = data[i++];
        remaining += (byte & 0x7f) * multiplier;
        if ((byte & 0x80) === 0) break;
        multiplier *= 128;
        if (i - offset >= MAX_HEADER_BYTES)
          throw new ProtocolError(Reason.MalformedPacket, 'remaining length longer than 4 bytes');
      }
      handler.header(first >> 4, remaining);
      const end = i + remaining;
      if (end > data.length) {
        this.needed = end - offset;
        return offset;
      }
      handler.packet(data, first, offset, i, end);
      offset = end;
    }
    return offset;
  }
}
