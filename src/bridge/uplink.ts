/**
 * One bridge's MQTT client connection to its central broker, spoken with the gateway's own protocol layer
 * (docs/architecture.md#uplink): one engine on one stream (`dial`: TCP, TLS, WS, WSS), a new connection per attempt
 * (uplink-connection.ts) when `ReconnectSchedule` says, cycling through `remote.urls`.
 *
 * The bridge's outbox is the only record of what still has to go up; this class keeps no queue. Packet ids follow
 * from the outbox seq (`outboxPacketId`), so an unacknowledged message goes again under its id after a reconnect
 * (DUP) or a restart [MQTT-4.4.0-1], and a QoS 2 flow the broker received resumes at PUBREL (`release`). Liveness
 * is end to end: a PINGREQ every keepalive, whose PINGRESP must come within half a keepalive more (MQTT 5
 * §3.1.2.10), and `ackTimeoutS` for a socket that is open but acknowledges nothing (a half-open link).
 */
import type { Duplex } from 'node:stream';
import type { BridgeConfig } from '../config/schema.js';
import type { Message, PublishProperties, QoS } from '../protocol/message.js';
import { decodePublish, encodePacket } from '../protocol/codec.js';
import type { Packet, PropertyTail, ProtocolVersion, PublishPacket } from '../protocol/codec.js';
import { packetBytes, type FrameHandler } from '../protocol/framer.js';
import { Reason } from '../protocol/reason-codes.js';
import { asError, errorLogFields, ProtocolError, systemErrorReason, UplinkError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { dial } from './dial.js';
import { InboundQoS2 } from './inbound-qos2.js';
import { disconnectError, ReconnectSchedule, type ConnectionEnd } from './reconnect-schedule.js';
import {
  UplinkConnection,
  type Confirmations,
  type OutgoingPublish,
  type PublishAck,
  type PublishFlow,
} from './uplink-connection.js';
import {
  connackRefusal,
  connectPacket,
  disconnectPacket,
  fromPublishProperties,
  parsePacket,
} from './uplink-packets.js';

/** What a successful CONNACK told us. */
export interface UplinkSession {
  readonly url: string;
  readonly sessionPresent: boolean;
  /** The server's Receive Maximum for our QoS 1/2 publishes (65535 when not announced). */
  readonly receiveMaximum: number;
  /** The server's Maximum Packet Size, when announced (MQTT 5). */
  readonly maximumPacketSizeBytes: number | undefined;
}

/** An application message received from the central broker. */
export interface InboundPublish {
  readonly topic: string;
  readonly payload: Buffer;
  readonly qos: QoS;
  readonly retain: boolean;
  readonly properties?: PublishProperties;
}

export interface UplinkEvents extends Confirmations {
  connecting(attempt: number, url: string): void;
  online(session: UplinkSession): void;
  /** The connection is gone (or never came up); the next attempt is in `retryInMs` (undefined after stop). */
  offline(error: Error, retryInMs: number | undefined): void;
  /** An inbound PUBLISH; the upstream is acknowledged once the returned promise settles. */
  inbound(msg: InboundPublish): Promise<void> | void;
}

export interface UplinkOptions {
  readonly config: BridgeConfig;
  readonly log: Logger;
  readonly events: UplinkEvents;
  /** Called for every CONNECT: the Will to register (Sparkplug NDEATH). */
  readonly will?: () => Message | undefined;
  /**
   * Called once per CONNECT that can reach the broker: after the stream is open (TCP connected, TLS handshake
   * done, WebSocket upgraded) and after `will()`, just before the CONNECT is written. An attempt that fails before
   * (DNS, refused, TLS) calls nothing. Sparkplug counts its bdSeq here [tck-id-payloads-nbirth-bdseq-increment].
   */
  readonly connectSending?: () => void;
  /** Remote filters to subscribe to (direction in/both), with their QoS. */
  readonly subscriptions: readonly { filter: string; qos: QoS }[];
  /**
   * Subscribe on every connection, a resumed session too, with the retained messages: a Sparkplug edge node must
   * see the primary host's retained STATE on each connection before it births [tck-id-message-flow-edge-node-birth-publish-phid-wait].
   */
  readonly subscribeEveryConnection?: boolean;
  /**
   * MQTT 5: the Maximum Packet Size announced in CONNECT (the local broker's `maxPacketBytes`, as what comes in
   * is published there). A broker that sends more breaks the protocol [MQTT-3.1.2-24]: the connection is dropped
   * at the packet's header, before its body is buffered, and it is never published locally.
   */
  readonly maxPacketBytes?: number;
}

const DEFAULT_RECEIVE_MAXIMUM = 65_535;
/** How long a DISCONNECT may take to leave before the socket is destroyed. */
const DISCONNECT_GRACE_MS = 1000;
/** How long `stop` waits for the broker to close after our DISCONNECT. */
const STOP_TIMEOUT_MS = 2000;
/** The acknowledgements of our publishes in their 2-byte-body form, by first header byte (flags 0 [MQTT-2.2.2-2]). */
const SHORT_ACKS: (PublishAck | undefined)[] = [];
SHORT_ACKS[0x40] = 'puback';
SHORT_ACKS[0x50] = 'pubrec';
SHORT_ACKS[0x70] = 'pubcomp';
const PUBLISH_TYPE = 3;

export class Uplink {
  private conn: UplinkConnection | undefined;
  private stopped = true;
  private urlIndex = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private livenessTimer: NodeJS.Timeout | undefined;
  private readonly schedule: ReconnectSchedule;
  /** Inbound QoS 2 state outlives a connection: a PUBLISH sent again on a resumed session is not published twice. */
  private readonly inboundQoS2 = new InboundQoS2();
  /** Remote filters already subscribed by this process (re-subscribe on a resumed session only if new). */
  private subscribedOnce = false;
  /** Upper bound for the QoS 1/2 window after the broker complained (DISCONNECT 0x93). */
  private windowLimit = Infinity;
  private readonly version: ProtocolVersion;
  private readonly log: Logger;

  constructor(private readonly options: UplinkOptions) {
    this.log = options.log;
    this.version = options.config.remote.protocolVersion;
    this.schedule = new ReconnectSchedule(options.config.reconnect);
  }

  get online(): boolean {
    return this.conn?.online === true;
  }

  /** Whether a PINGREQ written after publish `sendIndex` is still waiting for its PINGRESP. */
  pingCovers(sendIndex: number): boolean {
    return this.conn?.pingCovers(sendIndex) === true;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.connectNext();
    const checkEveryMs = Math.max(100, Math.min(1000, (this.options.config.ackTimeoutS * 1000) / 4));
    this.livenessTimer = setInterval(() => this.checkLiveness(), checkEveryMs);
    this.livenessTimer.unref();
  }

  /**
   * Closes the connection, with DISCONNECT (reason 0: the broker discards the Will) when online; resolves once the
   * stream is closed. Outstanding acks are not waited for: unacknowledged entries stay in the outbox and go again
   * on the next start.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.livenessTimer);
    const conn = this.conn;
    if (!conn) return;
    conn.closing = true;
    if (!conn.closed) {
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => conn.stream.destroy(), STOP_TIMEOUT_MS);
        conn.stream.once('close', () => {
          clearTimeout(force);
          resolve();
        });
        if (conn.online) conn.stream.end(disconnectPacket(this.version, Reason.Success));
        else conn.stream.destroy();
      });
    }
    if (this.conn === conn) this.conn = undefined;
  }

  /**
   * Ends the current connection with a normal DISCONNECT, after everything written before it (the broker discards
   * the Will), and connects again after the backoff: a new MQTT session (Sparkplug: the primary host went away).
   */
  reconnect(reason: string): void {
    const conn = this.conn;
    if (this.stopped || !conn?.online || conn.closing) return;
    conn.error = new UplinkError('EF_UPLINK_CONNECT', reason);
    conn.flush();
    conn.stream.end(disconnectPacket(this.version, Reason.Success));
    setTimeout(() => conn.stream.destroy(), DISCONNECT_GRACE_MS).unref();
  }

  /**
   * Writes one PUBLISH on the current connection. The flow's callbacks run when the broker answers on this
   * connection (never if the connection drops first: the entry is still in the outbox and goes again).
   * `packetId` is the one to use when it is free (an outbox entry's own, see `outboxPacketId`); `dup` marks a
   * re-send that may have reached the broker [MQTT-3.3.1-1]. MQTT 5: `stamp` adds its properties for `seq` (the
   * bridge's message id). Returns the publish's send index.
   */
  publish(
    msg: OutgoingPublish,
    packetId: number | undefined,
    dup: boolean,
    sender?: PublishFlow,
    stamp?: PropertyTail,
    seq = 0,
  ): number {
    return this.onlineConnection().publish(msg, packetId, dup, sender, stamp, seq);
  }

  /**
   * Resumes a QoS 2 flow the broker already received (PUBREC before a reconnect or restart): PUBREL under its
   * packet id, then PUBCOMP reports the result [MQTT-4.4.0-1]. Needs the session the broker kept.
   */
  release(packetId: number, sender: PublishFlow): number {
    return this.onlineConnection().release(packetId, sender);
  }

  /** Sends a PINGREQ now: its PINGRESP confirms every publish written before it. */
  ping(): void {
    const conn = this.conn;
    if (conn?.online) conn.writePing();
  }

  private onlineConnection(): UplinkConnection {
    const conn = this.conn;
    if (!conn || !conn.online) throw new UplinkError('EF_INTERNAL', 'publish while the uplink is offline');
    return conn;
  }

  // ---------------------------------------------------------------------------------------------------------
  // Connecting

  private connectNext(): void {
    if (this.stopped) return;
    const { remote } = this.options.config;
    const url = remote.urls[this.urlIndex % remote.urls.length];
    this.urlIndex++;
    this.options.events.connecting(this.schedule.nextAttempt(), url);
    let stream: Duplex;
    try {
      stream = dial(url, remote.tls, () => {
        if (conn.closed || conn.closing) return;
        const will = this.options.will?.();
        const connect = encodePacket(
          connectPacket(remote, this.version, will, this.announcedMaxPacketBytes()),
          this.version,
        );
        this.options.connectSending?.();
        stream.write(connect);
      });
    } catch (err) {
      // An unreadable or invalid TLS file: a failed attempt, so the bridge keeps buffering and retries.
      const error = new UplinkError('EF_UPLINK_CONNECT', `cannot connect to ${url}: ${asError(err).message}`, {
        cause: err,
      });
      this.scheduleRetry({ error, closedByBroker: false, onlineMs: undefined });
      return;
    }
    const conn = new UplinkConnection(stream, url, this.version, this.options.events, this.log);
    this.conn = conn;
    const frames = this.frameHandler(conn);
    stream.on('data', (chunk: Buffer) => {
      try {
        conn.framer.push(chunk, frames);
      } catch (err) {
        this.protocolFailure(conn, err);
      }
    });
    stream.on('error', (err: Error) => {
      conn.error ??= new UplinkError('EF_UPLINK_CONNECT', `${url}: ${systemErrorReason(err) ?? err.message}`, {
        cause: err,
      });
      this.log.debug({ ...errorLogFields(err), url }, 'uplink error');
    });
    stream.on('close', () => this.onClose(conn));
    conn.connackTimer = setTimeout(() => {
      conn.error ??= new UplinkError('EF_UPLINK_CONNECT', `${url}: no CONNACK within ${remote.connectTimeoutS} s`);
      stream.destroy();
    }, remote.connectTimeoutS * 1000);
    conn.connackTimer.unref();
  }

  /** MQTT 5 only: a 3.1.1 broker cannot know a limit, and would send the same packet after every reconnect. */
  private announcedMaxPacketBytes(): number | undefined {
    return this.version === 5 ? this.options.maxPacketBytes : undefined;
  }

  private onConnack(conn: UplinkConnection, packet: Packet & { cmd: 'connack' }): void {
    clearTimeout(conn.connackTimer);
    const code = (this.version === 5 ? packet.reasonCode : packet.returnCode) ?? 0;
    if (code !== 0) {
      // Refused: needs an operator (credentials, ACL), so the bridge logs it as an error once.
      const why = connackRefusal(this.version, code);
      conn.error = new UplinkError(
        'EF_UPLINK_REJECTED',
        `${conn.url} refused the connection: ${why} (0x${code.toString(16)})`,
      );
      conn.stream.destroy();
      return;
    }
    if (this.stopped) return;
    conn.online = true;
    conn.lastAckMs = conn.onlineAtMs = performance.now();
    this.startKeepalive(conn);
    this.schedule.online();
    // The next attempt after a drop starts again at the first URL (the preferred node).
    this.urlIndex = 0;
    const props = packet.properties;
    const sessionPresent = packet.sessionPresent === true;
    // The broker forgot our session: its QoS 2 state is gone with it.
    if (!sessionPresent) this.inboundQoS2.clear();
    // SUBSCRIBE goes on the wire before anything the online handler sends (backlog, Sparkplug births), so the
    // broker, reading the connection in order, has the command subscription before a host can answer a birth
    // [tck-id-message-flow-edge-node-ncmd-subscribe].
    this.subscribe(conn, sessionPresent);
    this.options.events.online({
      url: conn.url,
      sessionPresent,
      receiveMaximum: Math.min(props?.receiveMaximum ?? DEFAULT_RECEIVE_MAXIMUM, this.windowLimit),
      maximumPacketSizeBytes: props?.maximumPacketSize,
    });
  }

  /**
   * MQTT 5 §3.1.2.10: a control packet at least every keepalive. A PINGREQ goes one keepalive after the last
   * PINGRESP; without an answer half a keepalive later the link is dead (a half-open TCP connection).
   */
  private startKeepalive(conn: UplinkConnection): void {
    const keepaliveS = this.options.config.remote.keepaliveS;
    if (keepaliveS === 0) return;
    conn.keepaliveTimer = setInterval(() => this.onKeepaliveTick(conn), keepaliveS * 500);
    conn.keepaliveTimer.unref();
  }

  private onKeepaliveTick(conn: UplinkConnection): void {
    if (!conn.online || conn.closing) return;
    conn.keepaliveTicks++;
    if (conn.keepaliveTicks === 2) return conn.writePing();
    if (conn.keepaliveTicks < 2) return;
    conn.error ??= new UplinkError('EF_UPLINK_CONNECT', `${conn.url}: no PINGRESP within 1.5x keepalive`);
    this.log.debug({ url: conn.url }, 'uplink keepalive timeout, reconnecting');
    conn.stream.destroy();
  }

  private subscribe(conn: UplinkConnection, sessionPresent: boolean): void {
    const subs = this.options.subscriptions;
    if (subs.length === 0) return;
    const everyConnection = this.options.subscribeEveryConnection === true;
    // A resumed session still has them; subscribing again would make MQTT 3.1.1 brokers resend retained ones.
    if (sessionPresent && this.subscribedOnce && !everyConnection) return;
    const messageId = conn.ids.allocate() as number; // the first id of a fresh connection
    conn.subscribeId = messageId;
    const v5 = this.version === 5;
    // MQTT 5: no-local (our own publishes do not come back) and retained messages only for a new subscription,
    // or on every subscribe when wanted on every connection [MQTT-3.3.1-9] [MQTT-3.3.1-10].
    const rh = everyConnection ? 0 : 1;
    // The Sparkplug uplink asks for Retain As Published too: a retained command keeps its flag, so the edge node
    // can refuse it (docs/architecture.md#dcmd-to-the-plc); a 3.1.1 broker clears it on live delivery [MQTT-3.3.1-9].
    const rap = everyConnection;
    const subscriptions = subs.map((s) =>
      v5 ? { topic: s.filter, qos: s.qos, nl: true, rh, rap } : { topic: s.filter, qos: s.qos },
    );
    conn.write(encodePacket({ cmd: 'subscribe', messageId, subscriptions }, this.version));
  }

  private onSuback(conn: UplinkConnection, packet: Packet & { cmd: 'suback' }): void {
    conn.lastAckMs = performance.now();
    if (conn.subscribeId === undefined || packet.messageId !== conn.subscribeId) return;
    conn.ids.release(conn.subscribeId);
    conn.subscribeId = undefined;
    this.subscribedOnce = true;
    const subs = this.options.subscriptions;
    // One reason code per filter, in order (mqtt-packet types them loosely).
    (packet.granted as number[]).forEach((reasonCode, i) => {
      if (reasonCode >= 0x80)
        this.log.warn({ filter: subs[i]?.filter, reasonCode }, 'central broker refused an inbound subscription');
    });
  }

  private onClose(conn: UplinkConnection): void {
    conn.closed = true;
    clearTimeout(conn.connackTimer);
    clearInterval(conn.keepaliveTimer);
    if (this.conn !== conn) return;
    const wasOnline = conn.online;
    conn.online = false;
    this.conn = undefined;
    const error =
      conn.error ??
      new UplinkError('EF_UPLINK_CONNECT', wasOnline ? 'connection closed' : `cannot connect to ${conn.url}`);
    if (this.stopped || conn.closing) {
      this.options.events.offline(error, undefined);
      return;
    }
    const onlineMs = wasOnline ? performance.now() - conn.onlineAtMs : undefined;
    this.scheduleRetry({ error, closedByBroker: wasOnline && conn.error === undefined, onlineMs });
  }

  private scheduleRetry(end: ConnectionEnd): void {
    if (this.stopped) return;
    const { error, delayMs: retryInMs } = this.schedule.ended(end);
    this.options.events.offline(error, retryInMs);
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.connectNext(), retryInMs);
    this.retryTimer.unref();
  }

  // ---------------------------------------------------------------------------------------------------------
  // Reading

  /** The framer's view of one connection (one object per connection, not per packet). */
  private frameHandler(conn: UplinkConnection): FrameHandler {
    const maxPacketBytes = this.announcedMaxPacketBytes() ?? Infinity;
    const open = (): boolean => conn.error === undefined && !conn.closed;
    return {
      header: (_type, remainingLength) => {
        // Refused at its fixed header, before its body is buffered [MQTT-3.1.2-24].
        const bytes = packetBytes(remainingLength);
        if (bytes > maxPacketBytes)
          throw new ProtocolError(
            Reason.PacketTooLarge,
            `a packet of ${bytes} bytes, above our Maximum Packet Size [MQTT-3.1.2-24]`,
          );
      },
      packet: (data, first, packetStart, bodyStart, end) =>
        this.onFrame(conn, data, first, packetStart, bodyStart, end),
      isOpen: open,
      canTakeMore: open,
    };
  }

  /**
   * One whole packet. The replay's hot path, the 2-byte acks of our publishes, and PUBLISH without properties
   * are decoded in place; everything else goes through mqtt-packet.
   */
  private onFrame(
    conn: UplinkConnection,
    data: Buffer,
    first: number,
    packetStart: number,
    bodyStart: number,
    end: number,
  ): void {
    if (conn.online) {
      if (end - bodyStart === 2) {
        const ack = SHORT_ACKS[first];
        if (ack !== undefined) return conn.acknowledged(ack, data.readUInt16BE(bodyStart), 0);
      } else if (first >> 4 === PUBLISH_TYPE) {
        const publish = decodePublish(data, first, bodyStart, end, this.version);
        if (publish) return this.onInboundPublish(conn, publish);
      }
    }
    this.onPacket(conn, parsePacket(data.subarray(packetStart, end), this.version));
  }

  private onPacket(conn: UplinkConnection, packet: Packet): void {
    if (!conn.online) {
      if (packet.cmd !== 'connack')
        throw new ProtocolError(Reason.ProtocolError, `${packet.cmd} before CONNACK [MQTT-3.2.0-1]`);
      return this.onConnack(conn, packet);
    }
    // mqtt-packet reads a body too short for a packet id as id -1 rather than failing.
    if (packet.messageId !== undefined && packet.messageId < 1)
      throw new ProtocolError(Reason.MalformedPacket, `${packet.cmd} without a valid packet identifier`);
    switch (packet.cmd) {
      case 'puback':
      case 'pubrec':
      case 'pubcomp':
        return conn.acknowledged(packet.cmd, packet.messageId as number, packet.reasonCode ?? 0);
      case 'publish':
        // We announce no Topic Alias Maximum, i.e. 0: the broker may not use aliases [MQTT-3.3.2-11].
        if (packet.properties?.topicAlias !== undefined)
          throw new ProtocolError(
            Reason.TopicAliasInvalid,
            'a PUBLISH with a Topic Alias, which we do not accept [MQTT-3.3.2-11]',
          );
        return this.onInboundPublish(conn, packet);
      case 'pubrel':
        // Known or not (a restart forgot it), the message is published locally: complete the flow.
        this.inboundQoS2.release(packet.messageId as number);
        return conn.writeAck('pubcomp', packet.messageId as number);
      case 'pingresp':
        return conn.pingAnswered();
      case 'suback':
        return this.onSuback(conn, packet);
      case 'disconnect':
        return this.onServerDisconnect(conn, packet.reasonCode ?? 0);
      default:
        // CONNACK again, and what only a client sends (no AUTH either: we announce no authentication method).
        throw new ProtocolError(Reason.ProtocolError, `${packet.cmd} from a server`);
    }
  }

  private onServerDisconnect(conn: UplinkConnection, reasonCode: number): void {
    conn.error = disconnectError(conn.url, reasonCode, this.options.config.remote.clientId);
    if (reasonCode === Reason.ReceiveMaximumExceeded) {
      // The broker's limit is lower than it announced (or than we assumed): halve the window from now on.
      this.windowLimit = Math.max(1, Math.floor(Math.min(this.windowLimit, Math.max(conn.inFlight, 2)) / 2));
      this.log.warn(
        { url: conn.url, windowLimit: this.windowLimit },
        'central broker says too many messages in flight; window reduced',
      );
    }
    // Nothing may follow a DISCONNECT [MQTT-3.14.4-1]; the broker closes too.
    conn.stream.destroy();
  }

  /**
   * The broker broke the protocol (docs/reliability.md rule 38), or handling its packet failed: the stream can no
   * longer be trusted. DISCONNECT with the reason (MQTT 5), close, reconnect; what was in flight goes again.
   */
  private protocolFailure(conn: UplinkConnection, err: unknown): void {
    if (conn.closing || conn.error) return;
    const violation = err instanceof ProtocolError;
    const reasonCode = violation ? err.reasonCode : Reason.UnspecifiedError;
    const what = violation ? `central broker sent ${err.message}` : `handling a packet failed: ${asError(err).message}`;
    conn.error = new UplinkError('EF_UPLINK_CONNECT', `${conn.url}: ${what}`, { cause: err });
    if (violation) this.log.warn({ url: conn.url, reasonCode }, `${what}; reconnecting`);
    else this.log.error({ err, url: conn.url }, `${what}; reconnecting`);
    if (this.version !== 5) return void conn.stream.destroy();
    conn.stream.end(disconnectPacket(this.version, reasonCode));
    setTimeout(() => conn.stream.destroy(), DISCONNECT_GRACE_MS).unref();
  }

  /**
   * End-to-end liveness: something (a publish or a ping) has waited for an answer longer than `ackTimeoutS`
   * and the broker answered nothing else meanwhile. Half-open TCP and stalled brokers end up here.
   */
  private checkLiveness(): void {
    const conn = this.conn;
    if (!conn || !conn.online || conn.closing) return;
    const limitMs = this.options.config.ackTimeoutS * 1000;
    const nowMs = performance.now();
    if (nowMs - conn.lastAckMs <= limitMs) return;
    const oldestMs = conn.oldestWaitingSinceMs();
    if (oldestMs === Infinity) {
      // Nothing outstanding: probe, so a silent link is found even without traffic.
      conn.writePing();
      return;
    }
    if (nowMs - oldestMs <= limitMs) return;
    conn.error = new UplinkError(
      'EF_UPLINK_CONNECT',
      `central broker acknowledged nothing for ${this.options.config.ackTimeoutS} s`,
    );
    this.log.debug({ url: conn.url }, 'uplink stalled, reconnecting');
    conn.stream.destroy();
  }

  /**
   * An inbound PUBLISH, acknowledged once it is published locally (or refused, logged): QoS 1 with PUBACK, QoS 2
   * with PUBREC (`InboundQoS2`: delivered on receipt, once per packet id until PUBREL).
   */
  private onInboundPublish(conn: UplinkConnection, packet: PublishPacket): void {
    if (packet.qos === 0) return void this.deliverInbound(packet);
    const id = packet.messageId;
    if (id === undefined || id < 1)
      throw new ProtocolError(Reason.MalformedPacket, 'PUBLISH without a valid packet identifier');
    if (packet.qos === 1) {
      void this.deliverInbound(packet).then(() => conn.writeAck('puback', id));
      return;
    }
    void this.inboundQoS2.receive(id, () => this.deliverInbound(packet)).then(() => conn.writeAck('pubrec', id));
  }

  /** Publishes an inbound message locally; settles once it is durable there, or refused (logged, not thrown). */
  private async deliverInbound(packet: PublishPacket): Promise<void> {
    const msg: InboundPublish = {
      topic: packet.topic,
      payload: Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload),
      qos: packet.qos,
      retain: packet.retain,
      properties: fromPublishProperties(packet.properties),
    };
    try {
      await this.options.events.inbound(msg);
    } catch (err) {
      this.log.warn({ err, topic: msg.topic, url: this.conn?.url }, 'inbound message could not be published locally');
    }
  }
}
