/**
 * The OPC UA connector: one client session per connector, one subscription, monitored items for every tag
 * (never polling). Data-change notifications become TagSamples, one `sink.data()` call per publish response.
 *
 * Lifecycle (docs/architecture.md#connectors-never-retry): `start()` connects, resolves every tag (browse
 * paths, data types, access levels), creates the subscription and resolves; it rejects with a ConnectorError
 * if the server is unreachable or refuses us. Once running, a lost channel or session (socket closed,
 * subscription timed out, or no publish response, keep-alive or data, within the keep-alive deadline) is
 * reported once through `sink.lost()`; the runtime then calls `stop()` and, after its backoff, `start()`,
 * which builds a fresh session with every monitored item.
 *
 * A tag the server cannot serve as declared (unknown node, a data type with no Sparkplug equivalent, a
 * datatype other than the declared one) is reported once as an error naming the tag and left out; the other
 * tags run.
 *
 * What a node says about itself (its Description attribute; for an AnalogItem its EngineeringUnits and
 * EURange properties, OPC UA Part 8 §5.3.2) fills the tag's properties at start where its config sets none.
 */
import type { ClientMonitoredItemBase, ClientSubscription, DataValue, NodeId, StatusCode } from 'node-opcua-client';
import type {
  Connector,
  ReadBack,
  TagDefinition,
  TagProperties,
  TagQuality,
  TagSample,
  TagSink,
  TagValue,
} from '../contract.js';
import { ValueRefusedError } from '../contract.js';
import { tagProperties } from '../tag-properties.js';
import { ConnectorError, asError, errorLogFields } from '../../src/util/errors.js';
import type { Logger } from '../../src/util/logger.js';
import { openSession, UntrustedServerError, withDeadline, type OpenedSession } from './open-session.js';
import { isNumericDatatype } from './schema.js';
import type { OpcuaConnectorConfig, OpcuaTagConfig } from './schema.js';
import {
  BuiltInType,
  builtInTypeName,
  isArrayDatatype,
  isCompatibleDatatype,
  sameValue,
  sparkplugDatatypeFor,
  tagValueToVariant,
  variantToTagValue,
  VariantMismatchError,
  WriteTypeError,
  zeroValue,
} from './variants.js';

/** A tag the connector could not set up, as reported (once) in the log. */
export interface TagProblem {
  readonly tag: string;
  readonly reason: string;
}

/** What the server said about a tag's node at start. */
interface ResolvedTag {
  readonly config: OpcuaTagConfig;
  readonly definition: TagDefinition;
  readonly nodeId: NodeId;
  readonly builtIn: number;
  readonly isArray: boolean;
  readonly serverWritable: boolean;
}

/** What a server says about a tag's node, gathered at start. */
type ServerProperties = { -readonly [K in keyof TagProperties]: TagProperties[K] };

/** One connected period, from start() to stop() or loss. */
interface Run {
  readonly sink: TagSink;
  opened?: OpenedSession;
  subscription?: ClientSubscription;
  watchdog?: NodeJS.Timeout;
  readonly resolved: Map<string, ResolvedTag>;
  closed: boolean;
  lost: boolean;
  lastAliveMs: number;
  pending: TagSample[];
  flushScheduled: boolean;
  limits?: OperationLimits;
}

const AccessLevelCurrentWrite = 0x02;
/** Bounded teardown: a dead link must not hold up stop(). */
const closeTimeoutMs = 3000;

export interface OpcuaConnectorOptions {
  /** PKI folder; the factory fills in the default (`<dataDir>/opcua/pki`). */
  readonly pkiDir: string;
}

export class OpcuaConnector implements Connector {
  readonly id: string;
  private readonly config: OpcuaConnectorConfig;
  private readonly log: Logger;
  private readonly pkiDir: string;
  /** Each tag's config and definition; the definition's properties are completed from the server at start. */
  private readonly definitions: Map<string, { readonly config: OpcuaTagConfig; definition: TagDefinition }>;
  /** Problems already logged: each is reported once per connector, not at every restart. */
  private readonly reported = new Set<string>();
  private readonly problemList: TagProblem[] = [];
  /** Last value of each tag, shown with a bad status that carries no value. */
  private readonly lastValues = new Map<string, TagValue>();
  private run: Run | undefined;
  private starting: Promise<void> | undefined;

  constructor(config: OpcuaConnectorConfig, log: Logger, options: OpcuaConnectorOptions) {
    this.config = config;
    this.id = config.id;
    this.log = log;
    this.pkiDir = options.pkiDir;
    this.definitions = new Map(
      config.tags.map((tag) => [
        tag.name,
        {
          config: tag,
          definition: {
            name: tag.name,
            datatype: tag.datatype,
            writable: tag.writable,
            properties: tagProperties(tag),
          },
        },
      ]),
    );
  }

  get tags(): readonly TagDefinition[] {
    return [...this.definitions.values()].map((d) => d.definition);
  }

  /** Tags left out at start, with the reason (also logged once each). */
  get problems(): readonly TagProblem[] {
    return this.problemList;
  }

  /** True between a successful start() and loss or stop(). */
  get isConnected(): boolean {
    return this.run !== undefined && !this.run.closed && !this.run.lost && this.run.subscription !== undefined;
  }

  async start(sink: TagSink): Promise<void> {
    await this.stop();
    const starting = this.connect(sink);
    this.starting = starting;
    try {
      await starting;
    } finally {
      if (this.starting === starting) this.starting = undefined;
    }
  }

  private async connect(sink: TagSink): Promise<void> {
    const run: Run = {
      sink,
      resolved: new Map(),
      closed: false,
      lost: false,
      lastAliveMs: performance.now(),
      pending: [],
      flushScheduled: false,
    };
    this.run = run;
    try {
      run.opened = await openSession(
        {
          endpoint: this.config.endpoint,
          securityMode: this.config.securityMode,
          securityPolicy: this.config.securityPolicy,
          user: this.config.user,
          pkiDir: this.pkiDir,
          connectTimeoutMs: this.config.connectTimeoutMs,
          requestTimeoutMs: this.config.requestTimeoutMs,
          sessionTimeoutMs: this.config.sessionTimeoutMs,
          connectorId: this.id,
        },
        this.log,
      );
      this.throwIfClosed(run);
      await this.resolveTags(run);
      this.throwIfClosed(run);
      await this.subscribe(run);
      this.throwIfClosed(run);
      this.watchLiveness(run);
      this.log.info(
        {
          endpoint: this.config.endpoint,
          securityMode: this.config.securityMode,
          securityPolicy: this.config.securityPolicy,
          monitoredItems: run.resolved.size,
          problems: this.config.tags.length - run.resolved.size,
          publishingIntervalMs: run.subscription?.publishingInterval,
        },
        'opcua connector started',
      );
    } catch (err) {
      await this.teardown(run);
      if (this.run === run) this.run = undefined;
      if (err instanceof ConnectorError) {
        this.reportOperatorAction(err);
        throw err;
      }
      throw new ConnectorError(
        'EF_CONNECTOR_UNREACHABLE',
        this.id,
        `cannot start on ${this.config.endpoint}: ${asError(err).message}`,
      );
    }
  }

  async write(tag: string, value: TagValue): Promise<ReadBack | undefined> {
    const entry = this.definitions.get(tag);
    const refuse = (reason: string, retryable = false): ConnectorError =>
      new ConnectorError('EF_CONNECTOR_WRITE', this.id, `write ${tag} refused: ${reason}`, { retryable });
    if (entry === undefined) throw refuse('no such tag');
    if (!entry.config.writable) throw refuse('the tag is not writable (set writable: true in its config)');
    const run = this.run;
    const opened = run?.opened;
    if (run === undefined || opened === undefined || run.closed || run.lost) {
      throw refuse(`not connected to ${this.config.endpoint}`, true);
    }
    const resolved = run.resolved.get(tag);
    if (resolved === undefined) throw refuse('the tag could not be set up at start (see the startup error)');
    if (!resolved.serverWritable) throw refuse(`the node ${resolved.nodeId.toString()} is read-only on the server`);
    let variant;
    try {
      variant = tagValueToVariant(value, resolved.builtIn, resolved.isArray);
    } catch (err) {
      if (err instanceof WriteTypeError) throw new ValueRefusedError(this.id, tag, err.message);
      throw err;
    }
    let status;
    try {
      status = await withDeadline(
        opened.session.write({
          nodeId: resolved.nodeId,
          attributeId: opened.lib.ua.AttributeIds.Value,
          value: { value: variant as never },
        }),
        this.config.requestTimeoutMs,
        () => new Error(`no answer within ${this.config.requestTimeoutMs} ms`),
      );
    } catch (err) {
      throw refuse(`the write request failed: ${asError(err).message}`, true);
    }
    if (!status.isGood()) {
      const retryable =
        /BadTimeout|BadCommunication|BadConnection|BadServerNotConnected|BadSession|BadSecureChannel|BadTooManyOperations|BadResourceUnavailable/.test(
          status.name,
        );
      throw refuse(`the server answered ${status.name} (${status.description})`, retryable);
    }
    this.log.debug({ tag, nodeId: resolved.nodeId.toString() }, 'opcua write done');
    return this.readBack(opened, resolved, value);
  }

  /** The written node's Value read back, compared with what was written (at the node's precision). */
  private async readBack(
    opened: OpenedSession,
    resolved: ResolvedTag,
    written: TagValue,
  ): Promise<ReadBack | undefined> {
    const name = resolved.config.name;
    try {
      const dataValue = await withDeadline(
        opened.session.read({ nodeId: resolved.nodeId, attributeId: opened.lib.ua.AttributeIds.Value }),
        this.config.requestTimeoutMs,
        () => new Error(`no answer within ${this.config.requestTimeoutMs} ms`),
      );
      if (!dataValue.statusCode.isGood()) throw new Error(`the server answered ${dataValue.statusCode.name}`);
      const value = variantToTagValue(dataValue.value, resolved.definition.datatype);
      if (value === undefined) throw new Error('the server returned no value');
      return { value, timestamp: Date.now(), matches: sameValue(written, value, resolved.builtIn) };
    } catch (err) {
      this.log.warn({ tag: name, reason: asError(err).message }, 'written tag could not be read back');
      return undefined;
    }
  }

  async stop(): Promise<void> {
    const run = this.run;
    const starting = this.starting;
    if (run === undefined) return;
    this.run = undefined;
    await this.teardown(run);
    if (starting !== undefined) {
      // A start() in flight notices the stop at its next step and releases what it opened; wait for that.
      await starting.then(
        () => undefined,
        (err: unknown) => this.log.debug({ err: asError(err) }, 'opcua start abandoned by stop'),
      );
    }
  }

  private throwIfClosed(run: Run): void {
    if (run.closed) {
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, 'stopped while starting', { retryable: true });
    }
  }

  /** Releases what the run holds so far; safe to call again (a stop() racing a start() calls it twice). */
  private async teardown(run: Run): Promise<void> {
    run.closed = true;
    if (run.watchdog !== undefined) clearInterval(run.watchdog);
    run.pending = [];
    const opened = run.opened;
    run.opened = undefined;
    // After a loss the server is unreachable: asking it to close the session would only wait out the timeout.
    if (opened !== undefined) await opened.close(closeTimeoutMs, { closeSession: !run.lost });
  }

  /**
   * A start failure only the operator can fix (an untrusted server certificate, a rejected user, a security
   * mode the server lacks) is logged as an error once; the runtime logs the retries themselves.
   */
  private reportOperatorAction(err: ConnectorError): void {
    if (!(err instanceof UntrustedServerError) && err.retryable) return;
    if (this.reported.has(err.message)) return;
    this.reported.add(err.message);
    if (err instanceof UntrustedServerError) {
      this.log.error(
        {
          endpoint: this.config.endpoint,
          thumbprint: err.thumbprint,
          status: err.status,
          rejectedDir: err.rejectedDir,
          trustedDir: err.trustedDir,
        },
        err.message,
      );
    } else {
      this.log.error({ endpoint: this.config.endpoint, ...errorLogFields(err) }, err.message);
    }
  }

  /** Reports problem `reason` for `tag` once per connector, however often the runtime restarts it. */
  private reportProblem(tag: string, reason: string, level: 'error' | 'warn' = 'error'): void {
    const key = `${tag}\u0000${reason}`;
    if (this.reported.has(key)) return;
    this.reported.add(key);
    if (level === 'error') this.problemList.push({ tag, reason });
    this.log[level]({ tag, reason }, `opcua tag ${tag}: ${reason}`);
  }

  /** Finds every tag's NodeId, built-in type, rank and access level; keeps the ones that fit their declaration. */
  private async resolveTags(run: Run): Promise<void> {
    const opened = run.opened!;
    const { ua } = opened.lib;
    const session = opened.session;
    const limits = (run.limits = await readOperationLimits(opened));
    const entries = [...this.definitions.values()];

    // 1. NodeIds: by id (with namespace URIs resolved), or by browse path.
    const nodeIds = new Map<string, NodeId>();
    let namespaces: string[] | undefined;
    if (entries.some((e) => e.config.nodeId?.startsWith('nsu='))) namespaces = await session.readNamespaceArray();
    for (const { config } of entries) {
      if (config.nodeId === undefined) continue;
      try {
        nodeIds.set(config.name, ua.resolveNodeId(withNamespaceIndex(config.nodeId, namespaces)));
      } catch (err) {
        this.reportProblem(config.name, `bad nodeId ${config.nodeId}: ${asError(err).message}`);
      }
    }
    const byPath = entries.filter((e) => e.config.browsePath !== undefined);
    for (const batch of chunks(byPath, limits.translate)) {
      const results = await session.translateBrowsePath(
        batch.map((e) => ua.makeBrowsePath('RootFolder', e.config.browsePath as string)),
      );
      batch.forEach((e, i) => {
        const result = results.at(i);
        const target = result?.targets?.at(0)?.targetId;
        if (result === undefined || !result.statusCode.isGood() || target === undefined) {
          this.reportProblem(
            e.config.name,
            `browse path ${e.config.browsePath} not found (${result?.statusCode.name ?? 'no result'})`,
          );
          return;
        }
        nodeIds.set(e.config.name, ua.resolveNodeId(target.toString()));
      });
    }

    // 2. Attributes: data type, value rank, access levels.
    const named = entries.filter((e) => nodeIds.has(e.config.name));
    const attributes = [
      ua.AttributeIds.DataType,
      ua.AttributeIds.ValueRank,
      ua.AttributeIds.AccessLevel,
      ua.AttributeIds.UserAccessLevel,
      ua.AttributeIds.Description,
    ];
    const perRead = Math.max(1, Math.floor(limits.read / attributes.length));
    const basicTypes = new Map<string, number>();
    const serverProperties = new Map<string, ServerProperties>();
    for (const batch of chunks(named, perRead)) {
      const values = await session.read(
        batch.flatMap((e) => attributes.map((attributeId) => ({ nodeId: nodeIds.get(e.config.name)!, attributeId }))),
      );
      for (let i = 0; i < batch.length; i++) {
        const { config, definition } = batch[i]!;
        const nodeId = nodeIds.get(config.name)!;
        const [dataType, valueRank, accessLevel, userAccessLevel, description] = values.slice(
          i * attributes.length,
          (i + 1) * attributes.length,
        ) as (DataValue | undefined)[];
        if (!dataType!.statusCode.isGood()) {
          const why =
            dataType!.statusCode.name === 'BadAttributeIdInvalid'
              ? 'is not a variable'
              : `cannot be read (${dataType!.statusCode.name})`;
          this.reportProblem(config.name, `node ${nodeId.toString()} ${why}`);
          continue;
        }
        const dataTypeId = dataType!.value.value as NodeId;
        const builtIn = await this.basicType(opened, dataTypeId, basicTypes);
        const rank = valueRank!.statusCode.isGood() ? Number(valueRank!.value.value) : -1;
        const mapped = sparkplugDatatypeFor(builtIn, rank, isArrayDatatype(config.datatype));
        if (mapped === undefined) {
          const shape = rank >= 2 ? `${rank}-dimensional array of ` : rank === 1 ? 'array of ' : '';
          this.reportProblem(
            config.name,
            `node ${nodeId.toString()} is a ${shape}OPC UA ${builtInTypeName(builtIn)}, which has no Sparkplug datatype`,
          );
          continue;
        }
        if (!isCompatibleDatatype(config.datatype, mapped)) {
          this.reportProblem(
            config.name,
            `node ${nodeId.toString()} is ${mapped} (OPC UA ${builtInTypeName(builtIn)}), but the tag declares ${config.datatype}`,
          );
          continue;
        }
        const access = (dv: DataValue | undefined): number => (dv?.statusCode.isGood() ? Number(dv.value.value) : 0);
        const serverWritable = (access(accessLevel) & access(userAccessLevel) & AccessLevelCurrentWrite) !== 0;
        if (config.writable && !serverWritable) {
          this.reportProblem(
            config.name,
            `declared writable, but node ${nodeId.toString()} is read-only for this user on the server; writes will be refused`,
            'warn',
          );
        }
        run.resolved.set(config.name, {
          config,
          definition,
          nodeId,
          builtIn,
          isArray: isArrayDatatype(mapped),
          serverWritable,
        });
        const text = description?.statusCode.isGood()
          ? (description.value.value as { text?: string | null } | null)?.text
          : undefined;
        if (text) serverProperties.set(config.name, { description: text });
      }
    }

    // 3. What the nodes say about themselves, under what the config says. A description, not data: a server
    // that cannot tell leaves the tags running without it.
    try {
      await this.readAnalogProperties(run, serverProperties);
    } catch (err) {
      this.throwIfClosed(run);
      const reason = `engineering units and ranges not read: ${asError(err).message}`;
      if (!this.reported.has(reason)) {
        this.reported.add(reason);
        this.log.warn({ endpoint: this.config.endpoint, reason }, 'opcua tag properties incomplete');
      }
    }
    for (const entry of this.definitions.values()) {
      const fromServer = serverProperties.get(entry.config.name);
      if (fromServer === undefined) continue;
      entry.definition = { ...entry.definition, properties: { ...fromServer, ...tagProperties(entry.config) } };
    }
  }

  /**
   * The EngineeringUnits (EUInformation: its displayName is the unit) and EURange properties of each numeric
   * tag's node, where it has them (an AnalogItem, OPC UA Part 8 §5.3.2), into `into`.
   */
  private async readAnalogProperties(run: Run, into: Map<string, ServerProperties>): Promise<void> {
    const opened = run.opened!;
    const { ua } = opened.lib;
    const limits = run.limits!;
    const numeric = [...run.resolved.values()].filter((t) => isNumericDatatype(t.config.datatype));
    const lookups = numeric.flatMap((tag) =>
      (['EngineeringUnits', 'EURange'] as const).map((property) => ({ tag, property })),
    );
    const found: { name: string; property: 'EngineeringUnits' | 'EURange'; nodeId: NodeId }[] = [];
    for (const batch of chunks(lookups, limits.translate)) {
      const results = await opened.session.translateBrowsePath(
        batch.map((l) => ua.makeBrowsePath(l.tag.nodeId, `.${l.property}`)),
      );
      batch.forEach((l, i) => {
        const target = results[i]?.statusCode.isGood() ? results[i]?.targets?.[0]?.targetId : undefined;
        if (target !== undefined)
          found.push({ name: l.tag.config.name, property: l.property, nodeId: ua.resolveNodeId(target.toString()) });
      });
    }
    for (const batch of chunks(found, limits.read)) {
      const values = await opened.session.read(
        batch.map((f) => ({ nodeId: f.nodeId, attributeId: ua.AttributeIds.Value })),
      );
      batch.forEach((f, i) => {
        const dv = values.at(i);
        const value = dv?.statusCode.isGood() ? (dv.value.value as Record<string, unknown> | null) : null;
        if (value === null || typeof value !== 'object') return;
        const properties = into.get(f.name) ?? {};
        if (f.property === 'EngineeringUnits') {
          const unit = (value.displayName as { text?: string | null } | undefined)?.text;
          if (unit) properties.engUnit = unit;
        } else if (Number.isFinite(value.low) && Number.isFinite(value.high)) {
          properties.engLow = value.low as number;
          properties.engHigh = value.high as number;
        }
        into.set(f.name, properties);
      });
    }
  }

  /** The built-in type behind a DataType NodeId (a subtype such as Duration or an enumeration resolves to its base). */
  private async basicType(opened: OpenedSession, dataTypeId: NodeId, cache: Map<string, number>): Promise<number> {
    if (
      dataTypeId.namespace === 0 &&
      typeof dataTypeId.value === 'number' &&
      dataTypeId.value >= 1 &&
      dataTypeId.value <= 25
    ) {
      return dataTypeId.value;
    }
    const key = dataTypeId.toString();
    const cached = cache.get(key);
    if (cached !== undefined) return cached;
    let builtIn: number = BuiltInType.Null;
    try {
      builtIn = await opened.lib.ua.findBasicDataType(opened.session, dataTypeId);
    } catch (err) {
      this.log.debug({ err: asError(err), dataTypeId: key }, 'opcua data type not resolved');
    }
    cache.set(key, builtIn);
    return builtIn;
  }

  private async subscribe(run: Run): Promise<void> {
    const opened = run.opened!;
    const { ua } = opened.lib;
    const s = this.config.subscription;
    const subscription = await withDeadline(
      opened.session.createSubscription2({
        requestedPublishingInterval: s.publishingIntervalMs,
        requestedMaxKeepAliveCount: s.keepAliveCount,
        requestedLifetimeCount: s.lifetimeCount,
        maxNotificationsPerPublish: s.maxNotificationsPerPublish,
        priority: s.priority,
        publishingEnabled: true,
      }),
      this.config.requestTimeoutMs,
      () => new Error(`CreateSubscription got no answer within ${this.config.requestTimeoutMs} ms`),
    );
    run.subscription = subscription;
    this.watchSession(run);

    // Tags sharing monitoring parameters go in one CreateMonitoredItems call (up to the server's limit).
    const groups = new Map<string, ResolvedTag[]>();
    for (const tag of run.resolved.values()) {
      const key = JSON.stringify([
        tag.config.samplingIntervalMs,
        tag.config.queueSize,
        tag.config.discardOldest,
        tag.config.deadband,
        tag.config.trigger,
      ]);
      const group = groups.get(key);
      if (group === undefined) groups.set(key, [tag]);
      else group.push(tag);
    }
    const limits = run.limits ?? (await readOperationLimits(opened));
    for (const tags of groups.values()) {
      const first = tags[0]!.config;
      const trigger = {
        status: ua.DataChangeTrigger.Status,
        'status-value': ua.DataChangeTrigger.StatusValue,
        'status-value-timestamp': ua.DataChangeTrigger.StatusValueTimestamp,
      }[first.trigger];
      const needsFilter = first.deadband !== undefined || first.trigger !== 'status-value';
      const parameters = {
        samplingInterval: first.samplingIntervalMs ?? -1,
        queueSize: first.queueSize,
        discardOldest: first.discardOldest,
        filter: needsFilter
          ? new ua.DataChangeFilter({
              trigger,
              deadbandType:
                first.deadband === undefined
                  ? ua.DeadbandType.None
                  : first.deadband.type === 'percent'
                    ? ua.DeadbandType.Percent
                    : ua.DeadbandType.Absolute,
              deadbandValue: first.deadband?.value ?? 0,
            })
          : null,
      };
      for (const batch of chunks(tags, limits.monitoredItems)) {
        const group = await withDeadline(
          subscription.monitorItems(
            batch.map((t) => ({ nodeId: t.nodeId, attributeId: ua.AttributeIds.Value })),
            parameters,
            ua.TimestampsToReturn.Both,
          ),
          this.config.requestTimeoutMs,
          () => new Error(`CreateMonitoredItems got no answer within ${this.config.requestTimeoutMs} ms`),
        );
        group.monitoredItems.forEach((item: ClientMonitoredItemBase, i: number) => {
          const tag = batch[i]!;
          const status = item.statusCode as typeof item.statusCode | undefined; // absent from some servers
          if (status !== undefined && !status.isGood()) {
            this.reportProblem(
              tag.config.name,
              `the server refused to monitor node ${tag.nodeId.toString()}: ${status.name} (${status.description})`,
            );
            run.resolved.delete(tag.config.name);
          }
        });
        group.on('changed', (_item: ClientMonitoredItemBase, dataValue: DataValue, index: number) => {
          this.onChange(run, batch[index]!, dataValue);
        });
      }
    }
  }

  private onChange(run: Run, tag: ResolvedTag, dataValue: DataValue): void {
    if (run.closed || run.lost) return;
    run.lastAliveMs = performance.now();
    const name = tag.config.name;
    let quality = qualityOf(dataValue.statusCode);
    let value: TagValue | undefined;
    try {
      value = variantToTagValue(dataValue.value, tag.config.datatype);
    } catch (err) {
      if (!(err instanceof VariantMismatchError)) throw err;
      // The node's type changed under us: shown as a bad value rather than a wrong one.
      this.reportProblem(name, `received a value that does not fit ${tag.config.datatype}: ${err.message}`, 'warn');
      quality = 'bad';
    }
    if (value === undefined) value = this.lastValues.get(name) ?? zeroValue(tag.config.datatype);
    else this.lastValues.set(name, value);
    const timestamp = timeOf(dataValue.sourceTimestamp) ?? timeOf(dataValue.serverTimestamp) ?? Date.now();
    run.pending.push({ name, value, timestamp, quality });
    if (!run.flushScheduled) {
      run.flushScheduled = true;
      // Every change of one publish response is handled in one turn: deliver them together.
      setImmediate(() => this.flush(run));
    }
  }

  private flush(run: Run): void {
    run.flushScheduled = false;
    if (run.pending.length === 0 || run.closed) return;
    const samples = run.pending;
    run.pending = [];
    try {
      run.sink.data(samples);
    } catch (err) {
      this.log.error({ err: asError(err), samples: samples.length }, 'opcua sink rejected samples');
    }
  }

  /** Channel, session and subscription events that mean the device is gone. */
  private watchSession(run: Run): void {
    const opened = run.opened!;
    const subscription = run.subscription!;
    opened.client.on('connection_lost', () => this.lose(run, 'the connection was lost'));
    opened.client.on('close', (err?: Error | null) =>
      this.lose(run, `the channel closed${err ? `: ${err.message}` : ''}`),
    );
    opened.session.on('session_closed', (status: { name?: string } | undefined) =>
      this.lose(run, `the server closed the session (${status?.name ?? 'no status'})`),
    );
    subscription.on('raw_notification', () => {
      // Keep-alives and data both prove the server is publishing.
      run.lastAliveMs = performance.now();
    });
    subscription.on('status_changed', (status: { name: string }) => {
      if (status.name !== 'GoodSubscriptionTransferred') this.lose(run, `the subscription ended (${status.name})`);
    });
    subscription.on('terminated', () => this.lose(run, 'the subscription was terminated'));
    subscription.on('internal_error', (err: Error) => this.lose(run, `subscription error: ${err.message}`));
  }

  /**
   * The server owes a publish response (data or keep-alive) at least every publishing interval × keep-alive
   * count; a half-open link shows up as silence past that, with a margin for latency and scheduling.
   */
  private watchLiveness(run: Run): void {
    const subscription = run.subscription!;
    const keepAliveMs = subscription.publishingInterval * subscription.maxKeepAliveCount;
    const deadlineMs = Math.round(keepAliveMs * 1.5 + 1000);
    run.lastAliveMs = performance.now();
    run.watchdog = setInterval(
      () => {
        const silentMs = performance.now() - run.lastAliveMs;
        if (silentMs > deadlineMs)
          this.lose(run, `no data and no keep-alive for ${silentMs} ms (deadline ${deadlineMs} ms)`);
      },
      Math.max(100, Math.min(1000, Math.round(deadlineMs / 4))),
    );
    run.watchdog.unref();
  }

  private lose(run: Run, reason: string): void {
    if (run.closed || run.lost) return;
    this.flush(run);
    run.lost = true;
    if (run.watchdog !== undefined) clearInterval(run.watchdog);
    const err = new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `lost ${this.config.endpoint}: ${reason}`, {
      retryable: true,
    });
    this.log.warn({ endpoint: this.config.endpoint, reason }, 'opcua connection lost');
    run.sink.lost(err);
  }
}

interface OperationLimits {
  readonly read: number;
  readonly translate: number;
  readonly monitoredItems: number;
}

/** Per-call operation limits (0 or unreadable: no limit announced, so a moderate batch size). */
async function readOperationLimits(opened: OpenedSession): Promise<OperationLimits> {
  const { ua } = opened.lib;
  // Server_ServerCapabilities_OperationLimits_MaxNodesPerRead / …TranslateBrowsePathsToNodeIds / MaxMonitoredItemsPerCall
  const ids = ['i=11705', 'i=11712', 'i=11714'];
  const values = await opened.session.read(ids.map((nodeId) => ({ nodeId, attributeId: ua.AttributeIds.Value })));
  const limit = (dv: DataValue | undefined, fallback: number): number => {
    const n = dv?.statusCode.isGood() ? Number(dv.value.value) : 0;
    return n > 0 ? Math.min(n, fallback) : fallback;
  };
  return { read: limit(values[0], 4000), translate: limit(values[1], 1000), monitoredItems: limit(values[2], 1000) };
}

/** `nsu=<uri>;s=…` → `ns=<index>;s=…` with the server's namespace array. */
function withNamespaceIndex(nodeId: string, namespaces: readonly string[] | undefined): string {
  if (!nodeId.startsWith('nsu=')) return nodeId;
  const separator = nodeId.indexOf(';');
  const uri = nodeId.slice(4, separator);
  const index = namespaces?.indexOf(uri) ?? -1;
  if (index < 0) throw new Error(`the server has no namespace ${uri}`);
  return `ns=${index};${nodeId.slice(separator + 1)}`;
}

function* chunks<T>(items: readonly T[], size: number): Generator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size);
}

/** A value's quality by its status's severity (OPC UA Part 4, 7.39): Uncertain values are usable, Bad ones not. */
function qualityOf(status: StatusCode): TagQuality {
  return status.isGood() ? 'good' : status.isBad() ? 'bad' : 'uncertain';
}

function timeOf(date: Date | null | undefined): number | undefined {
  if (date === null || date === undefined) return undefined;
  const ms = date.getTime();
  // node-opcua reports an absent timestamp as the OPC UA minimum (1601-01-01).
  return Number.isFinite(ms) && ms > 0 ? ms : undefined;
}
