/** SUBSCRIBE (MQTT 3.1.1 §3.8-3.9, MQTT 5 §3.8-3.9): per-filter validation and authorization, SUBACK, retained. */
import type { SubscribePacket } from '../../protocol/codec.js';
import type { QoS } from '../../protocol/message.js';
import { Reason } from '../../protocol/reason-codes.js';
import { isValidMqttString, isValidTopicFilter, parseSharedFilter } from '../../protocol/topics.js';
import type { SubscriptionRecord } from '../../store/types.js';
import { ProtocolError } from '../../util/errors.js';
import type { ClientConnection } from '../context.js';
import { checkUserProperties, checkWireProperties } from './properties.js';

export function handleSubscribe(conn: ClientConnection, packet: SubscribePacket): void {
  const { broker, limits, auth } = conn.ctx;
  const v5 = conn.version === 5;
  if (packet.subscriptions.length === 0) throw new ProtocolError(Reason.ProtocolError, 'SUBSCRIBE without filters [MQTT-3.8.3-3]');
  if (!packet.messageId) throw new ProtocolError(Reason.ProtocolError, 'SUBSCRIBE with packet identifier 0 [MQTT-2.3.1-1]');
  // An ill-formed string makes the whole packet malformed, not just one filter invalid [MQTT-1.5.4-1/2].
  if (!packet.subscriptions.every((s) => isValidMqttString(s.topic))) {
    throw new ProtocolError(Reason.MalformedPacket, 'ill-formed UTF-8 or U+0000 in a topic filter [MQTT-1.5.4-1]');
  }
  const subscriptionId = packet.properties?.subscriptionIdentifier as number | undefined;
  if (subscriptionId === 0) throw new ProtocolError(Reason.ProtocolError, 'subscription identifier 0');
  if (v5) {
    checkUserProperties(packet.properties?.userProperties);
    checkWireProperties(packet.properties);
  }
  // v3.1.1 refuses a filter with 0x80 [MQTT-3.9.3-2]; MQTT 5 says why.
  const failure = (v5reason: number): number => (v5 ? v5reason : 0x80);

  const session = conn.session!;
  const granted: number[] = [];
  const accepted: SubscriptionRecord[] = [];
  /** Filters this packet adds (not replacing one the session has), counted against maxSubscriptionsPerClient. */
  const added = new Set<string>();
  const held = session.subscriptions.size + conn.subscriptionsPending;
  let overQuota = 0;
  for (const s of packet.subscriptions) {
    const shared = parseSharedFilter(s.topic);
    const inner = shared && shared !== 'invalid' ? shared.filter : s.topic;
    if (shared === 'invalid' || !isValidTopicFilter(inner, limits.maxTopicLevels)) {
      granted.push(failure(Reason.TopicFilterInvalid));
      continue;
    }
    if (shared && s.nl) throw new ProtocolError(Reason.ProtocolError, 'no local on a shared subscription [MQTT-3.8.3-4]');
    const decision = auth.authorizeSubscribe(conn, s.topic, s.qos as QoS);
    if (decision >= 0x80) {
      granted.push(failure(decision));
      continue;
    }
    if (!session.subscriptions.has(s.topic) && !added.has(s.topic)) {
      if (held + added.size >= limits.maxSubscriptionsPerClient) {
        overQuota++;
        granted.push(failure(Reason.QuotaExceeded));
        continue;
      }
      added.add(s.topic);
    }
    const qos = decision as QoS;
    granted.push(qos);
    accepted.push({
      filter: s.topic,
      qos,
      noLocal: s.nl ?? false,
      retainAsPublished: s.rap ?? false,
      retainHandling: (s.rh ?? 0) as 0 | 1 | 2,
      subscriptionId,
    });
  }
  if (overQuota > 0) {
    const max = limits.maxSubscriptionsPerClient;
    conn.log.info({ clientId: conn.clientId, refused: overQuota, max }, 'subscriptions refused: the client holds broker.maxSubscriptionsPerClient');
  }
  // SUBACK first, then the retained messages of the new subscriptions. A persistent session's subscriptions are
  // durable before the SUBACK, so a crash right after it cannot lose them.
  const subscribe = (): void => {
    conn.send({ cmd: 'suback', messageId: packet.messageId, granted });
    for (const record of accepted) broker.subscribeSession(session, record);
  };
  const durable = broker.persistSubscriptions(session, accepted);
  if (!durable) return subscribe();
  conn.subscriptionsPending += added.size;
  durable.then(
    () => {
      conn.subscriptionsPending -= added.size;
      subscribe();
    },
    (err: unknown) => {
      conn.subscriptionsPending -= added.size;
      conn.log.warn({ err, clientId: conn.clientId }, 'subscriptions could not be stored: refused');
      conn.send({ cmd: 'suback', messageId: packet.messageId, granted: granted.map((g) => (g < 0x80 ? failure(Reason.UnspecifiedError) : g)) });
    },
  );
}
