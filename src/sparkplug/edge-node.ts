/**
 * The gateway as one Sparkplug B 3.0 edge node (`groupId`/`edgeNodeId`); each connector is one device.
 *
 * Two views of one node:
 * - Locally, the node publishes through the in-process broker: NBIRTH (seq 0, bdSeq, Node Control/Rebirth),
 *   one DBIRTH per device as it first answers, NDATA/DDATA by exception with aliases only, DDEATH on device
 *   loss, NDEATH on a graceful stop. Local host applications see a complete session.
 * - Upstream, the node's session is the uplink's MQTT session (docs/architecture.md#sparkplug-session). The bridge journals the local
 *   messages in its outbox and asks `hooks`: `will()` is the NDEATH with the next bdSeq (persisted before the
 *   CONNECT), `prologue()` the NBIRTH + DBIRTHs sent first on every connection, and `rewrite()` renumbers what
 *   leaves the outbox into the upstream seq, flags data stored before the current births `is_historical`, and
 *   drops births/deaths the prologue superseded. A host application never sees stored data as live, nor data
 *   of an old session under a new session's seq.
 *
 * With `primaryHostId`, births wait for `spBv1.0/STATE/<id>` online (JSON {online, timestamp}); an offline
 * STATE at least as new as the online one ends the session (NDEATH) until the host is back; older ones are
 * ignored. With an uplink, this gates the upstream session (the bridge is paused, data stays journaled);
 * without one, the local session.
 */
import type { Connector, TagDatatype, TagValue } from '../../connectors/contract.js';
import { ValueRefusedError } from '../../connectors/contract.js';
import type { Broker } from '../broker/broker.js';
import type { Message, QoS } from '../protocol/message.js';
import { createMessage } from '../protocol/message.js';
import { asError, EdgeferryError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { commandValueProblem } from './command-value.js';
import { Device } from './device.js';
import type { DeviceHost } from './device.js';
import { NodeState } from './node-state.js';
import type { MetricIn, MetricOut } from './payload.js';
import { asHistorical, decodePayload, encodePayload, readTimestamp, withBdSeq, withSeq } from './payload.js';
import type { SparkplugConfig } from './schema.js';
import { deviceTopic, nodeTopic, parseTopic, stateTopic } from './topics.js';
import type { DeviceMessageType, NodeMessageType } from './topics.js';

/** Origin of every message the edge node publishes locally. */
export const EDGE_NODE_ORIGIN = 'edge-node';

const BDSEQ = 'bdSeq';
const REBIRTH = 'Node Control/Rebirth';
const DEVICES_ONLINE = 'Node Info/Devices Online';

/** The part of an outbox entry the rewrite needs (structurally a bridge `OutboxEntry`). */
export interface UplinkEntry {
  readonly msg: Message;
  readonly appendedAtMs: number;
}

/** The Sparkplug seam of a bridge (structurally the bridge's `UplinkHooks`). */
export interface SparkplugUplinkHooks {
  will(): Message;
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
}

export interface EdgeNodeOptions {
  readonly config: SparkplugConfig;
  readonly broker: Pick<Broker, 'publish' | 'subscribe' | 'clock'>;
  readonly connectors: readonly Connector[];
  /** Directory for the persisted bdSeq and aliases (the gateway's storage path). */
  readonly stateDir: string;
  readonly log: Logger;
  /** Where commands from host applications (rebirths, DCMD writes, refusals) are recorded with who sent them. */
  readonly audit?: Logger;
  /**
   * Who is behind a command's origin (a local client id): its authenticated user, certificate identity and address,
   * for the audit log; a client id alone is whatever the client chose.
   */
  readonly identify?: (origin: string) => SenderIdentity;
}

/** What the audit log says of a command's sender besides its client id (`who`). */
export interface SenderIdentity {
  readonly user?: string;
  readonly certificate?: string;
  readonly remote?: string;
}

/** A command's sender as its audit lines name it. */
type Sender = SenderIdentity & { readonly who: string };

export interface EdgeNodeStats {
  readonly localBorn: boolean;
  readonly uplinkBorn: boolean;
  readonly primaryHostOnline: boolean | undefined;
  readonly devicesOnline: number;
  readonly births: number;
  readonly dataMessages: number;
  readonly rebirths: number;
  readonly commandsRefused: number;
  readonly writesOk: number;
  readonly writesFailed: number;
  /** Messages sent upstream flagged historical. */
  readonly historicalSent: number;
  /** Outbox entries the rewrite dropped (superseded births/deaths, data of devices not born upstream). */
  readonly rewriteDropped: number;
}

/** One upstream Sparkplug session (one uplink connection). */
interface UpstreamSession {
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
}

interface NodeMetric {
  readonly name: string;
  readonly datatype: TagDatatype;
  readonly alias?: number;
  value: () => TagValue;
}

export class EdgeNode implements DeviceHost {
  readonly hooks: SparkplugUplinkHooks;
  private readonly config: SparkplugConfig;
  private readonly broker: Pick<Broker, 'publish' | 'subscribe' | 'clock'>;
  private readonly log: Logger;
  private readonly audit: Logger;
  private readonly identify: ((origin: string) => SenderIdentity) | undefined;
  private readonly state: NodeState;
  private readonly devices = new Map<string, Device>();
  private readonly nodeMetrics: NodeMetric[];
  private readonly nodeAliases = new Map<number, NodeMetric>();
  private readonly gateLocal: boolean;
  private readonly gateUplink: boolean;

  private control: UplinkControl | undefined;
  private unsubscribers: (() => void)[] = [];
  private running = false;
  private stopping = false;

  // Local session
  private localBorn = false;
  private localBdSeq = 0;
  private localSeq = 0;
  private nodeBirthTs: number | undefined;
  private lastUniqueTs = 0;
  private lastRebirthMs = -Infinity;
  private devicesOnlinePublished = -1;

  // Upstream session
  private up: UpstreamSession | undefined;
  private pendingUplinkBdSeq: number | undefined;
  private pausedByUs = false;
  private deathSent: (() => void) | undefined;
  private loggedNoPublishNow = false;

  // Primary host
  private hostOnline = false;
  private hostOnlineTs = -Infinity;
  private hostOfflineTs = -Infinity;

  private counters = {
    births: 0,
    dataMessages: 0,
    rebirths: 0,
    commandsRefused: 0,
    writesOk: 0,
    writesFailed: 0,
    historicalSent: 0,
    rewriteDropped: 0,
  };

  constructor(options: EdgeNodeOptions) {
    this.config = options.config;
    this.broker = options.broker;
    this.log = options.log;
    this.audit = options.audit ?? options.log;
    this.identify = options.identify;
    this.state = new NodeState(options.stateDir, this.config.groupId, this.config.edgeNodeId);
    this.gateLocal = this.config.primaryHostId !== undefined && this.config.uplink === undefined;
    this.gateUplink = this.config.primaryHostId !== undefined && this.config.uplink !== undefined;

    // Aliases are unique across the whole node and stable across restarts (persisted).
    const keys = [`/${DEVICES_ONLINE}`];
    for (const c of options.connectors) for (const t of c.tags) keys.push(`${c.id}/${t.name}`);
    const aliases = this.state.assignAliases(keys);

    this.nodeMetrics = [
      // bdSeq and the rebirth control carry no alias (Sparkplug 3.0 NBIRTH rules).
      { name: BDSEQ, datatype: 'Int64', value: () => BigInt(this.localBdSeq) },
      { name: REBIRTH, datatype: 'Boolean', value: () => false },
      { name: DEVICES_ONLINE, datatype: 'UInt32', alias: aliases.get(`/${DEVICES_ONLINE}`), value: () => this.devicesOnline() },
    ];
    for (const m of this.nodeMetrics) if (m.alias !== undefined) this.nodeAliases.set(m.alias, m);

    for (const connector of options.connectors) this.devices.set(connector.id, this.createDevice(connector, aliases));

    this.hooks = {
      will: () => this.will(),
      prologue: () => this.prologue(),
      rewrite: (entry, backlog) => this.rewrite(entry, backlog),
    };
  }

  get born(): boolean {
    return this.localBorn;
  }

  get stats(): EdgeNodeStats {
    return {
      localBorn: this.localBorn,
      uplinkBorn: this.up?.born ?? false,
      primaryHostOnline: this.config.primaryHostId === undefined ? undefined : this.hostOnline,
      devicesOnline: this.devicesOnline(),
      ...this.counters,
    };
  }

  /** The devices, for stats. */
  get deviceList(): readonly Device[] {
    return [...this.devices.values()];
  }

  /** Connects the bridge named by `sparkplug.uplink` (before it starts). */
  attachUplink(control: UplinkControl): void {
    this.control = control;
  }

  /** Subscribes to commands (and STATE), publishes the births unless gated, and starts the devices. */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    const { groupId, edgeNodeId, primaryHostId } = this.config;
    const sub = { qos: 0 as QoS, origin: EDGE_NODE_ORIGIN, noLocal: true };
    this.unsubscribers.push(this.broker.subscribe(nodeTopic(groupId, 'NCMD', edgeNodeId), sub, (msg) => this.onNodeCommand(msg)));
    this.unsubscribers.push(
      this.broker.subscribe(`${deviceTopic(groupId, 'DCMD', edgeNodeId, '+')}`, sub, (msg) => this.onDeviceCommand(msg)),
    );
    if (primaryHostId !== undefined) {
      // Retained STATE (bridged down from the central broker, or published locally) arrives on subscribe.
      this.unsubscribers.push(this.broker.subscribe(stateTopic(primaryHostId), { ...sub, qos: 1 }, (msg) => this.onState(msg)));
    }
    // A retained online STATE may already have started the session during the subscribe above.
    if (!this.localBorn && (!this.gateLocal || this.hostOnline)) this.startLocalSession();
    for (const device of this.devices.values()) device.start();
    this.log.info(
      { groupId, edgeNodeId, devices: this.devices.size, uplink: this.config.uplink, primaryHostId },
      'edge node started',
    );
  }

  /**
   * Graceful stop: devices stop (no DDEATH: the NDEATH covers them), NDEATH is published locally and, through
   * a connected uplink, upstream (directly, or through the outbox: then waiting, bounded, for it to leave).
   */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.stopping = true;
    for (const unsubscribe of this.unsubscribers) unsubscribe();
    this.unsubscribers = [];
    await Promise.all([...this.devices.values()].map((d) => d.stop()));
    let sent: Promise<boolean> = Promise.resolve(true);
    const up = this.up;
    if (up?.born && this.control?.online && !this.pausedByUs) {
      // Upstream first, at once (not behind a backlog in the outbox); else the journaled local NDEATH goes up.
      const death = this.upstreamMessage(nodeTopic(this.config.groupId, 'NDEATH', this.config.edgeNodeId), encodePayload(this.deathPayload(up.bdSeq)), 1);
      if (this.control.publishNow?.([death])) up.born = false;
      else sent = this.waitForUpstreamDeath(this.config.deathTimeoutMs);
    }
    if (this.localBorn) await this.endLocalSession();
    if (!(await sent)) this.log.warn({ timeoutMs: this.config.deathTimeoutMs }, 'NDEATH did not leave through the uplink in time');
    this.log.info('edge node stopped');
  }

  /**
   * Adds a device while the node runs (a reload added or reconfigured a connector). It starts at once and is
   * born with a DBIRTH when it first answers, inside the current session: no NBIRTH, the other devices carry on.
   *
   * Why a DBIRTH and not a whole-node rebirth (NBIRTH + every DBIRTH, same bdSeq): an NBIRTH names no devices,
   * so a host application learns a new device, or a device's new metric list after its DDEATH, from its DBIRTH
   * alone. That is the path every host application already takes for a device coming back after an outage
   * (DDEATH ... DBIRTH within one node session), so it is the one they handle best. A rebirth would make hosts
   * mark every device of the node stale and re-read every birth for a change to one device. What a rebirth
   * would protect, alias consistency, already holds: aliases are unique across the node and never reused
   * (NodeState), so a new device's aliases cannot collide with ones a host learnt earlier in this session, and a
   * reconfigured device's DBIRTH declares its complete new metric list [tck-id-operational-behavior-data-publish-dbirth].
   */
  addDevice(connector: Connector): void {
    if (this.devices.has(connector.id)) {
      throw new EdgeferryError('EF_INTERNAL', `device ${connector.id} already exists: remove it before adding its replacement`);
    }
    const aliases = this.state.assignAliases(connector.tags.map((t) => `${connector.id}/${t.name}`));
    const device = this.createDevice(connector, aliases);
    this.devices.set(connector.id, device);
    // A stopped node starts it with the others; a stopping one never does.
    if (this.running) device.start();
  }

  /**
   * Removes a device while the node runs (a reload removed or reconfigured its connector): DDEATH if it is born,
   * NDATA with the new device count, then its connector stops. Its commands are refused from now on ("unknown
   * device"); its aliases stay reserved. Resolves once the connector released its sockets (a replacement on
   * the same device or bus may then connect). False if there was no such device.
   */
  async removeDevice(id: string): Promise<boolean> {
    const device = this.devices.get(id);
    if (!device) return false;
    // Out of the map first: the node's device count (NDATA after the DDEATH) and DCMD routing no longer see it.
    this.devices.delete(id);
    await device.retire();
    return true;
  }

  private createDevice(connector: Connector, aliases: ReadonlyMap<string, number>): Device {
    return new Device({
      connector,
      aliases: new Map(connector.tags.map((t) => [t.name, aliases.get(`${connector.id}/${t.name}`) as number])),
      host: this,
      backoff: this.config.deviceReconnect,
      log: this.log.child({ device: connector.id }),
    });
  }

  // -----------------------------------------------------------------------------------------------------------
  // DeviceHost

  uniqueTimestamp(): number {
    const now = Date.now();
    this.lastUniqueTs = now > this.lastUniqueTs ? now : this.lastUniqueTs + 1;
    return this.lastUniqueTs;
  }

  publishDeviceBirth(device: Device, timestamp: number, metrics: MetricOut[]): void {
    this.counters.births++;
    this.publishLocal(deviceTopic(this.config.groupId, 'DBIRTH', this.config.edgeNodeId, device.id), {
      timestamp,
      seq: this.nextLocalSeq(),
      metrics,
    });
  }

  publishDeviceData(device: Device, metrics: MetricOut[]): void {
    this.counters.dataMessages++;
    this.publishLocal(deviceTopic(this.config.groupId, 'DDATA', this.config.edgeNodeId, device.id), {
      timestamp: Date.now(),
      seq: this.nextLocalSeq(),
      metrics,
    });
  }

  publishDeviceDeath(device: Device, timestamp: number): void {
    this.publishLocal(deviceTopic(this.config.groupId, 'DDEATH', this.config.edgeNodeId, device.id), {
      timestamp,
      seq: this.nextLocalSeq(),
      metrics: [],
    });
  }

  deviceStateChanged(): void {
    this.publishNodeData();
  }

  // -----------------------------------------------------------------------------------------------------------
  // Local session

  private devicesOnline(): number {
    let n = 0;
    for (const d of this.devices.values()) if (d.online) n++;
    return n;
  }

  private nextLocalSeq(): number {
    const seq = this.localSeq;
    this.localSeq = (this.localSeq + 1) & 0xff;
    return seq;
  }

  /** A new local session: the next bdSeq, then the births. */
  private startLocalSession(): void {
    this.localBdSeq = this.state.nextLocalBdSeq();
    this.localBorn = true;
    this.publishLocalBirths();
  }

  /** NBIRTH (seq 0) then a DBIRTH per online device; returns the node birth timestamp. */
  private publishLocalBirths(): number {
    const timestamp = this.uniqueTimestamp();
    this.localSeq = 0;
    this.nodeBirthTs = timestamp;
    this.counters.births++;
    this.publishLocal(nodeTopic(this.config.groupId, 'NBIRTH', this.config.edgeNodeId), {
      timestamp,
      seq: this.nextLocalSeq(),
      metrics: this.nodeBirthMetrics(timestamp, BigInt(this.localBdSeq)),
    });
    this.devicesOnlinePublished = this.devicesOnline();
    for (const device of this.devices.values()) device.birth();
    return timestamp;
  }

  private nodeBirthMetrics(timestamp: number, bdSeq: bigint): MetricOut[] {
    return this.nodeMetrics.map((m) => ({
      name: m.name,
      alias: m.alias,
      datatype: m.datatype,
      timestamp,
      value: m.name === BDSEQ ? bdSeq : m.value(),
    }));
  }

  private publishNodeData(): void {
    if (!this.localBorn || this.stopping) return;
    const online = this.devicesOnline();
    if (online === this.devicesOnlinePublished) return;
    this.devicesOnlinePublished = online;
    const metric = this.nodeMetrics.find((m) => m.name === DEVICES_ONLINE) as NodeMetric;
    this.counters.dataMessages++;
    this.publishLocal(nodeTopic(this.config.groupId, 'NDATA', this.config.edgeNodeId), {
      timestamp: Date.now(),
      seq: this.nextLocalSeq(),
      metrics: [{ alias: metric.alias, valueType: metric.datatype, timestamp: Date.now(), value: online }],
    });
  }

  private async endLocalSession(): Promise<void> {
    this.localBorn = false;
    for (const device of this.devices.values()) device.unborn();
    try {
      await this.publishLocal(nodeTopic(this.config.groupId, 'NDEATH', this.config.edgeNodeId), this.deathPayload(this.localBdSeq), 1);
    } catch (err) {
      this.log.warn({ err: asError(err) }, 'NDEATH not published locally');
    }
  }

  private deathPayload(bdSeq: number): { timestamp: number; metrics: MetricOut[] } {
    // NDEATH carries no seq [tck-id-payloads-ndeath-seq], only the bdSeq of the session it ends.
    return { timestamp: Date.now(), metrics: [{ name: BDSEQ, datatype: 'Int64', value: BigInt(bdSeq) }] };
  }

  /** Publishes to the local broker. QoS 0 births and data (Sparkplug), QoS 1 for NDEATH. */
  private publishLocal(topic: string, payload: { timestamp: number; seq?: number; metrics: readonly MetricOut[] }, qos: QoS = 0): Promise<unknown> {
    const msg = createMessage({ topic, payload: encodePayload(payload), qos, retain: false, origin: EDGE_NODE_ORIGIN });
    const published = this.broker.publish(msg);
    published.catch((err: unknown) => this.log.warn({ err: asError(err), topic }, 'local publish failed'));
    return published;
  }

  /** NCMD Rebirth: the same bdSeq, seq reset, NBIRTH and every DBIRTH again; data stops meanwhile (sync). */
  private sender(msg: Message): Sender {
    return { who: msg.origin, ...this.identify?.(msg.origin) };
  }

  private rebirth(who: Sender): void {
    const now = performance.now();
    if (now - this.lastRebirthMs < this.config.rebirthDebounceMs) {
      this.log.info({ ...who, debounceMs: this.config.rebirthDebounceMs }, 'rebirth request ignored: one was just answered');
      return;
    }
    this.lastRebirthMs = now;
    this.counters.rebirths++;
    this.audit.info(who, 'rebirth requested');
    if (this.localBorn) this.publishLocalBirths();
    // Upstream, the local births reach the host through the outbox; with publishNow they go at once.
    const up = this.up;
    if (up?.born && this.control?.publishNow && this.nodeBirthTs !== undefined) {
      const births = this.upstreamBirths(up, this.broker.clock.nowMs());
      if (!this.control.publishNow(births)) this.log.debug('uplink offline; upstream rebirth follows on connect');
    }
  }

  // -----------------------------------------------------------------------------------------------------------
  // Commands

  private onNodeCommand(msg: Message): void {
    const who = this.sender(msg);
    let metrics: readonly MetricIn[];
    try {
      metrics = decodePayload(msg.payload, (m) => {
        const nodeMetric = m.name !== undefined ? this.nodeMetrics.find((n) => n.name === m.name) : this.nodeAliases.get(m.alias ?? -1);
        return nodeMetric?.datatype;
      }).metrics;
    } catch (err) {
      this.refuse(who, msg.topic, undefined, `undecodable payload: ${asError(err).message}`);
      return;
    }
    for (const metric of metrics) {
      const target = metric.name ?? (metric.alias !== undefined ? this.nodeAliases.get(metric.alias)?.name : undefined);
      if (target === REBIRTH) {
        if (metric.value === true) this.rebirth(who);
        else this.refuse(who, msg.topic, target, 'Rebirth expects Boolean true');
        continue;
      }
      this.refuse(who, msg.topic, target ?? `alias ${metric.alias}`, target === undefined ? 'unknown metric' : 'read-only metric');
    }
  }

  private onDeviceCommand(msg: Message): void {
    const who = this.sender(msg);
    const topic = parseTopic(msg.topic);
    const device = topic?.deviceId !== undefined ? this.devices.get(topic.deviceId) : undefined;
    if (!device) {
      this.refuse(who, msg.topic, undefined, 'unknown device');
      return;
    }
    let metrics: readonly MetricIn[];
    try {
      metrics = decodePayload(msg.payload, (m) => device.datatypeOf(m)).metrics;
    } catch (err) {
      this.refuse(who, msg.topic, undefined, `undecodable payload: ${asError(err).message}`);
      return;
    }
    for (const metric of metrics) {
      const name = metric.name ?? (metric.alias !== undefined ? device.nameOf(metric.alias) : undefined);
      const def = name !== undefined ? device.definitions.get(name) : undefined;
      if (name === undefined || !def) {
        this.refuse(who, msg.topic, name ?? `alias ${metric.alias}`, 'unknown metric');
        continue;
      }
      if (!def.writable) {
        this.refuse(who, msg.topic, name, 'read-only metric');
        continue;
      }
      const problem = commandValueProblem(def.datatype, metric);
      if (problem) {
        this.refuse(who, msg.topic, name, problem, metric.value);
        continue;
      }
      const value = metric.value as TagValue;
      device.write(name, value).then(
        (readBack) => {
          this.counters.writesOk++;
          const line = { ...who, device: device.id, metric: name, value: String(value), readBack: readBack && String(readBack.value) };
          if (readBack && !readBack.matches) this.audit.warn(line, 'DCMD write accepted, but the device reads back another value');
          else this.audit.info(line, 'DCMD write done');
        },
        (err: unknown) => {
          if (err instanceof ValueRefusedError) {
            this.refuse(who, msg.topic, name, err.why, value);
            return;
          }
          this.counters.writesFailed++;
          this.audit.warn({ ...who, device: device.id, metric: name, value: String(value), err: asError(err) }, 'DCMD write failed');
        },
      );
    }
  }

  private refuse(who: Sender, topic: string, metric: string | undefined, why: string, value?: TagValue | null): void {
    this.counters.commandsRefused++;
    this.audit.warn({ ...who, topic, metric, value: value == null ? undefined : String(value), why }, 'command refused');
  }

  // -----------------------------------------------------------------------------------------------------------
  // Primary host STATE

  private onState(msg: Message): void {
    let state: { online?: unknown; timestamp?: unknown };
    try {
      state = JSON.parse(msg.payload.toString('utf8')) as typeof state;
    } catch {
      this.log.warn({ topic: msg.topic, who: msg.origin }, 'STATE payload is not JSON; ignored');
      return;
    }
    if (typeof state.online !== 'boolean' || typeof state.timestamp !== 'number') {
      this.log.warn({ topic: msg.topic, who: msg.origin }, 'STATE payload lacks online/timestamp; ignored');
      return;
    }
    const ts = state.timestamp;
    if (state.online) {
      // A retained online older than the host's last death is stale.
      if (ts <= this.hostOfflineTs || ts < this.hostOnlineTs) {
        this.log.debug({ timestamp: ts }, 'older online STATE ignored');
        return;
      }
      this.hostOnlineTs = ts;
      if (this.hostOnline) return;
      this.hostOnline = true;
      this.log.info({ primaryHostId: this.config.primaryHostId, timestamp: ts }, 'primary host online');
      this.onHostOnline();
      return;
    }
    // The host's Will reuses its birth timestamp: an offline STATE as new as the online one is its death.
    if (ts < this.hostOnlineTs) {
      this.log.debug({ timestamp: ts }, 'older offline STATE ignored');
      return;
    }
    this.hostOfflineTs = ts;
    if (!this.hostOnline) return;
    this.hostOnline = false;
    this.log.warn({ primaryHostId: this.config.primaryHostId, timestamp: ts }, 'primary host offline; session ended');
    this.onHostOffline();
  }

  private onHostOnline(): void {
    if (!this.running) return;
    if (this.gateLocal && !this.localBorn) this.startLocalSession();
    if (this.gateUplink) {
      const up = this.up;
      if (!up || up.born || !this.control?.online) return;
      if (this.control.publishNow) {
        if (this.control.publishNow(this.upstreamBirths(up, this.broker.clock.nowMs()))) this.resumeUplink();
        return;
      }
      if (!this.loggedNoPublishNow) {
        this.loggedNoPublishNow = true;
        this.log.error(
          'primary host is online, but this bridge cannot send births outside its outbox: Sparkplug data waits (stored) for the next uplink connection',
        );
      }
    }
  }

  private onHostOffline(): void {
    if (this.gateLocal && this.localBorn) void this.endLocalSession();
    if (this.gateUplink) {
      const up = this.up;
      if (up?.born) {
        up.born = false;
        const death = this.upstreamMessage(nodeTopic(this.config.groupId, 'NDEATH', this.config.edgeNodeId), encodePayload(this.deathPayload(up.bdSeq)), 1);
        if (!this.control?.publishNow) {
          this.log.warn('NDEATH not sent upstream: the bridge cannot publish outside its outbox');
        } else if (!this.control.publishNow([death])) {
          this.log.debug('uplink offline: the Will of its next connection supersedes this session');
        }
      }
      this.pauseUplink('primary host offline');
    }
  }

  private pauseUplink(reason: string): void {
    if (!this.control) return;
    this.pausedByUs = true;
    this.control.pause(reason);
  }

  private resumeUplink(): void {
    if (!this.control || !this.pausedByUs) return;
    this.pausedByUs = false;
    this.control.resume();
  }

  // -----------------------------------------------------------------------------------------------------------
  // Uplink hooks

  /** The NDEATH Will for the next CONNECT: a new bdSeq, on disk before the CONNECT leaves. */
  private will(): Message {
    const bdSeq = this.state.nextUplinkBdSeq();
    this.pendingUplinkBdSeq = bdSeq;
    return this.upstreamMessage(nodeTopic(this.config.groupId, 'NDEATH', this.config.edgeNodeId), encodePayload(this.deathPayload(bdSeq)), 1);
  }

  /** A new upstream session: births first (or nothing while the primary host is not online). */
  private prologue(): Message[] {
    const bdSeq = this.pendingUplinkBdSeq ?? this.state.nextUplinkBdSeq();
    this.pendingUplinkBdSeq = undefined;
    const up: UpstreamSession = { bdSeq, seq: 0, born: false, birthAtMs: this.broker.clock.nowMs(), nodeBirthTs: undefined, devices: new Map() };
    this.up = up;
    if (this.stopping) return [];
    if (this.gateUplink && !this.hostOnline) {
      this.pauseUplink('waiting for the primary host');
      this.log.info({ primaryHostId: this.config.primaryHostId }, 'uplink connected; births wait for the primary host');
      return [];
    }
    const births = this.upstreamBirths(up, up.birthAtMs);
    this.resumeUplink();
    return births;
  }

  /**
   * NBIRTH (seq 0, the session's bdSeq) + one DBIRTH per device born locally, with the values local host
   * applications were last told, so the journaled data that follows applies on top of them.
   */
  private upstreamBirths(up: UpstreamSession, atMs: number): Message[] {
    up.born = true;
    up.seq = 0;
    up.birthAtMs = atMs;
    up.nodeBirthTs = this.nodeBirthTs;
    up.devices.clear();
    const timestamp = Date.now();
    const { groupId, edgeNodeId } = this.config;
    const out: Message[] = [
      this.upstreamMessage(
        nodeTopic(groupId, 'NBIRTH', edgeNodeId),
        encodePayload({ timestamp, seq: this.nextUpSeq(up), metrics: this.nodeBirthMetrics(timestamp, BigInt(up.bdSeq)) }),
      ),
    ];
    for (const device of this.devices.values()) {
      const life = device.birthTimestamp;
      if (life === undefined) continue;
      up.devices.set(device.id, life);
      out.push(
        this.upstreamMessage(
          deviceTopic(groupId, 'DBIRTH', edgeNodeId, device.id),
          encodePayload({ timestamp, seq: this.nextUpSeq(up), metrics: device.birthMetrics() }),
        ),
      );
    }
    this.counters.births += out.length;
    return out;
  }

  private nextUpSeq(up: UpstreamSession): number {
    const seq = up.seq;
    up.seq = (up.seq + 1) & 0xff;
    return seq;
  }

  private upstreamMessage(topic: string, payload: Buffer, qos: QoS = 0): Message {
    return createMessage({ topic, payload, qos, retain: false, origin: EDGE_NODE_ORIGIN });
  }

  /**
   * Decides what an outbox entry becomes upstream. Our own node's messages only; anything else passes as is.
   * Never throws: a payload that cannot be parsed is dropped (and counted) rather than blocking the queue.
   */
  private rewrite(entry: UplinkEntry, backlog: boolean): Message | null {
    const msg = entry.msg;
    const topic = parseTopic(msg.topic, true);
    const { groupId, edgeNodeId } = this.config;
    if (!topic || topic.groupId !== groupId || topic.edgeNodeId !== edgeNodeId) return msg;
    if (topic.type === 'NCMD' || topic.type === 'DCMD') return msg;
    const up = this.up;
    try {
      const out = up ? this.rewriteOwn(up, entry, backlog, topic.type, topic.deviceId) : null;
      if (out === null) this.counters.rewriteDropped++;
      return out;
    } catch (err) {
      this.counters.rewriteDropped++;
      this.log.warn({ err: asError(err), topic: msg.topic }, 'journaled Sparkplug message could not be rewritten; dropped');
      return null;
    }
  }

  private rewriteOwn(
    up: UpstreamSession,
    entry: UplinkEntry,
    backlog: boolean,
    type: NodeMessageType | DeviceMessageType,
    deviceId: string | undefined,
  ): Message | null {
    const msg = entry.msg;
    const historical = backlog || entry.appendedAtMs < up.birthAtMs;
    const renumbered = (payload: Buffer): Message => ({ ...msg, payload });
    switch (type) {
      case 'NBIRTH': {
        // A rebirth after the current upstream births goes up (seq 0, the upstream bdSeq); older ones are superseded.
        const ts = readTimestamp(msg.payload);
        if (ts === undefined || historical || ts <= (up.nodeBirthTs ?? -Infinity)) return null;
        up.born = true;
        up.seq = 1;
        up.nodeBirthTs = ts;
        up.birthAtMs = entry.appendedAtMs;
        up.devices.clear();
        return renumbered(withBdSeq(msg.payload, up.bdSeq, 0));
      }
      case 'NDEATH': {
        // Our graceful stop: announce the death of the upstream session, not of the local one.
        if (backlog || !up.born || !this.stopping) return null;
        up.born = false;
        this.deathSent?.();
        return { ...renumbered(withBdSeq(msg.payload, up.bdSeq)), qos: 1 };
      }
      case 'DBIRTH': {
        // A device born (again) after the current upstream births; births stored from before are superseded.
        const ts = readTimestamp(msg.payload);
        if (!up.born || deviceId === undefined || !this.devices.has(deviceId) || ts === undefined || historical) return null;
        if (ts <= (up.devices.get(deviceId) ?? -Infinity)) return null;
        up.devices.set(deviceId, ts);
        return renumbered(withSeq(msg.payload, this.nextUpSeq(up)));
      }
      case 'DDEATH': {
        const life = deviceId !== undefined ? up.devices.get(deviceId) : undefined;
        const ts = readTimestamp(msg.payload);
        // A death of an earlier life (before the device's current upstream birth) is superseded.
        if (!up.born || life === undefined || ts === undefined || ts < life) return null;
        up.devices.delete(deviceId as string);
        return renumbered(withSeq(msg.payload, this.nextUpSeq(up)));
      }
      case 'NDATA':
      case 'DDATA': {
        if (!up.born) return null;
        // Data of a device that is not born upstream (it died while the uplink was down) has no birth to refer to.
        if (type === 'DDATA' && (deviceId === undefined || !up.devices.has(deviceId))) return null;
        const seq = this.nextUpSeq(up);
        if (!historical) return renumbered(withSeq(msg.payload, seq));
        this.counters.historicalSent++;
        return renumbered(asHistorical(msg.payload, seq));
      }
      default:
        return null;
    }
  }

  private waitForUpstreamDeath(timeoutMs: number): Promise<boolean> {
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
