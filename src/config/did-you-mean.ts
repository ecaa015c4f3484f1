/**
 * "Did you mean": the known key nearest to an unknown one (`listners` → `listeners`, `url` → `urls`), from the keys
 * the schema has at that place in the file, every variant of a union included (each connector type).
 */
import { z } from 'zod';
import type { Path } from './profiles.js';
import { configSchema } from './schema.js';

/** Typos a suggestion may undo: two edits (a swapped pair of letters is two). */
const MAX_DISTANCE = 2;

interface SchemaNode {
  properties?: Record<string, SchemaNode>;
  additionalProperties?: SchemaNode | boolean;
  items?: SchemaNode;
  anyOf?: SchemaNode[];
  oneOf?: SchemaNode[];
  allOf?: SchemaNode[];
}

let schema: SchemaNode | undefined;

/** The known key at `path` nearest to `key`, if one is within two edits of it and not a key of one letter. */
export function suggestKey(path: Path, key: string): string | undefined {
  schema ??= z.toJSONSchema(configSchema, { io: 'input' }) as SchemaNode;
  let nodes = variants(schema);
  for (const segment of path) {
    nodes = nodes.flatMap((node) => {
      const next =
        typeof segment === 'number' || /^\d+$/.test(String(segment))
          ? node.items
          : (node.properties?.[segment] ?? additional(node));
      return next === undefined ? [] : variants(next);
    });
  }
  const known = new Set(nodes.flatMap((node) => Object.keys(node.properties ?? {})));
  let best: { key: string; distance: number } | undefined;
  for (const candidate of known) {
    const distance = editDistance(key.toLowerCase(), candidate.toLowerCase());
    if (distance <= Math.min(MAX_DISTANCE, candidate.length - 1) && (best === undefined || distance < best.distance))
      best = { key: candidate, distance };
  }
  return best?.key;
}

function additional(node: SchemaNode): SchemaNode | undefined {
  return typeof node.additionalProperties === 'object' ? node.additionalProperties : undefined;
}

/** A node and the alternatives it stands for. */
function variants(node: SchemaNode): SchemaNode[] {
  const alternatives = [...(node.anyOf ?? []), ...(node.oneOf ?? []), ...(node.allOf ?? [])];
  return [node, ...alternatives.flatMap(variants)];
}

/** Levenshtein distance: insertions, deletions and substitutions. */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length];
}
