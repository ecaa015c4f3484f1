/** Reading an LMDB data file as the page check does, to damage precise pages in tests. */

/** LMDB's page size on this platform (lmdb-js default). */
export const PAGE = 4096;

/** The root page of a named database: its record in the main database's root page (a leaf in a small store). */
export function namedDatabaseRoot(file: Buffer, name: string): number {
  const meta = [0, PAGE]
    .map((at) => ({ at, txn: file.readBigUInt64LE(at + 152) }))
    .sort((a, b) => Number(b.txn - a.txn))[0].at;
  const main = Number(file.readBigUInt64LE(meta + 24 + 24 + 48 + 40)) * PAGE;
  for (let i = 0; i < file.readUInt16LE(main + 20) >> 1; i++) {
    const node = main + 24 + file.readUInt16LE(main + 24 + 2 * i);
    const key = file.toString('utf8', node + 8, node + 8 + file.readUInt16LE(node + 6)).replace(/\0$/, '');
    if (key === name) return Number(file.readBigUInt64LE(node + 8 + file.readUInt16LE(node + 6) + 40));
  }
  throw new Error(`no database ${name} in the main database's root page`);
}
