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
import { BuiltInType, builtInTypeName, sparkplugDatatypeFor } from './variants.js';

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
    return await walk(opened, options, log);
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
