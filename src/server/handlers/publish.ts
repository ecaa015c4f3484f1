/** PUBLISH and PUBREL from a client (MQTT 3.1.1 §3.3, §4.3; MQTT 5 §3.3, §3.6, §4.3). */
import { isUtf8 } from 'node:buffer';
import type { PublishPacket, PubrelPacket } from '../../protocol/codec.js';
import { createMessage } from '../../protocol/message.js';
import type { QoS } from '../../protocol/message.js';
import { Reason } from '../../protocol/reason-codes.js';
import { isValidMqttString, isValidTopicName } from '../../protocol/topics.js';
import { ProtocolError, StoreError } from '../../util/errors.js';
import type { ClientConnection, PendingAck } from '../context.js';
import type { Session } from '../../broker/session.js';
import { checkUserProperties, checkWireProperties, toPublishProperties } from './properties.js';

export function handlePublish(conn: ClientConnection, packet: PublishPacket): void {
  const { broker, limits, auth } = conn.ctx;
  const v5 = conn.version === 5;
  const qos = packet.qos as QoS;
  const packetId = packet.messageId ?? 0;
  if (qos === 0 && packet.dup)
    throw new ProtocolError(Reason.MalformedPacket, 'DUP set on a QoS 0 PUBLISH [MQTT-3.3.1-2]');
  if (qos > 0 && packetId === 0)
    throw new ProtocolError(Reason.ProtocolError, 'QoS > 0 PUBLISH without a packet identifier [MQTT-2.3.1-1]');

  let topic = packet.topic as string;
  // Ill-formed UTF-8 or U+0000 makes the packet malformed, before any alias could remember it [MQTT-1.5.4-1/2].
  if (!isValidMqttString(topic))
    throw new ProtocolError(Reason.MalformedPacket, 'ill-formed UTF-8 or U+0000 in the topic name [MQTT-1.5.4-1]');
  const props = packet.properties;
  if (v5) {
    checkUserProperties(props?.userProperties);
    checkWireProperties(props);
    const alias = props?.topicAlias;
    if (alias !== undefined) {
      if (alias === 0 || alias > limits.topicAliasMaximum) {
        throw new ProtocolError(
          Reason.TopicAliasInvalid,
          `topic alias ${alias} outside 1..${limits.topicAliasMaximum}`,
        );
      }
      if (topic.length > 0) (conn.topicAliasesIn ??= new Map()).set(alias, topic);
      else {
        const known = conn.topicAliasesIn?.get(alias);
        if (known === undefined)
          throw new ProtocolError(Reason.TopicAliasInvalid, `topic alias ${alias} was never set`);
        topic = known;
      }
    }
  }
  if (topic.length === 0) throw new ProtocolError(Reason.ProtocolError, 'empty topic name [MQTT-4.7.3-1]');
  if (!isValidTopicName(topic, limits.maxTopicLevels)) {
    throw new ProtocolError(Reason.TopicNameInvalid, 'invalid topic name [MQTT-3.3.2-2]');
  }
  if (packet.retain && !limits.retainAvailable)
    throw new ProtocolError(Reason.RetainNotSupported, 'retain is not available');

  const session = conn.session!;
  if (qos > 0) {
    // Our Receive Maximum bounds what an MQTT 5 client may have unacknowledged [MQTT-3.3.4-9]; a 3.1.1 client was
    // never told it, and gets flow control instead (`Connection.holdInboundWhenFull`).
    if (++conn.inboundInflight > limits.receiveMaximum && conn.version === 5) {
      throw new ProtocolError(
        Reason.ReceiveMaximumExceeded,
        `more than ${limits.receiveMaximum} QoS 1/2 publishes in flight`,
      );
    }
    // A resent QoS 2 PUBLISH whose PUBREC was already sent is not delivered again [MQTT-4.3.3-9].
    if (qos === 2 && session.isAwaitingPubrel(packetId)) {
      conn.inboundInflight--;
      return acknowledge(conn, 2, packetId, Reason.Success);
    }
  }

  let reason: number | undefined;
  if (v5 && props?.payloadFormatIndicator && !isUtf8(packet.payload as Buffer)) reason = Reason.PayloadFormatInvalid;
  else reason = auth.authorizePublish(conn, topic);
  if (reason !== undefined) {
    broker.stats.dropped.not_authorized += reason === Reason.NotAuthorized ? 1 : 0;
    if (qos === 0) {
      // QoS 0 cannot carry a refusal; MQTT 5 says which ones are worth a DISCONNECT.
      if (reason === Reason.PayloadFormatInvalid)
        throw new ProtocolError(reason, 'payload is not UTF-8 as its format indicator says');
      return;
    }
    // 3.1.1 has no way to refuse a publish: it is acknowledged and dropped, as Mosquitto does [MQTT-3.3.5-2].
    const code = v5 ? reason : Reason.Success;
    if (qos === 2 && code < 0x80) session.awaitPubrel(packetId);
    return acknowledge(conn, qos, packetId, code);
  }

  const msg = createMessage({
    topic,
    payload: packet.payload as Buffer,
    qos,
    retain: packet.retain,
    properties: v5 ? toPublishProperties(props) : undefined,
    origin: conn.clientId,
  });
  broker.stats.messagesReceived[qos]++;
  // Past broker.maxRetainedMessages/maxRetainedBytes an MQTT 5 publisher that waits for an acknowledgement hears
  // 0x97 and the message goes nowhere; everyone else's is delivered but not retained (RetainedIndex.set).
  if (v5 && qos > 0 && msg.retain && broker.retained.overLimit(msg)) {
    broker.retained.refuse(msg);
    return acknowledge(conn, qos, packetId, Reason.QuotaExceeded);
  }
  let durable = broker.route(msg);
  // A subscriber's queue is at its high-water mark: this publisher is not read from until it drains.
  if (broker.pressure !== undefined) conn.holdFor(broker.pressure);
  if (qos === 0) {
    durable?.catch((err: unknown) => conn.log.warn({ err, topic }, 'QoS 0 message could not be stored'));
    return;
  }
  if (qos === 2) {
    session.awaitPubrel(packetId);
    // A persistent session remembers the id across restarts, so a resent PUBLISH after a crash is not delivered twice.
    const remembered = session.store?.putAwaitingRelease(session.id, packetId);
    if (remembered) durable = durable ? Promise.all([durable, remembered]) : remembered;
  }
  if (!durable && conn.pendingAcks.length === 0) return acknowledge(conn, qos, packetId, Reason.Success);
  // Wait for durability, keeping acknowledgements in the order of the publishes [MQTT-4.6.0-2].
  const pending: PendingAck = { qos, packetId, code: durable ? undefined : Reason.Success };
  conn.pendingAcks.push(pending);
  conn.holdInboundWhenFull();
  durable?.then(
    () => settle(conn, pending, Reason.Success),
    (err: unknown) => {
      // The store logs its refusals once per episode (a full disk refuses thousands a second); not again per message.
      if (!(err instanceof StoreError))
        conn.log.warn({ err, topic, clientId: conn.clientId }, 'message not accepted: could not be stored');
      settle(conn, pending, refusalReason(err));
    },
  );
}

/** The reason code for a publish that could not be stored: 0x97 Quota exceeded when an outbox or the store is full. */
function refusalReason(err: unknown): number {
  if (err instanceof ProtocolError) return err.reasonCode;
  if (err instanceof StoreError && err.code === 'EF_STORE_FULL') return Reason.QuotaExceeded;
  return Reason.UnspecifiedError;
}

/** Records the outcome of one pending acknowledgement and sends every one at the head that is settled. */
function settle(conn: ClientConnection, settled: PendingAck, code: number): void {
  settled.code = code;
  const queue = conn.pendingAcks;
  while (queue.length > 0 && queue[0].code !== undefined) {
    const { qos, packetId, code: reasonCode } = queue.shift()!;
    if (reasonCode !== Reason.Success) {
      if (qos === 2)
        forgetAwaitingRelease(conn.session!, packetId)?.catch((e: unknown) =>
          conn.log.warn({ err: e }, 'QoS 2 release not stored'),
        );
      // Without a way to say "not stored" in 3.1.1, the client gets no acknowledgement and resends after reconnect.
      if (conn.version !== 5) {
        queue.length = 0;
        return conn.close(undefined, 'message could not be stored');
      }
    }
    acknowledge(conn, qos, packetId, reasonCode!);
  }
}

function acknowledge(conn: ClientConnection, qos: QoS, packetId: number, reasonCode: number): void {
  if (qos === 1) conn.inboundInflight--;
  // QoS 2 stays in flight until PUBCOMP unless refused.
  else if (reasonCode >= 0x80) conn.inboundInflight--;
  conn.sendAck(qos === 1 ? 'puback' : 'pubrec', packetId, reasonCode);
  conn.resumeInbound();
}

export function handlePubrel(conn: ClientConnection, packet: PubrelPacket): void {
  const packetId = packet.messageId!;
  const session = conn.session!;
  const known = session.isAwaitingPubrel(packetId);
  // A flow begun on an earlier connection never counted against this one (the quota starts afresh with each
  // connection); like the spec's send quota, which is not raised above its initial value (MQTT 5 §4.9), the
  // count never drops below zero, or a resumed client could exceed our Receive Maximum.
  if (known && conn.inboundInflight > 0) conn.inboundInflight--;
  const pubcomp = (): void =>
    conn.sendAck('pubcomp', packetId, known ? Reason.Success : Reason.PacketIdentifierNotFound);
  const forgotten = known ? forgetAwaitingRelease(session, packetId) : undefined;
  // PUBCOMP only once the id is forgotten durably: the client may reuse the id for a new message right after it.
  if (forgotten)
    forgotten.then(pubcomp, (err: unknown) =>
      conn.log.warn({ err, clientId: conn.clientId }, 'QoS 2 release not stored'),
    );
  else pubcomp();
}

/** Forgets an incoming QoS 2 packet id, in the store too for a persistent session. */
function forgetAwaitingRelease(session: Session, packetId: number): Promise<void> | undefined {
  session.handlePubrel(packetId);
  return session.store?.deleteAwaitingRelease(session.id, packetId);
}
