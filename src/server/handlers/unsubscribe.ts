/** UNSUBSCRIBE (MQTT 3.1.1 §3.10-3.11, MQTT 5 §3.10-3.11). */
import type { UnsubscribePacket } from '../../protocol/codec.js';
import { Reason } from '../../protocol/reason-codes.js';
import { isValidMqttString } from '../../protocol/topics.js';
import { ProtocolError } from '../../util/errors.js';
import type { ClientConnection } from '../context.js';

export function handleUnsubscribe(conn: ClientConnection, packet: UnsubscribePacket): void {
  if (packet.unsubscriptions.length === 0)
    throw new ProtocolError(Reason.ProtocolError, 'UNSUBSCRIBE without filters [MQTT-3.10.3-2]');
  if (!packet.messageId)
    throw new ProtocolError(Reason.ProtocolError, 'UNSUBSCRIBE with packet identifier 0 [MQTT-2.3.1-1]');
  if (!packet.unsubscriptions.every(isValidMqttString)) {
    throw new ProtocolError(Reason.MalformedPacket, 'ill-formed UTF-8 or U+0000 in a topic filter [MQTT-1.5.4-1]');
  }
  const session = conn.session!;
  const codes = packet.unsubscriptions.map((filter) => {
    const existed = conn.ctx.broker.unsubscribeSession(session, filter);
    return existed ? Reason.Success : Reason.NoSubscriptionExisted;
  });
  conn.send(
    conn.version === 5
      ? { cmd: 'unsuback', messageId: packet.messageId, granted: codes }
      : { cmd: 'unsuback', messageId: packet.messageId, granted: [] },
  );
}
