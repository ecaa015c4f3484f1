/**
 * docs/architecture.md#dependency-rules: which module may import which, where each third-party package may be
 * used, and no import cycle between modules or files. Reads every import line of src/ and connectors/; a
 * violation names the file, the import and the rule.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..', '..');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** Repository-relative path of every module a file imports (type-only imports included), and bare packages. */
function importsOf(file: string): { local: string[]; packages: string[]; typeOnly: Set<string> } {
  const text = readFileSync(file, 'utf8');
  const local: string[] = [];
  const packages: string[] = [];
  const typeOnly = new Set<string>();
  const re =
    /^\s*(import|export)\s+(type\s+)?(?:[^'";]*?\sfrom\s+)?['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|createRequire\([^)]*\)\(\s*['"]([^'"]+)['"]\s*\)/gm;
  for (const m of text.matchAll(re)) {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- a group that did not match is undefined
    const spec = m[3] ?? m[4] ?? m[5];
    if (spec.startsWith('.')) {
      const path = relative(ROOT, resolve(dirname(file), spec)).replace(/\.js$/, '.ts');
      local.push(path);
      if (m[2]) typeOnly.add(path);
    } else if (!spec.startsWith('node:')) {
      packages.push(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]);
    }
  }
  return { local, packages, typeOnly };
}

/** Module of a repository path: `src/broker`, `src/gateway.ts`, `connectors/modbus`, ... */
function moduleOf(path: string): string {
  const parts = path.split('/');
  if (parts[0] === 'connectors') return parts.length > 2 ? `connectors/${parts[1]}` : path;
  return parts.length > 2 ? `src/${parts[1]}` : path;
}

/** Allowed local imports per module: module prefixes or exact files. Type-only imports get the `types` list too. */
const rules: Partial<Record<string, { uses: string[]; types?: string[] }>> = {
  'src/util': { uses: [] },
  'src/protocol': { uses: ['src/util'] },
  'src/config': {
    uses: [
      'src/util',
      'src/protocol/topics.ts',
      'src/sparkplug/schema.ts',
      'connectors/modbus/schema.ts',
      'connectors/opcua/schema.ts',
      'connectors/s7/schema.ts',
    ],
  },
  'src/store': { uses: ['src/util', 'src/protocol'] },
  'src/broker': { uses: ['src/util', 'src/protocol', 'src/store/types.ts'] },
  'src/server': { uses: ['src/util', 'src/protocol', 'src/broker', 'src/store/types.ts'] },
  'src/bridge': {
    uses: ['src/util', 'src/protocol', 'src/broker', 'src/store/types.ts'],
    types: ['src/config/schema.ts'],
  },
  'src/sparkplug': {
    uses: ['src/util', 'src/protocol', 'src/broker', 'connectors/contract.ts'],
    types: ['src/bridge', 'src/config/schema.ts'],
  },
  'src/ops': { uses: ['src/util'], types: ['src/broker', 'src/bridge', 'src/sparkplug', 'src/config/schema.ts'] },
  'src/console': {
    uses: ['src/util', 'connectors/contract.ts'],
    types: ['src/broker', 'src/bridge', 'src/server', 'src/sparkplug'],
  },
  'connectors/modbus': {
    uses: [
      'connectors/contract.ts',
      'connectors/polling.ts',
      'connectors/polled-device.ts',
      'connectors/tag-properties.ts',
      'connectors/modbus',
      'src/util/errors.ts',
      'src/util/logger.ts',
      'src/util/on-first-use.ts',
    ],
  },
  'connectors/opcua': {
    uses: [
      'connectors/contract.ts',
      'connectors/tag-properties.ts',
      'connectors/opcua',
      'src/util/errors.ts',
      'src/util/logger.ts',
    ],
  },
  'connectors/s7': {
    uses: [
      'connectors/contract.ts',
      'connectors/polling.ts',
      'connectors/polled-device.ts',
      'connectors/tag-properties.ts',
      'connectors/s7',
      'src/util/errors.ts',
      'src/util/logger.ts',
    ],
  },
};

/** Where each third-party package may be imported (path prefixes). */
const packageHomes: Partial<Record<string, string[]>> = {
  'mqtt-packet': ['src/protocol/'],
  lmdb: ['src/store/lmdb/open.ts', 'src/store/lmdb/'],
  'sparkplug-payload': ['src/sparkplug/payload.ts'],
  'modbus-serial': ['connectors/modbus/'],
  yaml: ['src/config/'],
  zod: ['src/config/', 'src/sparkplug/schema.ts', 'connectors/'],
  pino: ['src/ops/pino-logger.ts'],
  'pino-pretty': ['src/ops/pino-logger.ts'],
  'prom-client': ['src/ops/metrics.ts'],
  ws: ['src/server/', 'src/bridge/dial.ts'],
  'unix-dgram': ['src/ops/systemd.ts'],
};

function allowed(target: string, list: string[] | undefined): boolean {
  return (list ?? []).some((rule) => target === rule || target.startsWith(rule + '/'));
}

describe('dependency rules (docs/architecture.md#dependency-rules)', () => {
  const files = [...sourceFiles(join(ROOT, 'src')), ...sourceFiles(join(ROOT, 'connectors'))];

  it('every module imports only what its rule allows', () => {
    const violations: string[] = [];
    for (const file of files) {
      const path = relative(ROOT, file);
      const rule = rules[moduleOf(path)];
      if (!rule) continue; // cli.ts, cli/, gateway.ts, gateway/ and connectors/*.ts at the top may use anything
      const { local, typeOnly } = importsOf(file);
      for (const target of local) {
        if (moduleOf(target) === moduleOf(path)) continue;
        if (allowed(target, rule.uses) || (typeOnly.has(target) && allowed(target, rule.types))) continue;
        violations.push(`${path} imports ${target}`);
      }
    }
    expect(violations).toEqual([]);
  });

  it('each third-party package stays inside its one module', () => {
    const violations: string[] = [];
    for (const file of files) {
      const path = relative(ROOT, file);
      for (const pkg of importsOf(file).packages) {
        const homes = pkg.startsWith('node-opcua') ? ['connectors/opcua/'] : packageHomes[pkg];
        if (!homes) violations.push(`${path} imports ${pkg}, which has no home in the rules`);
        else if (!homes.some((home) => path.startsWith(home)))
          violations.push(`${path} imports ${pkg} (allowed in ${homes.join(', ')})`);
      }
    }
    expect(violations).toEqual([]);
  });

  it('has no import cycles between modules', () => {
    const edges = new Map<string, Set<string>>();
    for (const file of files) {
      const from = moduleOf(relative(ROOT, file));
      for (const target of importsOf(file).local) {
        const to = moduleOf(target);
        if (to !== from) (edges.get(from) ?? edges.set(from, new Set()).get(from)!).add(to);
      }
    }
    expect(cyclesIn(edges)).toEqual([]);
  });

  it('has no import cycles between files, type-only imports included', () => {
    const edges = new Map<string, Set<string>>();
    for (const file of files) edges.set(relative(ROOT, file), new Set(importsOf(file).local));
    expect(cyclesIn(edges)).toEqual([]);
  });
});

/** One cycle (`a → b → a`) for every edge that closes one in a depth-first walk: none iff the graph has no cycle. */
function cyclesIn(edges: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  const cycles: string[] = [];
  const done = new Set<string>();
  const stack: string[] = [];
  const visit = (node: string): void => {
    const at = stack.indexOf(node);
    if (at >= 0) {
      cycles.push([...stack.slice(at), node].join(' → '));
      return;
    }
    if (done.has(node)) return;
    stack.push(node);
    for (const next of edges.get(node) ?? []) visit(next);
    stack.pop();
    done.add(node);
  };
  for (const node of [...edges.keys()].sort()) visit(node);
  return cycles;
}
