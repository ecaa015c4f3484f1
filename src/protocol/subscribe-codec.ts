/**
 * SUBSCRIBE decoded here rather than by mqtt-packet, whose parser copies the packet into a buffer list and builds
 * it whole, field by field, before the handler sees any of it: a thousand-filter SUBSCRIBE was one uninterrupted
 * stretch of work before the handler's slices began (docs/architecture.md#back-pressure). Only the common,
 * well-formed case is decoded here: anything else (an MQTT 5 SUBSCRIBE with properties, reserved bits set, a QoS or
 * retain handling of 3, lengths that do not add up, no filter at all) returns undefined and goes through
 * mqtt-packet, which says what is wrong. Filters are checked for well-formed UTF-8 by the handler, as for
 * mqtt-packet's (both decode ill-formed bytes to U+FFFD).
 */
import type { ISubscribePacket as SubscribePacket, ISubscription as Subscription } from 'mqtt-packet';
import type { ProtocolVersion } from './codec.js';
import type { QoS } from './message.js';

/** Fixed header of a SUBSCRIBE: type 8, reserved flags 0b0010 [MQTT-3.8.1-1]. */
const SUBSCRIBE_FIRST_BYTE = 0x82;

/**
 * A well-formed SUBSCRIBE (`data[bodyStart..end)` is its body), as mqtt-packet would return it (MQTT 3.1.1: topic
 * and qos; MQTT 5: also nl, rap and rh); undefined for anything else.
 */
export function decodeSubscribe(
  data: Buffer,
  first: number,
  bodyStart: number,
  end: number,
  version: ProtocolVersion,
): SubscribePacket | undefined {
  if (first !== SUBSCRIBE_FIRST_BYTE || end - bodyStart < 2) return undefined;
  const messageId = data.readUInt16BE(bodyStart);
  let at = bodyStart + 2;
  const v5 = version === 5;
  if (v5) {
    // A property length of 0 is one byte; anything else has properties for mqtt-packet to parse.
    if (at >= end || data[at] !== 0) return undefined;
    at++;
  }
  if (at >= end) return undefined;
  const subscriptions: Subscription[] = [];
  while (at < end) {
    if (at + 2 > end) return undefined;
    const topicEnd = at + 2 + data.readUInt16BE(at);
    // The options byte follows the filter.
    if (topicEnd >= end) return undefined;
    const topic = data.toString('utf8', at + 2, topicEnd);
    const options = data[topicEnd];
    at = topicEnd + 1;
    if ((options & 3) === 3) return undefined;
    const qos = (options & 3) as QoS;
    if (!v5) {
      // Bits 7-2 reserved in 3.1.1 [MQTT-3.8.3-4].
      if (options > 3) return undefined;
      subscriptions.push({ topic, qos });
      continue;
    }
    const rh = (options >> 4) & 3;
    // Bits 7-6 reserved [MQTT-3.8.3-5]; retain handling 3 is a protocol error.
    if (options > 0x3f || rh === 3) return undefined;
    subscriptions.push({ topic, qos, nl: (options & 0x04) !== 0, rap: (options & 0x08) !== 0, rh });
  }
  return { cmd: 'subscribe', messageId, subscriptions };
}
