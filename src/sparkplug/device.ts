/**
 * Runs one connector as one Sparkplug device: starts it, turns its samples into DBIRTH/DDATA (report by
 * exception with an optional deadband per tag, bad readings as null with quality BAD and uncertain ones with
 * their value and quality UNCERTAIN, never a stale value passed off as good), publishes DDEATH when the device is lost, and restarts it after a decorrelated-jitter backoff.
 * Connectors never retry: backoff lives here, so all connectors behave the same (docs/architecture.md#connectors-never-retry).
 */
import type { Connector, ReadBack, TagDefinition, TagQuality, TagSample, TagValue } from '../../connectors/contract.js';
import { Backoff } from '../util/backoff.js';
import { asError, errorLogFields } from '../util/errors.js';
import type { ConnectorError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { BirthProperties, MetricDatatype, MetricOut } from './payload.js';
import { Quality } from './payload.js';

/** What a device needs from its edge node. */
export interface DeviceHost {
  /** True while the node's local session is born: DBIRTH/DDATA may go out. */
  readonly born: boolean;
  /** A strictly increasing wall-clock timestamp, for births and deaths (they identify a device's life). */
  uniqueTimestamp(): number;
  publishDeviceBirth(device: Device, timestamp: number, metrics: MetricOut[]): void;
  publishDeviceData(device: Device, metrics: MetricOut[]): void;
  publishDeviceDeath(device: Device, timestamp: number): void;
  /** A device came up or went down, or its first start settled (node metrics count them; see `firstStartPending`). */
  deviceStateChanged(device: Device): void;
}

export interface DeviceOptions {
  readonly connector: Connector;
  /** Metric name → alias, unique across the node. */
  readonly aliases: ReadonlyMap<string, number>;
  readonly host: DeviceHost;
  /**
   * With `sparkplug.templates`, the device profile this device instantiates: its tags travel as the members of
   * one Template instance metric named after the profile (docs/architecture.md#sparkplug-templates).
   */
  readonly template?: string;
  readonly backoff: { readonly minDelayMs: number; readonly maxDelayMs: number };
  readonly log: Logger;
}

export interface Reading {
  value: TagValue;
  timestamp: number;
  quality: TagQuality;
}

/** What host applications were told last: a bad or stale metric as null, quality `bad`. */
interface Published {
  value: TagValue | null;
  quality: TagQuality;
}

/** The `Quality` property of a reading that is not good (a good one needs none, as Ignition reads it). */
const QUALITY_CODES = { good: undefined, uncertain: Quality.Uncertain, bad: Quality.Bad } as const;

export type DeviceState = 'stopped' | 'starting' | 'online' | 'backoff';

export interface DeviceStats {
  readonly state: DeviceState;
  readonly births: number;
  readonly deaths: number;
  readonly samples: number;
  readonly changes: number;
  readonly restarts: number;
}

export class Device {
  readonly id: string;
  readonly connector: Connector;
  /** The connector's tags by name, read again at each start: their properties may come from the device. */
  private defs: ReadonlyMap<string, TagDefinition>;
  readonly aliases: ReadonlyMap<string, number>;
  /** The profile whose Template this device instantiates, if any. */
  readonly template: string | undefined;
  private readonly names: ReadonlyMap<number, string>;
  private readonly host: DeviceHost;
  private readonly log: Logger;
  private readonly backoff: Backoff;

  private state: DeviceState = 'stopped';
  /** Incremented on every start attempt; callbacks from an older attempt are ignored. */
  private generation = 0;
  private retryTimer: NodeJS.Timeout | undefined;
  private current = new Map<string, Reading>();
  /** The readings from before the device was last lost: the web console shows them, marked stale, until read again. */
  private readonly lastKnown = new Map<string, Reading>();
  /** What host applications were last told (birth or data), for report by exception. */
  private published = new Map<string, Published>();
  private bornTs: number | undefined;
  /** Data arrived since the last (re)start: a device is born with values, when it first answers. */
  private answered = false;
  /** Started, and neither answered nor failed yet since: see `firstStartPending`. */
  private firstStart = false;
  /** The last failure was logged; the next success logs the recovery. */
  private failureLogged = false;
  private counters = { births: 0, deaths: 0, samples: 0, changes: 0, restarts: 0 };
  /** For the web console: when `online` last changed, and the last failure. */
  private changedAtMs = Date.now();
  private lastFailure: string | undefined;

  constructor(options: DeviceOptions) {
    this.connector = options.connector;
    this.id = options.connector.id;
    this.defs = byName(options.connector.tags);
    this.aliases = options.aliases;
    this.template = options.template;
    this.names = new Map([...options.aliases].map(([name, alias]) => [alias, name]));
    this.host = options.host;
    this.log = options.log;
    this.backoff = new Backoff(options.backoff.minDelayMs, options.backoff.maxDelayMs);
  }

  get definitions(): ReadonlyMap<string, TagDefinition> {
    return this.defs;
  }

  /** Connected and answering: it delivered data since it (re)started. */
  get online(): boolean {
    return this.state === 'online' && this.answered;
  }

  /**
   * Started and not yet answered or failed: its DBIRTH may still belong right after the node's births, so the
   * node holds its own NDATA back until this settles [tck-id-payloads-dbirth-order].
   */
  get firstStartPending(): boolean {
    return this.firstStart;
  }

  /** Timestamp of the current DBIRTH (identifies this life of the device), undefined while not born. */
  get birthTimestamp(): number | undefined {
    return this.bornTs;
  }

  get stats(): DeviceStats {
    return { state: this.state, ...this.counters };
  }

  /** Since when the device has been up (or down), and its last failure, for the web console. */
  get condition(): { readonly online: boolean; readonly sinceMs: number; readonly lastError: string | undefined } {
    return { online: this.online, sinceMs: this.changedAtMs, lastError: this.lastFailure };
  }

  /**
   * The last reading of a tag, for the web console: `stale` when it is from before the device was lost and the
   * tag was not read since; undefined when it was never read.
   */
  reading(name: string): { readonly reading: Readonly<Reading>; readonly stale: boolean } | undefined {
    const reading = this.current.get(name);
    if (reading !== undefined) return { reading, stale: false };
    const last = this.lastKnown.get(name);
    return last === undefined ? undefined : { reading: last, stale: true };
  }

  /** The name of the metric with this alias, if it is one of ours. */
  nameOf(alias: number): string | undefined {
    return this.names.get(alias);
  }

  start(): void {
    if (this.state !== 'stopped') return;
    this.firstStart = true;
    this.attempt();
  }

  /** Stops the connector; no DDEATH (a stopping node's NDEATH covers its devices). */
  async stop(): Promise<void> {
    this.halt();
    await this.stopConnector();
  }

  /**
   * Stops the connector for good while the node lives on (a reload removed or reconfigured it): a DDEATH if the
   * device is born in the node's session, then the node's device count, then the connector's release. Samples
   * the connector still delivers are ignored from the first line on, so nothing follows the DDEATH.
   */
  async retire(): Promise<void> {
    const wasBorn = this.bornTs !== undefined;
    const changed = this.online || this.firstStart;
    this.halt();
    if (wasBorn && this.host.born) {
      this.counters.deaths++;
      this.host.publishDeviceDeath(this, this.host.uniqueTimestamp());
    }
    if (changed) this.host.deviceStateChanged(this);
    await this.stopConnector();
  }

  /**
   * Publishes a DBIRTH with every metric's current value (the node was just born, or reborn). No-op while the
   * device has not answered yet: it is born when it first does.
   */
  birth(): void {
    if (!this.online || !this.host.born) return;
    const timestamp = this.host.uniqueTimestamp();
    const metrics: MetricOut[] = [];
    for (const [name, def] of this.definitions) {
      const reading = this.current.get(name);
      const alias = this.memberOrAlias(name);
      if (reading === undefined) {
        // Never read (e.g. a connector that reports items one by one): known, but no value yet.
        metrics.push({
          name,
          alias,
          datatype: def.datatype,
          timestamp,
          value: null,
          quality: Quality.Stale,
          properties: birthProperties(def),
        });
        this.published.set(name, { value: null, quality: 'bad' });
        continue;
      }
      metrics.push({
        name,
        alias,
        datatype: def.datatype,
        timestamp: reading.timestamp,
        value: reading.quality === 'bad' ? null : reading.value,
        quality: QUALITY_CODES[reading.quality],
        properties: birthProperties(def),
      });
      this.published.set(name, { value: reading.quality === 'bad' ? null : reading.value, quality: reading.quality });
    }
    this.bornTs = timestamp;
    this.counters.births++;
    this.host.publishDeviceBirth(this, timestamp, this.asInstance(metrics, timestamp, true));
  }

  /** The node's session ended (NDEATH): the device is no longer born, without a DDEATH of its own. */
  unborn(): void {
    this.bornTs = undefined;
  }

  /**
   * The birth metrics for an upstream session: the values host applications were last told locally (so the
   * DDATA that follows in the outbox applies on top of them), without changing the local state.
   */
  birthMetrics(): MetricOut[] {
    const metrics: MetricOut[] = [];
    for (const [name, def] of this.definitions) {
      const pub = this.published.get(name);
      const reading = this.current.get(name);
      const timestamp = reading?.timestamp ?? Date.now();
      const alias = this.memberOrAlias(name);
      const properties = birthProperties(def);
      if (!pub)
        metrics.push({
          name,
          alias,
          datatype: def.datatype,
          timestamp,
          value: null,
          quality: Quality.Stale,
          properties,
        });
      else
        metrics.push({
          name,
          alias,
          datatype: def.datatype,
          timestamp,
          value: pub.value,
          quality: QUALITY_CODES[pub.quality],
          properties,
        });
    }
    return this.asInstance(metrics, Date.now(), true);
  }

  /**
   * The NBIRTH's Template definition of this device's profile: every member with its datatype and properties,
   * no values [tck-id-payloads-template-definition-members]; undefined for a device that is no template instance.
   */
  templateDefinition(): MetricOut | undefined {
    if (this.template === undefined) return undefined;
    const members: MetricOut[] = [];
    for (const [name, def] of this.definitions)
      members.push({ name, datatype: def.datatype, properties: birthProperties(def) });
    return { name: this.template, datatype: 'Template', template: { isDefinition: true, members } };
  }

  /**
   * Writes a tag through the connector (DCMD) and publishes the value read back from the device, not the one
   * commanded, past the deadband (a host waits for this confirmation); rejects with the connector's error.
   */
  async write(name: string, value: TagValue): Promise<ReadBack | undefined> {
    const readBack = await this.connector.write(name, value);
    if (readBack === undefined || this.state !== 'online' || !this.answered) return readBack;
    const def = this.definitions.get(name);
    const change =
      def &&
      this.change({ name, value: readBack.value, timestamp: readBack.timestamp, quality: 'good' }, def, undefined);
    if (change && this.host.born) {
      this.counters.changes++;
      this.host.publishDeviceData(this, this.asInstance([change], readBack.timestamp, false));
    }
    return readBack;
  }

  /** The declared datatype of a metric (or of a member of this device's Template instance), by name or alias. */
  datatypeOf(metric: { name?: string; alias?: number }): MetricDatatype | undefined {
    const name = metric.name ?? (metric.alias === undefined ? undefined : this.names.get(metric.alias));
    if (name !== undefined && name === this.template) return 'Template';
    return name === undefined ? undefined : this.definitions.get(name)?.datatype;
  }

  // -----------------------------------------------------------------------------------------------------------

  /** A tag's alias in a birth, or none when it is a Template member (only the instance metric has one). */
  private memberOrAlias(name: string): number | undefined {
    return this.template === undefined ? this.aliases.get(name) : undefined;
  }

  /**
   * The metrics as they go out: unchanged, or as the members of this device's Template instance. A birth's
   * instance has every member [tck-id-payloads-template-instance-members-birth]; a DDATA's only the changed
   * ones [tck-id-payloads-template-instance-members-data]. DATA names the instance by its alias alone.
   */
  private asInstance(metrics: MetricOut[], timestamp: number, birth: boolean): MetricOut[] {
    if (this.template === undefined) return metrics;
    const template = { isDefinition: false, ref: this.template, members: metrics } as const;
    const alias = this.aliases.get(this.template);
    if (birth) return [{ name: this.template, alias, datatype: 'Template', timestamp, template }];
    return [{ alias, valueType: 'Template', timestamp, template }];
  }

  /** Ends the current attempt: callbacks of the running connector and a pending retry no longer act. */
  private halt(): void {
    this.generation++;
    this.state = 'stopped';
    this.bornTs = undefined;
    this.answered = false;
    this.firstStart = false;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
  }

  private attempt(): void {
    const generation = ++this.generation;
    this.state = 'starting';
    this.connector
      .start({
        data: (samples) => {
          if (generation === this.generation) this.onData(samples);
        },
        lost: (err) => {
          if (generation === this.generation) this.onLost(err);
        },
      })
      .then(
        () => {
          if (generation !== this.generation) return;
          // Some connectors deliver their first samples only after start(); the device is up either way.
          if (this.state === 'starting') this.goOnline();
        },
        (err: unknown) => {
          if (generation !== this.generation) return;
          this.onStartFailed(err);
        },
      );
  }

  /** Connected; the birth waits for the first data (a DBIRTH carries values). */
  private goOnline(): void {
    this.state = 'online';
    this.defs = byName(this.connector.tags);
    this.backoff.reset();
    if (this.failureLogged) {
      this.failureLogged = false;
      this.log.info('device reachable again');
    } else {
      this.log.info('device connected');
    }
    if (this.current.size > 0) this.firstAnswer();
  }

  private firstAnswer(): void {
    this.answered = true;
    this.changedAtMs = Date.now();
    this.firstStart = false;
    this.birth();
    // After the DBIRTH: node data never comes between a device's birth and its data.
    this.host.deviceStateChanged(this);
  }

  private onData(samples: readonly TagSample[]): void {
    this.counters.samples += samples.length;
    if (this.state === 'starting' || (this.state === 'online' && !this.answered)) {
      for (const s of samples) this.current.set(s.name, { value: s.value, timestamp: s.timestamp, quality: s.quality });
      if (this.state === 'starting') this.goOnline();
      else this.firstAnswer();
      return;
    }
    if (this.state !== 'online') return;
    if (this.bornTs === undefined && this.host.born) {
      // Not born yet in this node session (the node was just born, or gated): the birth carries these values.
      for (const s of samples) this.current.set(s.name, { value: s.value, timestamp: s.timestamp, quality: s.quality });
      this.birth();
      return;
    }
    const changes: MetricOut[] = [];
    for (const s of samples) {
      const def = this.definitions.get(s.name);
      if (!def) continue; // a connector bug; never publish a metric the birth did not declare
      const change = this.change(s, def, def.deadband);
      if (change) changes.push(change);
    }
    if (changes.length > 0 && this.host.born) {
      this.counters.changes += changes.length;
      this.host.publishDeviceData(this, this.asInstance(changes, changes[0].timestamp as number, false));
    }
  }

  /** Records a sample; the DDATA metric to publish when it changes what hosts were told (report by exception). */
  private change(s: TagSample, def: TagDefinition, deadband: number | undefined): MetricOut | undefined {
    this.current.set(s.name, { value: s.value, timestamp: s.timestamp, quality: s.quality });
    if (this.bornTs === undefined) return undefined;
    const pub = this.published.get(s.name);
    // A Template member is named and typed: members have no alias of their own.
    const member = this.template !== undefined;
    const name = member ? s.name : undefined;
    const alias = member ? undefined : this.aliases.get(s.name);
    const datatype = member ? def.datatype : undefined;
    if (s.quality === 'bad') {
      if (pub && pub.quality === 'bad' && pub.value === null) return undefined;
      this.published.set(s.name, { value: null, quality: 'bad' });
      return {
        name,
        alias,
        datatype,
        valueType: def.datatype,
        timestamp: s.timestamp,
        value: null,
        quality: Quality.Bad,
      };
    }
    if (pub && pub.quality === s.quality && !hasChanged(pub.value, s.value, deadband)) return undefined;
    this.published.set(s.name, { value: s.value, quality: s.quality });
    return {
      name,
      alias,
      datatype,
      valueType: def.datatype,
      timestamp: s.timestamp,
      value: s.value,
      // Say GOOD explicitly when leaving BAD/STALE/UNCERTAIN: host applications keep the last quality they saw.
      quality: s.quality === 'uncertain' ? Quality.Uncertain : pub && pub.quality !== 'good' ? Quality.Good : undefined,
    };
  }

  private onLost(err: ConnectorError): void {
    if (this.state !== 'online' && this.state !== 'starting') return;
    const wasBorn = this.bornTs !== undefined;
    const changed = this.online || this.firstStart;
    this.state = 'backoff';
    this.firstStart = false;
    this.bornTs = undefined;
    this.answered = false;
    this.published.clear();
    for (const [name, reading] of this.current) this.lastKnown.set(name, reading);
    this.current.clear();
    this.lastFailure = err.message;
    this.changedAtMs = Date.now();
    if (wasBorn && this.host.born) {
      this.counters.deaths++;
      this.host.publishDeviceDeath(this, this.host.uniqueTimestamp());
    }
    if (changed) this.host.deviceStateChanged(this);
    const retryInMs = this.backoff.next();
    this.failureLogged = true;
    const cause = errorLogFields(err);
    this.log.warn({ ...cause, retryInMs }, `device lost (${cause.reason})`);
    const generation = ++this.generation;
    void this.stopConnector().then(() => {
      if (generation === this.generation) this.scheduleRetry(retryInMs);
    });
  }

  private onStartFailed(err: unknown): void {
    const retryInMs = this.backoff.next();
    this.lastFailure = asError(err).message;
    const cause = errorLogFields(err);
    if (!this.failureLogged) {
      this.failureLogged = true;
      this.log.warn({ ...cause, retryInMs }, `device unreachable; retrying (${cause.reason})`);
    } else {
      this.log.debug({ ...cause, retryInMs }, `device still unreachable (${cause.reason})`);
    }
    this.state = 'backoff';
    if (this.firstStart) {
      this.firstStart = false;
      this.host.deviceStateChanged(this);
    }
    const generation = this.generation;
    void this.stopConnector().then(() => {
      if (generation === this.generation) this.scheduleRetry(retryInMs);
    });
  }

  private scheduleRetry(delayMs: number): void {
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      if (this.state !== 'backoff') return;
      this.counters.restarts++;
      this.attempt();
    }, delayMs);
    this.retryTimer.unref();
  }

  private async stopConnector(): Promise<void> {
    try {
      await this.connector.stop();
    } catch (err) {
      // stop() must release what it can; a failure here is logged and the restart goes ahead.
      this.log.warn({ err: asError(err) }, 'connector stop failed');
    }
  }
}

function byName(tags: readonly TagDefinition[]): ReadonlyMap<string, TagDefinition> {
  return new Map(tags.map((t) => [t.name, t]));
}

/** A tag's metric properties in a birth (docs/architecture.md#tag-properties): what it means, and whether hosts may write it. */
function birthProperties(def: TagDefinition): BirthProperties {
  const { engUnit, engLow, engHigh, description } = def.properties;
  return { engUnit, engLow, engHigh, documentation: description, readOnly: !def.writable };
}

/** Report by exception: has `next` moved away from what was published (by at least `deadband`)? */
export function hasChanged(previous: TagValue | null, next: TagValue, deadband: number | undefined): boolean {
  if (previous === null) return true;
  if (typeof previous === 'number' && typeof next === 'number') {
    if (Number.isNaN(previous) && Number.isNaN(next)) return false;
    if (deadband !== undefined && deadband > 0) return !(Math.abs(next - previous) < deadband);
    return previous !== next;
  }
  if (typeof previous === 'bigint' && typeof next === 'bigint') {
    if (deadband !== undefined && deadband > 0) {
      const diff = next > previous ? next - previous : previous - next;
      return Number(diff) >= deadband;
    }
    return previous !== next;
  }
  if (Buffer.isBuffer(previous) && Buffer.isBuffer(next)) return !previous.equals(next);
  if (Array.isArray(previous) && Array.isArray(next)) {
    return previous.length !== next.length || previous.some((v, i) => v !== next[i]);
  }
  return previous !== next;
}
