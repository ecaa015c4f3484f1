/**
 * One connection attempt of the uplink (docs/architecture.md#uplink) and what is under way on it: the QoS 1/2 flows
 * of our publishes by packet id, the PINGREQs whose answers confirm what was written before them, and the packets
 * of this tick, written together. A new one per attempt, so late callbacks from an old one are recognizable.
 *
 * A PINGRESP, PUBACK or PUBREC proves that every packet written before the matching PINGREQ/PUBLISH was received
 * (one stream, processed in order): `confirmed` reports that, and the bridge releases QoS 0 entries by it, which
 * nobody acknowledges (docs/architecture.md#qos-0-confirmation).
 */
import type { Duplex } from 'node:stream';
import type { PublishProperties, QoS } from '../protocol/message.js';
import { appendPublish, encodeAck, PacketArena } from '../protocol/codec.js';
import type { AckCommand, PropertyTail, ProtocolVersion } from '../protocol/codec.js';
import { PacketFramer } from '../protocol/framer.js';
import { UplinkError } from '../util/errors.js';
import { IdTable } from '../util/id-table.js';
import type { Logger } from '../util/logger.js';
import { PacketIds } from './packet-ids.js';

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

/** Who hears how far the broker has provably read (`UplinkEvents`). */
export interface Confirmations {
  /** Every publish with send index < `sendIndex` provably reached the broker. */
  confirmed(sendIndex: number): void;
}

export type PublishAck = Exclude<AckCommand, 'pubrel'>;

interface Flow {
  readonly qos: 1 | 2;
  readonly sender: PublishFlow | undefined;
  /** QoS 2: PUBREC arrived (or the flow resumed at PUBREL); only PUBCOMP is awaited. */
  released: boolean;
  /** Send index of its PUBLISH (or resumed PUBREL): an answer confirms everything written before. */
  readonly sendIndex: number;
  /** When it was written: liveness (`oldestWaitingSinceMs`). */
  readonly atMs: number;
}

/** The result of every accepted publish (shared: results are only read). */
const ACCEPTED: PublishResult = { ok: true };
const PINGREQ = Buffer.from([0xc0, 0x00]);

export class UplinkConnection {
  readonly framer = new PacketFramer();
  readonly ids = new PacketIds();
  online = false;
  /** When CONNACK accepted it. */
  onlineAtMs = 0;
  /** Last time the broker acknowledged anything (PUBACK, PUBREC, PUBCOMP, SUBACK, PINGRESP, CONNACK). */
  lastAckMs = performance.now();
  /** The packet id of our SUBSCRIBE until its SUBACK. */
  subscribeId: number | undefined;
  /** Until CONNACK: the deadline for it. */
  connackTimer: NodeJS.Timeout | undefined;
  /** Online, keepalive > 0: every half keepalive, restarted by each PINGRESP. */
  keepaliveTimer: NodeJS.Timeout | undefined;
  /** Keepalive half-periods since the last PINGRESP. */
  keepaliveTicks = 0;
  closing = false;
  closed = false;
  error: Error | undefined;
  /** Publishes written on this connection so far; the next publish gets this index. */
  private sendIndex = 0;
  /** Outstanding PINGREQs: send index at the time of writing, and when. */
  private readonly pings: { mark: number; atMs: number }[] = [];
  /** QoS 1/2 flows under way, by packet id. */
  private readonly flows = new IdTable<Flow>();
  /** Packets written this tick, sent together at the next (see `write`). */
  private readonly pending = new PacketArena();

  constructor(
    readonly stream: Duplex,
    readonly url: string,
    private readonly version: ProtocolVersion,
    private readonly events: Confirmations,
    private readonly log: Logger,
  ) {}

  get inFlight(): number {
    return this.flows.size;
  }

  /** Writes one PUBLISH (see `Uplink.publish`); returns its send index. */
  publish(
    msg: OutgoingPublish,
    packetId: number | undefined,
    dup: boolean,
    sender: PublishFlow | undefined,
    stamp: PropertyTail | undefined,
    seq: number,
  ): number {
    const sendIndex = this.sendIndex++;
    const id = msg.qos > 0 ? this.startFlow(msg.qos as 1 | 2, packetId, sendIndex, sender, false) : undefined;
    this.scheduleFlush();
    appendPublish(this.pending, msg, this.version, msg.qos, msg.retain, dup && id !== undefined, id ?? 0, stamp, seq);
    return sendIndex;
  }

  /** Resumes a QoS 2 flow at PUBREL (see `Uplink.release`); returns its send index. */
  release(packetId: number, sender: PublishFlow): number {
    const sendIndex = this.sendIndex++;
    this.writeAck('pubrel', this.startFlow(2, packetId, sendIndex, sender, true));
    return sendIndex;
  }

  /** Whether a PINGREQ written after publish `sendIndex` is still waiting for its PINGRESP. */
  pingCovers(sendIndex: number): boolean {
    const pings = this.pings;
    return pings.length > 0 && pings[pings.length - 1].mark > sendIndex;
  }

  /** Its PINGRESP confirms every publish counted so far: those waiting for this tick's write go with it, now. */
  writePing(): void {
    this.pings.push({ mark: this.sendIndex, atMs: performance.now() });
    this.pending.append(PINGREQ);
    this.flush();
  }

  writeAck(cmd: AckCommand, packetId: number): void {
    this.write(encodeAck(cmd, packetId, 0, this.version));
  }

  /**
   * The packets of one pump go out in one write at the next tick, encoded back to back into one buffer
   * (`PacketArena`): a write to a socket has a fixed cost whatever it carries (docs/architecture.md#hot-path).
   */
  write(bytes: Buffer): void {
    this.scheduleFlush();
    this.pending.append(bytes);
  }

  flush(): void {
    if (this.pending.empty) return;
    const packets = this.pending.take();
    // Closing but not yet closed: the entries stay in the outbox and go again on the next connection.
    if (this.stream.writable && !this.closing) this.stream.write(packets);
  }

  /** PINGRESP: the link is alive, and every publish written before its PINGREQ reached the broker. */
  pingAnswered(): void {
    this.lastAckMs = performance.now();
    this.keepaliveTicks = 0;
    this.keepaliveTimer?.refresh();
    const ping = this.pings.shift();
    if (ping) this.events.confirmed(ping.mark);
  }

  /** PUBACK, PUBREC or PUBCOMP from the broker: liveness, confirmation of what was written before, the flow. */
  acknowledged(cmd: PublishAck, packetId: number, reasonCode: number): void {
    this.lastAckMs = performance.now();
    // An ack for a flow of ours; one that answers nothing is left alone.
    const flow = this.flows.get(packetId);
    if (!flow) return;
    this.events.confirmed(flow.sendIndex);
    if (cmd === 'pubrec') {
      if (flow.qos !== 2 || flow.released) return;
      // An error reason ends the flow at PUBREC, without PUBREL (MQTT 5 §4.3.3).
      if (reasonCode >= 0x80) return this.settle(packetId, flow, reasonCode);
      flow.released = true;
      const durable = flow.sender?.received?.();
      if (!durable) return this.writeAck('pubrel', packetId);
      durable.then(
        () => {
          if (this.flows.get(packetId) === flow && !this.closed) this.writeAck('pubrel', packetId);
        },
        (err: unknown) =>
          this.log.warn(
            { err, url: this.url, packetId },
            'QoS 2 receipt not recorded; PUBREL waits for the next connection',
          ),
      );
      return;
    }
    if (cmd === 'puback' ? flow.qos !== 1 : !flow.released) return;
    // PUBCOMP ends the flow whatever its reason: 0x92 (id not found) after a resumed PUBREL means the broker
    // completed it before.
    this.settle(packetId, flow, cmd === 'puback' ? reasonCode : 0);
  }

  /** When the oldest publish or ping still waiting for its answer was written; Infinity when none waits. */
  oldestWaitingSinceMs(): number {
    let oldestMs = this.pings.length > 0 ? this.pings[0].atMs : Infinity;
    this.flows.forEach((f) => {
      if (f.atMs < oldestMs) oldestMs = f.atMs;
    });
    return oldestMs;
  }

  private scheduleFlush(): void {
    if (this.pending.empty) process.nextTick(() => this.flush());
  }

  private startFlow(
    qos: 1 | 2,
    wanted: number | undefined,
    sendIndex: number,
    sender: PublishFlow | undefined,
    released: boolean,
  ): number {
    const id = this.ids.allocateAs(wanted);
    if (id === null) throw new UplinkError('EF_INTERNAL', 'no free packet id'); // the window is far below 65535
    // Registered even without a sender: the final ack frees the packet id.
    this.flows.set(id, { qos, sender, released, sendIndex, atMs: performance.now() });
    return id;
  }

  private settle(packetId: number, flow: Flow, reasonCode: number): void {
    this.flows.delete(packetId);
    this.ids.release(packetId);
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
}
