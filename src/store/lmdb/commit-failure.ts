/**
 * What a failed LMDB commit means. lmdb-js rejects the batch with a generic "Commit failed" error whose
 * `commitError` promise carries the OS error; a full disk is the common case on an edge box and must be told
 * apart from a broken one: full means "refuse new messages with 0x97 until there is room", a real I/O error
 * means "something is wrong with the disk".
 */
import fs from 'node:fs';

const ENOSPC = 28;
const EIO = 5;
/** LMDB's MDB_MAP_FULL (the map size, which lmdb-js grows on its own; seen only when it cannot). */
const MDB_MAP_FULL = -30792;
/** An EIO with less free space than this (plus the batch's own size) on the data directory's filesystem is a full disk. */
const DISK_FULL_SLACK_BYTES = 1024 * 1024;
/** How long `commitCause` waits for lmdb-js to report the OS error behind a failed commit. */
const CAUSE_WAIT_MS = 1000;

/**
 * The error behind a failed commit: lmdb-js rejects its `commitError` promise with it in the same callback as
 * the batch (verified with lmdb 3.5.6); `err` itself when there is none.
 */
export function commitCause(err: unknown): Promise<unknown> {
  const detail = (err as { commitError?: Promise<unknown> } | undefined)?.commitError;
  if (detail === undefined || typeof detail.then !== 'function') return Promise.resolve(err);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(err), CAUSE_WAIT_MS);
    detail.then(
      () => {
        clearTimeout(timer);
        resolve(err);
      },
      (cause: unknown) => {
        clearTimeout(timer);
        resolve(cause);
      },
    );
  });
}

/**
 * Whether `cause` (from `commitCause`) means the disk under `dir` is full. LMDB reports ENOSPC when a page
 * write fails outright, but EIO when a write came up short because the filesystem filled in the middle of it
 * (mdb.c: "short write, filesystem full?"), so an EIO counts as full when the filesystem has less room than
 * the batch (`batchBytes`) plus some slack; any other EIO is a real I/O error.
 */
export function isDiskFull(cause: unknown, dir: string, batchBytes: number): boolean {
  const code = (cause as { code?: unknown } | undefined)?.code;
  if (code === ENOSPC || code === 'ENOSPC' || code === MDB_MAP_FULL) return true;
  if (code !== EIO && code !== 'EIO') return false;
  return diskHasRoom(dir, batchBytes) === false;
}

/**
 * Whether the filesystem under `dir` has room for `bytes` more plus some slack; undefined when it cannot tell.
 * While the disk is full, the store asks this before it lets LMDB try a write again, since every failed write
 * makes LMDB print a "Write error" line on stderr, which nothing can catch.
 */
export function diskHasRoom(dir: string, bytes: number): boolean | undefined {
  try {
    const fsStats = fs.statfsSync(dir);
    return fsStats.bavail * fsStats.bsize >= DISK_FULL_SLACK_BYTES + bytes;
  } catch {
    return undefined; // cannot tell: a full disk is then only known by a failed write
  }
}

let muted = false;

/**
 * lmdb-js prints every failed commit's OS error with `console.error` (write.js) on stderr, unstructured; the
 * store reports the same failure itself, once per episode, so those lines are dropped. Everything else printed
 * with console.error passes. (LMDB's own C-level "Write error" line cannot be caught from here; the store keeps
 * it to the write that found the disk full: see `diskHasRoom`.)
 */
export function muteLmdbCommitErrors(): void {
  if (muted) return;
  muted = true;
  const print = console.error.bind(console);
  console.error = (...args: unknown[]): void => {
    if (args.length === 1 && isLmdbCommitError(args[0])) return;
    print(...args);
  };
}

function isLmdbCommitError(value: unknown): boolean {
  return (
    value instanceof Error &&
    typeof (value as { code?: unknown }).code === 'number' &&
    /[/\\]lmdb[/\\]write\.js/.test(value.stack ?? '')
  );
}
