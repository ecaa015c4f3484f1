/**
 * A Sparkplug host application for tests: subscribes to a group over MQTT (MQTT.js), decodes every payload
 * with the alias table learnt from the births, checks the session rules a real host relies on (seq +1 mod 256
 * from NBIRTH 0, aliases declared before use, bdSeq of NDEATH = NBIRTH's, data of a device only while it is born,
 * or historical after its DDEATH in the same session) and keeps the current values and which devices are online.
 *
 *   const host = d.add(await startSparkplugHost(central.url, 'plant1'));
 *   await host.waitFor((h) => h.births('DBIRTH').length >= 1, 10_000);
 *   expect(host.violations).toEqual([]);
 *   await host.rebirth('line4-gw'); await host.write('line4-gw', 'press-1', { setpoint: 12.5 });
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connectAsync, type MqttClient } from 'mqtt';
import type { MetricIn, MetricDatatype, MetricOut, PayloadIn } from '../../src/sparkplug/payload.js';
import { decodePayload, encodePayload } from '../../src/sparkplug/payload.js';
import { parseTopic } from '../../src/sparkplug/topics.js';
import type { SparkplugMessageType } from '../../src/sparkplug/topics.js';
import type { TagValue } from '../../connectors/contract.js';
import { tahuCompress, tahuDecompress } from './tahu.js';
import { waitFor } from './wait.js';

export interface HostMessage {
  readonly topic: string;
  readonly type: SparkplugMessageType;
  readonly edgeNodeId: string;
  readonly deviceId?: string;
  readonly qos: number;
  readonly retain: boolean;
  /** Decompressed when it came compressed (by Tahu's decoder, test/helpers/tahu.ts). */
  readonly payload: PayloadIn;
  /** How it came: compressed or not, its bytes on the wire, and the payload's own bytes (decompressed). */
  readonly compressed: boolean;
  readonly wire: Buffer;
  readonly plain: Buffer;
  readonly receivedAtMs: number;
}

interface MetricInfo {
  readonly name: string;
  readonly datatype?: MetricDatatype;
}

interface NodeSession {
  bdSeq?: number;
  /** Expected seq of the next message (undefined: no NBIRTH seen). */
  nextSeq?: number;
  /** alias → metric, across the node (aliases are unique per node). */
  readonly aliases: Map<number, MetricInfo & { deviceId?: string }>;
  online: boolean;
  readonly devicesOnline: Set<string>;
  /** Devices with a DBIRTH since the NBIRTH: their aliases are known, also after their DDEATH. */
  readonly devicesBorn: Set<string>;
  /**
   * Whether this host has seen an NBIRTH of the node. Until then it may have subscribed in the middle of the node's
   * session (a gateway started before the host, still publishing its births): what it sees of that session is
   * not checked, as a primary host would ask for a rebirth instead. After a death, the next birth is checked again.
   */
  seenBirth: boolean;
}

export interface SparkplugHost {
  readonly client: MqttClient;
  readonly messages: HostMessage[];
  /** Rule breaks seen so far, as sentences. */
  readonly violations: string[];
  of(type: SparkplugMessageType, deviceId?: string): HostMessage[];
  births(type: 'NBIRTH' | 'DBIRTH', deviceId?: string): HostMessage[];
  /** Current (live, non-historical) value by `<node>/<device>/<metric>` or `<node>//<metric>`. */
  value(edgeNodeId: string, deviceId: string | undefined, metric: string): TagValue | null | undefined;
  /** Resolves the metric name of a DATA metric (by name or learnt alias). */
  nameOf(edgeNodeId: string, metric: MetricIn): string | undefined;
  isOnline(edgeNodeId: string): boolean;
  /** Whether the device is online: born, and no DDEATH (or NDEATH) since. */
  isDeviceOnline(edgeNodeId: string, deviceId: string): boolean;
  waitFor<T>(predicate: (host: SparkplugHost) => T, timeoutMs: number, what?: string): Promise<NonNullable<T>>;
  rebirth(edgeNodeId: string): Promise<void>;
  /** DCMD with metric names (and datatype, as Sparkplug hosts send them). */
  write(
    edgeNodeId: string,
    deviceId: string,
    metrics: { name: string; datatype: MetricDatatype; value: TagValue }[],
  ): Promise<void>;
  /** Publishes this host's STATE (retained, QoS 1), as a primary host application does. */
  publishState(hostId: string, online: boolean, timestamp: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startSparkplugHost(
  url: string,
  groupId: string,
  options: {
    clientId?: string;
    username?: string;
    /** Commands go out compressed with this, by Tahu's encoder (test/helpers/tahu.ts). */
    compressCommands?: 'DEFLATE' | 'GZIP';
  } = {},
): Promise<SparkplugHost> {
  const client = await connectAsync(url, {
    reconnectPeriod: 0,
    connectTimeout: 5000,
    clientId: options.clientId,
    username: options.username,
    protocolVersion: 5,
  });
  const messages: HostMessage[] = [];
  const violations: string[] = [];
  const sessions = new Map<string, NodeSession>();
  const values = new Map<string, TagValue | null>();

  const session = (node: string): NodeSession => {
    let s = sessions.get(node);
    if (!s) {
      s = { aliases: new Map(), online: false, devicesOnline: new Set(), devicesBorn: new Set(), seenBirth: false };
      sessions.set(node, s);
    }
    return s;
  };

  client.on('message', (topicName, payloadBuf, packet) => {
    const topic = parseTopic(topicName);
    if (!topic || topic.groupId !== groupId) return;
    const s = session(topic.edgeNodeId);
    let payload: PayloadIn;
    let inner: Uint8Array | undefined;
    try {
      const lookup = (m: { alias?: number }): MetricDatatype | undefined =>
        m.alias !== undefined ? s.aliases.get(m.alias)?.datatype : undefined;
      payload = decodePayload(payloadBuf, lookup);
      // Tahu's decoder only for what is compressed: its payload decoding knows fewer types than ours.
      if (payload.uuid === 'SPBV1.0_COMPRESSED') {
        inner = tahuDecompress(payloadBuf);
        payload = decodePayload(inner, lookup);
      }
    } catch (err) {
      violations.push(`${topicName}: undecodable payload (${(err as Error).message})`);
      return;
    }
    const msg: HostMessage = {
      topic: topicName,
      type: topic.type,
      edgeNodeId: topic.edgeNodeId,
      deviceId: topic.deviceId,
      qos: packet.qos,
      retain: packet.retain,
      payload,
      compressed: inner !== undefined,
      wire: payloadBuf,
      plain: inner === undefined ? payloadBuf : Buffer.from(inner),
      receivedAtMs: Date.now(),
    };
    messages.push(msg);
    check(s, msg);
  });

  const command = (metrics: MetricOut[]): Buffer => {
    const payload = encodePayload({ timestamp: Date.now(), metrics });
    const algorithm = options.compressCommands;
    return algorithm === undefined ? payload : Buffer.from(tahuCompress(payload, algorithm));
  };

  const where = (m: HostMessage): string => `${m.type} ${m.deviceId ?? m.edgeNodeId} seq ${m.payload.seq}`;

  function check(s: NodeSession, m: HostMessage): void {
    const p = m.payload;
    if (m.retain) violations.push(`${where(m)}: retained`);
    if (m.type === 'NCMD' || m.type === 'DCMD') return;
    if (m.type === 'NDEATH') {
      const bdSeq = p.metrics.find((x) => x.name === 'bdSeq');
      if (p.seq !== undefined) violations.push(`${where(m)}: NDEATH carries a seq`);
      if (m.qos !== 1) violations.push(`${where(m)}: NDEATH not QoS 1`);
      if (!bdSeq || bdSeq.datatype !== 'Int64') violations.push(`${where(m)}: NDEATH without an Int64 bdSeq`);
      // A death whose bdSeq does not match the current birth is a stale Will: a host ignores it.
      if (bdSeq && s.bdSeq !== undefined && Number(bdSeq.value) === s.bdSeq) {
        s.online = false;
        s.nextSeq = undefined;
        s.devicesOnline.clear();
      }
      return;
    }
    if (m.type !== 'NBIRTH' && !s.seenBirth) return;
    if (m.qos !== 0) violations.push(`${where(m)}: not QoS 0`);
    if (p.seq === undefined) {
      violations.push(`${where(m)}: no seq`);
      return;
    }
    if (m.type === 'NBIRTH') {
      if (p.seq !== 0) violations.push(`${where(m)}: NBIRTH seq is not 0`);
      const bdSeq = p.metrics.find((x) => x.name === 'bdSeq');
      if (!bdSeq || bdSeq.datatype !== 'Int64') violations.push(`${where(m)}: NBIRTH without an Int64 bdSeq`);
      s.bdSeq = bdSeq ? Number(bdSeq.value) : undefined;
      s.online = true;
      s.seenBirth = true;
      s.devicesOnline.clear();
      s.devicesBorn.clear();
      s.aliases.clear();
    } else if (s.nextSeq === undefined) {
      violations.push(`${where(m)}: before any NBIRTH`);
    } else if (p.seq !== s.nextSeq) {
      violations.push(`${where(m)}: expected seq ${s.nextSeq}`);
    }
    s.nextSeq = (p.seq + 1) & 0xff;
    if (m.type === 'NBIRTH' || m.type === 'DBIRTH') {
      if (m.type === 'DBIRTH') {
        s.devicesOnline.add(m.deviceId as string);
        s.devicesBorn.add(m.deviceId as string);
      }
      for (const metric of p.metrics) {
        if (metric.name === undefined) violations.push(`${where(m)}: birth metric without a name`);
        if (metric.datatype === undefined)
          violations.push(`${where(m)}: birth metric ${metric.name} without a datatype`);
        if (metric.alias !== undefined) {
          const owner = s.aliases.get(metric.alias);
          if (owner && (owner.deviceId !== m.deviceId || owner.name !== metric.name)) {
            violations.push(`${where(m)}: alias ${metric.alias} already names ${owner.deviceId ?? ''}/${owner.name}`);
          }
          s.aliases.set(metric.alias, { name: metric.name ?? '', datatype: metric.datatype, deviceId: m.deviceId });
        }
        if (metric.name !== undefined && !metric.isHistorical)
          values.set(`${m.edgeNodeId}/${m.deviceId ?? ''}/${metric.name}`, metric.value);
      }
      return;
    }
    if (m.type === 'DDEATH') {
      s.devicesOnline.delete(m.deviceId as string);
      return;
    }
    // NDATA / DDATA
    // After its DDEATH a device's stored data may follow, historical: it changes no live value (and needs the
    // aliases of its DBIRTH in this session).
    const device = m.deviceId as string;
    if (m.type === 'DDATA' && !s.devicesOnline.has(device)) {
      if (!s.devicesBorn.has(device)) violations.push(`${where(m)}: data for a device not born`);
      else if (!p.metrics.every((x) => x.isHistorical)) violations.push(`${where(m)}: live data for a dead device`);
    }
    for (const metric of p.metrics) {
      if (metric.name !== undefined) violations.push(`${where(m)}: DATA metric carries a name (${metric.name})`);
      if (metric.datatype !== undefined) violations.push(`${where(m)}: DATA metric carries a datatype`);
      if (metric.timestamp === undefined) violations.push(`${where(m)}: DATA metric without a timestamp`);
      const info = metric.alias !== undefined ? s.aliases.get(metric.alias) : undefined;
      if (!info) {
        violations.push(`${where(m)}: unknown alias ${metric.alias}`);
        continue;
      }
      if (!metric.isHistorical) values.set(`${m.edgeNodeId}/${m.deviceId ?? ''}/${info.name}`, metric.value);
    }
  }

  const host: SparkplugHost = {
    client,
    messages,
    violations,
    of: (type, deviceId) =>
      messages.filter((m) => m.type === type && (deviceId === undefined || m.deviceId === deviceId)),
    births: (type, deviceId) => host.of(type, deviceId),
    value: (node, device, metric) => values.get(`${node}/${device ?? ''}/${metric}`),
    nameOf: (node, metric) =>
      metric.name ?? (metric.alias !== undefined ? sessions.get(node)?.aliases.get(metric.alias)?.name : undefined),
    isOnline: (node) => sessions.get(node)?.online ?? false,
    isDeviceOnline: (node, device) => sessions.get(node)?.devicesOnline.has(device) ?? false,
    waitFor: (predicate, timeoutMs, what) =>
      waitFor(() => predicate(host), timeoutMs, {
        message: () =>
          `${what ?? 'host condition'}; received: ${messages.map((m) => `${m.type}:${m.deviceId ?? ''}:${m.payload.seq}`).join(' ')}`,
      }),
    rebirth: async (node) => {
      const payload = command([{ name: 'Node Control/Rebirth', datatype: 'Boolean', value: true }]);
      await client.publishAsync(`spBv1.0/${groupId}/NCMD/${node}`, payload, { qos: 0 });
    },
    write: async (node, device, metrics) => {
      const payload = command(metrics.map((m) => ({ name: m.name, datatype: m.datatype, value: m.value })));
      await client.publishAsync(`spBv1.0/${groupId}/DCMD/${node}/${device}`, payload, { qos: 0 });
    },
    publishState: async (hostId, online, timestamp) => {
      await client.publishAsync(`spBv1.0/STATE/${hostId}`, JSON.stringify({ online, timestamp }), {
        qos: 1,
        retain: true,
      });
    },
    stop: () => client.endAsync(true),
  };
  await client.subscribeAsync(`spBv1.0/${groupId}/#`, { qos: 1 });
  return host;
}

/**
 * The gateway's Sparkplug uplink bridge (`central`) to `url` for edge node `node` of `group`: Sparkplug out; the
 * node's NCMD and DCMD in, the hosts' STATE too unless `state: false`, and `extraIn`.
 */
export function sparkplugUplink(
  url: string,
  options: {
    group: string;
    node: string;
    keepaliveS?: number;
    maxDelayMs?: number;
    state?: boolean;
    extraIn?: readonly string[];
  },
) {
  const { group, node, keepaliveS, maxDelayMs = 300, state = true, extraIn = [] } = options;
  const inFilters = [
    `spBv1.0/${group}/NCMD/${node}`,
    `spBv1.0/${group}/DCMD/${node}/#`,
    ...(state ? ['spBv1.0/STATE/+'] : []),
    ...extraIn,
  ];
  return {
    name: 'central',
    remote: { urls: [url], clientId: node, ...(keepaliveS === undefined ? {} : { keepaliveS }) },
    reconnect: { minDelayMs: 100, maxDelayMs },
    topics: [{ filter: 'spBv1.0/#', direction: 'out' }, ...inFilters.map((filter) => ({ filter, direction: 'in' }))],
  };
}

/**
 * The gateway's `auth` when host applications on it command the edge node: an ACL file (written into `dir`) that
 * grants every client everything. Without an ACL file no local client may send NCMD or DCMD
 * (docs/architecture.md#security-model).
 */
export function hostsMayCommand(dir: string): { aclFile: string } {
  const aclFile = join(dir, 'acl');
  writeFileSync(aclFile, 'pattern readwrite #\n');
  return { aclFile };
}

/** A `sparkplug:` section with a test's timings: rebirths at once, devices back within 400 ms. */
export function sparkplugSection(groupId: string, edgeNodeId: string, extra: object = {}): object {
  return {
    groupId,
    edgeNodeId,
    rebirthDebounceMs: 0,
    deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 },
    ...extra,
  };
}
