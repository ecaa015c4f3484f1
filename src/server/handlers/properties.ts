/** MQTT 5 property helpers shared by the CONNECT and PUBLISH handlers. */
import type { PublishProperties, UserProperties } from '../../protocol/message.js';
import { Reason } from '../../protocol/reason-codes.js';
import { isValidMqttString } from '../../protocol/topics.js';
import { ProtocolError } from '../../util/errors.js';

interface WireProperties {
  payloadFormatIndicator?: boolean;
  messageExpiryInterval?: number;
  contentType?: string;
  responseTopic?: string;
  correlationData?: Buffer;
  userProperties?: UserProperties;
}

/** The properties that travel with an application message (not topic alias, not subscription ids). */
export function toPublishProperties(p: WireProperties | undefined): PublishProperties | undefined {
  if (!p) return undefined;
  const out: PublishProperties = {};
  let any = false;
  if (p.payloadFormatIndicator !== undefined) (out.payloadFormatIndicator = p.payloadFormatIndicator), (any = true);
  if (p.messageExpiryInterval !== undefined) (out.messageExpiryInterval = p.messageExpiryInterval), (any = true);
  if (p.contentType !== undefined) (out.contentType = p.contentType), (any = true);
  if (p.responseTopic !== undefined) (out.responseTopic = p.responseTopic), (any = true);
  if (p.correlationData !== undefined) (out.correlationData = p.correlationData), (any = true);
  if (p.userProperties !== undefined) (out.userProperties = p.userProperties), (any = true);
  return any ? out : undefined;
}

/** Caps the number of user properties per packet (property floods, CVE-2021-41039). */
export function checkUserProperties(userProperties: UserProperties | undefined, max: number): void {
  if (!userProperties) return;
  let n = 0;
  for (const [name, value] of Object.entries(userProperties)) {
    n += Array.isArray(value) ? value.length : 1;
    if (!isValidMqttString(name) || !(Array.isArray(value) ? value.every(isValidMqttString) : isValidMqttString(value))) {
      throw new ProtocolError(Reason.MalformedPacket, 'ill-formed UTF-8 or U+0000 in a user property [MQTT-1.5.4-1]');
    }
  }
  if (n > max) throw new ProtocolError(Reason.PacketTooLarge, `${n} user properties exceed the limit of ${max}`);
}

/** Content Type and Response Topic are UTF-8 strings: ill-formed ones make a Malformed Packet [MQTT-1.5.4-1/2]. */
export function checkStringProperties(p: WireProperties | undefined): void {
  if (!p) return;
  if ((p.contentType !== undefined && !isValidMqttString(p.contentType)) || (p.responseTopic !== undefined && !isValidMqttString(p.responseTopic))) {
    throw new ProtocolError(Reason.MalformedPacket, 'ill-formed UTF-8 or U+0000 in a string property [MQTT-1.5.4-1]');
  }
}
