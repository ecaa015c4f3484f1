/** Temporary directories for tests. Remove them in afterEach (see `useDisposer().tempDir()`). */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Creates a fresh directory under the OS temp dir, e.g. `/tmp/edgeferry-abc123`. */
export function tempDir(prefix = 'edgeferry-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

/** Removes a directory tree; missing is fine. */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
