/**
 * Plain topics (`sparkplug.plain`): every tag's value as retained JSON on a topic of its own, for HMIs,
 * historians and scripts on the box that do not speak Sparkplug (docs/architecture.md#plain-topics):
 *
 *   plant1/line4/press-1/temperature  {"value":21.5,"ts":1733050000000,"quality":"good","unit":"°C"}
 *
 * The edge node hands over what it publishes as DBIRTH, DDATA and DDEATH, so both outputs carry the same samples,
 * timestamps and report by exception; a value is published again only when it or its quality changed. A lost
 * device leaves its last values, marked `stale`. With `writes`, `<topic>/set` writes the tag through the same
 * command path as a DCMD (Commands.onPlainWrite); the broker's ACL check of the publish decides who may.
 */
import type { TagDatatype, TagValue } from '../../connectors/contract.js';
import type { Broker } from '../broker/broker.js';
import type { Message, PublishProperties } from '../protocol/message.js';
import { createMessage } from '../protocol/message.js';
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
export const PLAIN_ORIGIN = 'plain-topics';

const SET = '/set';
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
  private readonly byDevice = new Map<string, { readonly tags: ReadonlyMap<string, PlainTag>; readonly unsubscribe: (() => void)[] }>();
  /** `/set` topic → tag. */
  private readonly setTargets = new Map<string, PlainTag>();

  constructor(options: PlainTopicsOptions) {
    this.config = options.config;
    this.broker = options.broker;
    this.write = options.write;
    this.log = options.log;
  }

  /** Takes a device's tags and, with `writes`, subscribes to the `/set` topics of its writable ones. */
  addDevice(device: Device): void {
    const tags = new Map<string, PlainTag>();
    const unsubscribe: (() => void)[] = [];
    for (const [name, def] of device.definitions) {
      const tag: PlainTag = { device, deviceId: device.id, name, datatype: def.datatype, topic: this.topicOf(device.id, name), value: null, quality: undefined };
      tags.set(name, tag);
      const alias = device.aliases.get(name);
      if (alias !== undefined) this.byAlias.set(alias, tag);
      if (!this.config.writes || !def.writable) continue;
      this.setTargets.set(tag.topic + SET, tag);
      // Retain handling 2: a retained `/set` is applied once, when published, never again at a restart.
      unsubscribe.push(
        this.broker.subscribe(tag.topic + SET, { qos: 1, origin: PLAIN_ORIGIN, noLocal: true, retainHandling: 2 }, this.onSet),
      );
    }
    this.byDevice.set(device.id, { tags, unsubscribe });
  }

  /** Forgets a removed device (its retained values stay, stale since its DDEATH). */
  removeDevice(id: string): void {
    const entry = this.byDevice.get(id);
    if (!entry) return;
    this.byDevice.delete(id);
    for (const unsubscribe of entry.unsubscribe.splice(0)) unsubscribe();
    for (const tag of entry.tags.values()) this.setTargets.delete(tag.topic + SET);
    for (const [alias, tag] of this.byAlias) if (tag.deviceId === id) this.byAlias.delete(alias);
  }

  /** Takes no more writes (the node stops); the tags stay known, to go stale with the node's death. */
  close(): void {
    for (const entry of this.byDevice.values()) for (const unsubscribe of entry.unsubscribe.splice(0)) unsubscribe();
    this.setTargets.clear();
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
      for (const member of m.template.members) if (member.name !== undefined) this.sample(tags?.get(member.name), member);
    }
  }

  /** A DDEATH (or the end of the node's session): the device's last values stay, marked stale. */
  deviceDead(deviceId: string, timestamp: number): void {
    for (const tag of this.byDevice.get(deviceId)?.tags.values() ?? []) {
      if (tag.quality !== undefined && tag.quality !== 'stale') this.publish(tag, tag.value, timestamp, 'stale');
    }
  }

  // -----------------------------------------------------------------------------------------------------------

  private sample(tag: PlainTag | undefined, m: MetricOut): void {
    if (tag === undefined) return;
    const value = m.value ?? null;
    const quality = m.quality === Quality.Bad ? 'bad' : m.quality === Quality.Stale ? 'stale' : 'good';
    // A DBIRTH repeats values (a rebirth); only what changed goes out, as with the Sparkplug data.
    if (tag.quality === quality && (value === null ? tag.value === null : !hasChanged(tag.value, value, undefined))) return;
    this.publish(tag, value, m.timestamp ?? Date.now(), quality);
  }

  private topicOf(deviceId: string, tag: string): string {
    // A function, not a replacement string: `$&` in a tag name is text, not a pattern.
    return this.config.topic.replace(/\{device\}|\{tag\}/g, (placeholder) => (placeholder === '{device}' ? deviceId : tag));
  }

  private publish(tag: PlainTag, value: TagValue | null, timestamp: number, quality: string): void {
    tag.value = value;
    tag.quality = quality;
    // The unit is looked up now: an OPC UA device learns its tags' units from the server at each start.
    const unit = tag.device.definitions.get(tag.name)?.properties.engUnit;
    const unitJson = unit === undefined ? '' : `,"unit":${JSON.stringify(unit)}`;
    const payload = Buffer.from(`{"value":${plainJson(value)},"ts":${timestamp},"quality":"${quality}"${unitJson}}`);
    const msg = createMessage({ topic: tag.topic, payload, qos: this.config.qos, retain: true, properties: JSON_PROPERTIES, origin: PLAIN_ORIGIN });
    this.broker.publish(msg).catch(this.publishFailed);
  }

  private readonly publishFailed = (err: unknown): void => {
    this.log.warn({ err: asError(err) }, 'plain topic value not published');
  };

  private readonly onSet = (msg: Message): void => {
    const tag = this.setTargets.get(msg.topic);
    if (tag === undefined) return;
    this.write(msg, tag.deviceId, tag.name, decodePlainCommand(tag.datatype, msg.payload));
  };
}
