/** What a failed LMDB commit means: a full disk is EF_STORE_FULL (0x97), a broken one stays a write error. */
import { describe, expect, it } from 'vitest';
import { commitCause, isDiskFull } from '../../src/store/lmdb/commit-failure.js';
import { tempDir } from '../helpers/temp.js';

describe('commit failure classification', () => {
  const dir = tempDir('edgeferry-commit-');

  it('counts ENOSPC and MDB_MAP_FULL as a full disk', () => {
    expect(isDiskFull({ code: 28 }, dir, 0)).toBe(true);
    expect(isDiskFull({ code: 'ENOSPC' }, dir, 0)).toBe(true);
    expect(isDiskFull({ code: -30792 }, dir, 0)).toBe(true);
  });

  it('counts an EIO as a full disk only when the filesystem has no room for the batch', () => {
    // This test's filesystem has room for a small batch, but not for one larger than any disk.
    expect(isDiskFull({ code: 5 }, dir, 4096)).toBe(false);
    expect(isDiskFull({ code: 5 }, dir, Number.MAX_SAFE_INTEGER)).toBe(true);
    expect(isDiskFull({ code: 5 }, `${dir}/missing/dir`, Number.MAX_SAFE_INTEGER)).toBe(false);
  });

  it('keeps other errors write errors', () => {
    expect(isDiskFull({ code: -30796 /* MDB_CORRUPTED */ }, dir, Number.MAX_SAFE_INTEGER)).toBe(false);
    expect(isDiskFull(new Error('boom'), dir, Number.MAX_SAFE_INTEGER)).toBe(false);
  });

  it('takes the OS error from lmdb-js commitError when there is one', async () => {
    const cause = Object.assign(new Error('Input/output error'), { code: 5 });
    const err = Object.assign(new Error('Commit failed'), { commitError: Promise.reject(cause) });
    expect(await commitCause(err)).toBe(cause);
    const plain = new Error('plain');
    expect(await commitCause(plain)).toBe(plain);
  });
});
