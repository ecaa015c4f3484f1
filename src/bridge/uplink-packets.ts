/**
 * The uplink's rare packets, through mqtt-packet (`protocol/codec`): CONNECT with its Will, CONNACK refusals in
 * words, DISCONNECT, the parse of what is not decoded in place, and MQTT 5 publish properties both ways. The hot
 * path (our publishes, their 2-byte acks, PUBLISH without properties) does not come here.
 */
import type { BridgeConfig } from '../config/schema.js';
import type { Message, PublishProperties } from '../protocol/message.js';
import { createParser, encodePacket } from '../protocol/codec.js';
import type { ConnectPacket, Packet, ProtocolVersion, PublishPacket } from '../protocol/codec.js';
import { Reason, reasonName } from '../protocol/reason-codes.js';
import { ProtocolError } from '../util/errors.js';

/** MQTT 3.1.1 CONNACK return codes 1..5 (§3.2.2.3). */
const CONNACK_V3_REFUSALS = [
  '',
  'unacceptable protocol version',
  'identifier rejected',
  'server unavailable',
  'bad user name or password',
  'not authorized',
];

/** `maxPacketBytes`: the Maximum Packet Size to announce (MQTT 5), if any. */
export function connectPacket(
  remote: BridgeConfig['remote'],
  version: ProtocolVersion,
  will: Message | undefined,
  maxPacketBytes: number | undefined,
): ConnectPacket {
  const v5 = version === 5;
  return {
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: version,
    clean: remote.cleanStart,
    clientId: remote.clientId,
    keepalive: remote.keepaliveS,
    username: remote.username,
    password: remote.password === undefined ? undefined : Buffer.from(remote.password),
    properties: v5 ? { sessionExpiryInterval: remote.sessionExpiryS, maximumPacketSize: maxPacketBytes } : undefined,
    will: will
      ? {
          topic: will.topic,
          payload: will.payload,
          qos: will.qos,
          retain: will.retain,
          properties: v5 ? toPublishProperties(will.properties, will.expiresAt) : undefined,
        }
      : undefined,
  };
}

/** Why a CONNACK with reason (MQTT 5) or return code (3.1.1) `code` refused us. */
export function connackRefusal(version: ProtocolVersion, code: number): string {
  return version === 5 ? reasonName(code) : (CONNACK_V3_REFUSALS[code] ?? 'refused');
}

export function disconnectPacket(version: ProtocolVersion, reasonCode: number): Buffer {
  return encodePacket(version === 5 ? { cmd: 'disconnect', reasonCode } : { cmd: 'disconnect' }, version);
}

/**
 * One whole packet through mqtt-packet. A parser lives only for the call (as on the broker side): these packets
 * are rare, and a parser per connection would keep its buffers.
 */
export function parsePacket(bytes: Buffer, version: ProtocolVersion): Packet {
  const parser = createParser(version);
  let packet: Packet | undefined;
  let error: Error | undefined;
  parser.on('packet', (p: Packet) => (packet = p));
  parser.on('error', (err: Error) => (error = err));
  parser.parse(bytes);
  if (packet === undefined)
    throw new ProtocolError(Reason.MalformedPacket, `a malformed packet (${error?.message ?? 'incomplete'})`);
  return packet;
}

/** MQTT 5 properties for a message leaving now: the expiry interval is what is left of its lifetime. */
function toPublishProperties(
  p: PublishProperties | undefined,
  expiresAt: number | undefined,
): PublishProperties | undefined {
  if (!p) return undefined;
  const expiryS = expiresAt === undefined ? undefined : Math.max(1, Math.ceil((expiresAt - performance.now()) / 1000));
  return definedOnly({ ...p, messageExpiryInterval: expiryS ?? p.messageExpiryInterval });
}

export function fromPublishProperties(p: PublishPacket['properties']): PublishProperties | undefined {
  if (!p) return undefined;
  return definedOnly({
    payloadFormatIndicator: p.payloadFormatIndicator,
    messageExpiryInterval: p.messageExpiryInterval,
    contentType: p.contentType,
    responseTopic: p.responseTopic,
    correlationData: p.correlationData,
    userProperties: p.userProperties,
  });
}

/** mqtt-packet refuses a property present with an undefined value; absent is what we mean. */
function definedOnly(p: PublishProperties): PublishProperties | undefined {
  const defined = Object.entries(p).filter(([, v]) => v !== undefined);
  return defined.length === 0 ? undefined : (Object.fromEntries(defined) as PublishProperties);
}
