/**
 * Plain topics (`sparkplug.plain`): every tag's value as retained JSON on a topic of its own, for HMIs,
 * historians and scripts on the box that do not speak Sparkplug (docs/architecture.md#plain-topics):
 *
 *   plant1/line4/press-1/temperature  {"value":21.5,"ts":1733050000000,"quality":"good","unit":"°C"}
 *
 * The edge node hands over what it publishes as DBIRTH, DDATA and DDEATH, so both outputs carry the same samples,
 * timestamps and report by exception; a value is published again only when it or its quality changed. A lost
 * device, a stopping node and a start leave the last values, marked `stale` until the tag's next sample. With
 * `writes`, `<topic>/set` writes the tag through the same command path as a DCMD (Commands.onPlainWrite), which
 * also refuses, audited, a `/set` of a read-only tag or of a device or tag the node does not have; the broker's
 * ACL check of the publish decides who may.
 */
import type { TagDatatype, TagValue } from '../../connectors/contract.js';
import type { Broker } from '../broker/broker.js';
import type { Message, PublishProperties } from '../protocol/message.js';
import { Origins, createMessage } from '../protocol/message.js';
import { asError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { Device } from './device.js';
import { hasChanged } from './device.js';
import type { MetricOut } from './payload.js';
import { Quality } from './payload.js';
import type { PlainCommand } from './plain-value.js';
import { decodePlainCommand, plainJson } from './plain-value.js';
import type { PlainTopicsConfig } from './schema.js';

/** The origin of plain topic messages: a local publisher of its own, apart from the edge node. */
export const PLAIN_ORIGIN = Origins.plainTopics;

const SET = '/set';
/**
 * The end of a value this class published (`publish`): its quality, and the unit after it, a JSON string. Only the
 * quality is rewritten when a value of the last run is marked stale: the value's text stays exactly as it was.
 */
const QUALITY_TAIL = /,"ts":\d+,"quality":"(good|bad|stale)"((?:,"unit":"(?:[^"\\]|\\.)*")?)}$/;
/** MQTT 5 subscribers learn what the payload is. */
const JSON_PROPERTIES: PublishProperties = { payloadFormatIndicator: true, contentType: 'application/json' };

export interface PlainTopicsOptions {
  readonly config: PlainTopicsConfig;
  readonly broker: Pick<Broker, 'publish' | 'subscribe'>;
  /** Applies a `/set` write (Commands.onPlainWrite). */
  readonly write: (msg: Message, deviceId: string, tag: string, command: PlainCommand) => void;
  readonly log: Logger;
}

/** One tag's plain topic and what it last said there. */
interface PlainTag {
  readonly device: Device;
  readonly deviceId: string;
  readonly name: string;
  readonly datatype: TagDatatype;
  readonly topic: string;
  value: TagValue | null;
  quality: string | undefined;
}

export class PlainTopics {
  private readonly config: PlainTopicsConfig;
  private readonly broker: Pick<Broker, 'publish' | 'subscribe'>;
  private readonly write: PlainTopicsOptions['write'];
  private readonly log: Logger;
  /** By alias (unique across the node): DDATA metrics carry the alias alone. */
  private readonly byAlias = new Map<number, PlainTag>();
  /** By device, its tags by name: a Template instance's members carry names. */
  private readonly byDevice = new Map<string, { readonly tags: ReadonlyMap<string, PlainTag> }>();
  /** `/set` topic → tag. */
  private readonly setTargets = new Map<string, PlainTag>();
  /**
   * With `writes`, the `/set` subscriptions: the template with `+` for each level of a device id or tag name, one
   * filter per number of levels a tag name spans, with how many tags use it. They also catch `/set` topics of
   * devices and tags the node does not have, so that those are refused and audited like a DCMD.
   */
  private readonly setFilters = new Map<string, { tags: number; readonly unsubscribe: () => void }>();
  /** A `/set` topic of the template: the device id and tag name it names (by `setNames`' group numbers). */
  private readonly setPattern: RegExp;
  private readonly setNames: { readonly device: number; readonly tag: number };

  constructor(options: PlainTopicsOptions) {
    this.config = options.config;
    this.broker = options.broker;
    this.write = options.write;
    this.log = options.log;
    const parts = this.config.topic.split(/(\{device\}|\{tag\})/);
    const placeholders = parts.filter((p) => p === '{device}' || p === '{tag}');
    this.setNames = { device: placeholders.indexOf('{device}') + 1, tag: placeholders.indexOf('{tag}') + 1 };
    const source = parts.map((p) =>
      p === '{device}' ? '([^/]+)' : p === '{tag}' ? '(.+)' : p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'),
    );
    this.setPattern = new RegExp(`^${source.join('')}${SET}$`);
  }

  /**
   * Takes a device's tags and, with `writes`, their `/set` topics. A tag's value retained from before (the last
   * run: a crash could not mark it stale) says `stale` until its first sample.
   */
  addDevice(device: Device): void {
    const tags = new Map<string, PlainTag>();
    for (const [name, def] of device.definitions) {
      const tag: PlainTag = {
        device,
        deviceId: device.id,
        name,
        datatype: def.datatype,
        topic: this.topicOf(device.id, name),
        value: null,
        quality: undefined,
      };
      tags.set(name, tag);
      this.markRetainedStale(tag);
      const alias = device.aliases.get(name);
      if (alias !== undefined) this.byAlias.set(alias, tag);
      if (!this.config.writes) continue;
      this.setTargets.set(tag.topic + SET, tag);
      this.useSetFilter(name, +1);
    }
    this.byDevice.set(device.id, { tags });
  }

  /** Forgets a removed device (its retained values stay, stale since its DDEATH). */
  removeDevice(id: string): void {
    const entry = this.byDevice.get(id);
    if (!entry) return;
    this.byDevice.delete(id);
    for (const tag of entry.tags.values()) {
      if (this.setTargets.delete(tag.topic + SET)) this.useSetFilter(tag.name, -1);
    }
    for (const [alias, tag] of this.byAlias) if (tag.deviceId === id) this.byAlias.delete(alias);
  }

  /**
   * The node stops: no more writes, and every value goes stale (a graceful stop says so; a crash cannot, and the
   * next start does). Resolves once the stale values are stored, so they outlive the process.
   */
  async close(timestamp: number): Promise<void> {
    for (const filter of this.setFilters.values()) filter.unsubscribe();
    this.setFilters.clear();
    this.setTargets.clear();
    const published: Promise<unknown>[] = [];
    for (const { tags } of this.byDevice.values())
      for (const tag of tags.values()) published.push(this.markStale(tag, timestamp));
    await Promise.all(published);
  }

  /** A DBIRTH's or DDATA's metrics of `deviceId`: each tag whose value or quality changed. */
  metrics(deviceId: string, metrics: readonly MetricOut[]): void {
    for (const m of metrics) {
      if (m.template === undefined) {
        if (m.alias !== undefined) this.sample(this.byAlias.get(m.alias), m);
        continue;
      }
      // A Template instance (`sparkplug.templates`): its members are the device's tags, by name.
      const tags = this.byDevice.get(deviceId)?.tags;
      for (const member of m.template.members)
        if (member.name !== undefined) this.sample(tags?.get(member.name), member);
    }
  }

  /** A DDEATH (or the end of the node's session): the device's last values stay, marked stale. */
  deviceDead(deviceId: string, timestamp: number): void {
    for (const tag of this.byDevice.get(deviceId)?.tags.values() ?? []) void this.markStale(tag, timestamp);
  }

  // -----------------------------------------------------------------------------------------------------------

  private sample(tag: PlainTag | undefined, m: MetricOut): void {
    if (tag === undefined) return;
    const value = m.value ?? null;
    const quality =
      m.quality === Quality.Bad
        ? 'bad'
        : m.quality === Quality.Stale
          ? 'stale'
          : m.quality === Quality.Uncertain
            ? 'uncertain'
            : 'good';
    // A DBIRTH repeats values (a rebirth); only what changed goes out, as with the Sparkplug data.
    if (tag.quality === quality && (value === null ? tag.value === null : !hasChanged(tag.value, value, undefined)))
      return;
    void this.publish(tag, value, m.timestamp ?? Date.now(), quality);
  }

  /** A tag's last value again, stale, unless it is stale already or was never published; resolves once stored. */
  private markStale(tag: PlainTag, timestamp: number): Promise<unknown> {
    if (tag.quality === undefined || tag.quality === 'stale') return Promise.resolve();
    return this.publish(tag, tag.value, timestamp, 'stale');
  }

  private topicOf(deviceId: string, tag: string): string {
    // A function, not a replacement string: `$&` in a tag name is text, not a pattern.
    return this.config.topic.replace(/\{device\}|\{tag\}/g, (placeholder) =>
      placeholder === '{device}' ? deviceId : tag,
    );
  }

  private publish(tag: PlainTag, value: TagValue | null, timestamp: number, quality: string): Promise<unknown> {
    tag.value = value;
    tag.quality = quality;
    // The unit is looked up now: an OPC UA device learns its tags' units from the server at each start.
    const unit = tag.device.definitions.get(tag.name)?.properties.engUnit;
    const unitJson = unit === undefined ? '' : `,"unit":${JSON.stringify(unit)}`;
    return this.send(tag.topic, `{"value":${plainJson(value)},"ts":${timestamp},"quality":"${quality}"${unitJson}}`);
  }

  private send(topic: string, json: string): Promise<unknown> {
    const msg = createMessage({
      topic,
      payload: Buffer.from(json),
      qos: this.config.qos,
      retain: true,
      properties: JSON_PROPERTIES,
      origin: PLAIN_ORIGIN,
    });
    return this.broker.publish(msg).catch(this.publishFailed);
  }

  /**
   * The value retained on a tag's topic, if it says `good` or `bad` before this run sampled the tag, again with
   * quality `stale` and the time of now; the value and unit as they were. The broker hands an in-process subscriber
   * the retained message while it subscribes.
   */
  private markRetainedStale(tag: PlainTag): void {
    const unsubscribe = this.broker.subscribe(tag.topic, { qos: 0, origin: PLAIN_ORIGIN }, (msg) => {
      const text = msg.payload.toString('utf8');
      const tail = QUALITY_TAIL.exec(text);
      if (!msg.retain || tail === null || tail[1] === 'stale' || tag.quality !== undefined) return;
      void this.send(tag.topic, `${text.slice(0, tail.index)},"ts":${Date.now()},"quality":"stale"${tail[2]}}`);
    });
    unsubscribe();
  }

  private readonly publishFailed = (err: unknown): void => {
    this.log.warn({ err: asError(err) }, 'plain topic value not published');
  };

  /** One more (+1) or one less (-1) tag whose `/set` topic `filter` covers: subscribed while some tag uses it. */
  private useSetFilter(tagName: string, delta: 1 | -1): void {
    const levels = this.topicOf('\0', tagName.replace(/[^/]+/g, '\0')).split('/');
    const filter = levels.map((level) => (level.includes('\0') ? '+' : level)).join('/') + SET;
    const entry = this.setFilters.get(filter);
    if (entry !== undefined) {
      entry.tags += delta;
      if (entry.tags > 0) return;
      entry.unsubscribe();
      this.setFilters.delete(filter);
      return;
    }
    if (delta < 0) return;
    // Retain handling 2: a retained `/set` is applied once, when published, never again at a restart.
    const unsubscribe = this.broker.subscribe(
      filter,
      { qos: 1, origin: PLAIN_ORIGIN, noLocal: true, retainHandling: 2 },
      this.onSet,
    );
    this.setFilters.set(filter, { tags: 1, unsubscribe });
  }

  private readonly onSet = (msg: Message): void => {
    const tag = this.setTargets.get(msg.topic);
    if (tag !== undefined) {
      this.write(msg, tag.deviceId, tag.name, decodePlainCommand(tag.datatype, msg.payload));
      return;
    }
    // A device or tag this node does not have: refused and audited with what was sent (as text: no datatype).
    const names = this.setPattern.exec(msg.topic);
    if (names !== null)
      this.write(msg, names[this.setNames.device], names[this.setNames.tag], { value: msg.payload.toString('utf8') });
  };
}
