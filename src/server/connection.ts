/**
 * One client connection: parse → dispatch to the packet handlers → batched writes. Every failure of this
 * connection (malformed bytes, protocol violations, handler exceptions) ends here, closes only this connection
 * with the right reason code, and is counted; nothing escapes to the other clients.
 */
import {
  decodePublish,
  decodeShortAck,
  encodeAck,
  encodePacket,
  encodePublish,
  newPublishPacket,
} from '../protocol/codec.js';
import { decodeConnectV4 } from '../protocol/connect-codec.js';
import { decodeSubscribe } from '../protocol/subscribe-codec.js';
import { packetBytes, pushChunk } from '../protocol/framer.js';
import type { FrameHandler, PacketFramer } from '../protocol/framer.js';
import type { AckCommand, Packet, ProtocolVersion, PublishEncodings, ShortAck } from '../protocol/codec.js';
import type { Message, QoS } from '../protocol/message.js';
import { Reason, reasonName } from '../protocol/reason-codes.js';
import { BufferBatch } from '../util/buffer-batch.js';
import { ProtocolError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { Session } from '../broker/session.js';
import type { Delivery } from '../broker/session-queue.js';
import type { HeldPublisher } from '../broker/publisher-hold.js';
import type { ConnectionState, PendingAck, ServerContext, Will } from './context.js';
import type { PendingConnections } from './pending.js';
import type { Transport, TransportReader } from './transport.js';
import type { TurnWork, WriteFlusher } from './write-flusher.js';
import { handlePacket } from './handlers/index.js';
import { parseGenericPacket, type GenericPacketConnection } from './generic-packet.js';

/** What connections share beyond what their handlers see: the write flusher and the server's registries (listeners.ts). */
export interface ConnectionContext extends ServerContext {
  readonly flusher: WriteFlusher;
  /**
   * Connected clients by client id. With the listeners' `pending` these are every open connection: no set of all
   * of them is kept besides (docs/architecture.md#what-a-connection-costs).
   */
  readonly clients: Map<string, Connection>;
}

/** What a connection needs to know of its listener; one object per listener, shared by its connections. */
export interface ListenerPolicy {
  readonly allowAnonymous: boolean;
  readonly identityIsUsername: boolean;
  /** Open connections of this listener (for its own maxConnections). */
  connections: number;
  /** Those that have not completed CONNECT yet (maxPendingConnections, maxPendingPerAddress). */
  readonly pending: PendingConnections<Connection>;
}

const PACKET_CONNECT = 1;
const PACKET_PUBLISH = 3;
const PACKET_PUBACK = 4;
const PACKET_PUBCOMP = 7;
const PACKET_SUBSCRIBE = 8;
/**
 * Routing work (subscriptions matched, `Broker.routeWork`) one read of a connection may cause before the
 * connection yields the event loop: about 10 ms. A publisher whose messages each match thousands of
 * subscriptions then delays other clients by that much, not by the whole read (a 64 KB read of small messages
 * is thousands of them).
 */
const ROUTE_WORK_PER_TURN = 100_000;
/**
 * Packets one connection may have handled in a turn before it yields: delivery first. A publisher's 64 KB read
 * is about a thousand small PUBLISHes; handled at once, ten such reads keep the loop for milliseconds while the
 * subscribers' acknowledgements, which open their inflight windows, wait. The rest is framed after this turn's
 * writes went out and the next poll phase read those acknowledgements (docs/architecture.md#back-pressure).
 */
const PACKETS_PER_TURN = 64;
const NO_BYTES = Buffer.alloc(0);
/**
 * The hot-path packets (PUBLISH, the 2-byte acknowledgements) are decoded into these, shared by all connections
 * (no object per message): a connected client's packet is handled synchronously, and its handler takes the values
 * it needs before anything it calls could frame another client's packets (a publisher whose hold ended reads on).
 */
const decodedPublish = newPublishPacket();
const decodedAck: ShortAck = { cmd: 'puback', messageId: 0, reasonCode: 0 };

export class Connection implements GenericPacketConnection, FrameHandler, HeldPublisher, TurnWork, TransportReader {
  state: ConnectionState = 'awaiting-connect';
  version: ProtocolVersion = 4;
  clientId = '';
  username: string | undefined;
  session: Session | undefined;
  will: Will | undefined;
  keepaliveMs = 0;
  lastReceivedMs = performance.now();
  readonly openedAtMs = performance.now();
  /** The client's own limits (MQTT 5 CONNECT properties). */
  receiveMaximum = 65535;
  maxPacketBytes = 268435455;
  topicAliasMaximum = 0;
  requestProblemInformation = true;
  /** Incoming QoS 1/2 publishes not yet completed, checked against our Receive Maximum (MQTT 5). */
  inboundInflight = 0;
  /** New subscriptions granted but still being stored (persistent sessions): they count against the limit already. */
  subscriptionsPending = 0;
  /** Reading paused by `holdInboundWhenFull`. */
  private inboundHeld = false;
  /** `broker.routeWork` when this turn's reading began (see ROUTE_WORK_PER_TURN). */
  private turnWorkStart = 0;
  /** Packets handled since this turn's reading began (see PACKETS_PER_TURN). */
  private turnPackets = 0;
  /** The session whose queue is at its high-water mark and holds this publisher: not read from until it releases it. */
  private heldBy: Session | undefined;
  /** Reading paused until the next turn, the rest of the read held by the framer. */
  private yielding = false;
  /** Packets whose work runs in slices across turns (`inSlices`): reading is paused while any does. */
  private slicing = 0;
  /** Created on first use: most clients never use topic aliases, and idle connections should stay small. */
  topicAliasesIn: Map<number, string> | undefined;
  private topicAliasesOut: Map<string, number> | undefined;
  /** Packets that arrived while the CONNECT was being authenticated, dispatched once it completes. */
  private deferred: Packet[] | undefined;
  /**
   * QoS 1/2 acknowledgements waiting for their message to be stored, in the order of the PUBLISHes: they go out
   * in that order [MQTT-4.6.0-2] (handlers/publish.ts). Its head is always one still waiting. Created at the
   * first QoS 1/2 PUBLISH (`pendingAcks`): a client that never sends one keeps no array.
   */
  private acks: PendingAck[] | undefined;
  private readonly pending = new BufferBatch();
  /** WriteFlusher's mark: listed for its next flush. */
  flushListed = false;
  /** QoS 0 messages shed for this client since its write buffer last drained (see `checkTimers`). */
  private shedSinceDrain = 0;
  /** Since when the timer has seen the write buffer backed up without draining. */
  private backedUpSinceMs: number | undefined;
  /** Since when an incomplete packet has been held: a body trickled in byte by byte must still end [docs/reliability.md rule 6]. */
  private partialSinceMs: number | undefined;
  /** Created by the first read that ends inside a packet (`pushChunk`): an idle connection has none. */
  private framer: PacketFramer | undefined;

  constructor(
    readonly transport: Transport,
    readonly ctx: ConnectionContext,
    /** The listener the client came in on: its anonymous rule, mTLS identity rule and connection count. */
    readonly listener: ListenerPolicy,
  ) {
    transport.attach(this);
    listener.connections++;
    listener.pending.add(this);
  }

  get pendingAcks(): PendingAck[] {
    return (this.acks ??= []);
  }

  get log(): Logger {
    return this.ctx.log;
  }

  get allowAnonymous(): boolean {
    return this.listener.allowAnonymous;
  }

  /** mTLS: the client certificate's CN replaces the CONNECT user name. */
  get identityIsUsername(): boolean {
    return this.listener.identityIsUsername;
  }

  // ---- ClientLink (used by the session) ----

  get remoteAddress(): string {
    return this.transport.remoteAddress;
  }

  get certificateIdentity(): string | undefined {
    return this.transport.certificateIdentity;
  }

  /** Asked before each QoS 0 delivery; a refusal sheds that message, so it is counted for the slow-reader check. */
  canTakeQoS0(): boolean {
    if (this.transport.bufferedBytes + this.pending.bytes < this.ctx.limits.maxWriteBufferBytes) return true;
    this.shedSinceDrain++;
    return false;
  }

  backedUp(): boolean {
    return this.transport.bufferedBytes + this.pending.bytes >= this.ctx.limits.maxWriteBufferBytes / 2;
  }

  sendQoS0(
    msg: Message,
    retain: boolean,
    subscriptionIds: readonly number[] | undefined,
    encodings: PublishEncodings | undefined,
  ): boolean {
    return this.writePublish(msg, 0, retain, false, 0, subscriptionIds, encodings);
  }

  sendPublish(d: Delivery, packetId: number, dup: boolean, encodings: PublishEncodings | undefined): boolean {
    return this.writePublish(d.msg, d.qos, d.retain, dup, packetId, d.subscriptionIds, encodings);
  }

  /** Encodes (or takes the shared encoding of) one PUBLISH and queues it; false when not sent. */
  private writePublish(
    msg: Message,
    qos: QoS,
    retain: boolean,
    dup: boolean,
    packetId: number,
    subscriptionIds: readonly number[] | undefined,
    encodings: PublishEncodings | undefined,
  ): boolean {
    if (this.state !== 'connected') return false;
    let alias: number | undefined;
    let aliasIsNew = false;
    if (this.topicAliasMaximum > 0) {
      const aliases = (this.topicAliasesOut ??= new Map());
      alias = aliases.get(msg.topic);
      if (alias === undefined && aliases.size < this.topicAliasMaximum) {
        alias = aliases.size + 1;
        aliasIsNew = true;
      }
    }
    let bytes: Buffer;
    if (subscriptionIds === undefined && alias === undefined) {
      bytes =
        encodings && !dup
          ? encodings.bytesFor(this.version, qos, retain, packetId)
          : encodePublish(msg, this.version, qos, retain, dup, undefined, packetId).bytes;
    } else {
      const extras = { subscriptionIds, topicAlias: alias, omitTopic: alias !== undefined && !aliasIsNew };
      bytes = encodePublish(msg, this.version, qos, retain, dup, extras, packetId).bytes;
    }
    // A message larger than the client's Maximum Packet Size is not sent to it [MQTT-3.1.2-24].
    if (bytes.length > this.maxPacketBytes) return false;
    if (aliasIsNew) this.topicAliasesOut!.set(msg.topic, alias!);
    this.write(bytes);
    return true;
  }

  sendPubrel(packetId: number): void {
    this.sendAck('pubrel', packetId, 0);
  }

  /** PUBACK, PUBREC, PUBREL or PUBCOMP; the reason code is only sent to MQTT 5 clients. */
  sendAck(cmd: AckCommand, packetId: number, reasonCode: number): void {
    if (this.state === 'closed') return;
    this.write(encodeAck(cmd, packetId, this.version === 5 ? reasonCode : 0, this.version));
  }

  // ---- writing ----

  send(packet: Packet): void {
    if (this.state === 'closed') return;
    this.write(encodePacket(packet, this.version));
  }

  write(bytes: Buffer): void {
    const first = this.pending.empty;
    this.pending.push(bytes);
    if (first) this.ctx.flusher.schedule(this);
  }

  flush(): void {
    if (this.pending.empty) return;
    const data = this.pending.take();
    this.ctx.broker.stats.bytesSent += data.length;
    this.transport.write(data);
  }

  // ---- reading ----

  /** TransportReader: a chunk read from the socket. */
  received(chunk: Buffer): void {
    if (this.state === 'closed') return;
    this.lastReceivedMs = performance.now();
    this.ctx.broker.stats.bytesReceived += chunk.length;
    this.frame(chunk);
    this.ctx.flusher.readDone();
    // What this read wrote back to its own client (PUBACKs; the PUBLISHes a subscriber's acknowledgements let
    // into its inflight window) goes out now, not at the end of the turn: that client's next round trip starts
    // at once. What the read routed to other clients still waits for the turn's one write each
    // (docs/architecture.md#hot-path).
    this.flush();
  }

  private frame(chunk: Buffer): void {
    this.turnWorkStart = this.ctx.broker.routeWork;
    this.turnPackets = 0;
    try {
      this.framer = pushChunk(this.framer, chunk, this);
      // Every whole packet stopped the incomplete-packet clock (`packet`): it runs from the read that left the
      // current one incomplete, so a stream whose reads all end inside a packet is timed per packet. Bytes held
      // back by a yield or by back-pressure are packets waiting, not a trickle.
      if (this.framer !== undefined && this.framer.pendingBytes > 0 && !this.yielding && this.heldBy === undefined)
        this.partialSinceMs ??= this.lastReceivedMs;
    } catch (err) {
      this.protocolFailure(err);
    }
  }

  /**
   * The socket closed. Packets read before that but held back by a yield or back-pressure were sent before the
   * client went (a DISCONNECT that cancels its will among them): they are handled now, then the connection closes.
   * Each pass handles at least one packet, so this ends with the read.
   */
  peerClosed(): void {
    while (this.state !== 'closed' && (this.yielding || this.heldBy !== undefined)) {
      this.yielding = false;
      this.heldBy = undefined;
      this.frame(NO_BYTES);
    }
    this.close(undefined, 'socket closed');
  }

  /** Frames what the last turn held back; reading resumes once all of it went through. */
  continueReading(): void {
    this.yielding = false;
    if (this.state === 'closed' || this.heldBy !== undefined || this.slicing > 0) return;
    this.frame(NO_BYTES);
    this.resumeReading();
  }

  /** Reads from the socket again unless something still holds it: a yield, flow control, back-pressure, authentication. */
  private resumeReading(): void {
    if (
      !this.yielding &&
      this.slicing === 0 &&
      !this.inboundHeld &&
      this.heldBy === undefined &&
      this.state === 'connected'
    )
      this.transport.resume();
  }

  /**
   * Runs `slice` now and then once per turn until it returns true (done). Meanwhile this client is not read from
   * and the framer holds its later packets, so they follow the packet being worked on; other clients are read and
   * written between the slices (docs/architecture.md#back-pressure). `slice` itself stops when it sees the
   * connection closed. What it throws closes the connection, as a handler's exception does (`dispatch`).
   */
  inSlices(slice: () => boolean): void {
    if (slice()) return;
    this.slicing++;
    this.transport.pause();
    const next = (): void => {
      let done = true;
      try {
        done = slice();
      } catch (err) {
        this.protocolFailure(err);
      }
      if (!done) return void setImmediate(next);
      this.slicing--;
      this.continueReading();
    };
    setImmediate(next);
  }

  /**
   * A session this client's PUBLISH went to is at its queue's high-water mark: stop reading (the rest of this read
   * is held too) until it ends the hold [docs/architecture.md#back-pressure]. Its own session never holds a client,
   * which could then not read the acknowledgements that drain it.
   */
  holdFor(session: Session): void {
    if (this.heldBy !== undefined || session === this.session || this.state !== 'connected') return;
    this.heldBy = session;
    this.transport.pause();
    session.holdPublisher(this);
  }

  /** HeldPublisher: the session drained to its low-water mark, went offline, or gave up holding publishers. */
  holdEnded(): void {
    this.heldBy = undefined;
    // Its PINGREQs waited unread meanwhile: the keep-alive clock starts again now.
    this.lastReceivedMs = performance.now();
    this.continueReading();
  }

  // ---- FrameHandler (called by the framer) ----

  isOpen(): boolean {
    return this.state !== 'closed';
  }

  /**
   * False while back-pressure holds this client, and once this turn's reading handled PACKETS_PER_TURN packets or
   * caused ROUTE_WORK_PER_TURN: the rest waits until this turn's writes went out.
   */
  canTakeMore(): boolean {
    if (this.state === 'closed' || this.heldBy !== undefined || this.slicing > 0) return false;
    if (++this.turnPackets <= PACKETS_PER_TURN && this.ctx.broker.routeWork - this.turnWorkStart < ROUTE_WORK_PER_TURN)
      return true;
    if (!this.yielding) {
      this.yielding = true;
      this.transport.pause();
      this.ctx.flusher.scheduleRead(this);
    }
    return false;
  }

  /** Refuses a packet from its fixed header alone, before its body is buffered [docs/reliability.md rules 1, 5]. */
  header(type: number, remainingLength: number): void {
    if (this.state === 'awaiting-connect' && type !== PACKET_CONNECT) {
      throw new ProtocolError(Reason.ProtocolError, `first packet is of type ${type}, not CONNECT [MQTT-3.1.0-1]`);
    }
    const bytes = packetBytes(remainingLength);
    if (bytes > this.ctx.limits.maxPacketBytes) {
      throw new ProtocolError(Reason.PacketTooLarge, `packet of ${bytes} bytes exceeds the maximum packet size`);
    }
  }

  packet(data: Buffer, first: number, packetStart: number, bodyStart: number, end: number): void {
    this.partialSinceMs = undefined;
    if (this.state === 'connected') {
      // Hot paths (and SUBSCRIBE, which can be large) decoded here; everything else, and MQTT 5 packets with
      // properties, go through mqtt-packet.
      const type = first >> 4;
      if (type === PACKET_PUBLISH) {
        const publish = decodePublish(data, first, bodyStart, end, this.version, decodedPublish);
        if (publish) return this.dispatch(publish);
      } else if (end - bodyStart === 2 && type >= PACKET_PUBACK && type <= PACKET_PUBCOMP) {
        const ack = decodeShortAck(first, data.readUInt16BE(bodyStart), decodedAck);
        if (ack) return this.dispatch(ack);
      } else if (type === PACKET_SUBSCRIBE) {
        const subscribe = decodeSubscribe(data, first, bodyStart, end, this.version);
        if (subscribe) return this.dispatch(subscribe);
      }
    } else if (this.state === 'awaiting-connect') {
      // Every connection's first packet: an MQTT 3.1.1 CONNECT is decoded without mqtt-packet's garbage.
      const connect = decodeConnectV4(data, first, bodyStart, end);
      if (connect) return this.dispatch(connect);
    }
    parseGenericPacket(this, data, first, packetStart, bodyStart, end);
  }

  dispatch(packet: Packet): void {
    if (this.state === 'closed') return;
    if (this.state === 'authenticating') {
      (this.deferred ??= []).push(packet);
      return;
    }
    try {
      handlePacket(this, packet);
    } catch (err) {
      this.protocolFailure(err);
    }
  }

  /**
   * Flow control for clients without Receive Maximum (MQTT 3.1.1): they cannot know our limit, so rather than
   * being disconnected for a burst (and resending it after reconnecting, to be stored once more each time), they
   * are not read from while `receiveMaximum` of their QoS 1/2 publishes wait to be stored before we can
   * acknowledge them; TCP holds back the rest. Packets of the chunk already read still go through: the excess is
   * bounded by one read. QoS 2 flows waiting for the client's PUBREL do not count, or their PUBRELs would never
   * be read. An MQTT 5 client was told the limit, and exceeding it is a protocol error (handlers/publish.ts).
   */
  holdInboundWhenFull(): void {
    if (this.inboundHeld || this.version === 5 || this.pendingAcks.length < this.ctx.limits.receiveMaximum) return;
    this.inboundHeld = true;
    this.transport.pause();
  }

  /** An acknowledgement went out: reading resumes once the client is below the limit again. */
  resumeInbound(): void {
    if (!this.inboundHeld || this.pendingAcks.length >= this.ctx.limits.receiveMaximum) return;
    this.inboundHeld = false;
    this.resumeReading();
  }

  /** The CONNECT was accepted or refused: dispatch what arrived meanwhile, resume reading. */
  authenticated(): void {
    if (this.state === 'connected') this.listener.pending.delete(this);
    const deferred = this.deferred;
    this.deferred = undefined;
    this.transport.resume();
    if (deferred) for (const packet of deferred) this.dispatch(packet);
  }

  beginAuthentication(): void {
    this.state = 'authenticating';
    this.transport.pause();
  }

  /** Closes after a protocol violation (or a handler bug), with DISCONNECT + reason code for MQTT 5 clients. */
  protocolFailure(err: unknown): void {
    if (err instanceof ProtocolError) {
      this.log.debug(
        {
          clientId: this.clientId,
          remote: this.transport.remoteAddress,
          reason: reasonName(err.reasonCode),
          err: err.message,
        },
        'closing connection: protocol violation',
      );
      this.close(err.reasonCode, err.message);
    } else {
      this.log.error({ err, clientId: this.clientId }, 'closing connection after an internal error');
      this.close(Reason.ImplementationSpecificError, 'internal error');
    }
  }

  /**
   * Closes the connection once. A `reasonCode` sends DISCONNECT first (MQTT 5, connected clients only). Unless the
   * client sent DISCONNECT (`will` cleared by the handler), its will is published or scheduled [MQTT-3.1.2-8].
   */
  close(reasonCode: number | undefined, why: string): void {
    if (this.state === 'closed') return;
    const wasConnected = this.state === 'connected';
    if (reasonCode !== undefined) {
      const stats = this.ctx.broker.stats;
      const name = reasonName(reasonCode);
      stats.disconnects[name] = (stats.disconnects[name] ?? 0) + 1;
      if (this.version === 5 && wasConnected) {
        const properties = this.requestProblemInformation ? { reasonString: why.slice(0, 200) } : undefined;
        this.write(encodePacket({ cmd: 'disconnect', reasonCode, properties }, 5));
      }
    }
    this.state = 'closed';
    this.flush();
    this.transport.end();
    // A peer that does not read its last bytes must not keep the socket open forever.
    setTimeout(() => this.transport.destroy(), 2000).unref();
    this.listener.connections--;
    this.listener.pending.delete(this);
    if (wasConnected) this.ctx.broker.stats.clientsConnected--;
    if (this.ctx.clients.get(this.clientId) === this) this.ctx.clients.delete(this.clientId);
    const session = this.session;
    if (session) {
      this.session = undefined;
      // A persistent session's delayed will is stored, so it outlives a restart as the session does.
      if (this.will) {
        const store = session.expiryIntervalS > 0 ? session.store : undefined;
        this.ctx.broker.wills.schedule(this.clientId, this.will.msg, this.will.delayS, store);
      }
      this.ctx.broker.sessionDisconnected(session);
    }
    this.log.debug({ clientId: this.clientId, remote: this.transport.remoteAddress, why }, 'connection closed');
  }

  /** Keep-alive, connect timeout and slow-reader checks, driven by one broker-wide timer. */
  checkTimers(nowMs: number): void {
    const limits = this.ctx.limits;
    if (this.state === 'awaiting-connect' || this.state === 'authenticating') {
      if (nowMs - this.openedAtMs > limits.connectTimeoutMs)
        this.close(undefined, 'no CONNECT within the connect timeout');
      return;
    }
    const heldBy = this.heldBy;
    if (heldBy !== undefined) {
      if (heldBy.giveUpIfStuck(nowMs, limits.slowClientTimeoutMs)) {
        this.log.warn(
          { clientId: heldBy.id, queued: heldBy.queuedCount },
          'a subscriber has held its publishers for slowClientTimeoutMs without draining: it holds them no more, and what passes its queue high-water mark is dropped',
        );
      }
      // Not read from while held: its silence is ours.
      return this.checkDraining(nowMs);
    }
    if (this.keepaliveMs > 0 && nowMs - this.lastReceivedMs > this.keepaliveMs * 1.5) {
      // [MQTT-3.1.2-24]: nothing received for 1.5 × keep alive.
      return this.close(Reason.KeepAliveTimeout, 'keep alive timeout');
    }
    // One packet may take a while on a slow link, but not longer than the keep-alive window (or the connect timeout).
    const packetDeadlineMs = Math.max(this.keepaliveMs * 1.5, limits.connectTimeoutMs);
    if (this.partialSinceMs !== undefined && nowMs - this.partialSinceMs > packetDeadlineMs) {
      return this.close(Reason.MalformedPacket, 'incomplete packet not finished in time');
    }
    this.checkDraining(nowMs);
  }

  /**
   * A client that reads too slowly: its write buffer is over the limit, or QoS 0 messages are being shed for it,
   * and it has not drained (below half the limit) for `slowClientTimeoutMs`. Draining is what counts, not being
   * under the limit: a reader that takes a trickle keeps the buffer just under it while nearly everything is shed.
   */
  private checkDraining(nowMs: number): void {
    const limit = this.ctx.limits.maxWriteBufferBytes;
    const buffered = this.transport.bufferedBytes + this.pending.bytes;
    if (buffered < limit / 2) {
      this.shedSinceDrain = 0;
      this.backedUpSinceMs = undefined;
      return;
    }
    if (this.shedSinceDrain === 0 && buffered <= limit) return;
    this.backedUpSinceMs ??= nowMs;
    const stuckMs = nowMs - this.backedUpSinceMs;
    if (stuckMs <= this.ctx.limits.slowClientTimeoutMs) return;
    this.log.warn(
      {
        clientId: this.clientId,
        remote: this.transport.remoteAddress,
        bufferedBytes: buffered,
        shed: this.shedSinceDrain,
        stuckMs: Math.round(stuckMs),
      },
      'disconnecting a client that does not read: write buffer not drained within slowClientTimeoutMs',
    );
    this.close(Reason.QuotaExceeded, 'client does not read: write buffer not drained in time');
  }
}
