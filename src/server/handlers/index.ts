/**
 * One decoded packet to its handler, by the connection's state and the packet's type. The connection calls
 * `handlePacket` and turns what it throws into a close with the right reason code.
 */
import type { Packet } from '../../protocol/codec.js';
import { Reason } from '../../protocol/reason-codes.js';
import { ProtocolError } from '../../util/errors.js';
import type { ClientConnection } from '../context.js';
import { handleConnect } from './connect.js';
import { handlePublish, handlePubrel } from './publish.js';
import { handlePuback, handlePubrec, handlePubcomp } from './acks.js';
import { handleSubscribe } from './subscribe.js';
import { handleUnsubscribe } from './unsubscribe.js';
import { handlePingreq } from './ping.js';
import { handleDisconnect } from './disconnect.js';
import { handleAuth } from './auth.js';

export { refuse as refuseConnect } from './connect.js';

/** Handles a packet of a connection that is awaiting CONNECT or connected. */
export function handlePacket(conn: ClientConnection, packet: Packet): void {
  if (conn.state === 'awaiting-connect') {
    if (packet.cmd !== 'connect')
      throw new ProtocolError(Reason.ProtocolError, `first packet is ${packet.cmd}, not CONNECT`);
    return handleConnect(conn, packet);
  }
  // mqtt-packet yields -1 instead of failing when the packet ends inside its packet identifier.
  if (packet.messageId !== undefined && packet.messageId < 0)
    throw new ProtocolError(Reason.MalformedPacket, 'packet identifier cut short');
  switch (packet.cmd) {
    case 'publish':
      return handlePublish(conn, packet);
    case 'puback':
      return handlePuback(conn, packet);
    case 'pubrec':
      return handlePubrec(conn, packet);
    case 'pubrel':
      return handlePubrel(conn, packet);
    case 'pubcomp':
      return handlePubcomp(conn, packet);
    case 'subscribe':
      return handleSubscribe(conn, packet);
    case 'unsubscribe':
      return handleUnsubscribe(conn, packet);
    case 'pingreq':
      return handlePingreq(conn);
    case 'disconnect':
      return handleDisconnect(conn, packet);
    case 'auth':
      return handleAuth(conn, packet);
    case 'connect':
      throw new ProtocolError(Reason.ProtocolError, 'second CONNECT on a connection [MQTT-3.1.0-2]');
    default:
      // CONNACK, SUBACK, UNSUBACK, PINGRESP are server-to-client only.
      throw new ProtocolError(Reason.ProtocolError, `a client may not send ${packet.cmd}`);
  }
}
