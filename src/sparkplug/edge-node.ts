/**
 * The gateway as one Sparkplug B 3.0 edge node (`groupId`/`edgeNodeId`); each connector is one device.
 *
 * This class owns the local session: through the in-process broker it publishes NBIRTH (seq 0, bdSeq, Node
 * Control/Rebirth), one DBIRTH per device as it first answers, NDATA/DDATA by exception with aliases only,
 * DDEATH on device loss, NDEATH on a graceful stop. Local host applications see a complete session.
 * Its parts, each owning its own state (docs/architecture.md#sparkplug-session):
 * - `UpstreamSession`: the node's session through the uplink bridge (Will, births, rewrite of the outbox);
 * - `PrimaryHost`: with `primaryHostId`, whether the host is online. It gates the upstream session when there
 *   is an uplink, else the local one;
 * - `Commands`: NCMD and DCMD, audited;
 * - `PlainTopics`: with `plain`, the devices' values as retained JSON for local consumers, and their `/set` writes.
 */
import type { Connector, TagValue } from '../../connectors/contract.js';
import type { Broker } from '../broker/broker.js';
import type { Message, QoS } from '../protocol/message.js';
import { createMessage } from '../protocol/message.js';
import { asError, EdgeferryError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { Commands } from './commands.js';
import type { LastCommand, Sender, SenderIdentity, WriteOutcome } from './commands.js';
import { Device } from './device.js';
import type { DeviceHost } from './device.js';
import { NodeState } from './node-state.js';
import { BACKLOG_REPORT_MS, NodeMetrics } from './node-metrics.js';
import type { MetricOut, PayloadOut } from './payload.js';
import { encodePayload, nodeDeathPayload } from './payload.js';
import { PlainTopics } from './plain-topics.js';
import { PrimaryHost } from './primary-host.js';
import type { SparkplugConfig } from './schema.js';
import { deviceTopic, nodeTopic, stateTopic } from './topics.js';
import { TwinWatch } from './twin-watch.js';
import { EDGE_NODE_ORIGIN, UpstreamSession } from './upstream-session.js';
import type { SparkplugUplinkHooks, UplinkControl } from './upstream-session.js';
import { compressionAlgorithm } from './compression.js';

export type { UplinkControl } from './upstream-session.js';

export interface EdgeNodeOptions {
  readonly config: SparkplugConfig;
  readonly broker: Pick<Broker, 'publish' | 'subscribe' | 'clock'>;
  readonly connectors: readonly Connector[];
  /** The device profile each of `connectors` instantiates, by device id (with `sparkplug.templates`). */
  readonly profiles?: ReadonlyMap<string, string>;
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
  /** The gateway's version, a node metric in the NBIRTH (docs/architecture.md#fleet-status). */
  readonly version?: string;
  /**
   * Messages waiting in the uplink bridge's outbox: a node metric, in the NBIRTH and, while the uplink is online,
   * in NDATA when it changes (NDATA journaled during an outage would be superseded by the next NBIRTH anyway).
   */
  readonly backlog?: () => { readonly messages: number; readonly online: boolean };
}

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
  /** NBIRTHs with our group and edge node id from another node on the central broker (a twin). */
  readonly twinBirths: number;
}

export class EdgeNode implements DeviceHost {
  readonly hooks: SparkplugUplinkHooks & { readonly watch: TwinWatch };
  private readonly config: SparkplugConfig;
  private readonly broker: Pick<Broker, 'publish' | 'subscribe' | 'clock'>;
  private readonly log: Logger;
  private readonly state: NodeState;
  private readonly devices = new Map<string, Device>();
  private readonly nodeMetrics: NodeMetrics;
  private readonly primaryHost: PrimaryHost | undefined;
  /** With a primary host and no uplink, the host gates the local session. */
  private readonly gateLocal: boolean;
  private readonly upstream: UpstreamSession;
  private readonly commands: Commands;
  private readonly plain: PlainTopics | undefined;

  private unsubscribers: (() => void)[] = [];
  private running = false;
  private stopping = false;

  // Local session
  private localBorn = false;
  private localBdSeq = 0;
  private localSeq = 0;
  private nodeBirthTs: number | undefined;
  private lastUniqueTs = 0;
  private readonly backlog: EdgeNodeOptions['backlog'];
  private backlogTimer: NodeJS.Timeout | undefined;
  /** The Templates the last local NBIRTH defined, each with its definition as sent (`definitionKey`). */
  private definedTemplates = new Map<string, string>();

  private counters = { births: 0, dataMessages: 0 };

  constructor(options: EdgeNodeOptions) {
    this.config = options.config;
    this.broker = options.broker;
    this.log = options.log;
    this.state = new NodeState(options.stateDir, this.config.groupId, this.config.edgeNodeId);
    const { primaryHostId, uplink } = this.config;
    this.primaryHost =
      primaryHostId === undefined
        ? undefined
        : new PrimaryHost(
            primaryHostId,
            { online: () => this.onHostOnline(), offline: () => this.onHostOffline() },
            this.log,
          );
    this.gateLocal = this.primaryHost !== undefined && uplink === undefined;

    // Aliases are unique across the whole node and stable across restarts (persisted).
    this.backlog = options.backlog;
    const nodeSources = {
      bdSeq: () => this.localBdSeq,
      devicesOnline: () => this.devicesOnline(),
      version: options.version,
      backlog: options.backlog,
    };
    const keys = NodeMetrics.aliasKeys(nodeSources);
    for (const c of options.connectors) keys.push(...aliasKeys(c, this.templateOf(options.profiles?.get(c.id))));
    const aliases = this.state.assignAliases(keys);
    this.nodeMetrics = new NodeMetrics(nodeSources, aliases);

    this.plain =
      this.config.plain &&
      new PlainTopics({
        config: this.config.plain,
        broker: this.broker,
        write: (msg, deviceId, tag, command) => this.commands.onPlainWrite(msg, deviceId, tag, command),
        log: this.log.child({ plain: true }),
      });
    for (const c of options.connectors)
      this.addToMap(this.createDevice(c, aliases, this.templateOf(options.profiles?.get(c.id))));

    this.upstream = new UpstreamSession(
      {
        groupId: this.config.groupId,
        edgeNodeId: this.config.edgeNodeId,
        devices: this.devices,
        nodeBirthTs: () => this.nodeBirthTs,
        nodeBirthMetrics: (timestamp, bdSeq) => this.nodeBirthMetrics(timestamp, bdSeq),
        clock: this.broker.clock,
        compression: compressionAlgorithm(this.config.compression),
      },
      this.state,
      uplink === undefined ? undefined : this.primaryHost,
      this.log,
    );
    this.hooks = {
      ...this.upstream.hooks,
      watch: new TwinWatch(
        nodeTopic(this.config.groupId, 'NBIRTH', this.config.edgeNodeId),
        (payload) => this.upstream.sentNodeBirth(payload),
        this.log,
      ),
    };
    this.commands = new Commands({
      rebirthDebounceMs: this.config.rebirthDebounceMs,
      devices: this.devices,
      nodeMetric: (m) => this.nodeMetrics.find(m),
      rebirth: () => this.rebirth(),
      refusal: (msg) => this.commandRefusal(msg),
      log: this.log,
      audit: options.audit ?? options.log,
      identify: options.identify,
    });
  }

  get born(): boolean {
    return this.localBorn;
  }

  get stats(): EdgeNodeStats {
    const upstream = this.upstream.stats;
    return {
      localBorn: this.localBorn,
      uplinkBorn: upstream.born,
      primaryHostOnline: this.primaryHost?.online,
      devicesOnline: this.devicesOnline(),
      births: this.counters.births + upstream.births,
      dataMessages: this.counters.dataMessages,
      ...this.commands.stats,
      historicalSent: upstream.historicalSent,
      rewriteDropped: upstream.rewriteDropped,
      twinBirths: this.hooks.watch.births,
    };
  }

  /** The devices, for stats. */
  get deviceList(): readonly Device[] {
    return [...this.devices.values()];
  }

  /** Who the node is and where its local session stands, for the web console. */
  get session(): { groupId: string; edgeNodeId: string; bdSeq: number; lastCommand: LastCommand | undefined } {
    return {
      groupId: this.config.groupId,
      edgeNodeId: this.config.edgeNodeId,
      bdSeq: this.localBdSeq,
      lastCommand: this.commands.lastCommand,
    };
  }

  /** A tag write from the web console: the DCMD path (checks, audit, read-back) for this device's DCMD topic. */
  writeTag(who: Sender, deviceId: string, name: string, value: TagValue): Promise<WriteOutcome> {
    return this.commands.writeTag(
      who,
      deviceTopic(this.config.groupId, 'DCMD', this.config.edgeNodeId, deviceId),
      deviceId,
      name,
      value,
    );
  }

  /** A rebirth from the web console, debounced like NCMD Rebirth; false when one was just answered. */
  requestRebirth(who: Sender): boolean {
    return this.commands.requestRebirth(who, nodeTopic(this.config.groupId, 'NCMD', this.config.edgeNodeId));
  }

  /** Connects the bridge named by `sparkplug.uplink` (before it starts). */
  attachUplink(control: UplinkControl): void {
    this.upstream.attach(control);
  }

  /**
   * Why an NCMD or DCMD is not executed (docs/architecture.md#dcmd-to-the-plc): a retained command never is (it
   * may be any age: a restart or a new subscription delivers it again); one from the uplink only while the node is
   * born on that uplink connection, one from elsewhere while the local session is born. A command sent to a node
   * that is not born was meant for a session that is over, or for one the host has not seen.
   */
  private commandRefusal(msg: Message): string | undefined {
    if (msg.retain) return 'retained: a command is never executed from a retained message';
    if (this.upstream.carries(msg.origin))
      return this.upstream.bornNow ? undefined : 'the node is not born on the current uplink session';
    return this.localBorn ? undefined : 'the node is not born';
  }

  /** Subscribes to commands (and STATE), publishes the births unless gated, and starts the devices. */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    const { groupId, edgeNodeId, primaryHostId } = this.config;
    const sub = { qos: 0 as QoS, origin: EDGE_NODE_ORIGIN, noLocal: true };
    // Retain As Published: a command published retained keeps its flag, so that it is recognised and refused.
    const commandSub = { ...sub, retainAsPublished: true };
    this.unsubscribers.push(
      this.broker.subscribe(nodeTopic(groupId, 'NCMD', edgeNodeId), commandSub, (msg) =>
        this.commands.onNodeCommand(msg),
      ),
    );
    this.unsubscribers.push(
      this.broker.subscribe(`${deviceTopic(groupId, 'DCMD', edgeNodeId, '+')}`, commandSub, (msg) =>
        this.commands.onDeviceCommand(msg),
      ),
    );
    const host = this.primaryHost;
    if (host) {
      // Retained STATE (bridged down from the central broker, or published locally) arrives on subscribe.
      this.unsubscribers.push(
        this.broker.subscribe(stateTopic(host.hostId), { ...sub, qos: 1 }, (msg) => host.onState(msg)),
      );
    }
    // A retained online STATE may already have started the session during the subscribe above.
    if (!this.localBorn && (!this.gateLocal || host?.online)) this.startLocalSession();
    for (const device of this.devices.values()) device.start();
    if (this.backlog) {
      this.backlogTimer = setInterval(() => this.publishNodeData(), BACKLOG_REPORT_MS);
      this.backlogTimer.unref();
    }
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
    clearInterval(this.backlogTimer);
    for (const unsubscribe of this.unsubscribers) unsubscribe();
    this.unsubscribers = [];
    // The devices halt at once (their samples are ignored from here), so the stale plain values are the last.
    const devicesStopped = Promise.all([...this.devices.values()].map((d) => d.stop()));
    await this.plain?.close(this.uniqueTimestamp());
    await devicesStopped;
    const sent = this.upstream.stop(this.config.deathTimeoutMs);
    if (this.localBorn) await this.endLocalSession();
    if (!(await sent))
      this.log.warn({ timeoutMs: this.config.deathTimeoutMs }, 'NDEATH did not leave through the uplink in time');
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
  addDevice(connector: Connector, profile?: string): void {
    if (this.devices.has(connector.id)) {
      throw new EdgeferryError(
        'EF_INTERNAL',
        `device ${connector.id} already exists: remove it before adding its replacement`,
      );
    }
    const template = this.templateOf(profile);
    const aliases = this.state.assignAliases(aliasKeys(connector, template));
    const device = this.createDevice(connector, aliases, template);
    this.addToMap(device);
    // Its Template must be defined in the NBIRTH, as it is now (a reload may have changed the profile's tags),
    // before its DBIRTH names it [tck-id-topics-nbirth-templates].
    if (
      device.template !== undefined &&
      this.localBorn &&
      this.definedTemplates.get(device.template) !== definitionKey(device.templateDefinition())
    )
      this.rebirth();
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
    this.plain?.removeDevice(id);
    return true;
  }

  private addToMap(device: Device): void {
    this.devices.set(device.id, device);
    this.plain?.addDevice(device);
  }

  /** The Template a device built from `profile` instantiates: the profile's, with `sparkplug.templates`. */
  private templateOf(profile: string | undefined): string | undefined {
    return this.config.templates ? profile : undefined;
  }

  private createDevice(
    connector: Connector,
    aliases: ReadonlyMap<string, number>,
    template: string | undefined,
  ): Device {
    return new Device({
      connector,
      aliases: new Map(
        metricNames(connector, template).map((name) => [name, aliases.get(`${connector.id}/${name}`) as number]),
      ),
      template,
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
    this.plain?.metrics(device.id, metrics);
    void this.publishLocal(deviceTopic(this.config.groupId, 'DBIRTH', this.config.edgeNodeId, device.id), {
      timestamp,
      seq: this.nextLocalSeq(),
      metrics,
    });
  }

  publishDeviceData(device: Device, metrics: MetricOut[]): void {
    this.counters.dataMessages++;
    this.plain?.metrics(device.id, metrics);
    void this.publishLocal(deviceTopic(this.config.groupId, 'DDATA', this.config.edgeNodeId, device.id), {
      timestamp: Date.now(),
      seq: this.nextLocalSeq(),
      metrics,
    });
  }

  publishDeviceDeath(device: Device, timestamp: number): void {
    this.plain?.deviceDead(device.id, timestamp);
    void this.publishLocal(deviceTopic(this.config.groupId, 'DDEATH', this.config.edgeNodeId, device.id), {
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
    void this.publishLocal(nodeTopic(this.config.groupId, 'NBIRTH', this.config.edgeNodeId), {
      timestamp,
      seq: this.nextLocalSeq(),
      metrics: this.nodeBirthMetrics(timestamp, BigInt(this.localBdSeq)),
    });
    this.definedTemplates = new Map(
      [...this.templateDefinitions()].map(([name, definition]) => [name, definitionKey(definition)]),
    );
    this.nodeMetrics.localBirth();
    for (const device of this.devices.values()) device.birth();
    return timestamp;
  }

  /**
   * The node's metrics, then one Template definition per profile its devices instantiate: every definition an
   * instance in a DBIRTH refers to is in the NBIRTH [tck-id-payloads-template-definition-nbirth].
   */
  private nodeBirthMetrics(timestamp: number, bdSeq: bigint): MetricOut[] {
    const metrics = this.nodeMetrics.birth(timestamp, bdSeq);
    for (const definition of this.templateDefinitions().values()) metrics.push({ ...definition, timestamp });
    return metrics;
  }

  /** The Template definition of each profile the devices instantiate, by name, from its first device. */
  private templateDefinitions(): Map<string, MetricOut> {
    const definitions = new Map<string, MetricOut>();
    for (const device of this.devices.values()) {
      if (device.template === undefined || definitions.has(device.template)) continue;
      definitions.set(device.template, device.templateDefinition() as MetricOut);
    }
    return definitions;
  }

  /**
   * NDATA with the node metrics that changed (`NodeMetrics.changed`). Held while a device's first start is pending:
   * the DBIRTHs of the devices that come up with the node follow its NBIRTH with no node data between
   * [tck-id-payloads-dbirth-order].
   */
  private publishNodeData(): void {
    if (!this.localBorn || this.stopping) return;
    for (const d of this.devices.values()) if (d.firstStartPending) return;
    const timestamp = Date.now();
    const metrics = this.nodeMetrics.changed(timestamp);
    if (metrics.length === 0) return;
    this.counters.dataMessages++;
    void this.publishLocal(nodeTopic(this.config.groupId, 'NDATA', this.config.edgeNodeId), {
      timestamp,
      seq: this.nextLocalSeq(),
      metrics,
    });
  }

  private async endLocalSession(): Promise<void> {
    this.localBorn = false;
    const timestamp = this.uniqueTimestamp();
    for (const device of this.devices.values()) {
      // The NDEATH covers the devices: their plain values go stale as with a DDEATH.
      if (device.birthTimestamp !== undefined) this.plain?.deviceDead(device.id, timestamp);
      device.unborn();
    }
    try {
      await this.publishLocal(
        nodeTopic(this.config.groupId, 'NDEATH', this.config.edgeNodeId),
        nodeDeathPayload(this.localBdSeq),
        1,
      );
    } catch (err) {
      this.log.warn({ err: asError(err) }, 'NDEATH not published locally');
    }
  }

  /** Publishes to the local broker. QoS 0 births and data (Sparkplug), QoS 1 for NDEATH. */
  private publishLocal(topic: string, payload: PayloadOut, qos: QoS = 0): Promise<unknown> {
    const msg = createMessage({ topic, payload: encodePayload(payload), qos, retain: false, origin: EDGE_NODE_ORIGIN });
    const published = this.broker.publish(msg);
    published.catch((err: unknown) => this.log.warn({ err: asError(err), topic }, 'local publish failed'));
    return published;
  }

  /** NCMD Rebirth: the same bdSeq, seq reset, NBIRTH and every DBIRTH again; data stops meanwhile (sync). */
  private rebirth(): void {
    if (this.localBorn) this.publishLocalBirths();
    // Upstream, the local births reach the host through the outbox; with publishNow they go at once.
    this.upstream.rebirth();
  }

  // -----------------------------------------------------------------------------------------------------------
  // Primary host

  private onHostOnline(): void {
    if (!this.running) return;
    if (this.gateLocal) {
      if (!this.localBorn) this.startLocalSession();
    } else {
      this.upstream.hostOnline();
    }
  }

  private onHostOffline(): void {
    if (this.gateLocal) {
      if (this.localBorn) void this.endLocalSession();
    } else {
      this.upstream.hostOffline();
    }
  }
}

/** A Template definition as a comparable text: members, datatypes and properties (bigints as digits). */
function definitionKey(definition: MetricOut | undefined): string {
  return JSON.stringify(definition ?? null, (_key, value: unknown) =>
    typeof value === 'bigint' ? value.toString() : value,
  );
}

/** A device's metric names: its tags, and its Template instance if it is one. */
function metricNames(connector: Connector, template: string | undefined): string[] {
  const names = connector.tags.map((t) => t.name);
  if (template !== undefined) names.push(template);
  return names;
}

function aliasKeys(connector: Connector, template: string | undefined): string[] {
  return metricNames(connector, template).map((name) => `${connector.id}/${name}`);
}
