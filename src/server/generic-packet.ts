/**
 * The packets the connection's fast decoders leave (docs/architecture.md#hot-path): those of a connection not yet
 * connected other than an MQTT 3.1.1 CONNECT, MQTT 5 packets with properties, and every other packet type, all
 * parsed whole by mqtt-packet, after a count of their User Properties.
 */
import { createParser } from '../protocol/codec.js';
import type { Packet, Parser } from '../protocol/codec.js';
import { countUserProperties } from '../protocol/property-scan.js';
import { Reason } from '../protocol/reason-codes.js';
import { ProtocolError } from '../util/errors.js';
import type { ClientConnection } from './context.js';
import { refuseConnect } from './handlers/index.js';

/** What the general packet path asks of its connection beyond what the handlers see (`Connection`). */
export interface GenericPacketConnection extends ClientConnection {
  dispatch(packet: Packet): void;
  write(bytes: Buffer): void;
  protocolFailure(err: unknown): void;
}

/** Parses one whole packet, `data[packetStart, end)` (its body from `bodyStart`), and dispatches it. */
export function parseGenericPacket(
  conn: GenericPacketConnection,
  data: Buffer,
  first: number,
  packetStart: number,
  bodyStart: number,
  end: number,
): void {
  if (
    (conn.version === 5 || conn.state === 'awaiting-connect') &&
    refusedForUserProperties(conn, data, first, bodyStart, end)
  )
    return;
  parseGeneric(conn, data.subarray(packetStart, end));
}

/**
 * Counts the User Properties of an MQTT 5 packet before mqtt-packet builds them (`countUserProperties`): more than
 * `maxUserProperties` close the connection with 0x95 (CONNECT: CONNACK 0x95), saying why.
 */
function refusedForUserProperties(
  conn: GenericPacketConnection,
  data: Buffer,
  first: number,
  bodyStart: number,
  end: number,
): boolean {
  const count = countUserProperties(data, first, bodyStart, end);
  const max = conn.ctx.limits.maxUserProperties;
  if (count <= max) return false;
  const why = `${count} user properties, more than broker.maxUserProperties (${max})`;
  if (conn.state !== 'awaiting-connect') throw new ProtocolError(Reason.PacketTooLarge, why);
  conn.version = 5; // only an MQTT 5 CONNECT has properties
  refuseConnect(conn, Reason.PacketTooLarge, why);
  return true;
}

/**
 * One whole packet through mqtt-packet. A parser lives only for the call: it would otherwise keep per connection
 * an emitter, a buffer list and the CONNECT packet (as its settings), which idle connections do not need.
 */
function parseGeneric(conn: GenericPacketConnection, bytes: Buffer): void {
  const parser: Parser = createParser(conn.state === 'awaiting-connect' ? undefined : conn.version);
  parser.on('packet', (packet: Packet) => conn.dispatch(packet));
  parser.on('error', (err: Error) => onParseError(conn, err));
  parser.parse(bytes);
}

function onParseError(conn: GenericPacketConnection, err: Error): void {
  if (conn.state === 'closed') return;
  if (err.message === 'Invalid protocol version' && conn.state === 'awaiting-connect') {
    // Unknown protocol level: CONNACK 0x01 in the 3.1.1 format, then close [MQTT-3.1.2-2].
    conn.write(Buffer.from([0x20, 0x02, 0x00, 0x01]));
    return conn.close(undefined, 'unsupported protocol version');
  }
  conn.protocolFailure(new ProtocolError(Reason.MalformedPacket, err.message));
}
