/**
 * The integrity walk of `storage.verifyOnStart`, in process: the gateway runs it in a child
 * (verify-child.ts; the integration tests cover that and exit 3).
 */
import path from 'node:path';
import { open } from 'lmdb';
import { afterEach, describe, expect, it } from 'vitest';
import { removeDir, tempDir as makeTempDir } from '../helpers/temp.js';
import { createMessage } from '../../src/protocol/message.js';
import { openLmdbStore } from '../../src/store/lmdb/open.js';
import type { LmdbStore } from '../../src/store/lmdb/store.js';
import { describeDamage, verifyInChild, walkStore } from '../../src/store/lmdb/verify.js';
import { silentLogger } from '../../src/util/logger.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) removeDir(d);
});

function tempDir(): string {
  const d = makeTempDir('edgeferry-verify-');
  dirs.push(d);
  return d;
}

function walk(dir: string, mode: 'quick' | 'full') {
  const env = open({ path: dir, readOnly: true, noSubdir: false, maxDbs: 12 });
  try {
    return walkStore(env, mode);
  } finally {
    void env.close();
  }
}

describe('the store integrity walk', () => {
  it('says that the check could not start, not that the store is damaged, when the runtime cannot be started', async () => {
    const dir = tempDir();
    const store = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger });
    await store.close();
    const execPath = process.execPath;
    process.execPath = path.join(dir, 'no-such-node');
    try {
      expect(() => verifyInChild(dir, 'quick')).toThrow(
        /could not start \(.*ENOENT.*\): nothing is known to be damaged/,
      );
    } finally {
      process.execPath = execPath;
    }
  });

  it('passes an intact store, also one from before some databases existed', async () => {
    const dir = tempDir();
    const store = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger });
    await store.sessions.enqueue(
      'historian',
      createMessage({ topic: 't', payload: Buffer.from('x'), qos: 1, origin: 'c' }),
    );
    await store.close();
    expect(walk(dir, 'quick')).toMatchObject({ damaged: [], errors: [] });
    expect(walk(dir, 'full')).toMatchObject({ damaged: [], errors: [] });

    const old = tempDir();
    const env = open({ path: old, noSubdir: false, maxDbs: 12 });
    env.openDB('meta', { encoding: 'json' }).putSync('schema', { version: 1 });
    await env.close();
    expect(walk(old, 'full')).toEqual({ records: 1, damaged: [], errors: [] });
  });

  it('names the session and seq of a value whose checksum fails (full walk only)', async () => {
    const dir = tempDir();
    const store = (await openLmdbStore({
      path: dir,
      sync: 'full',
      maxBytes: 0,
      log: silentLogger,
    })) as unknown as LmdbStore;
    const seqs: number[] = [];
    for (let i = 0; i < 3; i++)
      seqs.push(
        await store.sessions.enqueue(
          'historian',
          createMessage({ topic: 't', payload: Buffer.alloc(50, i), qos: 1, origin: 'c' }),
        ),
      );
    const key = [...store.queueDb.getKeys({ snapshot: false })][1];
    const value = Buffer.from(store.queueDb.get(key)!);
    value[30] ^= 0xff;
    store.queueDb.putSync(key, value);
    await store.close();
    expect(walk(dir, 'quick')).toMatchObject({ damaged: [], errors: [] });
    const report = walk(dir, 'full');
    expect(describeDamage(report)).toEqual([`queue of session "historian": 1 damaged record (seq ${seqs[1]})`]);
  });
});
