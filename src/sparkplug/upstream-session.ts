/**
 * The node's upstream Sparkplug session: the MQTT session of the bridge named by `sparkplug.uplink`
 * (docs/architecture.md#sparkplug-session). The bridge journals the local messages in its outbox and asks the
 * `hooks`: `will()` is the NDEATH with the next bdSeq (persisted by `connectSending()`, just before the CONNECT
 * leaves), `prologue()` the NBIRTH +
 * DBIRTHs sent first on every connection, and `rewrite()` renumbers what leaves the outbox into the upstream seq,
 * flags data stored before the current births `is_historical`, and drops births/deaths the prologue superseded.
 * A live DDEATH goes up at once, also while a live-first backlog drains; the device's stored data still to come
 * follows it, historical (docs/architecture.md#live-first). A host application never sees stored data as live, nor
 * data of an old session under a new session's seq.
 *
 * With a primary host, the births on every connection wait for a STATE on that connection saying it is online: the
 * bridge is paused (data stays journaled) until then.
 */
import type { Message, QoS } from '../protocol/message.js';
import { Origins, createMessage } from '../protocol/message.js';
import { asError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { Device } from './device.js';
import type { NodeState } from './node-state.js';
import type { MetricOut } from './payload.js';
import { asHistorical, encodePayload, nodeDeathPayload, readTimestamp, withBdSeq, withSeq } from './payload.js';
import type { PrimaryHost } from './primary-host.js';
import { deviceTopic, nodeTopic, parseTopic } from './topics.js';
import type { DeviceMessageType, NodeMessageType } from './topics.js';
import type { SteadyClock } from '../util/clock.js';
import { compressPayload, type CompressionAlgorithm } from './compression.js';

/** NBIRTHs remembered for `sentNodeBirth`: more than a rebirth storm leaves in flight before its echoes return. */
const SENT_NODE_BIRTHS_KEPT = 8;

/** Origin of every message the edge node publishes (locally, and upstream outside the outbox). */
export const EDGE_NODE_ORIGIN = Origins.edgeNode;

/** The part of an outbox entry the rewrite needs (structurally a bridge `OutboxEntry`). */
export interface UplinkEntry {
  readonly msg: Message;
  readonly appendedAtMs: number;
}

/** The Sparkplug seam of a bridge (structurally the bridge's `UplinkHooks`). */
export interface SparkplugUplinkHooks {
  will(): Message;
  connectSending(): void;
  prologue(): Message[];
  rewrite(entry: UplinkEntry, backlog: boolean): Message | null;
}

/** What the edge node may ask of the bridge that carries its session. */
export interface UplinkControl {
  /** Hold back draining (journaling continues). */
  pause(reason: string): void;
  resume(): void;
  /** Whether the uplink is connected now. */
  readonly online: boolean;
  /**
   * Publishes upstream at once, outside the outbox, on the current connection; false if offline. Optional:
   * without it, births after a late primary-host STATE wait for the next uplink connection.
   */
  publishNow?(messages: readonly Message[]): boolean;
  /** Ends the MQTT session (normal DISCONNECT: no Will) and connects again, with a new Will. */
  reconnect(reason: string): void;
  /** The origin of the messages the bridge brings in from the central broker (`bridge:<name>`). */
  readonly origin: string;
}

/** What the upstream session reads of the node it carries. */
export interface UpstreamNode {
  readonly groupId: string;
  readonly edgeNodeId: string;
  /** The node's devices by id (the live map). */
  readonly devices: ReadonlyMap<string, Device>;
  /** Timestamp of the current local NBIRTH, undefined before the first. */
  nodeBirthTs(): number | undefined;
  /** The NBIRTH metrics with this bdSeq. */
  nodeBirthMetrics(timestamp: number, bdSeq: bigint): MetricOut[];
  /** The gateway's steady clock (util/clock.ts): outbox entries are stamped with it. */
  readonly clock: SteadyClock;
  /** Births and data go upstream compressed with this (src/sparkplug/compression.ts), or as they are. */
  readonly compression: CompressionAlgorithm | undefined;
}

export interface UpstreamStats {
  readonly born: boolean;
  /** NBIRTH and DBIRTH messages sent upstream outside the outbox. */
  readonly births: number;
  /** Messages sent upstream flagged historical. */
  readonly historicalSent: number;
  /** Outbox entries the rewrite dropped (superseded births/deaths, data of devices not born upstream). */
  readonly rewriteDropped: number;
}

/** One upstream session (one uplink connection). */
interface Session {
  readonly bdSeq: number;
  /** The next upstream seq. */
  seq: number;
  born: boolean;
  /** When the current upstream births went out (steady clock, util/clock.ts): entries journaled before are historical. */
  birthAtMs: number;
  /** Local NBIRTH (by payload timestamp) the current upstream NBIRTH stands for. */
  nodeBirthTs: number | undefined;
  /** Devices born upstream in this session → the local DBIRTH timestamp (life) they stand for. */
  readonly devices: Map<string, number>;
  /**
   * Devices born upstream since the current NBIRTH that died since (DDEATH sent): a host knows their aliases from
   * that DBIRTH, so their stored data may still follow, historical.
   */
  readonly died: Set<string>;
}

export class UpstreamSession {
  readonly hooks: SparkplugUplinkHooks;
  private control: UplinkControl | undefined;
  private up: Session | undefined;
  private pendingBdSeq: number | undefined;
  private pausedByUs = false;
  private stopping = false;
  private deathSent: (() => void) | undefined;
  private loggedNoPublishNow = false;
  private readonly counters = { births: 0, historicalSent: 0, rewriteDropped: 0 };
  /** The last NBIRTH payloads sent upstream (`sentNodeBirth`). */
  private readonly sentNodeBirths: Buffer[] = [];

  constructor(
    private readonly node: UpstreamNode,
    private readonly state: NodeState,
    /** Present when births wait for a primary host. */
    private readonly primaryHost: PrimaryHost | undefined,
    private readonly log: Logger,
  ) {
    this.hooks = {
      will: () => this.will(),
      connectSending: () => this.connectSending(),
      prologue: () => this.prologue(),
      rewrite: (entry, backlog) => this.rewrite(entry, backlog),
    };
  }

  get stats(): UpstreamStats {
    return { born: this.up?.born ?? false, ...this.counters };
  }

  /** Connects the bridge named by `sparkplug.uplink` (before it starts). */
  attach(control: UplinkControl): void {
    this.control = control;
  }

  /** Whether a message of `origin` came in through the uplink. */
  carries(origin: string): boolean {
    return this.control !== undefined && origin === this.control.origin;
  }

  /**
   * Whether the node is born on the uplink's current connection: its NBIRTH went up on it and no NDEATH since.
   * The bridge hands an inbound message to the broker, and so to the edge node's command handlers, within the
   * turn it arrived in, so for a command from the uplink this is its connection's session.
   */
  get bornNow(): boolean {
    return this.up?.born === true && this.control?.online === true;
  }

  /**
   * Graceful stop: the upstream NDEATH goes through a connected uplink at once, or else the journaled local one
   * through the rewrite, waited for up to `timeoutMs`. Resolves false if it did not leave in time.
   */
  stop(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    const up = this.up;
    if (!up?.born || !this.control?.online || this.pausedByUs) return Promise.resolve(true);
    if (this.control.publishNow?.([this.death(up.bdSeq)])) {
      up.born = false;
      return Promise.resolve(true);
    }
    return this.waitForDeath(timeoutMs);
  }

  /** A local rebirth (NCMD): the upstream births go at once where the bridge can send them; else through the outbox. */
  rebirth(): void {
    const up = this.up;
    if (up?.born && this.control?.publishNow && this.node.nodeBirthTs() !== undefined) {
      if (!this.control.publishNow(this.births(up, this.node.clock.nowMs())))
        this.log.debug('uplink offline; upstream rebirth follows on connect');
    }
  }

  /** The primary host came online: births on the current connection, then the journaled data. */
  hostOnline(): void {
    const up = this.up;
    if (!up || up.born || !this.control?.online) return;
    if (this.control.publishNow) {
      if (this.control.publishNow(this.births(up, this.node.clock.nowMs()))) this.resume();
      return;
    }
    if (!this.loggedNoPublishNow) {
      this.loggedNoPublishNow = true;
      this.log.error(
        'primary host is online, but this bridge cannot send births outside its outbox: Sparkplug data waits (stored) for the next uplink connection',
      );
    }
  }

  /**
   * The primary host went offline: NDEATH, then the MQTT session ends too
   * [tck-id-operational-behavior-edge-node-termination-host-offline]. The next connection's Will has a new bdSeq,
   * and its births wait for the host; the outbox keeps journaling meanwhile, and what it stored goes up flagged
   * historical after them.
   */
  hostOffline(): void {
    this.pause('primary host offline');
    const up = this.up;
    if (!up?.born || !this.control?.online) return;
    up.born = false;
    if (!this.control.publishNow?.([this.death(up.bdSeq)]))
      this.log.warn('NDEATH not sent upstream; the disconnect ends the session');
    // No session until the next prologue: births must not go out on the connection that is closing.
    this.up = undefined;
    this.control.reconnect('primary host offline: Sparkplug session ended');
  }

  private death(bdSeq: number): Message {
    return this.message(
      nodeTopic(this.node.groupId, 'NDEATH', this.node.edgeNodeId),
      encodePayload(nodeDeathPayload(bdSeq)),
      1,
    );
  }

  private pause(reason: string): void {
    if (!this.control) return;
    this.pausedByUs = true;
    this.control.pause(reason);
  }

  private resume(): void {
    if (!this.control || !this.pausedByUs) return;
    this.pausedByUs = false;
    this.control.resume();
  }

  /**
   * The NDEATH Will for a connection attempt, with the bdSeq after the last one sent. It counts only once its
   * CONNECT leaves (`connectSending`): attempts that fail before reuse it, so the next NBIRTH carries the bdSeq
   * after the NDEATH a host saw [tck-id-payloads-nbirth-bdseq] [tck-id-payloads-ndeath-bdseq].
   */
  private will(): Message {
    this.pendingBdSeq = this.state.nextUplinkBdSeq();
    return this.death(this.pendingBdSeq);
  }

  /** The CONNECT with the last Will is about to leave: its bdSeq goes on disk first, so a crash never reuses it. */
  private connectSending(): void {
    if (this.pendingBdSeq !== undefined) this.state.uplinkBdSeqSent(this.pendingBdSeq);
  }

  /** A new upstream session: births first (or nothing while the primary host is not online). */
  private prologue(): Message[] {
    const bdSeq = this.pendingBdSeq ?? this.state.nextUplinkBdSeq();
    this.pendingBdSeq = undefined;
    const up: Session = {
      bdSeq,
      seq: 0,
      born: false,
      birthAtMs: this.node.clock.nowMs(),
      nodeBirthTs: undefined,
      devices: new Map(),
      died: new Set(),
    };
    this.up = up;
    if (this.stopping) return [];
    // The host's state known from an earlier connection may be stale: a central broker that restarted delivers
    // the host's offline STATE (its Will, or the retained one) only now [tck-id-operational-behavior-edge-node-birth-sequence-wait].
    this.primaryHost?.unknown();
    if (this.primaryHost) {
      this.pause('waiting for the primary host');
      this.log.info({ primaryHostId: this.primaryHost.hostId }, 'uplink connected; births wait for the primary host');
      return [];
    }
    const births = this.births(up, up.birthAtMs);
    this.resume();
    return births;
  }

  /**
   * NBIRTH (seq 0, the session's bdSeq) + one DBIRTH per device born locally, with the values local host
   * applications were last told, so the journaled data that follows applies on top of them.
   */
  private births(up: Session, atMs: number): Message[] {
    this.supersedeDevices(up);
    up.born = true;
    up.seq = 0;
    up.birthAtMs = atMs;
    up.nodeBirthTs = this.node.nodeBirthTs();
    const timestamp = Date.now();
    const { groupId, edgeNodeId } = this.node;
    const out: Message[] = [
      this.remembered(
        this.message(
          nodeTopic(groupId, 'NBIRTH', edgeNodeId),
          this.compressed(
            encodePayload({
              timestamp,
              seq: this.nextSeq(up),
              metrics: this.node.nodeBirthMetrics(timestamp, BigInt(up.bdSeq)),
            }),
          ),
        ),
      ),
    ];
    for (const device of this.node.devices.values()) {
      const life = device.birthTimestamp;
      if (life === undefined) continue;
      up.devices.set(device.id, life);
      out.push(
        this.message(
          deviceTopic(groupId, 'DBIRTH', edgeNodeId, device.id),
          this.compressed(encodePayload({ timestamp, seq: this.nextSeq(up), metrics: device.birthMetrics() })),
        ),
      );
    }
    this.counters.births += out.length;
    return out;
  }

  /**
   * A new NBIRTH supersedes every device birth: a host takes the aliases of this session's births only, so data of
   * a device that died before it has nothing left to refer to.
   */
  private supersedeDevices(up: Session): void {
    up.devices.clear();
    up.died.clear();
  }

  private nextSeq(up: Session): number {
    const seq = up.seq;
    up.seq = (up.seq + 1) & 0xff;
    return seq;
  }

  private message(topic: string, payload: Buffer, qos: QoS = 0): Message {
    return createMessage({ topic, payload, qos, retain: false, origin: EDGE_NODE_ORIGIN });
  }

  /** An NBIRTH going upstream, remembered so that its echo on a 3.1.1 uplink is not taken for a twin's. */
  private remembered(nodeBirth: Message): Message {
    this.sentNodeBirths.push(nodeBirth.payload);
    if (this.sentNodeBirths.length > SENT_NODE_BIRTHS_KEPT) this.sentNodeBirths.shift();
    return nodeBirth;
  }

  /** Whether `payload` is one of the last NBIRTHs this node sent upstream (byte for byte). */
  sentNodeBirth(payload: Buffer): boolean {
    return this.sentNodeBirths.some((sent) => sent.equals(payload));
  }

  /** A birth or data payload as it goes upstream: compressed when the node says so. */
  private compressed(payload: Buffer): Buffer {
    const algorithm = this.node.compression;
    return algorithm === undefined ? payload : compressPayload(payload, algorithm);
  }

  /**
   * Decides what an outbox entry becomes upstream. Our own node's messages only; anything else passes as is.
   * Never throws: a payload that cannot be parsed is dropped (and counted) rather than blocking the queue.
   */
  private rewrite(entry: UplinkEntry, backlog: boolean): Message | null {
    const msg = entry.msg;
    const topic = parseTopic(msg.topic, true);
    const { groupId, edgeNodeId } = this.node;
    if (!topic || topic.groupId !== groupId || topic.edgeNodeId !== edgeNodeId) return msg;
    if (topic.type === 'NCMD' || topic.type === 'DCMD') return msg;
    const up = this.up;
    try {
      const out = up ? this.rewriteOwn(up, entry, backlog, topic.type, topic.deviceId) : null;
      if (out === null) this.counters.rewriteDropped++;
      return out;
    } catch (err) {
      this.counters.rewriteDropped++;
      this.log.warn(
        { err: asError(err), topic: msg.topic },
        'journaled Sparkplug message could not be rewritten; dropped',
      );
      return null;
    }
  }

  private rewriteOwn(
    up: Session,
    entry: UplinkEntry,
    backlog: boolean,
    type: NodeMessageType | DeviceMessageType,
    deviceId: string | undefined,
  ): Message | null {
    const msg = entry.msg;
    const historical = backlog || entry.appendedAtMs < up.birthAtMs;
    const renumbered = (payload: Buffer): Message => ({ ...msg, payload: this.compressed(payload) });
    switch (type) {
      case 'NBIRTH': {
        // A rebirth after the current upstream births goes up (seq 0, the upstream bdSeq); older ones are superseded.
        const ts = readTimestamp(msg.payload);
        if (ts === undefined || historical || ts <= (up.nodeBirthTs ?? -Infinity)) return null;
        this.supersedeDevices(up);
        up.born = true;
        up.seq = 1;
        up.nodeBirthTs = ts;
        up.birthAtMs = entry.appendedAtMs;
        return this.remembered(renumbered(withBdSeq(msg.payload, up.bdSeq, 0)));
      }
      case 'NDEATH': {
        // Our graceful stop: announce the death of the upstream session, not of the local one.
        if (backlog || !up.born || !this.stopping) return null;
        up.born = false;
        this.deathSent?.();
        // Never compressed, like the Will it repeats: a host reads the bdSeq of every death.
        return { ...msg, payload: withBdSeq(msg.payload, up.bdSeq), qos: 1 };
      }
      case 'DBIRTH': {
        // A device born (again) after the current upstream births; births stored from before are superseded.
        const ts = readTimestamp(msg.payload);
        if (!up.born || deviceId === undefined || !this.node.devices.has(deviceId) || ts === undefined || historical)
          return null;
        if (ts <= (up.devices.get(deviceId) ?? -Infinity)) return null;
        up.devices.set(deviceId, ts);
        up.died.delete(deviceId);
        return renumbered(withSeq(msg.payload, this.nextSeq(up)));
      }
      case 'DDEATH': {
        const life = deviceId !== undefined ? up.devices.get(deviceId) : undefined;
        const ts = readTimestamp(msg.payload);
        // A death of an earlier life (before the device's current upstream birth) is superseded.
        if (!up.born || life === undefined || ts === undefined || ts < life) return null;
        // At once, also while the device's stored data still drains (live-first): a host marks the device offline
        // and its metrics stale when the DDEATH arrives
        // [tck-id-operational-behavior-edge-node-termination-host-action-ddeath-devices-offline]
        // [tck-id-operational-behavior-edge-node-termination-host-action-ddeath-devices-tags-stale], and the stored
        // data that follows is flagged historical, not a current value, so it leaves that state alone
        // (docs/architecture.md#live-first).
        up.devices.delete(deviceId as string);
        up.died.add(deviceId as string);
        return renumbered(withSeq(msg.payload, this.nextSeq(up)));
      }
      case 'NDATA':
      case 'DDATA': {
        if (!up.born) return null;
        // The node's own metrics (Node Info) are in the NBIRTH with their current values: older NDATA is superseded.
        if (type === 'NDATA' && historical) return null;
        // Data of a device not born upstream in this session (it died while the uplink was down) has no birth to
        // refer to. One that died in this session keeps the aliases of its DBIRTH: its stored data goes on, historical.
        if (
          type === 'DDATA' &&
          (deviceId === undefined || !(up.devices.has(deviceId) || (historical && up.died.has(deviceId))))
        )
          return null;
        const seq = this.nextSeq(up);
        if (!historical) return renumbered(withSeq(msg.payload, seq));
        this.counters.historicalSent++;
        return renumbered(asHistorical(msg.payload, seq));
      }
      default:
        return null;
    }
  }

  private waitForDeath(timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.deathSent = undefined;
        resolve(false);
      }, timeoutMs);
      this.deathSent = () => {
        clearTimeout(timer);
        this.deathSent = undefined;
        // The message is handed to the uplink synchronously after this returns; let that happen first.
        setImmediate(() => resolve(true));
      };
    });
  }
}
