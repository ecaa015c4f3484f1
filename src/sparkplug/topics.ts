/**
 * The Sparkplug B topic namespace (Sparkplug 3.0 §4.1): `spBv1.0/<group>/<type>/<node>[/<device>]` and
 * `spBv1.0/STATE/<host>`.
 */

import type { ReservedTopics } from '../broker/auth.js';

export const NAMESPACE = 'spBv1.0';

export type NodeMessageType = 'NBIRTH' | 'NDEATH' | 'NDATA' | 'NCMD';
export type DeviceMessageType = 'DBIRTH' | 'DDEATH' | 'DDATA' | 'DCMD';
export type SparkplugMessageType = NodeMessageType | DeviceMessageType;

const NODE_TYPES: ReadonlySet<string> = new Set(['NBIRTH', 'NDEATH', 'NDATA', 'NCMD']);
const DEVICE_TYPES: ReadonlySet<string> = new Set(['DBIRTH', 'DDEATH', 'DDATA', 'DCMD']);

export interface SparkplugTopic {
  readonly groupId: string;
  readonly type: SparkplugMessageType;
  readonly edgeNodeId: string;
  /** Set for the device message types, undefined for the node ones. */
  readonly deviceId?: string;
}

/**
 * Group, edge node, device and host ids must be valid UTF-8 without the MQTT separators and wildcards
 * [tck-id-topic-structure-namespace-valid-group-id] [tck-id-topic-structure-namespace-valid-edge-node-id]
 * [tck-id-topic-structure-namespace-valid-device-id]. NUL is refused as well: MQTT forbids it in topics.
 */
export function isValidSparkplugId(id: string): boolean {
  return id.length > 0 && !/[+/#\u0000]/.test(id) && Buffer.byteLength(id) <= 1024;
}

export function nodeTopic(groupId: string, type: NodeMessageType, edgeNodeId: string): string {
  return `${NAMESPACE}/${groupId}/${type}/${edgeNodeId}`;
}

export function deviceTopic(groupId: string, type: DeviceMessageType, edgeNodeId: string, deviceId: string): string {
  return `${NAMESPACE}/${groupId}/${type}/${edgeNodeId}/${deviceId}`;
}

/** The primary host application's STATE topic (Sparkplug 3.0: no group level). */
export function stateTopic(hostId: string): string {
  return `${NAMESPACE}/STATE/${hostId}`;
}

/**
 * Parses a Sparkplug topic. `prefixOk` accepts anything before the namespace (a bridge's remote prefix);
 * undefined for topics that are not Sparkplug edge node or device topics (STATE included).
 */
export function parseTopic(topic: string, prefixOk = false): SparkplugTopic | undefined {
  let start = 0;
  if (!topic.startsWith(`${NAMESPACE}/`)) {
    if (!prefixOk) return undefined;
    const at = topic.indexOf(`/${NAMESPACE}/`);
    if (at < 0) return undefined;
    start = at + 1;
  }
  const levels = topic.slice(start).split('/');
  if (levels.length !== 4 && levels.length !== 5) return undefined;
  const [, groupId, type, edgeNodeId, deviceId] = levels;
  if (levels.length === 4 && NODE_TYPES.has(type)) {
    return { groupId, type: type as NodeMessageType, edgeNodeId };
  }
  if (levels.length === 5 && DEVICE_TYPES.has(type)) {
    return { groupId, type: type as DeviceMessageType, edgeNodeId, deviceId };
  }
  return undefined;
}

/**
 * The edge node's own namespace, `spBv1.0/<group>/<type>/<node>[/...]`, as the broker's publish check sees it
 * (docs/architecture.md#security-model): the node's NCMD and DCMD are commands (a local client needs an ACL grant);
 * every other message type there (births, deaths, data, anything else) only the gateway publishes.
 */
export function ownNamespace(groupId: string, edgeNodeId: string): ReservedTopics {
  const prefix = `${NAMESPACE}/${groupId}/`;
  return {
    prefix,
    kind(topic) {
      const slash = topic.indexOf('/', prefix.length);
      if (slash < 0 || !topic.startsWith(edgeNodeId, slash + 1)) return undefined;
      const end = slash + 1 + edgeNodeId.length;
      if (end !== topic.length && topic.charCodeAt(end) !== 0x2f) return undefined;
      const type = parseTopic(topic)?.type;
      return type === 'NCMD' || type === 'DCMD' ? 'command' : 'gateway';
    },
  };
}
