/**
 * Loads a CommonJS package the first time it is needed, synchronously. A package costs memory for as long as the
 * process lives once it is loaded (its code, its dependencies' code, their caches): a gateway without Modbus
 * devices, WebSocket listeners or pretty logs should not carry modbus-serial with serialport, ws or pino-pretty
 * (docs/operations.md#memory). Node's module cache makes every later call a field read.
 */
import { createRequire } from 'node:module';

const requireHere = createRequire(import.meta.url);

export function onFirstUse<T>(id: string): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= requireHere(id) as T);
}
