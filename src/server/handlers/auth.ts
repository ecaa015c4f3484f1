/** AUTH (MQTT 5 §3.15). No enhanced authentication method is supported, so an AUTH is a protocol error. */
import type { AuthPacket } from '../../protocol/codec.js';
import { Reason } from '../../protocol/reason-codes.js';
import { ProtocolError } from '../../util/errors.js';
import type { ClientConnection } from '../context.js';

export function handleAuth(_conn: ClientConnection, packet: AuthPacket): void {
  // Only a client that started enhanced authentication in CONNECT may send AUTH [MQTT-4.12.0-1]; none can here.
  throw new ProtocolError(Reason.ProtocolError, `AUTH (${packet.reasonCode}) without an authentication method`);
}
