/**
 * Eclipse Tahu's JavaScript Sparkplug client (npm `sparkplug-client`), for its payload compression: the reference
 * of the convention src/sparkplug/compression.ts implements, so that our compressed payloads are checked by
 * Tahu's decoder and Tahu's compressed commands by ours, never ours by ours.
 *
 * The package exports only `newClient`, which connects; the payload methods need no connection, so one client is
 * made pointing nowhere, ended at once, and its methods are used.
 */
import { createRequire } from 'node:module';

/** A payload object as Tahu's methods take and return it (sparkplug-payload's `UPayload`). */
export interface TahuPayload {
  timestamp?: number | { toNumber(): number };
  seq?: number | { toNumber(): number };
  uuid?: string;
  body?: Uint8Array;
  metrics?: { name?: string; type?: string; value?: unknown }[];
}

interface TahuClient {
  compressPayload(payload: Uint8Array, options: { algorithm: 'DEFLATE' | 'GZIP' }): TahuPayload;
  decompressPayload(payload: TahuPayload): Uint8Array;
  encodePayload(payload: TahuPayload): Uint8Array;
  decodePayload(payload: Uint8Array): TahuPayload;
  client: { end(force: boolean): void };
}

let client: TahuClient | undefined;

function tahuClient(): TahuClient {
  if (client) return client;
  const { newClient } = createRequire(import.meta.url)('sparkplug-client') as {
    newClient(config: object): TahuClient;
  };
  client = newClient({
    serverUrl: 'mqtt://127.0.0.1:1',
    username: '',
    password: '',
    groupId: 'tahu',
    edgeNode: 'tahu',
    clientId: 'tahu-payload-methods',
    publishDeath: false,
  });
  client.client.end(true);
  return client;
}

/** Tahu's decoder: the payload inside a compressed one (`uuid` SPBV1.0_COMPRESSED). */
export function tahuDecompress(wire: Uint8Array): Uint8Array {
  const c = tahuClient();
  const outer = c.decodePayload(wire);
  if (outer.uuid !== 'SPBV1.0_COMPRESSED') throw new Error(`not a compressed payload (uuid ${outer.uuid})`);
  return c.decompressPayload(outer);
}

/** Tahu's encoder: `payload` (encoded) compressed and wrapped, encoded for the wire. */
export function tahuCompress(payload: Uint8Array, algorithm: 'DEFLATE' | 'GZIP'): Uint8Array {
  const c = tahuClient();
  return c.encodePayload(c.compressPayload(payload, { algorithm }));
}

/** The outer payload as Tahu decodes it. */
export function tahuDecode(wire: Uint8Array): TahuPayload {
  return tahuClient().decodePayload(wire);
}
