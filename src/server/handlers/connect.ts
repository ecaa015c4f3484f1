/** CONNECT: validate, authenticate, take over or open the session, CONNACK (MQTT 3.1.1 §3.1-3.2, MQTT 5 §3.1-3.2). */
import { randomBytes } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import type { ConnectPacket, ProtocolVersion } from '../../protocol/codec.js';
import { createMessage, isInProcessOrigin } from '../../protocol/message.js';
import type { QoS } from '../../protocol/message.js';
import { Reason, connackV3Code } from '../../protocol/reason-codes.js';
import { isValidMqttString, isValidTopicName } from '../../protocol/topics.js';
import { ProtocolError } from '../../util/errors.js';
import type { ClientConnection } from '../context.js';
import { toPublishProperties, checkUserProperties, checkWireProperties } from './properties.js';

/** CONNACK refusal: the code goes out in the client's protocol version, then the connection closes. */
export function refuse(conn: ClientConnection, reason: number, why: string): void {
  if (conn.version === 5) {
    const properties = conn.requestProblemInformation ? { reasonString: why } : undefined;
    conn.send({ cmd: 'connack', sessionPresent: false, reasonCode: reason, properties });
  } else {
    conn.send({ cmd: 'connack', sessionPresent: false, returnCode: connackV3Code(reason) });
  }
  conn.ctx.log.info(
    { clientId: conn.clientId || undefined, remote: conn.remoteAddress, reasonCode: reason, why },
    'connection refused',
  );
  conn.close(undefined, why);
}

export function handleConnect(conn: ClientConnection, packet: ConnectPacket): void {
  const { limits } = conn.ctx;
  conn.version = packet.protocolVersion as ProtocolVersion;
  const v5 = conn.version === 5;
  const props = packet.properties;
  if (v5 && props?.requestProblemInformation === false) conn.requestProblemInformation = false;

  // Malformed content: close without CONNACK where the spec says so.
  if (!isValidMqttString(packet.clientId) || (packet.username !== undefined && !isValidMqttString(packet.username))) {
    throw new ProtocolError(Reason.MalformedPacket, 'ill-formed UTF-8 in client id or user name [MQTT-1.5.3-1]');
  }
  if (!v5 && packet.password !== undefined && packet.username === undefined) {
    throw new ProtocolError(Reason.MalformedPacket, 'password without user name [MQTT-3.1.2-22]');
  }
  if ((packet.will?.qos ?? 0) > 2) {
    // mqtt-packet takes the two Will QoS bits as they come; 3 makes the CONNECT malformed [MQTT-3.1.2-14].
    if (v5) return refuse(conn, Reason.MalformedPacket, 'Will QoS 3 [MQTT-3.1.2-12]');
    throw new ProtocolError(Reason.MalformedPacket, 'Will QoS 3 [MQTT-3.1.2-14]');
  }
  if (v5 && (props?.receiveMaximum === 0 || props?.maximumPacketSize === 0)) {
    throw new ProtocolError(Reason.ProtocolError, 'receive maximum and maximum packet size must not be 0');
  }
  if (v5) {
    checkUserProperties(props?.userProperties);
    checkUserProperties(packet.will?.properties?.userProperties);
    checkWireProperties(props);
    checkWireProperties(packet.will?.properties);
  }

  // Client identifier rules.
  let clientId = packet.clientId;
  let assigned = false;
  if (conn.version === 3 && (clientId.length === 0 || clientId.length > 23)) {
    return refuse(conn, Reason.ClientIdentifierNotValid, 'MQTT 3.1 client ids are 1 to 23 characters');
  }
  if (clientId.length === 0) {
    // 3.1.1: an empty id needs clean session [MQTT-3.1.3-8]; MQTT 5: the server assigns one [MQTT-3.1.3-6].
    if (!v5 && !packet.clean)
      return refuse(conn, Reason.ClientIdentifierNotValid, 'empty client id requires clean session');
    clientId = `auto-${randomBytes(8).toString('hex')}`;
    assigned = true;
  }
  if (isInProcessOrigin(clientId)) {
    return refuse(
      conn,
      Reason.ClientIdentifierNotValid,
      `client id ${clientId} is reserved for the gateway's own publishers`,
    );
  }
  conn.clientId = clientId;

  // Keep alive: MQTT 5 gets our maximum as Server Keep Alive; 3.1.x clients above it are refused (Mosquitto).
  let keepaliveS = packet.keepalive ?? 0;
  let serverKeepAlive: number | undefined;
  if (limits.maxKeepaliveS < 65535 && (keepaliveS > limits.maxKeepaliveS || keepaliveS === 0)) {
    if (!v5)
      return refuse(conn, Reason.ClientIdentifierNotValid, `keep alive above the maximum of ${limits.maxKeepaliveS} s`);
    keepaliveS = serverKeepAlive = limits.maxKeepaliveS;
  }

  if (v5 && props?.authenticationMethod !== undefined) {
    return refuse(
      conn,
      Reason.BadAuthenticationMethod,
      `authentication method ${props.authenticationMethod} is not supported`,
    );
  }

  // Will message: validated now, authorized after authentication.
  const will = packet.will;
  if (will) {
    if (!isValidTopicName(will.topic, limits.maxTopicLevels)) {
      if (!v5) throw new ProtocolError(Reason.TopicNameInvalid, 'invalid will topic');
      return refuse(conn, Reason.TopicNameInvalid, 'invalid will topic');
    }
    if (will.retain && !limits.retainAvailable)
      return refuse(conn, Reason.RetainNotSupported, 'retain is not available');
    if (v5 && will.properties?.payloadFormatIndicator && !isUtf8(will.payload as Buffer)) {
      return refuse(conn, Reason.PayloadFormatInvalid, 'will payload is not UTF-8 as its format indicator says');
    }
  }

  // mTLS with useIdentityAsUsername: the verified certificate is the credential, its CN the user name.
  let username = packet.username;
  let password = packet.password;
  if (conn.identityIsUsername) {
    if (conn.certificateIdentity === undefined)
      return refuse(conn, Reason.NotAuthorized, 'no verified client certificate');
    username = conn.certificateIdentity;
    password = undefined;
  }
  const accepted: Accepted = { clientId, username, assigned, keepaliveS, serverKeepAlive };
  let answer: number | undefined | Promise<number | undefined>;
  try {
    answer = conn.ctx.auth.authenticate({
      clientId,
      username,
      password,
      certificateVerified: conn.identityIsUsername,
      remoteAddress: conn.remoteAddress,
      allowAnonymous: conn.allowAnonymous,
      waiting: () => conn.state !== 'closed',
    });
  } catch (err) {
    return authenticationFailed(conn, err);
  }
  // An answer at once (anonymous clients, no password file) completes the CONNECT now, without a promise.
  if (!(answer instanceof Promise)) return authenticated(conn, packet, answer, accepted);
  conn.beginAuthentication();
  answer.then(
    (refusal) => authenticated(conn, packet, refusal, accepted),
    (err: unknown) => authenticationFailed(conn, err),
  );
}

/** What the CONNECT handler settled before authentication, for `accept`. */
interface Accepted {
  readonly clientId: string;
  readonly username: string | undefined;
  readonly assigned: boolean;
  readonly keepaliveS: number;
  readonly serverKeepAlive: number | undefined;
}

function authenticated(conn: ClientConnection, packet: ConnectPacket, refusal: number | undefined, p: Accepted): void {
  if (conn.state === 'closed') return;
  conn.state = 'awaiting-connect';
  if (refusal !== undefined) return refuse(conn, refusal, 'authentication failed');
  conn.username = p.username;
  if (
    packet.will &&
    conn.ctx.auth.authorizePublish({ clientId: p.clientId, username: p.username }, packet.will.topic) !== undefined
  ) {
    return refuse(conn, Reason.NotAuthorized, 'not authorized to publish the will topic');
  }
  accept(conn, packet, p);
  conn.authenticated();
}

function authenticationFailed(conn: ClientConnection, err: unknown): void {
  conn.ctx.log.error({ err, clientId: conn.clientId }, 'authentication hook failed');
  refuse(conn, Reason.UnspecifiedError, 'authentication error');
}

function accept(conn: ClientConnection, packet: ConnectPacket, p: Accepted): void {
  const { broker, limits, clients, log } = conn.ctx;
  const v5 = conn.version === 5;
  const props = packet.properties;

  // Session take-over: the old connection is closed first, its will handled as for any network close [MQTT-3.1.4-3].
  const previous = clients.get(p.clientId);
  if (previous && previous !== conn) previous.close(Reason.SessionTakenOver, 'session taken over by a new connection');

  let expiryS: number;
  let announcedExpiryS: number | undefined;
  if (v5) {
    const requested = props?.sessionExpiryInterval ?? 0;
    expiryS = Math.min(requested, limits.maxSessionExpiryS);
    if (expiryS !== requested) announcedExpiryS = expiryS;
  } else {
    // 3.1.1 has no expiry: a clean-session-0 session would live for ever; it gets the cap (Mosquitto's
    // `persistent_client_expiration`).
    expiryS = packet.clean === false ? limits.maxSessionExpiryS : 0;
  }
  const cleanStart = packet.clean ?? true;
  // The session's owner is the authenticated user name (a client certificate's identity with useIdentityAsUsername).
  const { session, present } = broker.openSession(p.clientId, conn.username ?? null, cleanStart, expiryS);

  conn.state = 'connected';
  conn.session = session;
  conn.keepaliveMs = p.keepaliveS * 1000;
  if (v5) {
    conn.receiveMaximum = props?.receiveMaximum ?? 65535;
    conn.maxPacketBytes = props?.maximumPacketSize ?? 268435455;
    conn.topicAliasMaximum = props?.topicAliasMaximum ?? 0;
  }
  if (packet.will) {
    const w = packet.will;
    conn.will = {
      msg: createMessage({
        topic: w.topic,
        // A copy: the decoded payload may be a view of the read chunk, which the will would pin for the connection's life.
        payload: Buffer.from(w.payload),
        qos: w.qos as QoS,
        retain: w.retain,
        properties: v5 ? toPublishProperties(w.properties) : undefined,
        origin: p.clientId,
      }),
      delayS: v5 ? (w.properties?.willDelayInterval ?? 0) : 0,
    };
  }
  clients.set(p.clientId, conn);
  const stats = broker.stats;
  stats.clientsConnected++;
  stats.connectionsTotal++;
  if (stats.clientsConnected > stats.clientsMaximum) stats.clientsMaximum = stats.clientsConnected;

  // 3.1.1: session present is 0 whenever clean session is set [MQTT-3.2.2-1].
  const sessionPresent = present && !cleanStart;
  if (v5) {
    conn.send({
      cmd: 'connack',
      sessionPresent,
      reasonCode: Reason.Success,
      properties: {
        sessionExpiryInterval: announcedExpiryS,
        receiveMaximum: limits.receiveMaximum,
        maximumPacketSize: limits.maxPacketBytes,
        retainAvailable: limits.retainAvailable,
        topicAliasMaximum: limits.topicAliasMaximum,
        wildcardSubscriptionAvailable: true,
        subscriptionIdentifiersAvailable: true,
        sharedSubscriptionAvailable: true,
        assignedClientIdentifier: p.assigned ? p.clientId : undefined,
        serverKeepAlive: p.serverKeepAlive,
      },
    });
  } else {
    conn.send({ cmd: 'connack', sessionPresent, returnCode: 0 });
  }
  // Resend unacknowledged messages and anything queued while offline.
  session.attach(conn);
  log.debug(
    { clientId: p.clientId, version: conn.version, remote: conn.remoteAddress, sessionPresent },
    'client connected',
  );
}
