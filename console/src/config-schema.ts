/**
 * The config file's JSON Schema as the forms read it (docs/console.md#configuration): the gateway serves the one it
 * generates from its zod schema (GET /api/config/schema), and a form takes from it the keys of a section, how each is
 * typed in, and the choices of a fixed-choice key (a tag's datatype, a topic's direction), per connector type.
 */
import { createContext } from 'preact';
import type { FieldKind, Path } from './config-types.js';

export interface SchemaNode {
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  properties?: Partial<Record<string, SchemaNode>>;
  items?: SchemaNode;
  additionalProperties?: SchemaNode | boolean;
  anyOf?: SchemaNode[];
  oneOf?: SchemaNode[];
}

/** The schema the gateway served; absent until it is read (the forms then offer what the file has). */
export const SchemaContext = createContext<SchemaNode | undefined>(undefined);

/**
 * A union's branches, flattened. Connectors and profiles are told apart by their `type`: given the connector type,
 * the branches of other types are left out (a union not told apart by it, e.g. an OPC UA `user`, stays whole).
 */
function branches(node: SchemaNode, type: string | undefined): SchemaNode[] {
  const union = [...(node.anyOf ?? []), ...(node.oneOf ?? [])];
  if (union.length === 0) return [node];
  const all = union.flatMap((b) => branches(b, type));
  const typeOf = (b: SchemaNode): unknown => (b.properties ?? {}).type?.const;
  const typed = all.filter((b) => typeOf(b) === type);
  return typed.length > 0 ? typed : all;
}

/** The schema's nodes at `path` in the file (every branch of a union that fits). */
export function nodesAt(root: SchemaNode | undefined, path: Path, type?: string): SchemaNode[] {
  let nodes = root === undefined ? [] : branches(root, type);
  for (const segment of path) {
    nodes = nodes
      .map((n) =>
        typeof segment === 'number'
          ? n.items
          : (n.properties?.[segment] ??
            (typeof n.additionalProperties === 'object' ? n.additionalProperties : undefined)),
      )
      .filter((n): n is SchemaNode => n !== undefined)
      .flatMap((n) => branches(n, type));
  }
  return nodes;
}

/** The keys the nodes have, each with its nodes, in the schema's order. */
export function keysOf(nodes: SchemaNode[], type?: string): Map<string, SchemaNode[]> {
  const keys = new Map<string, SchemaNode[]>();
  for (const node of nodes)
    for (const [key, sub] of Object.entries(node.properties ?? {}))
      if (sub !== undefined) keys.set(key, [...(keys.get(key) ?? []), ...branches(sub, type)]);
  return keys;
}

/** A key's fixed choices (an enum, or one constant per branch), or undefined when it has none. */
export function choicesOf(nodes: SchemaNode[]): unknown[] | undefined {
  const values = nodes.flatMap((n) => n.enum ?? ('const' in n ? [n.const] : []));
  return values.length === 0 ? undefined : [...new Set(values)];
}

export type Shape = FieldKind | 'list' | 'objects' | 'group';

/** How a key is edited: a value, a list of values, a list of objects (a bridge's topics), a group of keys. */
export function shapeOf(nodes: SchemaNode[]): Shape | undefined {
  const types = new Set(nodes.flatMap((n) => n.type ?? []));
  if (types.has('array')) {
    const items = nodes.flatMap((n) => (n.items === undefined ? [] : branches(n.items, undefined)));
    return items.some((i) => i.properties !== undefined) ? 'objects' : 'list';
  }
  if (nodes.some((n) => n.properties !== undefined)) return 'group';
  if (types.has('boolean')) return 'boolean';
  if (types.has('integer') || types.has('number')) return 'number';
  if (types.has('string')) return 'text';
  return undefined;
}

/** The default the gateway takes for an absent key, as a hint in its empty field. */
export function defaultOf(nodes: SchemaNode[]): string | undefined {
  const found = nodes.find((n) => n.default !== undefined && n.default !== '' && typeof n.default !== 'object');
  return found === undefined ? undefined : `default ${String(found.default as string)}`;
}
