/**
 * One bridge's connection to its central broker, built on MQTT.js (the only module that imports `mqtt`).
 *
 * MQTT.js runs the connection (CONNECT/CONNACK, keepalive, SUBSCRIBE, inbound publishes; their QoS 2 state is
 * ours, `InboundQoS2`), never a queue: the bridge's LMDB outbox is the only source of truth for what still has to go up.
 * Outgoing publishes bypass it entirely: encoded by our codec, written to its transport, and their acks are taken
 * out of the inbound bytes before MQTT.js parses them (`AckTap`) and matched here. So:
 * - a new MqttClient per connection attempt, `reconnectPeriod: 0`: this class owns reconnects (decorrelated
 *   jitter, cycling through `remote.urls`), and MQTT.js has no outgoing store to replay;
 * - packet ids come from our allocator: an outbox entry's id follows from its seq (`outboxPacketId`), so an
 *   unacknowledged message goes again under its id after a reconnect (DUP) or a restart [MQTT-4.4.0-1], and a
 *   QoS 2 flow the broker received resumes at PUBREL (`release`);
 * - liveness is end to end: MQTT.js's keepalive (PINGRESP within 1.5x keepalive) plus our own ack timeout: a
 *   socket that is open but acknowledges nothing for `ackTimeoutS` is destroyed and reconnected.
 *
 * It also reports how far the upstream has provably read the stream: a PINGRESP, PUBACK or PUBREC proves that
 * every packet written before the matching PINGREQ/PUBLISH was received (one TCP stream, processed in order).
 * The bridge uses this to release QoS 0 entries, which nobody acknowledges.
 */
import { readFileSync } from 'node:fs';
import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import { connect, Store } from 'mqtt';
import type { IClientOptions, IConnackPacket, IPublishPacket, IStore, MqttClient, Packet } from 'mqtt';
import type { BridgeConfig } from '../config/schema.js';
import type { Message, PublishProperties, QoS } from '../protocol/message.js';
import { appendPublish, encodeAck, encodePacket, PacketArena } from '../protocol/codec.js';
import { Reason } from '../protocol/reason-codes.js';
import { Backoff } from '../util/backoff.js';
import { AckTap, type PublishAck } from './ack-tap.js';
import { asError, UplinkError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';

type MessageIdProvider = NonNullable<IClientOptions['messageIdProvider']>;

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

/**
 * Packet ids 1..OUTBOX_PACKET_IDS belong to outbox entries, derived from their seq, so a flow resumes under the
 * same id after a restart and the broker recognises a QoS 2 message it already has [MQTT-4.3.3-10]. The ids
 * above are for everything else (MQTT.js's SUBSCRIBE, publishes outside the outbox).
 */
export const OUTBOX_PACKET_IDS = 65_000;

export function outboxPacketId(seq: number): number {
  return ((seq - 1) % OUTBOX_PACKET_IDS) + 1;
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
  /** Called before every connection attempt: the Will to register (Sparkplug NDEATH). */
  readonly will?: () => Message | undefined;
  /**
   * Called once per CONNECT that can reach the broker, just before its bytes leave: the transport is up (TCP
   * connected, TLS handshake done); an attempt that fails before (DNS, TCP, TLS) sends no CONNECT and calls
   * nothing. Sparkplug counts its bdSeq here [tck-id-payloads-nbirth-bdseq-increment]. A WebSocket stream hides
   * its socket: there it is called when the transport is created.
   */
  readonly connectSending?: () => void;
  /** Remote filters to subscribe to (direction in/both), with their QoS. */
  readonly subscriptions: readonly { filter: string; qos: QoS }[];
  /**
   * MQTT 5: the Maximum Packet Size announced in CONNECT (the local broker's `maxPacketBytes`, as what comes in
   * is published there). A broker that sends more breaks the protocol [MQTT-3.1.2-24]: the connection is dropped
   * at the packet's header (`AckTap`), before its body is buffered, and it is never published locally.
   */
  readonly maxPacketBytes?: number;
}

/** Per-connection state; a new one for every MqttClient, so late callbacks from an old one are recognizable. */
interface Connection {
  readonly client: MqttClient;
  /** The transport under MQTT.js's stream (`AckTap`): our publishes are written to it directly. */
  transport: Duplex | undefined;
  readonly url: string;
  readonly ids: PacketIdAllocator;
  online: boolean;
  /** Publishes written on this connection so far; the next publish gets this index. */
  sendIndex: number;
  /** Outstanding PINGREQs: send index at the time of writing, and when. */
  readonly pings: { mark: number; atMs: number }[];
  /** QoS 1/2 flows under way on this connection, by packet id. */
  readonly flows: Map<number, Flow>;
  /** Packets written this tick, sent together at the next (see `write`). */
  readonly pending: PacketArena;
  /** Last time the broker acknowledged anything (PUBACK, PUBREC, PUBCOMP, SUBACK, PINGRESP, CONNACK). */
  lastAckMs: number;
  closing: boolean;
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
/** How long a DISCONNECT for a protocol violation may take to leave before the socket is destroyed. */
const DISCONNECT_GRACE_MS = 1000;

export class Uplink {
  private conn: Connection | undefined;
  private stopped = true;
  private attempt = 0;
  private urlIndex = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private livenessTimer: NodeJS.Timeout | undefined;
  private readonly backoff: Backoff;
  /** Inbound QoS 2 state outlives a connection: a PUBLISH sent again on a resumed session is not published twice. */
  private incomingStore = new InboundQoS2((packet) => this.deliverInbound(packet));
  /** Remote filters already subscribed by this process (re-subscribe on a resumed session only if new). */
  private subscribedOnce = false;
  /** Upper bound for the QoS 1/2 window after the broker complained (DISCONNECT 0x93). */
  private windowLimit = Infinity;
  private readonly log: Logger;

  constructor(private readonly options: UplinkOptions) {
    this.log = options.log;
    const { minDelayMs, maxDelayMs } = options.config.reconnect;
    this.backoff = new Backoff(minDelayMs, maxDelayMs);
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

  /** Closes the connection (DISCONNECT when possible); resolves once the socket is closed. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.livenessTimer);
    const conn = this.conn;
    if (!conn) return;
    conn.closing = true;
    const client = conn.client;
    await new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        client.stream.destroy();
        resolve();
      }, 2000);
      const done = (): void => {
        clearTimeout(force);
        resolve();
      };
      if (conn.online) {
        // Do not wait for outstanding acks (MQTT.js would): unacknowledged entries stay in the outbox and go
        // again on the next start. Emptying MQTT.js's pending table makes end() send DISCONNECT at once.
        for (const id of Object.keys(client.outgoing)) delete client.outgoing[Number(id)];
        client.end(false, {}, done);
      } else {
        client.end(true, {}, done);
      }
    });
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
    // As at stop: end() sends DISCONNECT at once instead of waiting for acks of publishes MQTT.js never tracked.
    for (const id of Object.keys(conn.client.outgoing)) delete conn.client.outgoing[Number(id)];
    conn.client.end(false, {});
  }

  /**
   * Writes one PUBLISH on the current connection, encoded by our codec. The flow's callbacks run when the
   * broker answers on this connection (never if the connection drops first: the entry is still in the outbox
   * and goes again). MQTT.js is not involved: its per-publish work (option merging, a deep copy for its
   * outgoing store, timers, logging) was the largest share of the replay's CPU, and the outbox already is the
   * store; it ignores acks for ids it did not send. `packetId` is the one to use when it is free (an outbox
   * entry's own, see `outboxPacketId`); `dup` marks a re-send that may have reached the broker [MQTT-3.3.1-1].
   * Returns the publish's send index.
   */
  publish(msg: OutgoingPublish, packetId: number | undefined, dup: boolean, sender?: PublishFlow): number {
    const conn = this.onlineConnection();
    const sendIndex = conn.sendIndex++;
    const id = msg.qos > 0 ? this.startFlow(conn, msg.qos as 1 | 2, packetId, sendIndex, sender, false) : undefined;
    this.scheduleFlush(conn);
    appendPublish(conn.pending, msg, this.options.config.remote.protocolVersion, msg.qos, msg.retain, dup && id !== undefined, id ?? 0);
    return sendIndex;
  }

  /**
   * Resumes a QoS 2 flow the broker already received (PUBREC before a reconnect or restart): PUBREL under its
   * packet id, then PUBCOMP reports the result [MQTT-4.4.0-1]. Needs the session the broker kept.
   */
  release(packetId: number, sender: PublishFlow): number {
    const conn = this.onlineConnection();
    const sendIndex = conn.sendIndex++;
    this.writePubrel(conn, this.startFlow(conn, 2, packetId, sendIndex, sender, true));
    return sendIndex;
  }

  private onlineConnection(): Connection {
    const conn = this.conn;
    if (!conn || !conn.online) throw new UplinkError('EF_INTERNAL', 'publish while the uplink is offline');
    return conn;
  }

  private startFlow(conn: Connection, qos: 1 | 2, wanted: number | undefined, sendIndex: number, sender: PublishFlow | undefined, released: boolean): number {
    const id = conn.ids.allocateAs(wanted);
    if (id === null) throw new UplinkError('EF_INTERNAL', 'no free packet id'); // the window is far below 65535
    // Registered even without a sender: the final ack frees the packet id.
    conn.flows.set(id, { qos, sender, released, sendIndex, atMs: performance.now() });
    return id;
  }

  private writePubrel(conn: Connection, packetId: number): void {
    this.write(conn, encodeAck('pubrel', packetId, 0, this.options.config.remote.protocolVersion));
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
    const stream = conn.transport;
    // Closing but not yet closed: the entries stay in the outbox and go again on the next connection.
    if (stream === undefined || !stream.writable) return;
    stream.write(packets);
  }

  /** Sends a PINGREQ now: its PINGRESP confirms every publish written before it. */
  ping(): void {
    const conn = this.conn;
    if (!conn?.online) return;
    // Its PINGRESP confirms every publish counted so far: those waiting for this tick's write go first.
    this.flush(conn);
    conn.client.sendPing();
  }

  private connectNext(): void {
    if (this.stopped) return;
    const { remote } = this.options.config;
    const url = remote.urls[this.urlIndex % remote.urls.length];
    this.urlIndex++;
    this.attempt++;
    this.options.events.connecting(this.attempt, url);
    let client: MqttClient;
    const ids = new PacketIdAllocator();
    try {
      // Not connected yet: its stream builder gets the AckTap around the transport first.
      client = connect(url, { ...this.clientOptions(ids), manualConnect: true });
    } catch (err) {
      // An unreadable TLS file or a bad URL: treat like a failed attempt, so the bridge keeps buffering and retries.
      this.scheduleRetry(new UplinkError('EF_UPLINK_CONNECT', `cannot connect to ${url}: ${asError(err).message}`, { cause: err }));
      return;
    }
    const conn: Connection = {
      client,
      transport: undefined,
      url,
      ids,
      online: false,
      sendIndex: 0,
      pings: [],
      flows: new Map(),
      pending: new PacketArena(),
      lastAckMs: performance.now(),
      closing: false,
      error: undefined,
    };
    this.conn = conn;
    // MQTT.js declares its stream builder private; wrapping it is the one way in before the first byte.
    const withBuilder = client as unknown as { streamBuilder: (c: MqttClient) => Duplex };
    const build = withBuilder.streamBuilder;
    withBuilder.streamBuilder = (c) => {
      const transport = build(c);
      const sending = this.options.connectSending;
      if (sending) beforeConnectLeaves(transport, sending);
      const tap = new AckTap(transport, (cmd, packetId) => this.onPublishAck(conn, cmd, packetId, 0), this.announcedMaxPacketBytes());
      conn.transport = tap.transport;
      return tap;
    };
    client.handleMessage = (packet, done) => this.handleInbound(packet, done);
    client.on('packetsend', (packet) => this.onPacketSend(conn, packet));
    client.on('packetreceive', (packet) => this.onPacketReceive(conn, packet));
    client.on('connect', (connack) => this.onConnect(conn, connack));
    client.on('disconnect', (packet) => {
      const reason = packet.reasonCode ?? 0;
      conn.error = new UplinkError('EF_UPLINK_CONNECT', `central broker sent DISCONNECT 0x${reason.toString(16)}`);
      if (reason === Reason.ReceiveMaximumExceeded) {
        // The broker's limit is lower than it announced (or than we assumed): halve the window from now on.
        this.windowLimit = Math.max(1, Math.floor(Math.min(this.windowLimit, Math.max(conn.flows.size, 2)) / 2));
        this.log.warn({ url, windowLimit: this.windowLimit }, 'central broker says too many messages in flight; window reduced');
      }
    });
    client.on('error', (err) => {
      // MQTT.js reports socket errors, refused CONNACKs and keepalive timeouts here; 'close' follows where the
      // connection is gone. Remember the cause for the offline report.
      conn.error ??= classifyError(err, url);
      this.log.debug({ err, url }, 'uplink error');
      // Anything else on an established connection (a parser error, an ack that answers nothing) means the
      // stream can no longer be trusted: drop it and reconnect (docs/reliability.md rule 38).
      if (conn.online && !conn.closing) client.stream.destroy();
    });
    client.on('close', () => this.onClose(conn));
    try {
      client.connect();
    } catch (err) {
      // Bad TLS material (the transport is built here): treat like a failed attempt, keep buffering, retry.
      client.removeAllListeners();
      this.conn = undefined;
      this.scheduleRetry(new UplinkError('EF_UPLINK_CONNECT', `cannot connect to ${url}: ${asError(err).message}`, { cause: err }));
      return;
    }
    // Our writes are already batched per tick (see `write`); Nagle would hold the next small write until
    // the previous one is acknowledged, which the receiver's delayed ACK postpones by up to 40 ms (measured:
    // replay at a few hundred messages/s once writes were smaller than the window). TLS sockets pass it on;
    // WebSocket streams have no such method (the ws library sets it on its socket itself).
    (conn.transport as { setNoDelay?: (on: boolean) => void } | undefined)?.setNoDelay?.(true);
  }

  /** MQTT 5 only: a 3.1.1 broker cannot know a limit, and would send the same packet after every reconnect. */
  private announcedMaxPacketBytes(): number | undefined {
    return this.options.config.remote.protocolVersion === 5 ? this.options.maxPacketBytes : undefined;
  }

  private clientOptions(ids: PacketIdAllocator): IClientOptions {
    const { remote, ackTimeoutS } = this.options.config;
    const v5 = remote.protocolVersion === 5;
    const willMsg = this.options.will?.();
    const options: IClientOptions = {
      clientId: remote.clientId,
      username: remote.username,
      password: remote.password,
      protocolVersion: remote.protocolVersion,
      keepalive: remote.keepaliveS,
      clean: remote.cleanStart,
      reconnectPeriod: 0,
      connectTimeout: ackTimeoutS * 1000,
      queueQoSZero: false,
      resubscribe: false,
      // MQTT.js otherwise moves its keepalive timer (clearInterval + setInterval) at every packet sent or
      // received: 3.5 % of the replay's CPU, measured. Pings then go every keepalive interval, as the spec allows.
      reschedulePings: false,
      // MQTT.js traces every packet through the `debug` package, which costs even when disabled (about 3 % of
      // the replay's CPU, measured); our own logs say what matters.
      log: () => {},
      messageIdProvider: ids,
      incomingStore: this.incomingStore,
      properties: v5 ? { sessionExpiryInterval: remote.sessionExpiryS, maximumPacketSize: this.announcedMaxPacketBytes() } : undefined,
      will: willMsg
        ? {
            topic: willMsg.topic,
            payload: willMsg.payload,
            qos: willMsg.qos,
            retain: willMsg.retain,
            properties: v5 ? toPublishProperties(willMsg.properties, willMsg.expiresAt) : undefined,
          }
        : undefined,
    };
    const tls = remote.tls;
    if (tls) {
      // Read at every attempt, so rotated certificates are picked up without a restart.
      if (tls.caFile) options.ca = readFileSync(tls.caFile);
      if (tls.certFile) options.cert = readFileSync(tls.certFile);
      if (tls.keyFile) options.key = readFileSync(tls.keyFile);
      if (tls.servername) options.servername = tls.servername;
      options.rejectUnauthorized = tls.rejectUnauthorized;
      // MQTT.js hands its options to tls.connect for mqtts://, but only wsOptions (and a few keys) to wss://.
      Object.assign(options, { ciphers: tls.ciphers, wsOptions: { ciphers: tls.ciphers } });
    }
    return options;
  }

  private onConnect(conn: Connection, connack: IConnackPacket): void {
    if (this.conn !== conn || this.stopped) return;
    conn.online = true;
    conn.lastAckMs = performance.now();
    this.attempt = 0;
    this.backoff.reset();
    // The next attempt after a drop starts again at the first URL (the preferred node).
    this.urlIndex = 0;
    const props = connack.properties;
    const sessionPresent = connack.sessionPresent === true;
    if (!sessionPresent) {
      // The broker forgot our session: its QoS 2 state, and any packet id it could still hold, are gone.
      this.incomingStore = new InboundQoS2((packet) => this.deliverInbound(packet));
      conn.client.incomingStore = this.incomingStore;
    }
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

  private subscribe(conn: Connection, sessionPresent: boolean): void {
    const subs = this.options.subscriptions;
    if (subs.length === 0) return;
    // A resumed session still has them; subscribing again would make MQTT 3.1.1 brokers resend retained ones.
    if (sessionPresent && this.subscribedOnce) return;
    const v5 = this.options.config.remote.protocolVersion === 5;
    const map: Record<string, { qos: QoS; nl?: boolean; rh?: number }> = {};
    for (const s of subs) map[s.filter] = v5 ? { qos: s.qos, nl: true, rh: 1 } : { qos: s.qos };
    conn.client.subscribe(map, (err, granted) => {
      if (this.conn !== conn) return;
      if (err) {
        this.log.warn({ err, url: conn.url }, 'central broker refused an inbound subscription');
        return;
      }
      this.subscribedOnce = true;
      for (const g of granted ?? []) {
        if (g.qos >= 0x80) this.log.warn({ filter: g.topic, reasonCode: g.qos }, 'central broker refused an inbound subscription');
      }
    });
  }

  private onClose(conn: Connection): void {
    if (this.conn !== conn) return;
    const wasOnline = conn.online;
    conn.online = false;
    conn.client.removeAllListeners('connect');
    this.conn = undefined;
    const error = conn.error ?? new UplinkError('EF_UPLINK_CONNECT', wasOnline ? 'connection closed' : `cannot connect to ${conn.url}`);
    if (this.stopped || conn.closing) {
      this.options.events.offline(error, undefined);
      return;
    }
    this.scheduleRetry(error);
  }

  private scheduleRetry(error: Error): void {
    if (this.stopped) return;
    const retryInMs = this.backoff.next();
    this.options.events.offline(error, retryInMs);
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.connectNext(), retryInMs);
    this.retryTimer.unref();
  }

  private onPacketSend(conn: Connection, packet: Packet): void {
    if (packet.cmd === 'pingreq') conn.pings.push({ mark: conn.sendIndex, atMs: performance.now() });
  }

  private onPacketReceive(conn: Connection, packet: Packet): void {
    if (this.conn !== conn) return;
    switch (packet.cmd) {
      case 'puback':
      case 'pubrec':
      case 'pubcomp': {
        // Those with a reason code or properties: the short ones never reach MQTT.js (AckTap).
        const id = packet.messageId;
        // mqtt-packet reads a body too short for a packet id as id -1 (or none) rather than failing.
        if (id === undefined || id < 1) return this.dropMalformed(conn, `${packet.cmd} without a valid packet identifier`);
        this.onPublishAck(conn, packet.cmd, id, packet.reasonCode ?? 0);
        break;
      }
      case 'pingresp': {
        conn.lastAckMs = performance.now();
        const ping = conn.pings.shift();
        if (ping) this.options.events.confirmed(ping.mark);
        break;
      }
      case 'suback':
      case 'unsuback':
        conn.lastAckMs = performance.now();
        break;
      default:
        break;
    }
  }

  /**
   * The broker broke the protocol (docs/reliability.md rule 38): the stream can no longer be trusted. DISCONNECT with the
   * reason (MQTT 5), close, reconnect; what was in flight goes again.
   */
  private dropMalformed(conn: Connection, what: string): void {
    if (conn.closing || conn.error) return;
    conn.error = new UplinkError('EF_UPLINK_CONNECT', `${conn.url}: central broker sent ${what}`);
    this.log.warn({ url: conn.url }, `central broker sent ${what}; reconnecting`);
    const stream = conn.client.stream;
    if (this.options.config.remote.protocolVersion !== 5) return void stream.destroy();
    stream.end(encodePacket({ cmd: 'disconnect', reasonCode: Reason.MalformedPacket }, 5));
    setTimeout(() => stream.destroy(), DISCONNECT_GRACE_MS).unref();
  }

  /** PUBACK, PUBREC or PUBCOMP from the broker: liveness, confirmation of what was written before, the flow. */
  private onPublishAck(conn: Connection, cmd: PublishAck, packetId: number, reasonCode: number): void {
    if (this.conn !== conn) return;
    conn.lastAckMs = performance.now();
    // An ack for a flow of ours; anything else (MQTT.js's, or answering nothing) is left alone.
    const flow = conn.flows.get(packetId);
    if (!flow) return;
    this.options.events.confirmed(flow.sendIndex);
    if (cmd === 'pubrec') {
      if (flow.qos !== 2 || flow.released) return;
      // An error reason ends the flow at PUBREC, without PUBREL (MQTT 5 §4.3.3).
      if (reasonCode >= 0x80) return this.settle(conn, packetId, flow, reasonCode);
      flow.released = true;
      const durable = flow.sender?.received?.();
      if (!durable) return this.writePubrel(conn, packetId);
      durable.then(
        () => {
          if (conn.flows.get(packetId) === flow && this.conn === conn) this.writePubrel(conn, packetId);
        },
        (err: unknown) => this.log.warn({ err, url: conn.url, packetId }, 'QoS 2 receipt not recorded; PUBREL waits for the next connection'),
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
    conn.ids.deallocate(packetId);
    if (!flow.sender) return;
    if (reasonCode < 0x80) return flow.sender.result(ACCEPTED);
    flow.sender.result({
      ok: false,
      reasonCode,
      error: new UplinkError('EF_UPLINK_REJECTED', `the central broker refused a publish (0x${reasonCode.toString(16)})`),
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
    for (const f of conn.flows.values()) if (f.atMs < oldestMs) oldestMs = f.atMs;
    if (oldestMs === Infinity) {
      // Nothing outstanding: probe, so a silent link is found even without traffic.
      conn.client.sendPing();
      return;
    }
    if (nowMs - oldestMs <= limitMs) return;
    conn.error = new UplinkError('EF_UPLINK_CONNECT', `central broker acknowledged nothing for ${this.options.config.ackTimeoutS} s`);
    this.log.debug({ url: conn.url }, 'uplink stalled, reconnecting');
    conn.client.stream?.destroy();
  }

  /**
   * MQTT.js hands over an inbound PUBLISH to acknowledge it: at once for QoS 0 and 1 (the PUBACK waits for
   * `done`), at PUBREL for QoS 2, which `InboundQoS2` published already.
   */
  private handleInbound(packet: IPublishPacket, done: (err?: Error) => void): void {
    if (packet.qos === 2) return done();
    this.deliverInbound(packet).then(() => done());
  }

  /** Publishes an inbound message locally; settles once it is durable there, or refused (logged, not thrown). */
  private async deliverInbound(packet: IPublishPacket): Promise<void> {
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
 * Inbound QoS 2, as MQTT.js's incoming store: a message is published locally, durably, when its PUBLISH
 * arrives, and only then does MQTT.js send PUBREC (delivery on receipt, "Method B" of MQTT 3.1.1 Figure 4.3).
 * MQTT.js's own store keeps it in memory until PUBREL instead: a crash in between lost it, as the broker then
 * only sends PUBREL. Here a crash before PUBREC at worst publishes it twice (the broker sends it again), and a
 * PUBREL for an id this process does not know (after a restart) is answered with PUBCOMP: the message is in.
 * Ids awaiting PUBREL outlive a connection, so a PUBLISH sent again on a resumed session is not published twice
 * [MQTT-4.3.3-9].
 */
class InboundQoS2 implements IStore {
  private readonly awaitingRelease = new Map<number, IPublishPacket>();

  constructor(private readonly deliver: (packet: IPublishPacket) => Promise<void>) {}

  put(packet: Packet, cb: (err?: Error) => void): IStore {
    const id = packet.messageId;
    if (packet.cmd !== 'publish' || id === undefined || this.awaitingRelease.has(id)) {
      cb();
      return this;
    }
    void this.deliver(packet).then(() => {
      this.awaitingRelease.set(id, packet);
      cb();
    });
    return this;
  }

  get(packet: Pick<Packet, 'messageId'>, cb: (err?: Error, packet?: Packet) => void): IStore {
    const stored = packet.messageId === undefined ? undefined : this.awaitingRelease.get(packet.messageId);
    if (stored) cb(undefined, stored);
    else cb(new Error('no QoS 2 message awaits release under this packet id'));
    return this;
  }

  del(packet: Pick<Packet, 'messageId'>, cb: (err?: Error, packet?: Packet) => void): IStore {
    if (packet.messageId !== undefined) this.awaitingRelease.delete(packet.messageId);
    cb();
    return this;
  }

  /** Read by MQTT.js only from outgoing stores, to resend: nothing goes out from here. */
  createStream(): ReturnType<IStore['createStream']> {
    return new Store().createStream();
  }

  close(cb: () => void): void {
    cb();
  }
}

/** Packet ids for one connection; MQTT.js allocates its own (SUBSCRIBE) through it too. */
class PacketIdAllocator implements MessageIdProvider {
  private next = OUTBOX_PACKET_IDS + 1;
  private last: number | null = null;
  /** 1 per packet id in use: a fixed table, as ids come and go with every message. */
  private readonly inUse = new Uint8Array(65_536);

  /** `wanted` if it is free (an outbox entry's own id), else what `allocate` gives. */
  allocateAs(wanted: number | undefined): number | null {
    if (wanted !== undefined && this.inUse[wanted] === 0) return this.use(wanted);
    return this.allocate();
  }

  /** From the ids above OUTBOX_PACKET_IDS, and only when those are all taken from the rest. */
  allocate(): number | null {
    for (let i = OUTBOX_PACKET_IDS; i < 65_535; i++) {
      const id = this.next;
      this.next = id === 65_535 ? OUTBOX_PACKET_IDS + 1 : id + 1;
      if (this.inUse[id] === 0) return this.use(id);
    }
    for (let id = 1; id <= OUTBOX_PACKET_IDS; id++) if (this.inUse[id] === 0) return this.use(id);
    return null;
  }

  getLastAllocated(): number | null {
    return this.last;
  }

  register(id: number): boolean {
    if (this.inUse[id] === 1) return false;
    this.inUse[id] = 1;
    return true;
  }

  deallocate(id: number): void {
    this.inUse[id] = 0;
  }

  clear(): void {
    this.inUse.fill(0);
  }

  private use(id: number): number {
    this.inUse[id] = 1;
    this.last = id;
    return id;
  }
}

/** MQTT 5 properties for a message leaving now: the expiry interval is what is left of its lifetime. */
function toPublishProperties(p: PublishProperties | undefined, expiresAt: number | undefined): IPublishPacket['properties'] | undefined {
  if (!p) return undefined;
  const expiryS = expiresAt === undefined ? undefined : Math.max(1, Math.ceil((expiresAt - performance.now()) / 1000));
  return {
    payloadFormatIndicator: p.payloadFormatIndicator,
    messageExpiryInterval: expiryS ?? p.messageExpiryInterval,
    contentType: p.contentType,
    responseTopic: p.responseTopic,
    correlationData: p.correlationData,
    userProperties: p.userProperties,
  };
}

function fromPublishProperties(p: IPublishPacket['properties']): PublishProperties | undefined {
  if (!p) return undefined;
  const out: PublishProperties = {
    payloadFormatIndicator: p.payloadFormatIndicator,
    messageExpiryInterval: p.messageExpiryInterval,
    contentType: p.contentType,
    responseTopic: p.responseTopic,
    correlationData: p.correlationData,
    userProperties: p.userProperties,
  };
  const defined = Object.entries(out).filter(([, v]) => v !== undefined);
  return defined.length === 0 ? undefined : (Object.fromEntries(defined) as PublishProperties);
}

/** Refused CONNACKs need an operator (credentials, ACL); everything else is the network. */
function classifyError(err: Error, url: string): UplinkError {
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'number' && code > 0 && /Connection refused/i.test(err.message)) {
    return new UplinkError('EF_UPLINK_REJECTED', `${url} refused the connection: ${err.message} (0x${code.toString(16)})`, { cause: err });
  }
  return new UplinkError('EF_UPLINK_CONNECT', `${url}: ${err.message}`, { cause: err });
}

/**
 * Calls `sending` once the transport can carry the CONNECT that MQTT.js queues on it while it connects: before
 * those bytes leave, as this listener is added before MQTT.js writes, and a socket flushes what was written
 * while connecting from a later `connect` listener (TLS: only after the handshake, past `secureConnect`).
 */
function beforeConnectLeaves(transport: Duplex, sending: () => void): void {
  if (transport instanceof TLSSocket) transport.once('secureConnect', sending);
  else if (transport instanceof Socket && transport.connecting) transport.once('connect', sending);
  else sending();
}
