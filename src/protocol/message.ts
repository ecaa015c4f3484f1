/** The one in-memory form of an application message. Immutable once published. */
export type QoS = 0 | 1 | 2;

export interface UserProperties {
  [name: string]: string | string[];
}

/** MQTT 5 PUBLISH properties that travel with the message (aliases and subscription ids do not). */
export interface PublishProperties {
  payloadFormatIndicator?: boolean;
  /** Seconds, as received; the remaining lifetime is computed from `Message.expiresAt`. */
  messageExpiryInterval?: number;
  contentType?: string;
  responseTopic?: string;
  correlationData?: Buffer;
  userProperties?: UserProperties;
}

export interface Message {
  readonly topic: string;
  readonly payload: Buffer;
  readonly qos: QoS;
  readonly retain: boolean;
  readonly properties?: PublishProperties;
  /** Client id, or one of the gateway's own `Origins` (`bridge:<name>` for a bridge): no-local, loop prevention, command audit. */
  readonly origin: string;
  /** Monotonic deadline (ms, `performance.now()` clock) after which the message is discarded. */
  readonly expiresAt?: number;
}

/**
 * The origins of the gateway's in-process publishers. No client may take one as its client id (CONNACK 0x85):
 * no-local, loop prevention and the command audit tell the gateway's own messages from clients' by them.
 */
export const Origins = {
  edgeNode: 'edge-node',
  plainTopics: 'plain-topics',
  sys: '$SYS',
  bridgePrefix: 'bridge:',
} as const;

/** Whether a client id would pass for one of the gateway's in-process publishers (`Origins`). */
export function isInProcessOrigin(id: string): boolean {
  return (
    id === Origins.edgeNode || id === Origins.plainTopics || id === Origins.sys || id.startsWith(Origins.bridgePrefix)
  );
}

/** Builds a Message, computing the expiry deadline from the MQTT 5 message expiry interval. */
export function createMessage(fields: {
  topic: string;
  payload: Buffer;
  qos?: QoS;
  retain?: boolean;
  properties?: PublishProperties;
  origin: string;
}): Message {
  const expiryS = fields.properties?.messageExpiryInterval;
  return {
    topic: fields.topic,
    payload: fields.payload,
    qos: fields.qos ?? 0,
    retain: fields.retain ?? false,
    properties: fields.properties,
    origin: fields.origin,
    expiresAt: expiryS === undefined ? undefined : performance.now() + expiryS * 1000,
  };
}

/** Seconds of life left (rounded up), undefined if the message never expires, 0 if expired. */
export function remainingExpiryS(msg: Pick<Message, 'expiresAt'>, nowMs?: number): number | undefined {
  if (msg.expiresAt === undefined) return undefined;
  return Math.max(0, Math.ceil((msg.expiresAt - (nowMs ?? performance.now())) / 1000));
}

export function isExpired(msg: Message, nowMs?: number): boolean {
  // The clock is read only for messages that expire: most do not, and this runs per message sent.
  return msg.expiresAt !== undefined && msg.expiresAt <= (nowMs ?? performance.now());
}
