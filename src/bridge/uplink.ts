/**
 * One bridge's connection to its central broker, spoken with the gateway's own protocol layer: the framer and
 * codec of the broker side, mqtt-packet (through `protocol/codec`) for the rare packets (CONNECT, CONNACK,
 * SUBSCRIBE, DISCONNECT, and acks or publishes with properties). One engine on one stream (`dial`: TCP, TLS, WS,
 * WSS); see docs/architecture.md#uplink.
 *
 * The bridge's LMDB outbox is the only source of truth for what still has to go up; this class keeps no queue:
 * - a new connection per attempt, cycling through `remote.urls`, when `ReconnectSchedule` says;
 * - packet ids follow from the outbox seq (`outboxPacketId`), so an unacknowledged message goes again under its id
 *   after a reconnect (DUP) or a restart [MQTT-4.4.0-1], and a QoS 2 flow the broker received resumes at PUBREL
 *   (`release`);
 * - liveness is end to end: a PINGREQ every keepalive, whose PINGRESP must come within half a keepalive more
 *   (MQTT 5 §3.1.2.10), plus an ack timeout: a socket that is open but acknowledges nothing for `ackTimeoutS` is
 *   destroyed and reconnected.
 *
 * It also reports how far the upstream has provably read the stream: a PINGRESP, PUBACK or PUBREC proves that
 * every packet written before the matching PINGREQ/PUBLISH was received (one stream, processed in order). The
 * bridge uses this to release QoS 0 entries, which nobody acknowledges.
 */
import type { Duplex } from 'node:stream';
import type { BridgeConfig } from '../config/schema.js';
import type { Message, PublishProperties, QoS } from '../protocol/message.js';
import { appendPublish, createParser, decodePublish, encodeAck, encodePacket, PacketArena } from '../protocol/codec.js';
import type {
  AckCommand,
  ConnectPacket,
  Packet,
  PropertyTail,
  ProtocolVersion,
  PublishPacket,
} from '../protocol/codec.js';
import { PacketFramer, packetBytes, type FrameHandler } from '../protocol/framer.js';
import { Reason, reasonName } from '../protocol/reason-codes.js';
import { asError, errorLogFields, ProtocolError, systemErrorReason, UplinkError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { dial } from './dial.js';
import { InboundQoS2 } from './inbound-qos2.js';
import { PacketIds } from './packet-ids.js';
import { disconnectError, ReconnectSchedule, type ConnectionEnd } from './reconnect-schedule.js';
import { IdTable } from '../util/id-table.js';

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

/** What goes up: a `Message` is one. */
export interface OutgoingPublish {
  readonly topic: string;
  readonly payload: Buffer;
  readonly qos: QoS;
  readonly retain: boolean;
  readonly properties?: PublishProperties;
  /** Remaining message expiry is computed from this message's deadline. */
  readonly expiresAt?: number;
}

/** The outcome of a QoS 1/2 publish on the connection it was sent on. */
export type PublishResult = { ok: true } | { ok: false; reasonCode: number; error: Error };

/** What the sender of a QoS 1/2 publish hears back on the connection it was sent on. */
export interface PublishFlow {
  /** PUBACK (QoS 1), PUBCOMP (QoS 2), or a refusal (reason code >= 0x80 in PUBACK or PUBREC). */
  result(result: PublishResult): void;
  /**
   * QoS 2: the broker has the message (PUBREC). The PUBREL goes out once the returned promise resolves, so the
   * caller can first make "received" durable; if it rejects, no PUBREL, and the flow resumes on a later connection.
   */
  received?(): Promise<void>;
}

export interface UplinkEvents {
  connecting(attempt: number, url: string): void;
  online(session: UplinkSession): void;
  /** The connection is gone (or never came up); the next attempt is in `retryInMs` (undefined after stop). */
  offline(error: Error, retryInMs: number | undefined): void;
  /** Every publish with send index < `sendIndex` provably reached the broker. */
  confirmed(sendIndex: number): void;
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

type PublishAck = Exclude<AckCommand, 'pubrel'>;

/** Per-connection state; a new one for every attempt, so late callbacks from an old one are recognizable. */
interface Connection {
  readonly stream: Duplex;
  readonly url: string;
  readonly framer: PacketFramer;
  readonly ids: PacketIds;
  online: boolean;
  /** When CONNACK accepted it. */
  onlineAtMs: number;
  /** Publishes written on this connection so far; the next publish gets this index. */
  sendIndex: number;
  /** Outstanding PINGREQs: send index at the time of writing, and when. */
  readonly pings: { mark: number; atMs: number }[];
  /** QoS 1/2 flows under way on this connection, by packet id. */
  readonly flows: IdTable<Flow>;
  /** Packets written this tick, sent together at the next (see `write`). */
  readonly pending: PacketArena;
  /** Last time the broker acknowledged anything (PUBACK, PUBREC, PUBCOMP, SUBACK, PINGRESP, CONNACK). */
  lastAckMs: number;
  /** The packet id of our SUBSCRIBE until its SUBACK. */
  subscribeId: number | undefined;
  /** Until CONNACK: the deadline for it. */
  connackTimer: NodeJS.Timeout | undefined;
  /** Online, keepalive > 0: every half keepalive (`onKeepaliveTick`), restarted by each PINGRESP. */
  keepaliveTimer: NodeJS.Timeout | undefined;
  /** Keepalive half-periods since the last PINGRESP. */
  keepaliveTicks: number;
  closing: boolean;
  closed: boolean;
  error: Error | undefined;
}

interface Flow {
  readonly qos: 1 | 2;
  readonly sender: PublishFlow | undefined;
  /** QoS 2: PUBREC arrived (or the flow resumed at PUBREL); only PUBCOMP is awaited. */
  released: boolean;
  /** Send index of its PUBLISH (or resumed PUBREL): an answer confirms everything written before. */
  readonly sendIndex: number;
  /** When it was written: liveness (`checkLiveness`). */
  readonly atMs: number;
}

const DEFAULT_RECEIVE_MAXIMUM = 65_535;
/** The result of every accepted publish (shared: results are only read). */
const ACCEPTED: PublishResult = { ok: true };
/** How long a DISCONNECT may take to leave before the socket is destroyed. */
const DISCONNECT_GRACE_MS = 1000;
/** How long `stop` waits for the broker to close after our DISCONNECT. */
const STOP_TIMEOUT_MS = 2000;
const PINGREQ = Buffer.from([0xc0, 0x00]);
/** The acknowledgements of our publishes in their 2-byte-body form, by first header byte (flags 0 [MQTT-2.2.2-2]). */
const SHORT_ACKS: (PublishAck | undefined)[] = [];
SHORT_ACKS[0x40] = 'puback';
SHORT_ACKS[0x50] = 'pubrec';
SHORT_ACKS[0x70] = 'pubcomp';
const PUBLISH_TYPE = 3;
/** MQTT 3.1.1 CONNACK return codes 1..5 (§3.2.2.3). */
const CONNACK_V3_REFUSALS = [
  '',
  'unacceptable protocol version',
  'identifier rejected',
  'server unavailable',
  'bad user name or password',
  'not authorized',
];

export class Uplink {
  private conn: Connection | undefined;
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
    const pings = this.conn?.pings;
    return pings !== undefined && pings.length > 0 && pings[pings.length - 1].mark > sendIndex;
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
        if (conn.online) conn.stream.end(this.disconnectPacket(Reason.Success));
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
    this.flush(conn);
    conn.stream.end(this.disconnectPacket(Reason.Success));
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
    const conn = this.onlineConnection();
    const sendIndex = conn.sendIndex++;
    const id = msg.qos > 0 ? this.startFlow(conn, msg.qos as 1 | 2, packetId, sendIndex, sender, false) : undefined;
    this.scheduleFlush(conn);
    appendPublish(conn.pending, msg, this.version, msg.qos, msg.retain, dup && id !== undefined, id ?? 0, stamp, seq);
    return sendIndex;
  }

  /**
   * Resumes a QoS 2 flow the broker already received (PUBREC before a reconnect or restart): PUBREL under its
   * packet id, then PUBCOMP reports the result [MQTT-4.4.0-1]. Needs the session the broker kept.
   */
  release(packetId: number, sender: PublishFlow): number {
    const conn = this.onlineConnection();
    const sendIndex = conn.sendIndex++;
    this.writeAck(conn, 'pubrel', this.startFlow(conn, 2, packetId, sendIndex, sender, true));
    return sendIndex;
  }

  /** Sends a PINGREQ now: its PINGRESP confirms every publish written before it. */
  ping(): void {
    const conn = this.conn;
    if (conn?.online) this.writePing(conn);
  }

  private onlineConnection(): Connection {
    const conn = this.conn;
    if (!conn || !conn.online) throw new UplinkError('EF_INTERNAL', 'publish while the uplink is offline');
    return conn;
  }

  private startFlow(
    conn: Connection,
    qos: 1 | 2,
    wanted: number | undefined,
    sendIndex: number,
    sender: PublishFlow | undefined,
    released: boolean,
  ): number {
    const id = conn.ids.allocateAs(wanted);
    if (id === null) throw new UplinkError('EF_INTERNAL', 'no free packet id'); // the window is far below 65535
    // Registered even without a sender: the final ack frees the packet id.
    conn.flows.set(id, { qos, sender, released, sendIndex, atMs: performance.now() });
    return id;
  }

  private writeAck(conn: Connection, cmd: AckCommand, packetId: number): void {
    this.write(conn, encodeAck(cmd, packetId, 0, this.version));
  }

  /** Its PINGRESP confirms every publish counted so far: those waiting for this tick's write go with it, now. */
  private writePing(conn: Connection): void {
    conn.pings.push({ mark: conn.sendIndex, atMs: performance.now() });
    conn.pending.append(PINGREQ);
    this.flush(conn);
  }

  /**
   * The packets of one pump go out in one write at the next tick, encoded back to back into one buffer
   * (`PacketArena`): a write to a socket costs about 75 µs here whatever it carries.
   */
  private write(conn: Connection, bytes: Buffer): void {
    this.scheduleFlush(conn);
    conn.pending.append(bytes);
  }

  private scheduleFlush(conn: Connection): void {
    if (conn.pending.empty) process.nextTick(() => this.flush(conn));
  }

  private flush(conn: Connection): void {
    if (conn.pending.empty) return;
    const packets = conn.pending.take();
    // Closing but not yet closed: the entries stay in the outbox and go again on the next connection.
    if (conn.stream.writable && !conn.closing) conn.stream.write(packets);
  }

  // ---------------------------------------------------------------------------------------------------------
  // Connecting

  private connectNext(): void {
    if (this.stopped) return;
    const { remote, ackTimeoutS } = this.options.config;
    const url = remote.urls[this.urlIndex % remote.urls.length];
    this.urlIndex++;
    this.options.events.connecting(this.schedule.nextAttempt(), url);
    let stream: Duplex;
    try {
      stream = dial(url, remote.tls, () => {
        if (conn.closed || conn.closing) return;
        const connect = encodePacket(this.connectPacket(), this.version);
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
    const conn: Connection = {
      stream,
      url,
      framer: new PacketFramer(),
      ids: new PacketIds(),
      online: false,
      onlineAtMs: 0,
      sendIndex: 0,
      pings: [],
      flows: new IdTable(),
      pending: new PacketArena(),
      lastAckMs: performance.now(),
      subscribeId: undefined,
      connackTimer: undefined,
      keepaliveTimer: undefined,
      keepaliveTicks: 0,
      closing: false,
      closed: false,
      error: undefined,
    };
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
      conn.error ??= new UplinkError('EF_UPLINK_CONNECT', `${url}: no CONNACK within ${ackTimeoutS} s`);
      stream.destroy();
    }, ackTimeoutS * 1000);
    conn.connackTimer.unref();
  }

  private connectPacket(): ConnectPacket {
    const { remote } = this.options.config;
    const v5 = this.version === 5;
    const will = this.options.will?.();
    return {
      cmd: 'connect',
      protocolId: 'MQTT',
      protocolVersion: this.version,
      clean: remote.cleanStart,
      clientId: remote.clientId,
      keepalive: remote.keepaliveS,
      username: remote.username,
      password: remote.password === undefined ? undefined : Buffer.from(remote.password),
      properties: v5
        ? { sessionExpiryInterval: remote.sessionExpiryS, maximumPacketSize: this.announcedMaxPacketBytes() }
        : undefined,
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

  /** MQTT 5 only: a 3.1.1 broker cannot know a limit, and would send the same packet after every reconnect. */
  private announcedMaxPacketBytes(): number | undefined {
    return this.version === 5 ? this.options.maxPacketBytes : undefined;
  }

  private disconnectPacket(reasonCode: number): Buffer {
    return encodePacket(this.version === 5 ? { cmd: 'disconnect', reasonCode } : { cmd: 'disconnect' }, this.version);
  }

  private onConnack(conn: Connection, packet: Packet & { cmd: 'connack' }): void {
    clearTimeout(conn.connackTimer);
    const code = (this.version === 5 ? packet.reasonCode : packet.returnCode) ?? 0;
    if (code !== 0) {
      // Refused: needs an operator (credentials, ACL), so the bridge logs it as an error once.
      const why = this.version === 5 ? reasonName(code) : (CONNACK_V3_REFUSALS[code] ?? 'refused');
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
  private startKeepalive(conn: Connection): void {
    const keepaliveS = this.options.config.remote.keepaliveS;
    if (keepaliveS === 0) return;
    conn.keepaliveTimer = setInterval(() => this.onKeepaliveTick(conn), keepaliveS * 500);
    conn.keepaliveTimer.unref();
  }

  private onKeepaliveTick(conn: Connection): void {
    if (!conn.online || conn.closing) return;
    conn.keepaliveTicks++;
    if (conn.keepaliveTicks === 2) return this.writePing(conn);
    if (conn.keepaliveTicks < 2) return;
    conn.error ??= new UplinkError('EF_UPLINK_CONNECT', `${conn.url}: no PINGRESP within 1.5x keepalive`);
    this.log.debug({ url: conn.url }, 'uplink keepalive timeout, reconnecting');
    conn.stream.destroy();
  }

  private subscribe(conn: Connection, sessionPresent: boolean): void {
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
    this.write(conn, encodePacket({ cmd: 'subscribe', messageId, subscriptions }, this.version));
  }

  private onSuback(conn: Connection, packet: Packet & { cmd: 'suback' }): void {
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

  private onClose(conn: Connection): void {
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
  private frameHandler(conn: Connection): FrameHandler {
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
    conn: Connection,
    data: Buffer,
    first: number,
    packetStart: number,
    bodyStart: number,
    end: number,
  ): void {
    if (conn.online) {
      if (end - bodyStart === 2) {
        const ack = SHORT_ACKS[first];
        if (ack !== undefined) return this.onPublishAck(conn, ack, data.readUInt16BE(bodyStart), 0);
      } else if (first >> 4 === PUBLISH_TYPE) {
        const publish = decodePublish(data, first, bodyStart, end, this.version);
        if (publish) return this.onInboundPublish(conn, publish);
      }
    }
    this.onPacket(conn, parsePacket(data.subarray(packetStart, end), this.version));
  }

  private onPacket(conn: Connection, packet: Packet): void {
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
        return this.onPublishAck(conn, packet.cmd, packet.messageId as number, packet.reasonCode ?? 0);
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
        return this.writeAck(conn, 'pubcomp', packet.messageId as number);
      case 'pingresp':
        return this.onPingresp(conn);
      case 'suback':
        return this.onSuback(conn, packet);
      case 'disconnect':
        return this.onServerDisconnect(conn, packet.reasonCode ?? 0);
      default:
        // CONNACK again, and what only a client sends (no AUTH either: we announce no authentication method).
        throw new ProtocolError(Reason.ProtocolError, `${packet.cmd} from a server`);
    }
  }

  private onPingresp(conn: Connection): void {
    conn.lastAckMs = performance.now();
    conn.keepaliveTicks = 0;
    conn.keepaliveTimer?.refresh();
    const ping = conn.pings.shift();
    if (ping) this.options.events.confirmed(ping.mark);
  }

  private onServerDisconnect(conn: Connection, reasonCode: number): void {
    conn.error = disconnectError(conn.url, reasonCode, this.options.config.remote.clientId);
    if (reasonCode === Reason.ReceiveMaximumExceeded) {
      // The broker's limit is lower than it announced (or than we assumed): halve the window from now on.
      this.windowLimit = Math.max(1, Math.floor(Math.min(this.windowLimit, Math.max(conn.flows.size, 2)) / 2));
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
  private protocolFailure(conn: Connection, err: unknown): void {
    if (conn.closing || conn.error) return;
    const violation = err instanceof ProtocolError;
    const reasonCode = violation ? err.reasonCode : Reason.UnspecifiedError;
    const what = violation ? `central broker sent ${err.message}` : `handling a packet failed: ${asError(err).message}`;
    conn.error = new UplinkError('EF_UPLINK_CONNECT', `${conn.url}: ${what}`, { cause: err });
    if (violation) this.log.warn({ url: conn.url, reasonCode }, `${what}; reconnecting`);
    else this.log.error({ err, url: conn.url }, `${what}; reconnecting`);
    if (this.version !== 5) return void conn.stream.destroy();
    conn.stream.end(this.disconnectPacket(reasonCode));
    setTimeout(() => conn.stream.destroy(), DISCONNECT_GRACE_MS).unref();
  }

  /** PUBACK, PUBREC or PUBCOMP from the broker: liveness, confirmation of what was written before, the flow. */
  private onPublishAck(conn: Connection, cmd: PublishAck, packetId: number, reasonCode: number): void {
    conn.lastAckMs = performance.now();
    // An ack for a flow of ours; one that answers nothing is left alone.
    const flow = conn.flows.get(packetId);
    if (!flow) return;
    this.options.events.confirmed(flow.sendIndex);
    if (cmd === 'pubrec') {
      if (flow.qos !== 2 || flow.released) return;
      // An error reason ends the flow at PUBREC, without PUBREL (MQTT 5 §4.3.3).
      if (reasonCode >= 0x80) return this.settle(conn, packetId, flow, reasonCode);
      flow.released = true;
      const durable = flow.sender?.received?.();
      if (!durable) return this.writeAck(conn, 'pubrel', packetId);
      durable.then(
        () => {
          if (conn.flows.get(packetId) === flow && this.conn === conn) this.writeAck(conn, 'pubrel', packetId);
        },
        (err: unknown) =>
          this.log.warn(
            { err, url: conn.url, packetId },
            'QoS 2 receipt not recorded; PUBREL waits for the next connection',
          ),
      );
      return;
    }
    if (cmd === 'puback' ? flow.qos !== 1 : !flow.released) return;
    // PUBCOMP ends the flow whatever its reason: 0x92 (id not found) after a resumed PUBREL means the broker
    // completed it before.
    this.settle(conn, packetId, flow, cmd === 'puback' ? reasonCode : 0);
  }

  private settle(conn: Connection, packetId: number, flow: Flow, reasonCode: number): void {
    conn.flows.delete(packetId);
    conn.ids.release(packetId);
    if (!flow.sender) return;
    if (reasonCode < 0x80) return flow.sender.result(ACCEPTED);
    flow.sender.result({
      ok: false,
      reasonCode,
      error: new UplinkError(
        'EF_UPLINK_REJECTED',
        `the central broker refused a publish (0x${reasonCode.toString(16)})`,
      ),
    });
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
    let oldestMs = conn.pings.length > 0 ? conn.pings[0].atMs : Infinity;
    conn.flows.forEach((f) => {
      if (f.atMs < oldestMs) oldestMs = f.atMs;
    });
    if (oldestMs === Infinity) {
      // Nothing outstanding: probe, so a silent link is found even without traffic.
      this.writePing(conn);
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
  private onInboundPublish(conn: Connection, packet: PublishPacket): void {
    if (packet.qos === 0) return void this.deliverInbound(packet);
    const id = packet.messageId;
    if (id === undefined || id < 1)
      throw new ProtocolError(Reason.MalformedPacket, 'PUBLISH without a valid packet identifier');
    if (packet.qos === 1) {
      void this.deliverInbound(packet).then(() => this.writeAck(conn, 'puback', id));
      return;
    }
    void this.inboundQoS2.receive(id, () => this.deliverInbound(packet)).then(() => this.writeAck(conn, 'pubrec', id));
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

/**
 * One whole packet through mqtt-packet. A parser lives only for the call (as on the broker side): these packets
 * are rare, and a parser per connection would keep its buffers.
 */
function parsePacket(bytes: Buffer, version: ProtocolVersion): Packet {
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

function fromPublishProperties(p: PublishPacket['properties']): PublishProperties | undefined {
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
