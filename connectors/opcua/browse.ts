/**
 * The logic of `edgeferry opcua browse <endpoint> [--node <id>] [--depth N]`: walks the server's address
 * space below a node (default: the Objects folder) along hierarchical references, and lists every variable
 * with its NodeId, browse path, data type, matching Sparkplug datatype and access level. `renderTagList()`
 * turns the rows into a `tags:` block to paste into a connector's config.
 */
import type { DataValue, NodeId, ReferenceDescription } from 'node-opcua-client';
import type { TagDatatype } from '../contract.js';
import { ConnectorError, asError } from '../../src/util/errors.js';
import { silentLogger, type Logger } from '../../src/util/logger.js';
import { openSession, type OpenedSession } from './open-session.js';
import type { OpcuaSecurityMode, OpcuaSecurityPolicy, OpcuaUserConfig } from './schema.js';
import {
  BuiltInType,
  builtInTypeName,
  sparkplugDatatypeFor,
  variantToTagValue,
  VariantMismatchError,
  type VariantLike,
} from './variants.js';

export interface BrowseOptions {
  /** Where to start (a NodeId); default the Objects folder `i=85`. */
  readonly node?: string;
  /** How many levels below the start node; default 6. */
  readonly depth?: number;
  readonly securityMode?: OpcuaSecurityMode;
  readonly securityPolicy?: OpcuaSecurityPolicy;
  readonly user?: OpcuaUserConfig;
  /** PKI folder (`opcuaPkiDir(dataDir)`): a secured browse needs the server trusted there, like the connector. */
  readonly pkiDir: string;
  /** Also list properties (HasProperty children such as EURange); default false. */
  readonly includeProperties?: boolean;
  /** Also descend into namespace 0 (the standard Server object and its diagnostics); default false. */
  readonly includeStandardNodes?: boolean;
  /** Stop after this many nodes; default 20,000. */
  readonly maxNodes?: number;
  readonly connectTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  readonly log?: Logger;
}

export interface BrowseRow {
  readonly nodeId: string;
  /** From the Root folder, `/Objects/3:Line4/3:Press/3:Temperature`: usable as a tag's `browsePath`. */
  readonly browsePath: string;
  /** Below the start node, without namespace prefixes: the suggested Sparkplug metric name. */
  readonly name: string;
  readonly displayName: string;
  /** The OPC UA built-in type (`Double`, `LocalizedText`, …). */
  readonly dataType: string;
  /** The node's own DataType when it is a subtype (`Duration`, an enumeration, …). */
  readonly dataTypeName?: string;
  readonly valueRank: number;
  /** The Sparkplug datatype, or undefined when the data type has none. */
  readonly datatype?: TagDatatype;
  /** `r`, `w`, `rw` or `-` for the current user (UserAccessLevel ∩ AccessLevel). */
  readonly access: string;
}

const Objects = 'i=85';
const Root = 84;
const HierarchicalReferences = 'i=33';
const HasProperty = 46;
const NodeClassObject = 1;
const NodeClassVariable = 2;

export async function browse(endpoint: string, options: BrowseOptions): Promise<BrowseRow[]> {
  return withSession(endpoint, options, (opened, log) => walk(opened, options, log));
}

/** One node's children as the console's browse panel shows them (docs/console.md#opc-ua-browse). */
export interface ChildNode {
  readonly nodeId: string;
  readonly displayName: string;
  readonly browsePath: string;
  readonly nodeClass: 'Object' | 'Variable';
  /** Variables: what `describeVariables` says (data type, Sparkplug datatype, access), the value now, the unit. */
  readonly variable?: BrowseRow & {
    readonly value: string;
    readonly engUnit?: string;
    readonly engLow?: number;
    readonly engHigh?: number;
    readonly description?: string;
  };
}

/**
 * The objects and variables right below `options.node` (default the Objects folder), variables with their value
 * now, their unit and range (an AnalogItem's EngineeringUnits and EURange) and description.
 */
export async function browseChildren(
  endpoint: string,
  options: BrowseOptions,
): Promise<{ nodeId: string; browsePath: string; children: ChildNode[] }> {
  return withSession(endpoint, options, async (opened, log) => {
    const { ua } = opened.lib;
    const start = ua.resolveNodeId(options.node ?? Objects);
    const browsePath = await pathFromRoot(opened, start);
    const refs = ((await browseAll(opened, [start], 'forward')).at(0) ?? []).filter(
      (ref) =>
        !isStandard(ref.referenceTypeId, HasProperty) &&
        (ref.nodeClass === NodeClassObject || ref.nodeClass === NodeClassVariable) &&
        (options.includeStandardNodes || ua.resolveNodeId(ref.nodeId.toString()).namespace !== 0),
    );
    const found = refs.map((ref) => ({
      nodeId: ua.resolveNodeId(ref.nodeId.toString()),
      browsePath: `${browsePath}/${qualified(ref.browseName.namespaceIndex, ref.browseName.name ?? '')}`,
      name: ref.browseName.name ?? '',
      displayName: ref.displayName.text ?? ref.browseName.name ?? '',
      variable: ref.nodeClass === NodeClassVariable,
    }));
    const variables = found.filter((f) => f.variable);
    const rows = await describeVariables(opened, variables, log);
    const details = await readDetails(opened, rows);
    const byNode = new Map(rows.map((row, i) => [row.nodeId, { ...row, ...details[i] }]));
    return {
      nodeId: start.toString(),
      browsePath,
      children: found.map((f) => {
        const variable = byNode.get(f.nodeId.toString());
        return {
          nodeId: f.nodeId.toString(),
          displayName: f.displayName,
          browsePath: f.browsePath,
          nodeClass: f.variable ? 'Variable' : 'Object',
          ...(variable === undefined ? {} : { variable }),
        };
      }),
    };
  });
}

/** Each node's value now (for reading), description and, where it has them, EngineeringUnits and EURange. */
async function readDetails(
  opened: OpenedSession,
  rows: readonly BrowseRow[],
): Promise<{ value: string; engUnit?: string; engLow?: number; engHigh?: number; description?: string }[]> {
  const { ua } = opened.lib;
  const session = opened.session;
  const nodeIds = rows.map((row) => ua.resolveNodeId(row.nodeId));
  if (nodeIds.length === 0) return [];
  const attributes = await session.read(
    nodeIds.flatMap((nodeId) => [
      { nodeId, attributeId: ua.AttributeIds.Value },
      { nodeId, attributeId: ua.AttributeIds.Description },
    ]),
  );
  const paths = nodeIds.flatMap((nodeId) =>
    ['EngineeringUnits', 'EURange'].map((property) => ua.makeBrowsePath(nodeId, `.${property}`)),
  );
  const targets = await session.translateBrowsePath(paths);
  const propertyIds = targets.map((t) => (t.statusCode.isGood() ? t.targets?.[0]?.targetId : undefined));
  const present = propertyIds.flatMap((id) => (id === undefined ? [] : [ua.resolveNodeId(id.toString())]));
  const propertyValues =
    present.length === 0
      ? []
      : await session.read(present.map((nodeId) => ({ nodeId, attributeId: ua.AttributeIds.Value })));
  let next = 0;
  const propertyValue = (k: number): Record<string, unknown> | undefined => {
    if (propertyIds[k] === undefined) return undefined;
    const dv = propertyValues.at(next++);
    const v = dv?.statusCode.isGood() ? (dv.value.value as unknown) : undefined;
    return typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : undefined;
  };
  return nodeIds.map((_, i) => {
    const value = attributes.at(i * 2);
    const description = (attributes.at(i * 2 + 1)?.value.value as { text?: string | null } | null)?.text ?? undefined;
    const eu = propertyValue(i * 2);
    const range = propertyValue(i * 2 + 1);
    const engUnit = (eu?.displayName as { text?: string | null } | undefined)?.text ?? undefined;
    const ranged = range !== undefined && Number.isFinite(range.low) && Number.isFinite(range.high);
    return {
      value: value?.statusCode.isGood()
        ? shown(value.value, rows[i].datatype)
        : `(${value?.statusCode.name ?? 'no value'})`,
      ...(engUnit ? { engUnit } : {}),
      ...(ranged ? { engLow: range.low as number, engHigh: range.high as number } : {}),
      ...(description ? { description } : {}),
    };
  });
}

/** A value as a person reads it in the browse panel: as the tag would carry it where there is a Sparkplug datatype. */
function shown(variant: VariantLike, datatype: TagDatatype | undefined): string {
  if (datatype !== undefined) {
    try {
      const value = variantToTagValue(variant, datatype);
      if (value !== undefined)
        return Array.isArray(value) ? shownRaw(value) : String(value as string | number | bigint);
    } catch (err) {
      if (!(err instanceof VariantMismatchError)) throw err;
    }
  }
  return shownRaw(variant.value);
}

function shownRaw(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (value instanceof Date) return value.toISOString();
  if (Buffer.isBuffer(value)) return `0x${value.toString('hex')}`;
  if (ArrayBuffer.isView(value) || Array.isArray(value)) {
    const items = Array.from(value as ArrayLike<unknown>);
    return `[${items.slice(0, 10).map(shownRaw).join(', ')}${items.length > 10 ? `, … ${items.length} items` : ''}]`;
  }
  if (typeof value === 'object' && 'text' in value) return String((value as { text: unknown }).text);
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value as string | number | boolean | bigint);
}

/** Opens a session for a browse, runs `work`, closes it; failures other than the connector's own are wrapped. */
async function withSession<T>(
  endpoint: string,
  options: BrowseOptions,
  work: (opened: OpenedSession, log: Logger) => Promise<T>,
): Promise<T> {
  const log = options.log ?? silentLogger;
  const securityMode = options.securityMode ?? 'None';
  const opened = await openSession(
    {
      endpoint,
      securityMode,
      securityPolicy: options.securityPolicy ?? (securityMode === 'None' ? 'None' : 'Basic256Sha256'),
      user: options.user ?? { type: 'anonymous' },
      pkiDir: options.pkiDir,
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      requestTimeoutMs: options.requestTimeoutMs ?? 10_000,
      sessionTimeoutMs: 60_000,
      connectorId: 'opcua-browse',
    },
    log,
  );
  try {
    return await work(opened, log);
  } catch (err) {
    if (err instanceof ConnectorError) throw err;
    throw new ConnectorError(
      'EF_CONNECTOR_UNREACHABLE',
      'opcua-browse',
      `browsing ${endpoint} failed: ${asError(err).message}`,
      {
        cause: err,
      },
    );
  } finally {
    await opened.close(3000);
  }
}

interface Found {
  readonly nodeId: NodeId;
  readonly browsePath: string;
  readonly name: string;
  readonly displayName: string;
}

async function walk(opened: OpenedSession, options: BrowseOptions, log: Logger): Promise<BrowseRow[]> {
  const { ua } = opened.lib;
  const start = ua.resolveNodeId(options.node ?? Objects);
  const depth = options.depth ?? 6;
  const maxNodes = options.maxNodes ?? 20_000;
  const startPath = await pathFromRoot(opened, start);

  const variables: Found[] = [];
  const visited = new Set<string>([start.toString()]);
  let level: { nodeId: NodeId; browsePath: string; name: string }[] = [
    { nodeId: start, browsePath: startPath, name: '' },
  ];
  for (let d = 0; d < depth && level.length > 0 && visited.size < maxNodes; d++) {
    const next: typeof level = [];
    for (const batch of chunks(level, 500)) {
      const results = await browseAll(
        opened,
        batch.map((n) => n.nodeId),
        'forward',
      );
      batch.forEach((parent, i) => {
        for (const ref of results[i] ?? []) {
          if (!options.includeProperties && isStandard(ref.referenceTypeId, HasProperty)) continue;
          if (ref.nodeClass !== NodeClassObject && ref.nodeClass !== NodeClassVariable) continue;
          const nodeId = ua.resolveNodeId(ref.nodeId.toString());
          if (!options.includeStandardNodes && nodeId.namespace === 0) continue;
          const key = nodeId.toString();
          if (visited.has(key) || visited.size >= maxNodes) continue;
          visited.add(key);
          const segment = qualified(ref.browseName.namespaceIndex, ref.browseName.name ?? '');
          const child = {
            nodeId,
            browsePath: `${parent.browsePath}/${segment}`,
            name: parent.name === '' ? (ref.browseName.name ?? '') : `${parent.name}/${ref.browseName.name ?? ''}`,
          };
          if (ref.nodeClass === NodeClassVariable)
            variables.push({ ...child, displayName: ref.displayName.text ?? '' });
          next.push(child);
        }
      });
    }
    level = next;
  }
  return describeVariables(opened, variables, log);
}

async function describeVariables(opened: OpenedSession, found: readonly Found[], log: Logger): Promise<BrowseRow[]> {
  const { ua } = opened.lib;
  const session = opened.session;
  const attributes = [
    ua.AttributeIds.DataType,
    ua.AttributeIds.ValueRank,
    ua.AttributeIds.AccessLevel,
    ua.AttributeIds.UserAccessLevel,
  ];
  const rows: BrowseRow[] = [];
  const basic = new Map<string, { builtIn: number; name?: string }>();
  for (const batch of chunks(found, 250)) {
    const values = await session.read(
      batch.flatMap((f) => attributes.map((attributeId) => ({ nodeId: f.nodeId, attributeId }))),
    );
    for (let i = 0; i < batch.length; i++) {
      const f = batch[i]!;
      const [dataType, valueRank, accessLevel, userAccessLevel] = values.slice(i * 4, i * 4 + 4) as (
        DataValue | undefined
      )[];
      const typeId = dataType?.statusCode.isGood() ? (dataType.value.value as NodeId) : undefined;
      const type = typeId === undefined ? { builtIn: BuiltInType.Null } : await resolveType(opened, typeId, basic, log);
      const rank = valueRank?.statusCode.isGood() ? Number(valueRank.value.value) : -1;
      const access = (dv: DataValue | undefined): number => (dv?.statusCode.isGood() ? Number(dv.value.value) : 0);
      const level = access(accessLevel) & access(userAccessLevel);
      const datatype = sparkplugDatatypeFor(type.builtIn, rank, rank === 1);
      rows.push({
        nodeId: f.nodeId.toString(),
        browsePath: f.browsePath,
        name: f.name,
        displayName: f.displayName,
        dataType: typeId === undefined ? 'unknown' : builtInTypeName(type.builtIn),
        ...(type.name !== undefined ? { dataTypeName: type.name } : {}),
        valueRank: rank,
        ...(datatype !== undefined ? { datatype } : {}),
        access: `${level & 1 ? 'r' : ''}${level & 2 ? 'w' : ''}` || '-',
      });
    }
  }
  return rows;
}

async function resolveType(
  opened: OpenedSession,
  typeId: NodeId,
  cache: Map<string, { builtIn: number; name?: string }>,
  log: Logger,
): Promise<{ builtIn: number; name?: string }> {
  if (typeId.namespace === 0 && typeof typeId.value === 'number' && typeId.value >= 1 && typeId.value <= 25) {
    return { builtIn: typeId.value };
  }
  const key = typeId.toString();
  const hit = cache.get(key);
  if (hit !== undefined) return hit;
  const { ua } = opened.lib;
  let builtIn: number = BuiltInType.Null;
  let name: string | undefined;
  try {
    builtIn = await ua.findBasicDataType(opened.session, typeId);
    const browseName = await opened.session.read({ nodeId: typeId, attributeId: ua.AttributeIds.BrowseName });
    name = (browseName.value.value as { name?: string } | null)?.name ?? undefined;
  } catch (err) {
    // Listed as `unknown` rather than failing the whole browse for one odd data type node.
    log.debug({ err: asError(err), dataTypeId: key }, 'opcua data type not resolved');
  }
  const result = name !== undefined ? { builtIn, name } : { builtIn };
  cache.set(key, result);
  return result;
}

/** Browse with continuation points followed to the end. */
async function browseAll(
  opened: OpenedSession,
  nodeIds: readonly NodeId[],
  direction: 'forward' | 'inverse',
): Promise<ReferenceDescription[][]> {
  const { ua } = opened.lib;
  const session = opened.session;
  const results = await session.browse(
    nodeIds.map((nodeId) => ({
      nodeId,
      browseDirection: direction === 'forward' ? ua.BrowseDirection.Forward : ua.BrowseDirection.Inverse,
      referenceTypeId: HierarchicalReferences,
      includeSubtypes: true,
      nodeClassMask: direction === 'forward' ? NodeClassObject | NodeClassVariable : 0,
      resultMask: 0x3f,
    })),
  );
  const out: ReferenceDescription[][] = [];
  for (const result of results) {
    const refs = [...(result.references ?? [])];
    let continuationPoint = result.continuationPoint as Buffer | null; // null: no more
    while (continuationPoint && continuationPoint.length > 0) {
      const more = (await session.browseNext([continuationPoint], false)).at(0);
      refs.push(...(more?.references ?? []));
      continuationPoint = more?.continuationPoint ?? null;
    }
    out.push(refs);
  }
  return out;
}

/** `/Objects/3:Line4` for a node, walking inverse hierarchical references up to the Root folder. */
async function pathFromRoot(opened: OpenedSession, nodeId: NodeId): Promise<string> {
  const { ua } = opened.lib;
  const segments: string[] = [];
  let current = nodeId;
  for (let hops = 0; hops < 32 && !isStandard(current, Root); hops++) {
    const node = (await opened.session.read([{ nodeId: current, attributeId: ua.AttributeIds.BrowseName }])).at(0);
    if (!node?.statusCode.isGood()) {
      throw new ConnectorError(
        'EF_CONNECTOR_UNREACHABLE',
        'opcua-browse',
        `node ${current.toString()} does not exist (${node?.statusCode.name})`,
        { retryable: false },
      );
    }
    const browseName = node.value.value as { namespaceIndex: number; name: string };
    segments.unshift(qualified(browseName.namespaceIndex, browseName.name));
    const parent = (await browseAll(opened, [current], 'inverse')).at(0)?.at(0);
    if (parent === undefined) break;
    current = ua.resolveNodeId(parent.nodeId.toString());
  }
  return `/${segments.join('/')}`;
}

/** True for the namespace-0 node `i=<id>` (NodeId.toString() spells it `ns=0;i=<id>`). */
function isStandard(nodeId: NodeId, id: number): boolean {
  return nodeId.namespace === 0 && nodeId.value === id;
}

function qualified(namespaceIndex: number, name: string): string {
  return namespaceIndex === 0 ? name : `${namespaceIndex}:${name}`;
}

function* chunks<T>(items: readonly T[], size: number): Generator<T[]> {
  for (let i = 0; i < items.length; i += size) yield items.slice(i, i + size);
}

/** A fixed-width table for the terminal. */
export function formatBrowseTable(rows: readonly BrowseRow[]): string {
  const header = ['NodeId', 'Browse path', 'Data type', 'Sparkplug', 'Access'];
  const lines = rows.map((r) => [
    r.nodeId,
    r.browsePath,
    `${r.dataType}${r.valueRank >= 1 ? '[]' : ''}${r.dataTypeName !== undefined && r.dataTypeName !== r.dataType ? ` (${r.dataTypeName})` : ''}`,
    r.datatype ?? '(none)',
    r.access,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [fmt(header), fmt(widths.map((w) => '-'.repeat(w))), ...lines.map(fmt)].join('\n');
}

/**
 * A `tags:` block for the connector config: one line per variable, with the datatype filled in; variables
 * without a Sparkplug datatype are commented out with the reason.
 */
export function renderTagList(rows: readonly BrowseRow[], options: { indent?: number } = {}): string {
  const pad = ' '.repeat(options.indent ?? 4);
  const mapped = rows.filter((r) => r.datatype !== undefined).length;
  const out = [
    `${pad}# ${rows.length} variables, ${mapped} with a Sparkplug datatype; add writable: true to accept DCMD writes`,
    `${pad}tags:`,
  ];
  const names = new Set<string>();
  for (const r of rows) {
    let name = r.name || r.displayName || r.nodeId;
    // Metric names must be unique within the connector.
    for (let n = 2; names.has(name); n++) name = `${r.name}~${n}`;
    names.add(name);
    const fields = `name: ${JSON.stringify(name)}, nodeId: ${JSON.stringify(r.nodeId)}`;
    if (r.datatype === undefined) {
      const shape = r.valueRank >= 2 ? `${r.valueRank}-dimensional ` : '';
      out.push(`${pad}  # - { ${fields} }  # ${shape}${r.dataTypeName ?? r.dataType} has no Sparkplug datatype`);
    } else {
      out.push(
        `${pad}  - { ${fields}, datatype: ${r.datatype} }${r.access.includes('w') ? '  # writable on the server' : ''}`,
      );
    }
  }
  return out.join('\n');
}
