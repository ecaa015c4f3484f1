/** PUBACK, PUBREC, PUBCOMP from a client for our outgoing QoS 1/2 flows. Unknown ids are ignored [docs/reliability.md rule 20]. */
import type { PubackPacket, PubcompPacket, PubrecPacket } from '../../protocol/codec.js';
import { Reason } from '../../protocol/reason-codes.js';
import type { ClientConnection } from '../context.js';

export function handlePuback(conn: ClientConnection, packet: PubackPacket): void {
  if (!conn.session!.complete(packet.messageId!)) conn.log.debug({ clientId: conn.clientId, packetId: packet.messageId }, 'PUBACK for an unknown packet id');
}

export function handlePubrec(conn: ClientConnection, packet: PubrecPacket): void {
  if (!conn.session!.received(packet.messageId!, packet.reasonCode ?? 0)) {
    // MQTT 5: answer an unknown id with PUBREL 0x92 so the client can finish its side.
    conn.sendAck('pubrel', packet.messageId!, Reason.PacketIdentifierNotFound);
  }
}

export function handlePubcomp(conn: ClientConnection, packet: PubcompPacket): void {
  if (!conn.session!.complete(packet.messageId!)) conn.log.debug({ clientId: conn.clientId, packetId: packet.messageId }, 'PUBCOMP for an unknown packet id');
}
