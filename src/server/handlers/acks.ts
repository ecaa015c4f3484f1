/**
 * PUBACK, PUBREC, PUBCOMP from a client for our outgoing QoS 1/2 flows. Unknown ids are ignored [docs/reliability.md rule 20].
 * The packet is the connection's reused decode target: its values are read before the session runs, which may
 * end the hold on a publisher whose packets are then decoded into it (Connection.packet).
 */
import type { PubackPacket, PubcompPacket, PubrecPacket } from '../../protocol/codec.js';
import { Reason } from '../../protocol/reason-codes.js';
import type { ClientConnection } from '../context.js';

export function handlePuback(conn: ClientConnection, packet: PubackPacket): void {
  const packetId = packet.messageId!;
  if (!conn.session!.handlePuback(packetId))
    conn.log.debug({ clientId: conn.clientId, packetId }, 'PUBACK for an unknown packet id');
}

export function handlePubrec(conn: ClientConnection, packet: PubrecPacket): void {
  const packetId = packet.messageId!;
  if (!conn.session!.handlePubrec(packetId, packet.reasonCode ?? 0)) {
    // MQTT 5: answer an unknown id with PUBREL 0x92 so the client can finish its side.
    conn.sendAck('pubrel', packetId, Reason.PacketIdentifierNotFound);
  }
}

export function handlePubcomp(conn: ClientConnection, packet: PubcompPacket): void {
  const packetId = packet.messageId!;
  if (!conn.session!.handlePubcomp(packetId))
    conn.log.debug({ clientId: conn.clientId, packetId }, 'PUBCOMP for an unknown packet id');
}
