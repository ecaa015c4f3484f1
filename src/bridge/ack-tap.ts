/**
 * The stream MQTT.js reads and writes on an uplink: the transport (TCP, TLS or WebSocket stream) with the
 * acknowledgements of our publishes taken out of the inbound bytes before MQTT.js sees them.
 *
 * Why: during a replay, nearly every inbound packet is a PUBACK (or PUBREC/PUBCOMP) for one of our publishes,
 * which MQTT.js does not track anyway (see uplink.ts). Through MQTT.js each one cost a stream pipe hop, a buffer
 * list, mqtt-packet's parser and a tick of its packet queue: about a quarter of the replay's CPU, measured. Here
 * they are framed in place (`PacketFramer`) and handed to the uplink at once; every other packet (CONNACK,
 * PINGRESP, SUBACK, inbound PUBLISH/PUBREL, acks with a reason code or properties) goes on to MQTT.js unchanged
 * and in order. Writes pass straight through.
 */
import { Duplex } from 'node:stream';
import { decodeShortAck } from '../protocol/codec.js';
import { PacketFramer, packetBytes, type FrameHandler } from '../protocol/framer.js';
import { Reason } from '../protocol/reason-codes.js';
import { ProtocolError } from '../util/errors.js';

export type PublishAck = 'puback' | 'pubrec' | 'pubcomp';

export class AckTap extends Duplex implements FrameHandler {
  private readonly framer = new PacketFramer();

  constructor(
    /** The transport; the uplink writes its publishes to it directly. */
    readonly transport: Duplex,
    private readonly onAck: (cmd: PublishAck, packetId: number) => void,
    /** The Maximum Packet Size we announced (MQTT 5): a larger packet is refused at its header, never buffered. */
    private readonly maxPacketBytes = Infinity,
  ) {
    super();
    transport.on('data', (chunk: Buffer) => {
      try {
        this.framer.push(chunk, this);
      } catch (err) {
        this.destroy(err as Error); // a broken or too large packet: MQTT.js reports it and the uplink reconnects
      }
    });
    transport.on('end', () => this.push(null));
    transport.on('error', (err: Error) => this.destroy(err));
    transport.on('close', () => this.destroy());
  }

  // ---- FrameHandler ----

  header(_type: number, remainingLength: number): void {
    const bytes = packetBytes(remainingLength);
    if (bytes > this.maxPacketBytes) {
      throw new ProtocolError(Reason.PacketTooLarge, `central broker sent a packet of ${bytes} bytes, above our Maximum Packet Size [MQTT-3.1.2-24]`);
    }
  }

  packet(data: Buffer, first: number, packetStart: number, bodyStart: number, end: number): void {
    if (end - bodyStart === 2) {
      const ack = decodeShortAck(first, data.readUInt16BE(bodyStart));
      if (ack !== undefined && ack.cmd !== 'pubrel') return this.onAck(ack.cmd as PublishAck, ack.messageId as number);
    }
    this.push(data.subarray(packetStart, end));
  }

  isOpen(): boolean {
    return !this.destroyed;
  }

  canTakeMore(): boolean {
    return !this.destroyed;
  }

  // ---- Duplex ----

  /** Inbound bytes are pushed as they arrive (see the constructor); MQTT.js always reads. */
  override _read(): void {}

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.transport.write(chunk);
    callback();
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.transport.end();
    callback();
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.transport.destroy();
    callback(err);
  }
}
