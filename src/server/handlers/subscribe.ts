/** SUBSCRIBE (MQTT 3.1.1 §3.8-3.9, MQTT 5 §3.8-3.9): per-filter validation and authorization, SUBACK, retained. */
import type { SubscribePacket } from '../../protocol/codec.js';
import type { QoS } from '../../protocol/message.js';
import { Reason } from '../../protocol/reason-codes.js';
import { isValidMqttString, isValidTopicFilter, parseSharedFilter } from '../../protocol/topics.js';
import type { SubscriptionRecord } from '../../store/types.js';
import { hasOptions } from '../../broker/topic-tree.js';
import { ProtocolError } from '../../util/errors.js';
import type { ClientConnection } from '../context.js';
import { checkUserProperties, checkWireProperties } from './properties.js';

/**
 * Filters one SUBSCRIBE checks, or subscribes, per event-loop turn: a thousand-filter SUBSCRIBE (milliseconds of
 * ACL checks and tree inserts) does not stall other clients (docs/architecture.md#back-pressure).
 */
const FILTERS_PER_TURN = 64;

export function handleSubscribe(conn: ClientConnection, packet: SubscribePacket): void {
  const { broker, limits, auth } = conn.ctx;
  const v5 = conn.version === 5;
  if (packet.subscriptions.length === 0)
    throw new ProtocolError(Reason.ProtocolError, 'SUBSCRIBE without filters [MQTT-3.8.3-3]');
  if (!packet.messageId)
    throw new ProtocolError(Reason.ProtocolError, 'SUBSCRIBE with packet identifier 0 [MQTT-2.3.1-1]');
  const subscriptionId = packet.properties?.subscriptionIdentifier as number | undefined;
  if (subscriptionId === 0) throw new ProtocolError(Reason.ProtocolError, 'subscription identifier 0');
  if (v5) {
    checkUserProperties(packet.properties?.userProperties);
    checkWireProperties(packet.properties);
  }
  // v3.1.1 refuses a filter with 0x80 [MQTT-3.9.3-2]; MQTT 5 says why.
  const failure = (v5reason: number): number => (v5 ? v5reason : 0x80);

  const session = conn.session!;
  // Sized once: a thousand-filter SUBSCRIBE grew each array some ten times, garbage at every step.
  const count = packet.subscriptions.length;
  const granted = new Array<number>(count);
  const accepted = new Array<SubscriptionRecord>(count);
  let acceptedCount = 0;
  /** Filters this packet adds (not replacing one the session has), counted against maxSubscriptionsPerClient. */
  const added = new Set<string>();
  let overQuota = 0;
  /** Checks filter `i`: validity, ACL, quota; its granted QoS or failure goes into `granted[i]`. */
  const check = (i: number): void => {
    const s = packet.subscriptions[i];
    // An ill-formed string makes the whole packet malformed, not just one filter invalid [MQTT-1.5.4-1/2]: thrown
    // before anything of the packet takes effect (the last check comes before the first subscribe).
    if (!isValidMqttString(s.topic))
      throw new ProtocolError(Reason.MalformedPacket, 'ill-formed UTF-8 or U+0000 in a topic filter [MQTT-1.5.4-1]');
    const shared = parseSharedFilter(s.topic);
    const inner = shared && shared !== 'invalid' ? shared.filter : s.topic;
    if (shared === 'invalid' || !isValidTopicFilter(inner, limits.maxTopicLevels)) {
      granted[i] = failure(Reason.TopicFilterInvalid);
      return;
    }
    if (shared && s.nl)
      throw new ProtocolError(Reason.ProtocolError, 'no local on a shared subscription [MQTT-3.8.3-4]');
    const decision = auth.authorizeSubscribe(conn, s.topic, s.qos as QoS);
    if (decision >= 0x80) {
      granted[i] = failure(decision);
      return;
    }
    const held = session.subscriptions.get(s.topic);
    if (held === undefined && !added.has(s.topic)) {
      // Counted now, not at the packet's start: an earlier SUBSCRIBE still being stored may have become subscriptions.
      if (session.subscriptions.size + conn.subscriptionsPending + added.size >= limits.maxSubscriptionsPerClient) {
        overQuota++;
        granted[i] = failure(Reason.QuotaExceeded);
        return;
      }
      added.add(s.topic);
    }
    const qos = decision as QoS;
    const noLocal = s.nl ?? false;
    const retainAsPublished = s.rap ?? false;
    const retainHandling = (s.rh ?? 0) as 0 | 1 | 2;
    granted[i] = qos;
    // The same subscription again keeps the record held, as session and topic tree keep theirs: a client that
    // re-subscribes its whole set makes no object per filter.
    accepted[acceptedCount++] =
      held !== undefined && hasOptions(held, qos, noLocal, retainAsPublished, retainHandling, subscriptionId)
        ? held
        : { filter: s.topic, qos, noLocal, retainAsPublished, retainHandling, subscriptionId };
  };

  /** Subscribes `accepted` in slices, then SUBACK, then starts their retained messages in slices [MQTT-3.3.1-9]. */
  const subscribe = (pending: boolean): void => {
    const replaced = new Array<boolean>(accepted.length);
    let subscribed = 0;
    let acked = false;
    let started = 0;
    conn.inSlices(() => {
      if (!acked) {
        const end = Math.min(subscribed + FILTERS_PER_TURN, accepted.length);
        for (; subscribed < end; subscribed++) {
          const record = accepted[subscribed];
          replaced[subscribed] = broker.subscribeSession(session, record);
          // From pending to held: the quota count stays right while the rest is subscribed.
          if (pending && added.has(record.filter)) conn.subscriptionsPending--;
        }
        if (end < accepted.length) return false;
        if (conn.state === 'closed') return true;
        conn.send({ cmd: 'suback', messageId: packet.messageId, granted });
        acked = true;
      }
      if (conn.state === 'closed') return true;
      // The first slice starts in the SUBACK's turn, so that the retained messages of up to 64 filters go out
      // from the very next turn, as soon as the client can have the SUBACK (a later slice would give its own
      // publish on the topic more time to overtake the retained message).
      const end = Math.min(started + FILTERS_PER_TURN, accepted.length);
      for (; started < end; started++) broker.startRetained(session, accepted[started], replaced[started]);
      return started === accepted.length;
    });
  };

  // A SUBSCRIBE of many filters is worked on a slice per turn (docs/architecture.md#back-pressure): the client's
  // later packets wait for it (packet order), other clients do not.
  let checked = 0;
  conn.inSlices(() => {
    if (conn.state === 'closed') return true;
    const end = Math.min(checked + FILTERS_PER_TURN, count);
    for (; checked < end; checked++) check(checked);
    if (checked < count) return false;
    accepted.length = acceptedCount;
    if (overQuota > 0) {
      const max = limits.maxSubscriptionsPerClient;
      conn.log.info(
        { clientId: conn.clientId, refused: overQuota, max },
        'subscriptions refused: the client holds broker.maxSubscriptionsPerClient',
      );
    }
    // A persistent session's subscriptions are durable before the SUBACK, so a crash right after it cannot lose
    // them. The client is read again meanwhile; its new subscriptions count against the limit already.
    const durable = broker.persistSubscriptions(session, accepted);
    if (!durable) {
      subscribe(false);
      return true;
    }
    conn.subscriptionsPending += added.size;
    durable.then(
      () => subscribe(true),
      (err: unknown) => {
        conn.subscriptionsPending -= added.size;
        conn.log.warn({ err, clientId: conn.clientId }, 'subscriptions could not be stored: refused');
        conn.send({
          cmd: 'suback',
          messageId: packet.messageId,
          granted: granted.map((g) => (g < 0x80 ? failure(Reason.UnspecifiedError) : g)),
        });
      },
    );
    return true;
  });
}
