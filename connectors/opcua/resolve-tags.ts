/**
 * What the server says about each tag's node at start: its NodeId (by id, with namespace URIs resolved, or by
 * browse path), built-in type, value rank and access levels, and what the node says about itself (its
 * Description; for an AnalogItem its EngineeringUnits and EURange, OPC UA Part 8 §5.3.2). A tag the server cannot
 * serve as declared is reported and left out; the other tags run.
 */
import type { DataValue, NodeId } from 'node-opcua-client';
import type { TagDefinition, TagProperties } from '../contract.js';
import { asError } from '../../src/util/errors.js';
import type { Logger } from '../../src/util/logger.js';
import type { OpenedSession } from './open-session.js';
import { isNumericDatatype } from './schema.js';
import type { OpcuaTagConfig } from './schema.js';
import type { TagProblems } from './tag-problems.js';
import {
  BuiltInType,
  builtInTypeName,
  isArrayDatatype,
  isCompatibleDatatype,
  sparkplugDatatypeFor,
} from './variants.js';

/** What the server said about a tag's node at start. */
export interface ResolvedTag {
  readonly config: OpcuaTagConfig;
  readonly definition: TagDefinition;
  readonly nodeId: NodeId;
  readonly builtIn: number;
  readonly isArray: boolean;
  readonly serverWritable: boolean;
}

/** What a server says about a tag's node, gathered at start. */
export type ServerProperties = { -readonly [K in keyof TagProperties]: TagProperties[K] };

/** A tag as configured, with its definition. */
export interface TagEntry {
  readonly config: OpcuaTagConfig;
  readonly definition: TagDefinition;
}

export interface OperationLimits {
  readonly read: number;
  readonly translate: number;
  readonly monitoredItems: number;
}

const AccessLevelCurrentWrite = 0x02;

/** Per-call operation limits (0 or unreadable: no limit announced, so a moderate batch size). */
export async function readOperationLimits(opened: OpenedSession): Promise<OperationLimits> {
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

/**
 * Finds every tag's NodeId, built-in type, rank and access level; puts the ones that fit their declaration into
 * `into`. Returns the Description of each node that has one.
 */
export async function resolveTags(
  opened: OpenedSession,
  entries: readonly TagEntry[],
  limits: OperationLimits,
  into: Map<string, ResolvedTag>,
  problems: TagProblems,
  log: Logger,
): Promise<Map<string, ServerProperties>> {
  const { ua } = opened.lib;
  const session = opened.session;

  // 1. NodeIds: by id (with namespace URIs resolved), or by browse path.
  const nodeIds = new Map<string, NodeId>();
  let namespaces: string[] | undefined;
  if (entries.some((e) => e.config.nodeId?.startsWith('nsu='))) namespaces = await session.readNamespaceArray();
  for (const { config } of entries) {
    if (config.nodeId === undefined) continue;
    try {
      nodeIds.set(config.name, ua.resolveNodeId(withNamespaceIndex(config.nodeId, namespaces)));
    } catch (err) {
      problems.tag(config.name, `bad nodeId ${config.nodeId}: ${asError(err).message}`);
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
        problems.tag(
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
        problems.tag(config.name, `node ${nodeId.toString()} ${why}`);
        continue;
      }
      const dataTypeId = dataType!.value.value as NodeId;
      const builtIn = await basicType(opened, dataTypeId, basicTypes, log);
      const rank = valueRank!.statusCode.isGood() ? Number(valueRank!.value.value) : -1;
      const mapped = sparkplugDatatypeFor(builtIn, rank, isArrayDatatype(config.datatype));
      if (mapped === undefined) {
        const shape = rank >= 2 ? `${rank}-dimensional array of ` : rank === 1 ? 'array of ' : '';
        problems.tag(
          config.name,
          `node ${nodeId.toString()} is a ${shape}OPC UA ${builtInTypeName(builtIn)}, which has no Sparkplug datatype`,
        );
        continue;
      }
      if (!isCompatibleDatatype(config.datatype, mapped)) {
        problems.tag(
          config.name,
          `node ${nodeId.toString()} is ${mapped} (OPC UA ${builtInTypeName(builtIn)}), but the tag declares ${config.datatype}`,
        );
        continue;
      }
      const access = (dv: DataValue | undefined): number => (dv?.statusCode.isGood() ? Number(dv.value.value) : 0);
      const serverWritable = (access(accessLevel) & access(userAccessLevel) & AccessLevelCurrentWrite) !== 0;
      if (config.writable && !serverWritable) {
        problems.tag(
          config.name,
          `declared writable, but node ${nodeId.toString()} is read-only for this user on the server; writes will be refused`,
          'warn',
        );
      }
      into.set(config.name, {
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
  return serverProperties;
}

/**
 * The EngineeringUnits (EUInformation: its displayName is the unit) and EURange properties of each numeric
 * tag's node, where it has them (an AnalogItem, OPC UA Part 8 §5.3.2), into `into`.
 */
export async function readAnalogProperties(
  opened: OpenedSession,
  resolved: ReadonlyMap<string, ResolvedTag>,
  limits: OperationLimits,
  into: Map<string, ServerProperties>,
): Promise<void> {
  const { ua } = opened.lib;
  const numeric = [...resolved.values()].filter((t) => isNumericDatatype(t.config.datatype));
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
async function basicType(
  opened: OpenedSession,
  dataTypeId: NodeId,
  cache: Map<string, number>,
  log: Logger,
): Promise<number> {
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
    log.debug({ err: asError(err), dataTypeId: key }, 'opcua data type not resolved');
  }
  cache.set(key, builtIn);
  return builtIn;
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

export function* chunks<T>(items: readonly T[], size: number): Generator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size);
}
