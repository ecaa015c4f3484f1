/** The console's HTTP plumbing: refusals with their status, JSON bodies in and out, the checks every POST gets. */
import type http from 'node:http';
import { asError } from '../util/errors.js';
import { SECURITY_HEADERS } from './static-files.js';

/** Request bodies are small JSON objects; the configuration's changes may be larger (a tag list). */
export const MAX_BODY_BYTES = 16 * 1024;

/** A refusal with its HTTP status; `details` go into the JSON answer next to `error`. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }
}

export function field(body: Record<string, unknown>, name: string): string {
  const value = body[name];
  if (typeof value !== 'string' || value === '') throw new HttpError(400, `"${name}" (a string) is required`);
  return value;
}

export function requirePost(req: http.IncomingMessage): void {
  if (req.method !== 'POST') throw new HttpError(405, 'POST only');
  // A form of another site can POST text/plain without a preflight; it cannot send application/json.
  if (!(req.headers['content-type'] ?? '').startsWith('application/json'))
    throw new HttpError(415, 'send application/json');
}

export async function readJson(req: http.IncomingMessage, maxBytes = MAX_BODY_BYTES): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) throw new HttpError(413, `request body over ${maxBytes} bytes`);
    chunks.push(chunk);
  }
  if (size === 0) return {};
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (err) {
    throw new HttpError(400, `the body is not JSON: ${asError(err).message}`);
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new HttpError(400, 'the body must be a JSON object');
  return body as Record<string, unknown>;
}

export function reply(res: http.ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...SECURITY_HEADERS });
  res.end(JSON.stringify(body));
}
