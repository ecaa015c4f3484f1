/**
 * What the packet handlers (handlers/) see: the server they run in (`ServerContext`) and the connection a packet
 * came on (`ClientConnection`). `Connection` implements the second; handlers never import it, so the connection
 * depends on the handlers and not back (docs/architecture.md#dependency-rules).
 */
import type { Broker } from '../broker/broker.js';
import type { AuthHooks, ClientInfo } from '../broker/auth.js';
import type { ClientLink, Session } from '../broker/session.js';
import type { Packet, ProtocolVersion, AckCommand } from '../protocol/codec.js';
import type { Message, QoS } from '../protocol/message.js';
import type { Logger } from '../util/logger.js';

export interface ServerLimits {
  readonly maxConnections: number;
  readonly maxPacketBytes: number;
  readonly maxKeepaliveS: number;
  readonly connectTimeoutMs: number;
  readonly receiveMaximum: number;
  readonly maxTopicLevels: number;
  readonly topicAliasMaximum: number;
  readonly maxSessionExpiryS: number;
  readonly maxWriteBufferBytes: number;
  readonly slowClientTimeoutMs: number;
  readonly retainAvailable: boolean;
  readonly maxUserProperties: number;
  /** Subscriptions one session may hold: each one that matches a topic is work on every message to it. */
  readonly maxSubscriptionsPerClient: number;
}

/** What every connection shares and the handlers use: the broker, auth hooks, limits and the connected clients. */
export interface ServerContext {
  readonly broker: Broker;
  /** Swapped on reload; read at each use so a new ACL applies to connected clients' next operations. */
  auth: AuthHooks;
  readonly limits: ServerLimits;
  readonly log: Logger;
  /** Connected clients by client id, for session take-over. */
  readonly clients: Map<string, ClientConnection>;
}

export type ConnectionState = 'awaiting-connect' | 'authenticating' | 'connected' | 'closed';

export interface Will {
  readonly msg: Message;
  readonly delayS: number;
}

/** A QoS 1/2 acknowledgement waiting in `pendingAcks`; `code` is set once its message is stored (or not). */
export interface PendingAck {
  readonly qos: QoS;
  readonly packetId: number;
  code: number | undefined;
}

/** One client connection as its packet handlers see it: what the client said at CONNECT, its session, and how to answer. */
export interface ClientConnection extends ClientLink, ClientInfo {
  readonly ctx: ServerContext;
  readonly log: Logger;
  state: ConnectionState;
  version: ProtocolVersion;
  clientId: string;
  username: string | undefined;
  session: Session | undefined;
  will: Will | undefined;
  keepaliveMs: number;
  /** The client's own limits (MQTT 5 CONNECT properties). */
  receiveMaximum: number;
  maxPacketBytes: number;
  topicAliasMaximum: number;
  requestProblemInformation: boolean;
  /** Incoming QoS 1/2 publishes not yet completed, checked against our Receive Maximum (MQTT 5). */
  inboundInflight: number;
  /** New subscriptions granted but still being stored (persistent sessions): they count against the limit already. */
  subscriptionsPending: number;
  /** Created on first use: most clients never use topic aliases. */
  topicAliasesIn: Map<number, string> | undefined;
  /**
   * QoS 1/2 acknowledgements waiting for their message to be stored, in the order of the PUBLISHes: they go out
   * in that order [MQTT-4.6.0-2] (handlers/publish.ts). Its head is always one still waiting.
   */
  readonly pendingAcks: PendingAck[];
  /** The listener's rules: anonymous clients, and mTLS where the certificate's CN replaces the CONNECT user name. */
  readonly allowAnonymous: boolean;
  readonly identityIsUsername: boolean;
  send(packet: Packet): void;
  sendAck(cmd: AckCommand, packetId: number, reasonCode: number): void;
  /** Reading pauses while the CONNECT is authenticated; `authenticated` resumes it once accepted or refused. */
  beginAuthentication(): void;
  authenticated(): void;
  /** Flow control for clients without Receive Maximum (see `Connection.holdInboundWhenFull`). */
  holdInboundWhenFull(): void;
  resumeInbound(): void;
  /** Back-pressure: not read from until `session`, at its queue's high-water mark, releases this publisher. */
  holdFor(session: Session): void;
  /**
   * Runs `slice` now and then once per turn until it returns true, not reading this client meanwhile: one packet's
   * long work without stalling other clients, its later packets after it (`Connection.inSlices`).
   */
  inSlices(slice: () => boolean): void;
  /** Closes once; a `reasonCode` sends DISCONNECT first (MQTT 5, connected clients only). */
  close(reasonCode: number | undefined, why: string): void;
}
