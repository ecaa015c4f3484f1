/**
 * The JSON Schema of the config file (the input side: keys with defaults are optional), so that editors
 * complete and check `edgeferry.yaml`. `npm run schema` writes it to config/edgeferry.schema.json.
 */
import { pathToFileURL } from 'node:url';
import { z } from 'zod';
import { configSchema } from './schema.js';

export function jsonSchema(): string {
  return `${JSON.stringify(z.toJSONSchema(configSchema, { io: 'input' }), null, 2)}\n`;
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  process.stdout.write(jsonSchema());
}
