/** MQTT 5 property helpers shared by the CONNECT and PUBLISH handlers. */
import type { PublishProperties, UserProperties } from '../../protocol/message.js';
import { Reason } from '../../protocol/reason-codes.js';
import { isValidMqttString } from '../../protocol/topics.js';
import { ProtocolError } from '../../util/errors.js';

/**
 * The properties that travel with an application message, picked from a packet's properties (which may also hold
 * a topic alias, subscription ids and more).
 */
export function toPublishProperties(p: PublishProperties | undefined): PublishProperties | undefined {
  if (!p) return undefined;
  const out: PublishProperties = {};
  let any = false;
  if (p.payloadFormatIndicator !== undefined) {
    out.payloadFormatIndicator = p.payloadFormatIndicator;
    any = true;
  }
  if (p.messageExpiryInterval !== undefined) {
    out.messageExpiryInterval = p.messageExpiryInterval;
    any = true;
  }
  if (p.contentType !== undefined) {
    out.contentType = p.contentType;
    any = true;
  }
  if (p.responseTopic !== undefined) {
    out.responseTopic = p.responseTopic;
    any = true;
  }
  if (p.correlationData !== undefined) {
    out.correlationData = p.correlationData;
    any = true;
  }
  if (p.userProperties !== undefined) {
    out.userProperties = p.userProperties;
    any = true;
  }
  return any ? out : undefined;
}

/**
 * User properties must be well-formed strings. (Their number was checked on the packet's bytes, before parsing:
 * protocol/property-scan.ts.)
 */
export function checkUserProperties(userProperties: UserProperties | undefined): void {
  if (!userProperties) return;
  for (const [name, value] of Object.entries(userProperties)) {
    if (!isValidMqttString(name) || !(Array.isArray(value) ? value.every(isWellFormed) : isWellFormed(value))) {
      throw new ProtocolError(
        Reason.MalformedPacket,
        'malformed user property: truncated, ill-formed UTF-8 or U+0000 [MQTT-1.5.4-1]',
      );
    }
  }
}

function isWellFormed(s: unknown): boolean {
  return typeof s === 'string' && isValidMqttString(s);
}

/**
 * mqtt-packet does not fail on a property that runs past the end of the packet: it yields null (strings, binary
 * data), -1 (integers) or false (variable byte integers). Those, and strings with ill-formed UTF-8 or U+0000,
 * make a Malformed Packet [MQTT-1.5.4-1/2]; a repeated property is a Protocol Error. User properties are checked by
 * `checkUserProperties`.
 */
export function checkWireProperties(p: object | undefined): void {
  if (!p) return;
  for (const [name, value] of Object.entries(p)) {
    if (name === 'userProperties') continue;
    // mqtt-packet collects a repeated property into an array; only user properties may repeat (MQTT 5 §2.2.2.2).
    if (Array.isArray(value)) throw new ProtocolError(Reason.ProtocolError, `${name} property included more than once`);
    const bad =
      value === null ||
      value === undefined ||
      (typeof value === 'number' && value < 0) ||
      (typeof value === 'string' && !isValidMqttString(value)) ||
      (name === 'subscriptionIdentifier' && typeof value !== 'number');
    if (bad) throw new ProtocolError(Reason.MalformedPacket, `malformed ${name} property [MQTT-1.5.4-1]`);
  }
}
