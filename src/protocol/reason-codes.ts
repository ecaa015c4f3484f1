/** MQTT 5.0 reason codes (OASIS MQTT 5.0, 2.4) and the MQTT 3.1.1 CONNACK return codes they map to. */
export const Reason = {
  Success: 0x00,
  GrantedQoS1: 0x01,
  GrantedQoS2: 0x02,
  DisconnectWithWill: 0x04,
  NoMatchingSubscribers: 0x10,
  NoSubscriptionExisted: 0x11,
  UnspecifiedError: 0x80,
  MalformedPacket: 0x81,
  ProtocolError: 0x82,
  ImplementationSpecificError: 0x83,
  UnsupportedProtocolVersion: 0x84,
  ClientIdentifierNotValid: 0x85,
  BadUserNameOrPassword: 0x86,
  NotAuthorized: 0x87,
  ServerUnavailable: 0x88,
  ServerBusy: 0x89,
  Banned: 0x8a,
  ServerShuttingDown: 0x8b,
  BadAuthenticationMethod: 0x8c,
  KeepAliveTimeout: 0x8d,
  SessionTakenOver: 0x8e,
  TopicFilterInvalid: 0x8f,
  TopicNameInvalid: 0x90,
  PacketIdentifierInUse: 0x91,
  PacketIdentifierNotFound: 0x92,
  ReceiveMaximumExceeded: 0x93,
  TopicAliasInvalid: 0x94,
  PacketTooLarge: 0x95,
  MessageRateTooHigh: 0x96,
  QuotaExceeded: 0x97,
  AdministrativeAction: 0x98,
  PayloadFormatInvalid: 0x99,
  RetainNotSupported: 0x9a,
  QoSNotSupported: 0x9b,
  UseAnotherServer: 0x9c,
  ServerMoved: 0x9d,
  SharedSubscriptionsNotSupported: 0x9e,
  ConnectionRateExceeded: 0x9f,
  MaximumConnectTime: 0xa0,
  SubscriptionIdentifiersNotSupported: 0xa1,
  WildcardSubscriptionsNotSupported: 0xa2,
} as const;

export type ReasonCode = (typeof Reason)[keyof typeof Reason];

/** MQTT 3.1.1 CONNACK return codes (3.2.2.3). */
export const ConnackV3 = {
  Accepted: 0,
  UnacceptableProtocolVersion: 1,
  IdentifierRejected: 2,
  ServerUnavailable: 3,
  BadUserNameOrPassword: 4,
  NotAuthorized: 5,
} as const;

/** The 3.1.1 CONNACK return code closest to an MQTT 5 CONNACK reason code. */
export function connackV3Code(reason: number): number {
  switch (reason) {
    case Reason.Success:
      return ConnackV3.Accepted;
    case Reason.UnsupportedProtocolVersion:
      return ConnackV3.UnacceptableProtocolVersion;
    case Reason.ClientIdentifierNotValid:
      return ConnackV3.IdentifierRejected;
    case Reason.BadUserNameOrPassword:
    case Reason.BadAuthenticationMethod:
      return ConnackV3.BadUserNameOrPassword;
    case Reason.NotAuthorized:
    case Reason.Banned:
      return ConnackV3.NotAuthorized;
    default:
      return ConnackV3.ServerUnavailable;
  }
}

/** Short snake_case names, used as metric labels and log fields. */
export function reasonName(code: number): string {
  for (const [name, value] of Object.entries(Reason)) {
    if (value === code) return name.replace(/[A-Z]/g, (c, i) => (i ? '_' : '') + c.toLowerCase());
  }
  return `reason_0x${code.toString(16)}`;
}
