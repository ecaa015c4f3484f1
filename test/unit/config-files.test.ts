import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { jsonSchema } from '../../src/config/json-schema.js';
import { loadConfig, parseConfig } from '../../src/config/load.js';

const root = join(import.meta.dirname, '../..');
const configDir = join(root, 'config');

interface JsonSchemaNode {
  properties?: Record<string, JsonSchemaNode>;
  items?: JsonSchemaNode;
  anyOf?: JsonSchemaNode[];
  oneOf?: JsonSchemaNode[];
  allOf?: JsonSchemaNode[];
}

/** Every key of the schema, the variants of unions included (each connector type, each OPC UA user type). */
function keysOf(node: JsonSchemaNode): string[] {
  return [
    ...Object.entries(node.properties ?? {}).flatMap(([key, child]) => [key, ...keysOf(child)]),
    ...(node.items ? keysOf(node.items) : []),
    ...[...(node.anyOf ?? []), ...(node.oneOf ?? []), ...(node.allOf ?? [])].flatMap(keysOf),
  ];
}

describe('config files', () => {
  it('config/edgeferry.schema.json is generated from the current schema', () => {
    expect(
      readFileSync(join(configDir, 'edgeferry.schema.json'), 'utf8'),
      'config/edgeferry.schema.json is stale: regenerate it with `npm run schema`',
    ).toBe(jsonSchema());
  });

  it('the embedded default is a loopback-only broker with anonymous access and data under the package root', () => {
    const config = loadConfig(join(configDir, 'edgeferry.yaml'));
    expect(config.listeners).toEqual([
      {
        type: 'tcp',
        host: '127.0.0.1',
        port: 1883,
        path: '/mqtt',
        allowAnonymous: true,
        maxPendingConnections: 1000,
        maxPendingPerAddress: 100,
      },
    ]);
    expect(config.storage.path).toBe(join(root, 'data'));
    expect(config.bridges).toEqual([]);
  });

  it('the example is valid and mentions every key of the schema', () => {
    const file = join(configDir, 'edgeferry.example.yaml');
    expect(loadConfig(file).bridges).toHaveLength(1);
    const text = readFileSync(file, 'utf8');
    const keys = new Set(keysOf(JSON.parse(jsonSchema()) as JsonSchemaNode));
    expect([...keys].filter((key) => !new RegExp(`\\b${key}:`).test(text))).toEqual([]);
  });

  it("the example's optional sections, sparkplug and every connector type, are valid once uncommented", () => {
    const text = readFileSync(join(configDir, 'edgeferry.example.yaml'), 'utf8');
    const at = text.indexOf('# sparkplug:');
    // One level of `# ` comes off; the alternatives inside (`#   # path: ...`) stay comments.
    const uncommented = text.slice(0, at) + text.slice(at).replace(/^# (?=[ a-z])/gm, '');
    const config = parseConfig(uncommented, 'example.yaml', configDir);
    expect(config.connectors.map((c) => c.type)).toEqual(['modbus', 'opcua', 's7']);
  });
});
