/**
 * Replaces a file the operator owns, atomically and without changing who may read it: the new content goes to a
 * temp file beside the target (through a symlink, to the file it points at), gets the old file's mode, owner and
 * group, is fsynced, renamed over the target, and the directory is fsynced, so a crash leaves the old file or
 * the new one, never a mix, and a service that reads the file as another user keeps reading it.
 */
import {
  closeSync,
  fchmodSync,
  fchownSync,
  fstatSync,
  fsyncSync,
  lstatSync,
  openSync,
  readlinkSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs';
import type { Stats } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';

/** The file `path` names once every symlink is followed; a dangling link gives the path it points at. */
export function symlinkTarget(path: string): string {
  let current = resolve(path);
  for (let hops = 0; hops < 40; hops++) {
    const link = statIfExists(current, lstatSync);
    if (link === undefined || !link.isSymbolicLink()) return current;
    current = resolve(dirname(current), readlinkSync(current));
  }
  throw new Error(`${path}: too many levels of symbolic links`);
}

/**
 * Writes `text` as the new content of `path`. A new file gets `newMode` and the caller's owner. Throws, leaving
 * the old file as it was, when the old owner or group cannot be kept (only root may give a file away).
 */
export function replaceFile(path: string, text: string, newMode: number): void {
  const target = symlinkTarget(path);
  const old = statIfExists(target);
  const tmp = join(dirname(target), `.${basename(target)}.tmp-${process.pid}`);
  const fd = openSync(tmp, 'wx', 0o600);
  try {
    try {
      writeSync(fd, text);
      // Set explicitly: the mode given to open() is reduced by the umask.
      fchmodSync(fd, old ? old.mode & 0o7777 : newMode);
      const created = fstatSync(fd);
      if (old && (old.uid !== created.uid || old.gid !== created.gid)) {
        try {
          fchownSync(fd, old.uid, old.gid);
        } catch (err) {
          throw new Error(
            `cannot keep the owner ${old.uid}:${old.gid} of ${target} (${(err as Error).message}): run this as root or as the file's owner`,
            { cause: err },
          );
        }
        // chown clears set-id bits: set the mode again.
        fchmodSync(fd, old.mode & 0o7777);
      }
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(tmp, target);
  } catch (err) {
    unlinkQuietly(tmp);
    throw err;
  }
  const dir = openSync(dirname(target), 'r');
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
}

/** `stat` (or `lstat`) of `path`, or undefined when there is nothing there. */
function statIfExists(path: string, stat: (path: string) => Stats = statSync): Stats | undefined {
  try {
    return stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone: nothing to clean up
  }
}
