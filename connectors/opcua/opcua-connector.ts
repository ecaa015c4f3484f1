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
import type { ClientSubscription, DataValue, StatusCode } from 'node-opcua-client';
import type { Connector, ReadBack, TagDefinition, TagQuality, TagSample, TagSink, TagValue } from '../contract.js';
import { tagProperties } from '../tag-properties.js';
import { ConnectorError, asError } from '../../src/util/errors.js';
import type { Logger } from '../../src/util/logger.js';
import { openSession, withDeadline, type OpenedSession } from './open-session.js';
import type { OpcuaConnectorConfig, OpcuaTagConfig } from './schema.js';
import { variantToTagValue, VariantMismatchError, zeroValue } from './variants.js';
import { monitorTags } from './monitored-items.js';
import {
  readAnalogProperties,
  readOperationLimits,
  resolveTags,
  type OperationLimits,
  type ResolvedTag,
} from './resolve-tags.js';
import { TagProblems, type TagProblem } from './tag-problems.js';
import { writeRefused, writeTag } from './write-tag.js';

export type { TagProblem } from './tag-problems.js';

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
  private readonly tagProblems: TagProblems;
  /** Last value of each tag, shown with a bad status that carries no value. */
  private readonly lastValues = new Map<string, TagValue>();
  private run: Run | undefined;
  private starting: Promise<void> | undefined;

  constructor(config: OpcuaConnectorConfig, log: Logger, options: OpcuaConnectorOptions) {
    this.config = config;
    this.id = config.id;
    this.log = log;
    this.pkiDir = options.pkiDir;
    this.tagProblems = new TagProblems(log, config.endpoint);
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
    return this.tagProblems.list;
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
        this.tagProblems.operatorAction(err);
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
    const refuse = (reason: string, retryable = false) => writeRefused(this.id, tag, reason, retryable);
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
    const on = { connectorId: this.id, opened, requestTimeoutMs: this.config.requestTimeoutMs, log: this.log };
    return writeTag(on, resolved, value);
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

  /** Resolves every tag's node (see resolve-tags.ts), then completes the tags' properties from the server. */
  private async resolveTags(run: Run): Promise<void> {
    const opened = run.opened!;
    const limits = (run.limits = await readOperationLimits(opened));
    const entries = [...this.definitions.values()];
    const serverProperties = await resolveTags(opened, entries, limits, run.resolved, this.tagProblems, this.log);
    // What the nodes say about themselves, under what the config says. A description, not data: a server that
    // cannot tell leaves the tags running without it.
    try {
      await readAnalogProperties(opened, run.resolved, limits, serverProperties);
    } catch (err) {
      this.throwIfClosed(run);
      this.tagProblems.propertiesIncomplete(`engineering units and ranges not read: ${asError(err).message}`);
    }
    for (const entry of this.definitions.values()) {
      const fromServer = serverProperties.get(entry.config.name);
      if (fromServer === undefined) continue;
      entry.definition = { ...entry.definition, properties: { ...fromServer, ...tagProperties(entry.config) } };
    }
  }

  private async subscribe(run: Run): Promise<void> {
    const opened = run.opened!;
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

    const limits = run.limits ?? (await readOperationLimits(opened));
    await monitorTags(
      opened,
      subscription,
      run.resolved,
      limits,
      this.config.requestTimeoutMs,
      this.tagProblems,
      (tag, dv) => this.onChange(run, tag, dv),
    );
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
      this.tagProblems.tag(name, `received a value that does not fit ${tag.config.datatype}: ${err.message}`, 'warn');
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
