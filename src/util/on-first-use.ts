/**
 * Loads a CommonJS package the first time it is needed, synchronously. A package costs memory for as long as the
 * process lives once it is loaded (its code, its dependencies' code, their caches): a gateway without Modbus
 * devices, WebSocket listeners or pretty logs should not carry modbus-serial with serialport, ws or pino-pretty
 * (docs/operations.md#memory). Node's module cache makes every later call a field read.
 *
 * Node's own modules too: `require` returns the module object as it is, where an ESM `import` of it reads every
 * export to build its namespace, getters included (on Node.js 24, `http.WebSocket` loads undici: 3 MB).
 */
import { createRequire } from 'node:module';
import type * as Http from 'node:http';
import type * as Https from 'node:https';
import type * as Tls from 'node:tls';

const requireHere = createRequire(import.meta.url);

export function onFirstUse<T>(id: string): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= requireHere(id) as T);
}

/** node:tls, for TLS listeners, bridges and endpoints only (3 MB on Node.js 24). */
export const tlsModule = onFirstUse<typeof Tls>('node:tls');
/** node:http and node:https, for WebSocket listeners and the metrics endpoint only. */
export const httpModule = onFirstUse<typeof Http>('node:http');
export const httpsModule = onFirstUse<typeof Https>('node:https');
