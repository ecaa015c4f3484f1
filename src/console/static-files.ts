/**
 * The console's front end: the files vite built into dist/console, served from memory (read once), with their
 * content types. index.html is revalidated on every load; files under assets/ carry a content hash in their name,
 * so browsers keep them for a year.
 */
import { readFileSync } from 'node:fs';
import type http from 'node:http';
import { extname, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.woff2': 'font/woff2',
};

/** No inline scripts, nothing from elsewhere: a plant network has no CDN, and a page that loads nothing foreign leaks nothing. */
export const SECURITY_HEADERS = {
  'content-security-policy':
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
} as const;

/** dist/src/console/ → dist/console/ */
const ROOT = fileURLToPath(new URL('../../console/', import.meta.url));

export class StaticFiles {
  private readonly cache = new Map<string, Buffer>();

  constructor(private readonly root = ROOT) {}

  /** Serves `path` (relative to /console/); false when there is no such file. */
  serve(path: string, res: http.ServerResponse): boolean {
    const name = path === '' || path.endsWith('/') ? `${path}index.html` : path;
    const file = resolve(this.root, name);
    if (!file.startsWith(this.root.endsWith(sep) ? this.root : this.root + sep)) return false;
    let body = this.cache.get(file);
    if (body === undefined) {
      try {
        body = readFileSync(file);
      } catch {
        return false; // not cached: unknown paths must not grow the map
      }
      this.cache.set(file, body);
    }
    res.writeHead(200, {
      'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
      'cache-control': name.startsWith('assets/') ? 'public, max-age=31536000, immutable' : 'no-cache',
      ...SECURITY_HEADERS,
    });
    res.end(body);
    return true;
  }
}
