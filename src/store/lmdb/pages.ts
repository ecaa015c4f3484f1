/**
 * A page-level check of `data.mdb`, read as a plain file: what LMDB itself never checks. LMDB trusts every page it
 * reaches; a damaged page header, a child pointer into a wrong page, a freelist record naming a page in use, or a
 * page whose transaction id lies in the future (LMDB then takes a clean mapped page for one of its own dirty,
 * malloc'd pages and corrupts the heap) crash the process or corrupt the store later, often far from the damage.
 * Walking the keys through LMDB does not see most of these (the freelist is never walked; page headers beyond
 * the keys are not looked at), so the store is walked here page by page from the snapshot LMDB will open, the
 * way `mdb_chk` does, before LMDB touches it (docs/reliability.md#lmdb-facts).
 *
 * Checked: every page reached from the snapshot's meta (the freelist, the main database and every named
 * database, branch, leaf and overflow pages) has its own page number, a known kind at the right depth, a
 * transaction id not newer than the snapshot, sane bounds, nodes inside the page and keys in order; each
 * tree's page and entry counts match its record; and every page of the file up to the snapshot's last page is
 * either in exactly one tree or in the freelist, never both, never twice.
 *
 * The layout is LMDB's as built into lmdb-js 3.x (liblmdb's mdb.master3 branch, 64-bit): 24-byte page headers.
 */
import fs from 'node:fs';

// Page header: pgno u64, txnid u64, pad u16, flags u16, lower u16 + upper u16 (or pages u32 for overflow).
const PAGE_HEADER = 24;
const P_BRANCH = 0x01;
const P_LEAF = 0x02;
const P_OVERFLOW = 0x04;
const P_META = 0x08;
// Node header: lo u16, hi u16, flags u16, ksize u16.
const NODE_HEADER = 8;
const F_BIGDATA = 0x01;
const F_SUBDATA = 0x02;
// MDB_db: pad u32, flags u16, depth u16, branch u64, leaf u64, overflow u64, entries u64, root u64.
const DB_RECORD = 48;
const MDB_INTEGERKEY = 0x08;
const MDB_DUPSORT = 0x04;
const P_INVALID = 0xffffffffffffffffn;
// MDB_meta after the page header: magic u32, version u32, address u64, mapsize u64, dbs[2], last_pg u64, txnid u64,
// boot_id i64.
const MDB_MAGIC = 0xbeefc0de;
const META_DBS = PAGE_HEADER + 24;
const META_LAST_PAGE = META_DBS + 2 * DB_RECORD;
const META_TXNID = META_LAST_PAGE + 8;
const META_BOOT_ID = META_TXNID + 8;
const META_BYTES = META_BOOT_ID + 8;
/** lmdb-js's flag for overlapping sync, recorded in the meta's flags (MDB_OVERLAPPINGSYNC). */
const OVERLAPPING_SYNC = 0x1000;

/** What one problem report may grow to: the first few problems of each tree say enough. */
const PROBLEMS_PER_TREE = 5;

interface DbRecord {
  readonly flags: number;
  readonly depth: number;
  readonly branchPages: number;
  readonly leafPages: number;
  readonly overflowPages: number;
  readonly entries: number;
  readonly root: bigint;
}

export interface MetaPage {
  readonly pageSize: number;
  readonly flags: number;
  readonly lastPage: number;
  readonly txnId: number;
  readonly bootId: bigint;
  readonly free: DbRecord;
  readonly main: DbRecord;
}

function readDb(buf: Buffer, at: number): DbRecord {
  return {
    flags: buf.readUInt16LE(at + 4),
    depth: buf.readUInt16LE(at + 6),
    branchPages: Number(buf.readBigUInt64LE(at + 8)),
    leafPages: Number(buf.readBigUInt64LE(at + 16)),
    overflowPages: Number(buf.readBigUInt64LE(at + 24)),
    entries: Number(buf.readBigUInt64LE(at + 32)),
    root: buf.readBigUInt64LE(at + 40),
  };
}

/** The meta record in `buf` (at least META_BYTES long), or undefined when it is not an LMDB meta page. */
export function readMetaPage(buf: Buffer): MetaPage | undefined {
  if (buf.length < META_BYTES || (buf.readUInt16LE(18) & P_META) === 0) return undefined;
  if (buf.readUInt32LE(PAGE_HEADER) !== MDB_MAGIC) return undefined;
  return {
    pageSize: buf.readUInt32LE(META_DBS),
    flags: buf.readUInt16LE(META_DBS + 4),
    lastPage: Number(buf.readBigUInt64LE(META_LAST_PAGE)),
    txnId: Number(buf.readBigUInt64LE(META_TXNID)),
    bootId: buf.readBigInt64LE(META_BOOT_ID),
    free: readDb(buf, META_DBS),
    main: readDb(buf, META_DBS + DB_RECORD),
  };
}

/** This boot's id as lmdb-js records it in a meta page: `strtoll` of /proc's boot id in base 16 (its first group). */
function lmdbBootId(): bigint {
  try {
    const id = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8');
    const hex = /^[0-9a-f]+/i.exec(id)?.[0];
    return hex === undefined ? 0n : BigInt(`0x${hex}`);
  } catch {
    return 0n;
  }
}

/**
 * The meta LMDB opens, as lmdb-js's `mdb_pick_meta` chooses it with overlapping sync (on by default): the newest
 * of the meta copies (pages 0 and 1, and the flushed copy in the second half of page 0), unless the newest was
 * written before this boot: then the older one, whose pages were flushed to disk before it was written.
 */
function pickMeta(metas: readonly (MetaPage | undefined)[], bootId: bigint): MetaPage | undefined {
  let picked: MetaPage | undefined;
  for (const m of metas) {
    if (picked === undefined) {
      picked = m;
      continue;
    }
    if (m === undefined || m.txnId === 0) continue;
    const latest = picked.txnId >= m.txnId ? picked : m;
    const older = picked.txnId > m.txnId ? m : picked;
    picked =
      (latest.bootId !== 0n && latest.bootId === bootId) || (latest.flags & OVERLAPPING_SYNC) === 0 ? latest : older;
  }
  return picked;
}

/** A 64-bit little-endian integer as a number: page numbers and transaction ids stay far below 2^53. */
function u64(buf: Buffer, at: number): number {
  return buf.readUInt32LE(at) + buf.readUInt32LE(at + 4) * 0x1_0000_0000;
}

/** Blocks of pages read ahead: B-trees written in order lie mostly in order in the file. */
const BLOCK_PAGES = 64;

/** Pages of the file, read a block at a time. */
class PageFile {
  private readonly block: Buffer;
  private blockStart = -1;
  private readonly header = Buffer.alloc(PAGE_HEADER);

  constructor(
    private readonly fd: number,
    readonly pageSize: number,
  ) {
    this.block = Buffer.alloc(BLOCK_PAGES * pageSize);
  }

  /** Page `pgno` (zeros past the end of the file), valid until the next call. */
  page(pgno: number): Buffer {
    const start = pgno - (pgno % BLOCK_PAGES);
    if (start !== this.blockStart) {
      const n = fs.readSync(this.fd, this.block, 0, this.block.length, start * this.pageSize);
      this.block.fill(0, n);
      this.blockStart = start;
    }
    const at = (pgno - start) * this.pageSize;
    return this.block.subarray(at, at + this.pageSize);
  }

  /** The header of page `pgno` alone, without disturbing the block (overflow runs, met inside a leaf page). */
  pageHeader(pgno: number): Buffer {
    this.header.fill(0);
    fs.readSync(this.fd, this.header, 0, PAGE_HEADER, pgno * this.pageSize);
    return this.header;
  }

  /** `length` bytes of an overflow run starting at page `pgno`, after its header. */
  overflowData(pgno: number, length: number): Buffer {
    const data = Buffer.alloc(length);
    fs.readSync(this.fd, data, 0, length, pgno * this.pageSize + PAGE_HEADER);
    return data;
  }
}

/** A node of a branch page (`child`) or a leaf page (a value of `size` bytes at `dataAt`, or on overflow pages). */
interface PageNode {
  readonly key: Buffer;
  readonly flags: number;
  readonly size: number;
  readonly dataAt: number;
  readonly child: number;
}

/** The walk of one snapshot: which pages it uses, and what is wrong. */
class SnapshotWalk {
  /** Per page: 0 not reached, 1 in a tree, 2 in the freelist. */
  private readonly owner: Uint8Array;
  readonly problems: string[] = [];
  /** Named databases of the main database, as the walk found them. */
  readonly named: { name: string; db: DbRecord }[] = [];
  /** The leaf pages that checked out, by named database. */
  private readonly leaves = new Map<string, number[]>();
  /** Named databases whose tree has a problem. */
  readonly damagedTrees: string[] = [];
  /** The freelist walked without a problem, and no page both free and in use. */
  freelistIntact = false;

  constructor(
    private readonly file: PageFile,
    private readonly meta: MetaPage,
  ) {
    this.owner = new Uint8Array(meta.lastPage + 1);
  }

  run(): void {
    this.tree('the main database', this.meta.main, (key, data) => {
      this.named.push({ name: key.toString('utf8').replace(/\0$/, ''), db: readDb(data, 0) });
    });
    for (const { name, db } of this.named) {
      const leaves: number[] = [];
      this.leaves.set(name, leaves);
      if (this.tree(`database "${name}"`, db, undefined, undefined, leaves)) this.damagedTrees.push(name);
    }
    const freePages: number[] = [];
    this.freelistIntact = !this.tree('the freelist', this.meta.free, undefined, (data, problem) =>
      this.freeRecord(data, freePages, problem),
    );
    let clashes = 0;
    for (const pgno of freePages) {
      if (this.owner[pgno] !== 0 && ++clashes <= PROBLEMS_PER_TREE) {
        this.problems.push(
          `the freelist: page ${pgno} is listed as free but ${this.owner[pgno] === 1 ? 'is in use' : 'is listed twice'}`,
        );
      }
      this.owner[pgno] = 2;
    }
    if (clashes > 0) this.freelistIntact = false;
    if (clashes > PROBLEMS_PER_TREE)
      this.problems.push(
        `the freelist: ${clashes - PROBLEMS_PER_TREE} more pages listed as free are in use or listed twice`,
      );
    let lost = 0;
    for (let pgno = 2; pgno <= this.meta.lastPage; pgno++) if (this.owner[pgno] === 0) lost++;
    if (lost > 0)
      this.problems.push(`${lost} page${lost === 1 ? ' is' : 's are'} cut off: in no database and not free`);
  }

  /**
   * The records of database `name` that can be read from the file, after `run()`: those of its leaf pages that
   * checked out, and those of the leaf pages that no tree reaches and the freelist does not list. In an intact file
   * there are none of the latter, so with the damage in this database alone they are its leaves cut off by a damaged
   * branch page, still whole (own page number, a leaf, not newer than the snapshot, nodes in order). Values on
   * overflow pages are read too. Read page by page as they are iterated.
   */
  *records(name: string): Generator<{ key: Buffer; value: Buffer }> {
    const quiet = (): boolean => false;
    for (const pgno of this.leavesOf(name)) {
      const page = this.file.page(pgno);
      if (!this.header(page, pgno, P_LEAF, quiet)) continue;
      for (const node of this.nodes(page, pgno, P_LEAF, false, quiet) ?? []) {
        if (node.flags === 0) {
          yield { key: Buffer.from(node.key), value: Buffer.from(page.subarray(node.dataAt, node.dataAt + node.size)) };
        } else if (node.flags === F_BIGDATA) {
          const first = u64(page, node.dataAt);
          if (this.overflowIntact(first, node.size))
            yield { key: Buffer.from(node.key), value: this.file.overflowData(first, node.size) };
        }
      }
    }
  }

  /** The leaf pages of database `name` that checked out, then the pages no tree reaches and the freelist does not list. */
  private *leavesOf(name: string): Generator<number> {
    yield* this.leaves.get(name) ?? [];
    for (let pgno = 2; pgno <= this.meta.lastPage; pgno++) if (this.owner[pgno] === 0) yield pgno;
  }

  /**
   * Walks one B-tree; true when it has a problem. `sub` receives the named databases of the main database;
   * `values` receives each value of the tree (the freelist's records), with a way to report a problem in it;
   * `leaves` the page numbers of the leaf pages that checked out.
   */
  private tree(
    what: string,
    db: DbRecord,
    sub?: (key: Buffer, data: Buffer) => void,
    values?: (data: Buffer, problem: (p: string) => void) => void,
    leaves?: number[],
  ): boolean {
    const before = this.problems.length;
    let damaged = false;
    const problem = (p: string): boolean => {
      damaged = true;
      if (this.problems.length - before < PROBLEMS_PER_TREE) this.problems.push(`${what}: ${p}`);
      return false;
    };
    if (db.root === P_INVALID) {
      if (db.entries !== 0 || db.depth !== 0) problem(`has no root page but records ${db.entries} entries`);
      return damaged;
    }
    if ((db.flags & MDB_DUPSORT) !== 0) return !problem('is a DUPSORT database, which the store never creates');
    const counted = { branch: 0, leaf: 0, overflow: 0, entries: 0 };
    const integerKeys = (db.flags & MDB_INTEGERKEY) !== 0;
    const stack: { pgno: number; depth: number }[] = [{ pgno: Number(db.root), depth: db.depth }];
    while (stack.length > 0) {
      const { pgno, depth } = stack.pop()!;
      if (pgno < 2 || pgno > this.meta.lastPage) {
        problem(`a page number ${pgno} outside the file's pages 2-${this.meta.lastPage}`);
        continue;
      }
      if (this.owner[pgno] !== 0) {
        problem(`page ${pgno} is reached twice`);
        continue;
      }
      this.owner[pgno] = 1;
      const page = this.file.page(pgno);
      const kind = depth > 1 ? P_BRANCH : P_LEAF;
      if (!this.header(page, pgno, kind, problem)) continue;
      const nodes = this.nodes(page, pgno, kind, integerKeys, problem);
      if (nodes === undefined) continue;
      if (kind === P_BRANCH) {
        counted.branch++;
        for (const node of nodes) stack.push({ pgno: node.child, depth: depth - 1 });
        continue;
      }
      counted.leaf++;
      counted.entries += nodes.length;
      leaves?.push(pgno);
      for (const { key, flags, size, dataAt } of nodes) {
        let data: Buffer | undefined;
        if ((flags & F_BIGDATA) !== 0) {
          const first = u64(page, dataAt);
          const run = this.overflow(first, size, problem);
          counted.overflow += run;
          // Only the freelist's and the main database's values are read; the others are LMDB's to read.
          if (run > 0 && (values !== undefined || sub !== undefined)) data = this.file.overflowData(first, size);
        } else {
          data = page.subarray(dataAt, dataAt + size);
        }
        if (data === undefined) continue;
        if ((flags & F_SUBDATA) !== 0) {
          if (sub === undefined || data.length !== DB_RECORD) problem(`page ${pgno} holds a misplaced database record`);
          else sub(key, data);
        } else if (values !== undefined) {
          values(data, problem);
        }
      }
    }
    const { branch, leaf, overflow, entries } = counted;
    if (
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by problem() during the walk
      !damaged &&
      (branch !== db.branchPages || leaf !== db.leafPages || overflow !== db.overflowPages || entries !== db.entries)
    ) {
      problem(
        `has ${branch} branch, ${leaf} leaf and ${overflow} overflow pages and ${entries} entries, but records ` +
          `${db.branchPages}, ${db.leafPages}, ${db.overflowPages} and ${db.entries}`,
      );
    }
    return damaged;
  }

  /**
   * The nodes of a branch or leaf page whose header checked out, each inside the page, keys ascending; undefined
   * (after reporting) when they are not. Keys are views into `page`.
   */
  private nodes(
    page: Buffer,
    pgno: number,
    kind: number,
    integerKeys: boolean,
    problem: (p: string) => boolean,
  ): PageNode[] | undefined {
    const count = page.readUInt16LE(20) >> 1;
    const nodes: PageNode[] = [];
    for (let i = 0; i < count; i++) {
      const at = PAGE_HEADER + page.readUInt16LE(PAGE_HEADER + 2 * i);
      if (at < PAGE_HEADER + page.readUInt16LE(22) || at + NODE_HEADER > page.length) {
        problem(`page ${pgno} node ${i} lies outside the page`);
        return undefined;
      }
      const lo = page.readUInt16LE(at);
      const hi = page.readUInt16LE(at + 2);
      const flags = page.readUInt16LE(at + 4);
      const dataAt = at + NODE_HEADER + page.readUInt16LE(at + 6);
      const key = page.subarray(at + NODE_HEADER, dataAt);
      if (dataAt > page.length) {
        problem(`page ${pgno} node ${i} has a key past the end of the page`);
        return undefined;
      }
      // A branch page's first key is empty by design; the others ascend.
      const previous = nodes.at(-1)?.key;
      if (previous !== undefined && (kind === P_LEAF || i > 1) && compareKeys(previous, key, integerKeys) >= 0) {
        problem(`page ${pgno} has its keys out of order at node ${i}`);
        return undefined;
      }
      if (kind === P_BRANCH) {
        nodes.push({ key, flags: 0, size: 0, dataAt, child: lo + hi * 0x1_0000 + flags * 0x1_0000_0000 });
        continue;
      }
      const size = (flags & F_BIGDATA) !== 0 ? 8 : lo + hi * 0x1_0000;
      if ((flags & ~(F_BIGDATA | F_SUBDATA)) !== 0) {
        problem(`page ${pgno} node ${i} has unknown flags 0x${flags.toString(16)}`);
        return undefined;
      }
      if (dataAt + size > page.length) {
        problem(`page ${pgno} node ${i} has a value past the end of the page`);
        return undefined;
      }
      nodes.push({ key, flags, size: lo + hi * 0x1_0000, dataAt, child: 0 });
    }
    return nodes;
  }

  /** Checks the header of a branch or leaf page; false (after reporting) when it cannot be walked. */
  private header(page: Buffer, pgno: number, expected: number, problem: (p: string) => boolean): boolean {
    const own = u64(page, 0);
    if (own !== pgno) return problem(`page ${pgno} carries the page number ${own}`);
    const txnId = u64(page, 8);
    if (txnId > this.meta.txnId)
      return problem(`page ${pgno} carries transaction ${txnId}, newer than the store's ${this.meta.txnId}`);
    const flags = page.readUInt16LE(18);
    if (flags !== expected) {
      const kind = expected === P_BRANCH ? 'branch' : 'leaf';
      return problem(`page ${pgno} should be a ${kind} page but has flags 0x${flags.toString(16)}`);
    }
    const lower = page.readUInt16LE(20);
    const upper = page.readUInt16LE(22);
    if (lower === 0 || lower % 2 !== 0 || lower > upper || PAGE_HEADER + upper > page.length) {
      return problem(`page ${pgno} has impossible bounds (${lower}, ${upper})`);
    }
    return true;
  }

  /** Marks and checks an overflow run holding `size` bytes; returns its page count (0 when damaged). */
  private overflow(pgno: number, size: number, problem: (p: string) => boolean): number {
    const pages = this.overflowPages(pgno, size, problem);
    for (let p = pgno; p < pgno + pages; p++) {
      if (this.owner[p] !== 0) {
        problem(`overflow page ${p} is reached twice`);
        return 0;
      }
      this.owner[p] = 1;
    }
    return pages;
  }

  /** An overflow run, checked again when its value is read (records()). */
  private overflowIntact(pgno: number, size: number): boolean {
    return this.overflowPages(pgno, size, () => false) > 0;
  }

  /** The page count of the overflow run at `pgno` holding `size` bytes, 0 (after reporting) when damaged. */
  private overflowPages(pgno: number, size: number, problem: (p: string) => boolean): number {
    if (pgno < 2 || pgno > this.meta.lastPage) {
      problem(`an overflow page number ${pgno} outside the file's pages 2-${this.meta.lastPage}`);
      return 0;
    }
    const header = this.file.pageHeader(pgno);
    const pages = header.readUInt32LE(20);
    if (u64(header, 0) !== pgno || header.readUInt16LE(18) !== P_OVERFLOW) {
      problem(`overflow page ${pgno} has a damaged header`);
      return 0;
    }
    if (u64(header, 8) > this.meta.txnId) {
      problem(`overflow page ${pgno} carries a transaction newer than the store's ${this.meta.txnId}`);
      return 0;
    }
    if (pages < 1 || pgno + pages - 1 > this.meta.lastPage || pages * this.file.pageSize - PAGE_HEADER < size) {
      problem(`overflow page ${pgno} claims ${pages} pages for ${size} bytes`);
      return 0;
    }
    return pages;
  }

  /**
   * A freelist record, in lmdb-js's format: a count of slots, then the slots: a page number, 0 (an empty slot), or
   * -n followed by the first page of a run of n free pages. LMDB may reserve a longer record than it fills.
   */
  private freeRecord(data: Buffer, into: number[], problem: (p: string) => void): void {
    const slots = data.length >= 8 ? Number(data.readBigUInt64LE(0)) : -1;
    if (slots < 0 || data.length % 8 !== 0 || data.length < 8 * (slots + 1)) {
      problem(`a record of ${data.length} bytes does not hold the ${slots} slots it counts`);
      return;
    }
    for (let i = 1; i <= slots; i++) {
      const slot = data.readBigInt64LE(8 * i);
      if (slot === 0n) continue;
      let first = slot;
      let run = 1n;
      if (slot < 0n) {
        if (i === slots) {
          problem('a record ends inside a run of free pages');
          return;
        }
        run = -slot;
        first = data.readBigInt64LE(8 * ++i);
      }
      if (first < 2n || first + run - 1n > BigInt(this.meta.lastPage)) {
        problem(
          `free pages ${first}${run > 1n ? `-${first + run - 1n}` : ''} lie outside the file's pages 2-${this.meta.lastPage}`,
        );
        return;
      }
      for (let p = Number(first); p < Number(first + run); p++) into.push(p);
    }
  }
}

function compareKeys(a: Buffer, b: Buffer, integer: boolean): number {
  if (integer && a.length === 8 && b.length === 8) {
    const x = a.readBigUInt64LE(0);
    const y = b.readBigUInt64LE(0);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  return Buffer.compare(a, b);
}

/**
 * Checks `file` (an LMDB data.mdb) page by page from the snapshot LMDB will open; returns the problems found, one
 * line each, empty when the file is intact. Never throws for damage; throws only when the file cannot be read.
 */
export function checkPages(file: string): string[] {
  const fd = fs.openSync(file, 'r');
  try {
    const walk = snapshotWalk(fd);
    if (Array.isArray(walk)) return walk;
    walk.run();
    return walk.problems;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * What a salvage can take from `file` without LMDB, for the one named database that is damaged: every record of its
 * leaf pages that check out, also those cut off by a damaged branch page, which no walk through LMDB reaches. Only
 * when the damage is in that database alone and the main database and the freelist are intact (then every page is
 * accounted for, and a leaf that is neither reached nor free is one that was cut off, not an old copy); undefined
 * otherwise. The records are read from the file as they are iterated, a page at a time, so a salvage holds no more
 * of a large database than it copies at once; the file stays open until the iteration ends.
 */
export function pageRecords(
  file: string,
): { db: string; records: Generator<{ key: Buffer; value: Buffer }> } | undefined {
  const fd = fs.openSync(file, 'r');
  let handedOver = false;
  try {
    const walk = snapshotWalk(fd);
    if (Array.isArray(walk)) return undefined;
    walk.run();
    if (!walk.freelistIntact || walk.damagedTrees.length !== 1) return undefined;
    if (walk.problems.some((p) => p.startsWith('the main database'))) return undefined;
    const db = walk.damagedTrees[0];
    handedOver = true;
    return { db, records: closingAfter(walk.records(db), fd) };
  } finally {
    if (!handedOver) fs.closeSync(fd);
  }
}

function* closingAfter<T>(items: Generator<T>, fd: number): Generator<T> {
  try {
    yield* items;
  } finally {
    fs.closeSync(fd);
  }
}

/** The walk of the snapshot LMDB will open from the file `fd`, not run yet; a file without one gets its problem, as the only line. */
function snapshotWalk(fd: number): SnapshotWalk | string[] {
  const head = Buffer.alloc(META_BYTES);
  const metaAt = (offset: number): MetaPage | undefined => {
    const n = fs.readSync(fd, head, 0, META_BYTES, offset);
    return n === META_BYTES ? readMetaPage(head) : undefined;
  };
  const first = metaAt(0);
  if (first === undefined) return ['page 0 is not an LMDB meta page'];
  const pageSize = first.pageSize;
  const overlapping = (first.flags & OVERLAPPING_SYNC) !== 0;
  const meta = pickMeta([first, overlapping ? metaAt(pageSize >> 1) : undefined, metaAt(pageSize)], lmdbBootId());
  if (meta === undefined) return ['no meta page can be read'];
  if ((meta.lastPage + 1) * pageSize > fs.fstatSync(fd).size)
    return [`the file ends before its last page ${meta.lastPage}`];
  return new SnapshotWalk(new PageFile(fd, pageSize), meta);
}
