/**
 * The page-level check of data.mdb (src/store/lmdb/pages.ts): damage that LMDB's own key walk does not see and that
 * crashes or corrupts a writing process later (docs/reliability.md#lmdb-facts). Each case damages one precise field
 * of a real LMDB file written by lmdb-js, and checks that the key walk alone passes it while the page check names it.
 */
import fs from 'node:fs';
import { open } from 'lmdb';
import { describe, expect, it } from 'vitest';
import { checkPages, pageRecords, readMetaPage } from '../../src/store/lmdb/pages.js';
import { walkStore } from '../../src/store/lmdb/verify.js';
import { useDisposer } from '../helpers/disposer.js';
import { namedDatabaseRoot } from '../helpers/lmdb-file.js';

const d = useDisposer();
const PAGE = 4096;

/** A store written the way the gateway writes one: a named database, values rewritten so that pages get freed. */
async function writtenStore(): Promise<string> {
  const dir = d.tempDir('edgeferry-pages-');
  const env = open({ path: dir, noSubdir: false, maxDbs: 12, eventTurnBatching: false });
  const db = env.openDB<Buffer, Buffer>('session-queue', { encoding: 'binary', keyEncoding: 'binary' });
  for (let round = 0; round < 4; round++) {
    await db.batch(() => {
      for (let i = 0; i < 400; i++)
        void db.put(
          Buffer.from(`k${String(i).padStart(4, '0')}`),
          Buffer.alloc(round === 3 && i === 7 ? 9000 : 300, round),
        );
    });
  }
  await env.close();
  return dir;
}

function read(file: string): { bytes: Buffer; meta: NonNullable<ReturnType<typeof readMetaPage>> } {
  const bytes = fs.readFileSync(file);
  const metas = [readMetaPage(bytes.subarray(0, 200)), readMetaPage(bytes.subarray(PAGE, PAGE + 200))];
  const meta = metas.reduce((a, b) => ((b?.txnId ?? 0) > (a?.txnId ?? 0) ? b : a));
  if (meta === undefined) throw new Error('no meta page');
  return { bytes, meta };
}

/** The page numbers of the leaf pages holding the named database's keys, found as the check would: by header. */
function leafPagesWith(bytes: Buffer, text: string): number[] {
  const found: number[] = [];
  for (let pgno = 2; pgno * PAGE < bytes.length; pgno++) {
    const page = bytes.subarray(pgno * PAGE, (pgno + 1) * PAGE);
    if (Number(page.readBigUInt64LE(0)) === pgno && page.readUInt16LE(18) === 0x02 && page.includes(text))
      found.push(pgno);
  }
  return found;
}

function keyWalkPasses(dir: string): boolean {
  const env = open({ path: dir, readOnly: true, noSubdir: false, maxDbs: 12 });
  try {
    const report = walkStore(env, 'quick');
    return report.errors.length === 0 && report.damaged.length === 0;
  } finally {
    void env.close();
  }
}

describe('the page check of data.mdb', () => {
  it('passes an intact store: every page in one tree or free, counts matching', async () => {
    const dir = await writtenStore();
    expect(checkPages(`${dir}/data.mdb`)).toEqual([]);
  });

  it('finds a leaf page whose transaction id lies after the snapshot (LMDB would take it for a page of its own)', async () => {
    const dir = await writtenStore();
    const file = `${dir}/data.mdb`;
    const { bytes, meta } = read(file);
    const [pgno] = leafPagesWith(bytes, 'k0100');
    expect(pgno).toBeDefined();
    bytes.writeBigUInt64LE(BigInt(meta.txnId + 1000), pgno * PAGE + 8);
    fs.writeFileSync(file, bytes);
    expect(keyWalkPasses(dir)).toBe(true);
    expect(checkPages(file).join('\n')).toMatch(
      new RegExp(`database "session-queue": page ${pgno} carries transaction \\d+, newer than`),
    );
  });

  it('finds a freelist record that names a page in use (LMDB would hand it out and overwrite live data)', async () => {
    const dir = await writtenStore();
    const file = `${dir}/data.mdb`;
    const { bytes, meta } = read(file);
    expect(meta.free.root).not.toBe(0xffffffffffffffffn);
    const root = Number(meta.free.root) * PAGE;
    const node = root + 24 + bytes.readUInt16LE(root + 24);
    const data = node + 8 + bytes.readUInt16LE(node + 6);
    expect(Number(bytes.readBigUInt64LE(data))).toBeGreaterThan(0);
    const [live] = leafPagesWith(bytes, 'k0200');
    bytes.writeBigInt64LE(BigInt(live), data + 8);
    fs.writeFileSync(file, bytes);
    expect(keyWalkPasses(dir)).toBe(true);
    expect(checkPages(file).join('\n')).toContain(`the freelist: page ${live} is listed as free but is in use`);
  });

  it('finds an overflow value whose first page was overwritten', async () => {
    const dir = await writtenStore();
    const file = `${dir}/data.mdb`;
    const { bytes } = read(file);
    let overflow = -1;
    for (let pgno = 2; pgno * PAGE < bytes.length && overflow < 0; pgno++) {
      const at = pgno * PAGE;
      if (Number(bytes.readBigUInt64LE(at)) === pgno && bytes.readUInt16LE(at + 18) === 0x04 && bytes[at + 24] === 3)
        overflow = pgno;
    }
    expect(overflow).toBeGreaterThan(1);
    bytes.fill(0xa5, overflow * PAGE, overflow * PAGE + 24);
    fs.writeFileSync(file, bytes);
    expect(keyWalkPasses(dir)).toBe(true);
    expect(checkPages(file).join('\n')).toContain(
      `database "session-queue": overflow page ${overflow} has a damaged header`,
    );
  });

  it('finds a branch or leaf page replaced by random bytes, and a file cut short', async () => {
    const dir = await writtenStore();
    const file = `${dir}/data.mdb`;
    const { bytes } = read(file);
    const [pgno] = leafPagesWith(bytes, 'k0300');
    for (let i = 0; i < PAGE; i++) bytes[pgno * PAGE + i] = (i * 131 + 7) & 0xff;
    fs.writeFileSync(file, bytes);
    expect(checkPages(file).join('\n')).toMatch(
      new RegExp(`database "session-queue": page ${pgno} carries the page number`),
    );
    fs.truncateSync(file, pgno * PAGE);
    expect(checkPages(file)).toEqual([expect.stringMatching(/^the file ends before its last page \d+$/)]);
  });

  it('reads the records of a large damaged database page by page: salvage memory stays bounded', async () => {
    // 80,000 queued 1 KiB messages (a data file of some 170 MB); the session queue's root page overwritten.
    const dir = d.tempDir('edgeferry-pages-large-');
    const env = open({ path: dir, noSubdir: false, maxDbs: 12, eventTurnBatching: false });
    const db = env.openDB<Buffer, Buffer>('session-queue', { encoding: 'binary', keyEncoding: 'binary' });
    const total = 80_000;
    for (let from = 0; from < total; from += 10_000) {
      await db.batch(() => {
        for (let i = from; i < from + 10_000; i++)
          void db.put(Buffer.from(`historian\0${String(i).padStart(8, '0')}`), Buffer.alloc(1024, i));
      });
    }
    await env.close();
    const file = `${dir}/data.mdb`;
    const fileBytes = fs.statSync(file).size;
    const root = namedDatabaseRoot(fs.readFileSync(file), 'session-queue');
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.alloc(PAGE, 0x5a), 0, PAGE, root * PAGE);
    fs.closeSync(fd);

    const seen = new Uint8Array(total);
    const held = (): number => process.memoryUsage().heapUsed + process.memoryUsage().arrayBuffers;
    const before = held();
    let peak = 0;
    let read = 0;
    const found = pageRecords(file);
    expect(found?.db).toBe('session-queue');
    for (const { key, value } of found!.records) {
      const i = Number(key.toString('latin1', key.indexOf(0) + 1));
      if (value.length === 1024 && value.every((b) => b === (i & 0xff))) seen[i] = 1;
      if (++read % 1000 === 0) peak = Math.max(peak, held() - before);
    }
    expect(read).toBe(total);
    expect(seen.every((s) => s === 1)).toBe(true); // every record intact, also those the damaged root cut off
    console.log(
      `pageRecords over a ${Math.round(fileBytes / 1e6)} MB file: ${read} records, at most ${Math.round(peak / 1e6)} MB more held while reading`,
    );
    expect(fileBytes).toBeGreaterThan(100e6);
    expect(peak).toBeLessThan(fileBytes / 4); // holding them all: some 100 MB
  }, 120_000);
});
