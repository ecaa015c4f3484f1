/**
 * The edge node's own metrics: bdSeq, Node Control/Rebirth, and Node Info (devices online, the gateway's version,
 * the uplink's backlog). All of them go in each NBIRTH; NDATA carries those that changed since
 * (docs/architecture.md#sparkplug-session).
 */
import type { TagDatatype, TagValue } from '../../connectors/contract.js';
import { REBIRTH } from './commands.js';
import type { MetricOut } from './payload.js';

const BDSEQ = 'bdSeq';
const DEVICES_ONLINE = 'Node Info/Devices Online';
const VERSION = 'Node Info/Version';
const BACKLOG = 'Node Info/Backlog Messages';
/** A changed backlog goes out in NDATA at most this often (it changes with every message while it drains). */
export const BACKLOG_REPORT_MS = 10_000;

export interface NodeMetric {
  readonly name: string;
  readonly datatype: TagDatatype;
  readonly alias?: number;
  value: () => TagValue;
}

export interface NodeMetricSources {
  /** The bdSeq of the local session. */
  readonly bdSeq: () => number;
  readonly devicesOnline: () => number;
  /** The gateway's version (docs/architecture.md#fleet-status). */
  readonly version?: string;
  /** Messages waiting in the uplink bridge's outbox, and whether the uplink is online. */
  readonly backlog?: () => { readonly messages: number; readonly online: boolean };
}

export class NodeMetrics {
  private readonly list: NodeMetric[];
  private readonly byAlias = new Map<number, NodeMetric>();
  private devicesOnlinePublished = -1;
  private backlogPublished = -1;
  private backlogPublishedAtMs = -Infinity;

  /** The alias keys of the node metrics that have one, for `NodeState.assignAliases`. */
  static aliasKeys(sources: NodeMetricSources): string[] {
    return [`/${DEVICES_ONLINE}`, ...(sources.backlog ? [`/${BACKLOG}`] : [])];
  }

  constructor(
    private readonly sources: NodeMetricSources,
    aliases: ReadonlyMap<string, number>,
  ) {
    this.list = [
      // bdSeq and the rebirth control carry no alias (Sparkplug 3.0 NBIRTH rules).
      { name: BDSEQ, datatype: 'Int64', value: () => BigInt(sources.bdSeq()) },
      { name: REBIRTH, datatype: 'Boolean', value: () => false },
      {
        name: DEVICES_ONLINE,
        datatype: 'UInt32',
        alias: aliases.get(`/${DEVICES_ONLINE}`),
        value: () => sources.devicesOnline(),
      },
    ];
    const { version, backlog } = sources;
    if (version !== undefined) this.list.push({ name: VERSION, datatype: 'String', value: () => version });
    if (backlog)
      this.list.push({
        name: BACKLOG,
        datatype: 'UInt64',
        alias: aliases.get(`/${BACKLOG}`),
        value: () => BigInt(backlog().messages),
      });
    for (const m of this.list) if (m.alias !== undefined) this.byAlias.set(m.alias, m);
  }

  /** A node metric a command names, by name or alias. */
  find(metric: { name?: string; alias?: number }): NodeMetric | undefined {
    return metric.name !== undefined
      ? this.list.find((n) => n.name === metric.name)
      : this.byAlias.get(metric.alias ?? -1);
  }

  /** Every node metric, for an NBIRTH (local or upstream) with this `bdSeq`. */
  birth(timestamp: number, bdSeq: bigint): MetricOut[] {
    const metrics: MetricOut[] = this.list.map((m) => ({
      name: m.name,
      alias: m.alias,
      datatype: m.datatype,
      timestamp,
      value: m.name === BDSEQ ? bdSeq : m.value(),
    }));
    // The births (local or upstream) carry the backlog now; NDATA reports it when it changes from this.
    this.backlogPublished = this.sources.backlog?.().messages ?? -1;
    return metrics;
  }

  /** The local NBIRTH went out: NDATA reports the device count when it changes from now. */
  localBirth(): void {
    this.devicesOnlinePublished = this.sources.devicesOnline();
  }

  /** The node metrics that changed, for an NDATA: the device count at once, the backlog at most every `BACKLOG_REPORT_MS`. */
  changed(timestamp: number): MetricOut[] {
    const metrics: MetricOut[] = [];
    const changed = (name: string, value: TagValue): void => {
      const metric = this.list.find((m) => m.name === name) as NodeMetric;
      metrics.push({ alias: metric.alias, valueType: metric.datatype, timestamp, value });
    };
    const online = this.sources.devicesOnline();
    if (online !== this.devicesOnlinePublished) {
      this.devicesOnlinePublished = online;
      changed(DEVICES_ONLINE, online);
    }
    const backlog = this.sources.backlog?.();
    const nowMs = performance.now();
    if (
      backlog?.online &&
      backlog.messages !== this.backlogPublished &&
      nowMs - this.backlogPublishedAtMs >= BACKLOG_REPORT_MS
    ) {
      this.backlogPublished = backlog.messages;
      this.backlogPublishedAtMs = nowMs;
      changed(BACKLOG, BigInt(backlog.messages));
    }
    return metrics;
  }
}
