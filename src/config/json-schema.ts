/**
 * The JSON Schema of the config file (the input side: keys with defaults are optional), so that editors
 * complete and check `edgeferry.yaml`. `npm run schema` writes it to config/edgeferry.schema.json.
 */
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { configSchema } from './schema.js';

export function jsonSchema(): string {
  const schema = z.toJSONSchema(configSchema, { io: 'input' });
  allowProfileConnectors(schema);
  return `${JSON.stringify(schema, null, 2)}\n`;
}

/**
 * Profiles are expanded before validation (src/config/profiles.ts), so a connector that names a profile is
 * complete only after expansion: the editor schema accepts it as an object with `profile` and any overrides.
 */
function allowProfileConnectors(schema: { properties?: unknown }): void {
  const connectors = (schema.properties as Record<string, { items?: object }> | undefined)?.connectors;
  if (connectors?.items === undefined) throw new Error('json-schema: no connectors array in the config schema');
  connectors.items = {
    anyOf: [
      connectors.items,
      { type: 'object', required: ['profile'], properties: { profile: { type: 'string', minLength: 1 } } },
    ],
  };
}

if ((process.argv[1] as string | undefined) !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.stdout.write(jsonSchema());
}
