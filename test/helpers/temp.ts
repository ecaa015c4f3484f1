/** Temporary directories for tests. Remove them in afterEach (see `useDisposer().tempDir()`). */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Creates a fresh directory under the OS temp dir, e.g. `/tmp/edgeferry-abc123`, or under `parent` where a test
 * needs it elsewhere (e.g. inside the repository, for a compiled file to resolve its packages).
 */
export function tempDir(prefix = 'edgeferry-', parent = tmpdir()): string {
  return mkdtempSync(join(parent, prefix));
}

/** Removes a directory tree; missing is fine. */
export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}
