/**
 * Commands from host applications: NCMD (`Node Control/Rebirth`, debounced) and DCMD (writes to device tags),
 * each checked against the metric it names and recorded in the audit log with who sent it. A command that cannot
 * apply (unknown device or metric, read-only metric, a value that does not fit the datatype) is refused, counted
 * and audited; nothing is narrowed or guessed.
 */
import type { TagDatatype, TagValue } from '../../connectors/contract.js';
import { ValueRefusedError } from '../../connectors/contract.js';
import type { Message } from '../protocol/message.js';
import { asError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { commandValueProblem } from './command-value.js';
import type { Device } from './device.js';
import type { MetricIn } from './payload.js';
import { decodePayload } from './payload.js';
import { parseTopic } from './topics.js';

export const REBIRTH = 'Node Control/Rebirth';

/** What the audit log says of a command's sender besides its client id (`who`). */
export interface SenderIdentity {
  readonly user?: string;
  readonly certificate?: string;
  readonly remote?: string;
}

/** A command's sender as its audit lines name it. */
type Sender = SenderIdentity & { readonly who: string };

export interface CommandsOptions {
  readonly rebirthDebounceMs: number;
  /** The node's devices by id (the live map: devices added or removed by a reload count at once). */
  readonly devices: ReadonlyMap<string, Device>;
  /** A node metric by name or alias, with its datatype; undefined when the node has no such metric. */
  readonly nodeMetric: (metric: { name?: string; alias?: number }) => { readonly name: string; readonly datatype: TagDatatype } | undefined;
  /** Answers an accepted rebirth request. */
  readonly rebirth: () => void;
  readonly log: Logger;
  readonly audit: Logger;
  /**
   * Who is behind a command's origin (a local client id): its authenticated user, certificate identity and address,
   * for the audit log; a client id alone is whatever the client chose.
   */
  readonly identify?: (origin: string) => SenderIdentity;
}

export class Commands {
  private lastRebirthMs = -Infinity;
  private readonly counters = { rebirths: 0, commandsRefused: 0, writesOk: 0, writesFailed: 0 };

  constructor(private readonly options: CommandsOptions) {}

  get stats(): { readonly rebirths: number; readonly commandsRefused: number; readonly writesOk: number; readonly writesFailed: number } {
    return { ...this.counters };
  }

  onNodeCommand(msg: Message): void {
    const who = this.sender(msg);
    let metrics: readonly MetricIn[];
    try {
      metrics = decodePayload(msg.payload, (m) => this.options.nodeMetric(m)?.datatype).metrics;
    } catch (err) {
      this.refuse(who, msg.topic, undefined, `undecodable payload: ${asError(err).message}`);
      return;
    }
    for (const metric of metrics) {
      const target = this.options.nodeMetric(metric)?.name ?? metric.name;
      if (target === REBIRTH) {
        if (metric.value === true) this.rebirth(who);
        else this.refuse(who, msg.topic, target, 'Rebirth expects Boolean true');
        continue;
      }
      this.refuse(who, msg.topic, target ?? `alias ${metric.alias}`, target === undefined ? 'unknown metric' : 'read-only metric');
    }
  }

  onDeviceCommand(msg: Message): void {
    const who = this.sender(msg);
    const topic = parseTopic(msg.topic);
    const device = topic?.deviceId !== undefined ? this.options.devices.get(topic.deviceId) : undefined;
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
      if (device.template === undefined) {
        this.command(who, msg.topic, device, name, metric);
        continue;
      }
      // A Template instance's device knows one metric, the instance: each member in it is a write
      // [tck-id-payloads-template-instance-members]; its tags by themselves are no metrics of the device.
      if (name !== device.template || metric.template === undefined) {
        this.refuse(who, msg.topic, name ?? `alias ${metric.alias}`, name === device.template ? 'no Template value' : 'unknown metric');
      } else if (metric.template.isDefinition || (metric.template.ref !== undefined && metric.template.ref !== device.template)) {
        this.refuse(who, msg.topic, name, `not an instance of ${device.template}`);
      } else {
        for (const member of metric.template.members) this.command(who, msg.topic, device, member.name, member, name);
      }
    }
  }

  /** One tag write, checked: `name` is the tag's metric name, or its member name inside `instance`. */
  private command(who: Sender, topic: string, device: Device, name: string | undefined, metric: MetricIn, instance?: string): void {
    const def = name !== undefined ? device.definitions.get(name) : undefined;
    const label = name === undefined ? `alias ${metric.alias}` : instance === undefined ? name : `${instance}/${name}`;
    if (name === undefined || !def) {
      this.refuse(who, topic, label, 'unknown metric');
      return;
    }
    if (!def.writable) {
      this.refuse(who, topic, label, 'read-only metric');
      return;
    }
    const problem = commandValueProblem(def.datatype, metric);
    if (problem) {
      this.refuse(who, topic, label, problem, metric.value);
      return;
    }
    this.write(who, topic, device, name, metric.value as TagValue);
  }

  private write(who: Sender, topic: string, device: Device, name: string, value: TagValue): void {
    device.write(name, value).then(
      (readBack) => {
        this.counters.writesOk++;
        const line = { ...who, device: device.id, metric: name, value: String(value), readBack: readBack && String(readBack.value) };
        if (readBack && !readBack.matches) this.options.audit.warn(line, 'DCMD write accepted, but the device reads back another value');
        else this.options.audit.info(line, 'DCMD write done');
      },
      (err: unknown) => {
        if (err instanceof ValueRefusedError) {
          this.refuse(who, topic, name, err.why, value);
          return;
        }
        this.counters.writesFailed++;
        this.options.audit.warn({ ...who, device: device.id, metric: name, value: String(value), err: asError(err) }, 'DCMD write failed');
      },
    );
  }

  /** NCMD Rebirth: answered once per `rebirthDebounceMs`. */
  private rebirth(who: Sender): void {
    const now = performance.now();
    if (now - this.lastRebirthMs < this.options.rebirthDebounceMs) {
      this.options.log.info({ ...who, debounceMs: this.options.rebirthDebounceMs }, 'rebirth request ignored: one was just answered');
      return;
    }
    this.lastRebirthMs = now;
    this.counters.rebirths++;
    this.options.audit.info(who, 'rebirth requested');
    this.options.rebirth();
  }

  private sender(msg: Message): Sender {
    return { who: msg.origin, ...this.options.identify?.(msg.origin) };
  }

  private refuse(who: Sender, topic: string, metric: string | undefined, why: string, value?: TagValue | null): void {
    this.counters.commandsRefused++;
    this.options.audit.warn({ ...who, topic, metric, value: value == null ? undefined : String(value), why }, 'command refused');
  }
}
