/**
 * Commands from host applications: NCMD (`Node Control/Rebirth`, debounced) and DCMD (writes to device tags),
 * and writes from local clients through plain `/set` topics (plain-topics.ts), each checked against the metric it
 * names and recorded in the audit log with who sent it. A command that cannot apply (unknown device or metric,
 * read-only metric, a value that does not fit the datatype) is refused, counted and audited with the value it
 * carried; nothing is narrowed or guessed. Writes to one tag go to the device one after the other, in the order
 * they came (docs/architecture.md#dcmd-to-the-plc).
 */
import type { TagDatatype, TagValue } from '../../connectors/contract.js';
import { ValueRefusedError } from '../../connectors/contract.js';
import type { Message } from '../protocol/message.js';
import { asError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { commandValueProblem } from './command-value.js';
import type { Device } from './device.js';
import type { MetricIn } from './payload.js';
import type { PlainCommand } from './plain-value.js';
import { decodeCommandPayload } from './compression.js';
import { parseTopic } from './topics.js';

export const REBIRTH = 'Node Control/Rebirth';

/**
 * Writes to one tag waiting behind the one under way, at most: beyond, a write is refused. At a PLC's usual
 * 10-50 ms per write and read-back that is seconds of commands, each staler than the last when it runs.
 */
export const MAX_QUEUED_WRITES_PER_TAG = 100;

/** What the audit log says of a command's sender besides its client id (`who`). */
export interface SenderIdentity {
  readonly user?: string;
  readonly certificate?: string;
  readonly remote?: string;
}

/** A command's sender as its audit lines name it. */
export type Sender = SenderIdentity & { readonly who: string };

/** What became of a tag write: done (with the value read back from the device), or refused or failed and why. */
export type WriteOutcome =
  | { readonly ok: true; readonly readBack?: string; readonly matches: boolean }
  | { readonly ok: false; readonly why: string };

/** The last command the node took in (NCMD, DCMD, or a console action), for the console's Sparkplug view. */
export interface LastCommand {
  readonly kind: 'NCMD' | 'DCMD' | 'console';
  readonly atMs: number;
  readonly sender: Sender;
  readonly topic: string;
}

type CommandMetric = Pick<MetricIn, 'alias' | 'datatype' | 'value'>;

/** The path a write came by, as its audit lines name it: a Sparkplug DCMD, a plain topic's `/set`, or the web console. */
type Via = 'DCMD' | 'plain' | 'console';

export interface CommandsOptions {
  readonly rebirthDebounceMs: number;
  /** The node's devices by id (the live map: devices added or removed by a reload count at once). */
  readonly devices: ReadonlyMap<string, Device>;
  /** A node metric by name or alias, with its datatype; undefined when the node has no such metric. */
  readonly nodeMetric: (metric: {
    name?: string;
    alias?: number;
  }) => { readonly name: string; readonly datatype: TagDatatype } | undefined;
  /** Answers an accepted rebirth request. */
  readonly rebirth: () => void;
  /** Why an NCMD or DCMD is not taken at all (the node's session, docs/architecture.md#dcmd-to-the-plc), or undefined. */
  readonly refusal: (msg: Message) => string | undefined;
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
  private last: LastCommand | undefined;
  /** Per tag (`device/name`), the writes taken and not yet done, and the promise of the last of them. */
  private readonly tagWrites = new Map<string, { pending: number; last: Promise<unknown> }>();

  constructor(private readonly options: CommandsOptions) {}

  get stats(): {
    readonly rebirths: number;
    readonly commandsRefused: number;
    readonly writesOk: number;
    readonly writesFailed: number;
  } {
    return { ...this.counters };
  }

  get lastCommand(): LastCommand | undefined {
    return this.last;
  }

  onNodeCommand(msg: Message): void {
    const who = this.sender(msg);
    this.last = { kind: 'NCMD', atMs: Date.now(), sender: who, topic: msg.topic };
    if (this.refused(who, msg)) return;
    let metrics: readonly MetricIn[];
    try {
      metrics = decodeCommandPayload(msg.payload, (m) => this.options.nodeMetric(m)?.datatype).metrics;
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
      this.refuse(
        who,
        msg.topic,
        target ?? `alias ${metric.alias}`,
        target === undefined ? 'unknown metric' : 'read-only metric',
      );
    }
  }

  onDeviceCommand(msg: Message): void {
    const who = this.sender(msg);
    this.last = { kind: 'DCMD', atMs: Date.now(), sender: who, topic: msg.topic };
    if (this.refused(who, msg)) return;
    const topic = parseTopic(msg.topic);
    const device = topic?.deviceId !== undefined ? this.options.devices.get(topic.deviceId) : undefined;
    if (!device) {
      this.refuse(who, msg.topic, undefined, 'unknown device');
      return;
    }
    let metrics: readonly MetricIn[];
    try {
      metrics = decodeCommandPayload(msg.payload, (m) => device.datatypeOf(m)).metrics;
    } catch (err) {
      this.refuse(who, msg.topic, undefined, `undecodable payload: ${asError(err).message}`);
      return;
    }
    for (const metric of metrics) {
      const name = metric.name ?? (metric.alias !== undefined ? device.nameOf(metric.alias) : undefined);
      if (device.template === undefined) {
        void this.apply('DCMD', who, msg.topic, device, name, metric);
        continue;
      }
      // A Template instance's device knows one metric, the instance: each member in it is a write
      // [tck-id-payloads-template-instance-members]; its tags by themselves are no metrics of the device.
      if (name !== device.template || metric.template === undefined) {
        this.refuse(
          who,
          msg.topic,
          name ?? `alias ${metric.alias}`,
          name === device.template ? 'no Template value' : 'unknown metric',
        );
      } else if (
        metric.template.isDefinition ||
        (metric.template.ref !== undefined && metric.template.ref !== device.template)
      ) {
        this.refuse(who, msg.topic, name, `not an instance of ${device.template}`);
      } else {
        for (const member of metric.template.members)
          void this.apply('DCMD', who, msg.topic, device, member.name, member, name);
      }
    }
  }

  /**
   * A tag write asked for in-process (the web console): the same checks, audit lines and read-back as a DCMD on
   * `topic`; resolves with the outcome instead of only auditing it.
   */
  writeTag(who: Sender, topic: string, deviceId: string, name: string, value: TagValue): Promise<WriteOutcome> {
    this.last = { kind: 'console', atMs: Date.now(), sender: who, topic };
    const device = this.options.devices.get(deviceId);
    if (!device) return Promise.resolve(this.refuse(who, topic, undefined, 'unknown device'));
    return this.apply('console', who, topic, device, name, { value });
  }

  /** A rebirth asked for in-process (the web console), debounced like NCMD Rebirth; false when ignored. */
  requestRebirth(who: Sender, topic: string): boolean {
    this.last = { kind: 'console', atMs: Date.now(), sender: who, topic };
    return this.rebirth(who);
  }

  /**
   * A write from a plain `<tag topic>/set` message (decoded by the caller): the same checks, write, read-back and
   * audit lines as a DCMD metric. The broker has already checked the sender's ACL write permission on the topic.
   */
  onPlainWrite(msg: Message, deviceId: string, name: string, command: PlainCommand): void {
    const who = this.sender(msg);
    const device = this.options.devices.get(deviceId);
    if (!device) this.refuse(who, msg.topic, name, 'unknown device', 'why' in command ? undefined : command.value);
    else if ('why' in command) this.refuse(who, msg.topic, name, command.why);
    else void this.apply('plain', who, msg.topic, device, name, { value: command.value });
  }

  /**
   * One tag write, checked, then written: `name` is the tag's metric name (undefined: an alias the device does not
   * know), or its member name inside the Template `instance`.
   */
  private async apply(
    via: Via,
    who: Sender,
    topic: string,
    device: Device,
    name: string | undefined,
    metric: CommandMetric,
    instance?: string,
  ): Promise<WriteOutcome> {
    const def = name !== undefined ? device.definitions.get(name) : undefined;
    const label = name === undefined ? `alias ${metric.alias}` : instance === undefined ? name : `${instance}/${name}`;
    if (name === undefined || !def) return this.refuse(who, topic, label, 'unknown metric', metric.value);
    if (!def.writable) return this.refuse(who, topic, label, 'read-only metric', metric.value);
    const problem = commandValueProblem(def.datatype, metric);
    if (problem) return this.refuse(who, topic, label, problem, metric.value);
    const value = metric.value as TagValue;
    const queued = this.afterWritesTo(`${device.id}/${name}`, () =>
      this.write(via, who, topic, device, name, label, value),
    );
    return (
      queued ??
      this.refuse(who, topic, label, `${MAX_QUEUED_WRITES_PER_TAG} writes to this tag are already waiting`, value)
    );
  }

  /**
   * Runs `write` once every write to the same tag taken before it is done (read-back included), so that a tag ends
   * up holding the last value commanded and each read-back is of its own write; undefined when too many wait.
   */
  private afterWritesTo(tag: string, write: () => Promise<WriteOutcome>): Promise<WriteOutcome> | undefined {
    const queue = this.tagWrites.get(tag) ?? { pending: 0, last: Promise.resolve() };
    if (queue.pending > MAX_QUEUED_WRITES_PER_TAG) return undefined;
    queue.pending++;
    this.tagWrites.set(tag, queue);
    // `write` never rejects: its failures are outcomes.
    const outcome = queue.last.then(write);
    queue.last = outcome.finally(() => {
      if (--queue.pending === 0) this.tagWrites.delete(tag);
    });
    return outcome;
  }

  /** One write and read-back; `label` names the metric in the audit lines (`instance/member` for a Template member). */
  private async write(
    via: Via,
    who: Sender,
    topic: string,
    device: Device,
    name: string,
    label: string,
    value: TagValue,
  ): Promise<WriteOutcome> {
    let readBack: Awaited<ReturnType<Device['write']>>;
    try {
      readBack = await device.write(name, value);
    } catch (err) {
      if (err instanceof ValueRefusedError) return this.refuse(who, topic, label, err.why, value);
      this.counters.writesFailed++;
      this.options.audit.warn(
        { ...who, device: device.id, metric: label, value: String(value), err: asError(err) },
        `${via} write failed`,
      );
      return { ok: false, why: asError(err).message };
    }
    this.counters.writesOk++;
    const line = {
      ...who,
      device: device.id,
      metric: label,
      value: String(value),
      readBack: readBack && String(readBack.value),
    };
    const matches = readBack === undefined || readBack.matches;
    if (!matches) this.options.audit.warn(line, `${via} write accepted, but the device reads back another value`);
    else this.options.audit.info(line, `${via} write done`);
    return { ok: true, readBack: line.readBack, matches };
  }

  /** NCMD Rebirth: answered once per `rebirthDebounceMs`; false when ignored. */
  private rebirth(who: Sender): boolean {
    const now = performance.now();
    if (now - this.lastRebirthMs < this.options.rebirthDebounceMs) {
      this.options.log.info(
        { ...who, debounceMs: this.options.rebirthDebounceMs },
        'rebirth request ignored: one was just answered',
      );
      return false;
    }
    this.lastRebirthMs = now;
    this.counters.rebirths++;
    this.options.audit.info(who, 'rebirth requested');
    this.options.rebirth();
    return true;
  }

  /** Refuses (audited) a command the node does not take at all: true if it did. */
  private refused(who: Sender, msg: Message): boolean {
    const why = this.options.refusal(msg);
    if (why !== undefined) this.refuse(who, msg.topic, undefined, why);
    return why !== undefined;
  }

  private sender(msg: Message): Sender {
    return { who: msg.origin, ...this.options.identify?.(msg.origin) };
  }

  private refuse(
    who: Sender,
    topic: string,
    metric: string | undefined,
    why: string,
    value?: TagValue | null,
  ): WriteOutcome {
    this.counters.commandsRefused++;
    this.options.audit.warn(
      { ...who, topic, metric, value: value == null ? undefined : String(value), why },
      'command refused',
    );
    return { ok: false, why };
  }
}
