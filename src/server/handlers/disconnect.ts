/** DISCONNECT from a client (MQTT 3.1.1 §3.14, MQTT 5 §3.14). */
import type { DisconnectPacket } from '../../protocol/codec.js';
import { Reason } from '../../protocol/reason-codes.js';
import { ProtocolError } from '../../util/errors.js';
import type { ClientConnection } from '../context.js';

export function handleDisconnect(conn: ClientConnection, packet: DisconnectPacket): void {
  const session = conn.session!;
  if (conn.version === 5) {
    const expiry = packet.properties?.sessionExpiryInterval;
    if (expiry !== undefined) {
      // A session that was to end with the connection may not be extended at disconnect [MQTT-3.14.2-2].
      if (session.expiryIntervalS === 0 && expiry !== 0) {
        throw new ProtocolError(
          Reason.ProtocolError,
          'session expiry set at DISCONNECT after 0 at CONNECT [MQTT-3.14.2-2]',
        );
      }
      session.expiryIntervalS = Math.min(expiry, conn.ctx.limits.maxSessionExpiryS);
    }
  }
  // A normal DISCONNECT discards the will [MQTT-3.1.2-10]; MQTT 5 reason 0x04 asks for it to be sent.
  if (!(conn.version === 5 && packet.reasonCode === Reason.DisconnectWithWill)) conn.will = undefined;
  conn.close(undefined, 'client disconnected');
}
