/**
 * How outbox entries lie in LMDB: in chunks. The entries one batch (one transaction) appends to an outbox are
 * one value, under the key `owner prefix, u64 seq of the first entry, u32 entry count`.
 *
 * Why: lmdb-js costs a few µs per value read, written or deleted (a Buffer per value read, an instruction and a
 * B-tree operation per write). With one value per message that was most of a replay's CPU: a 1 KiB entry cost
 * about 4.5 µs to read and as much again to delete. A chunk is read, written and deleted as one.
 *
 * Chunks never change once written. The outbox records removed entries by its floor (no live entry has a lower
 * seq) and, for the few removed out of order, by marks; a chunk is deleted once the floor passes its end.
 *
 * Value: u8 CHUNK_FORMAT, u32 count, count x u32 end offsets (from the start of the data), then the entries,
 * each a stamped value (codec.ts) with its own checksum, so one damaged entry costs only itself. A chunk whose
 * header does not match its key is damaged as a whole: every entry of it reads as damaged. A key with only 8 bytes after the prefix is an entry written before chunks
 * (one stamped value, the seq in the key): it is read as a chunk of one.
 *
 * A compacted journal chunk (compaction.ts) is a journal chunk compressed as one unit: u8 COMPRESSED_CHUNK_FORMAT,
 * u32 count, u32 bytes of the journal chunk, u32 CRC-32 of it, then it compressed with Brotli. Reading it
 * decompresses it whole and checks the CRC: one that does not decompress, or whose CRC or header does not hold,
 * is damaged as a whole, like a chunk whose header does not match its key (docs/architecture.md#compaction).
 */

import { brotliCompressSync, brotliDecompressSync, constants as zlibConstants, crc32 } from 'node:zlib';
import { CorruptValueError, decodeStampedValue, keySeq, seqKey, stampedValueMs } from '../codec.js';
import type { OutboxEntry } from '../types.js';
import type { SteadyClock } from '../../util/clock.js';

/** Format byte of a chunk value; a stored entry from before chunks starts with VALUE_FORMAT (1). */
const CHUNK_FORMAT = 3;
/**
 * A journal chunk (journal.ts): after the end offsets, count x u32 cursor masks, bit `slot` set in an entry's
 * mask when the cursor (outbox) of that slot wants it.
 */
const MASKED_CHUNK_FORMAT = 4;
/** A journal chunk compressed (see the top of this file). */
const COMPRESSED_CHUNK_FORMAT = 5;
const COMPRESSED_HEADER_BYTES = 13;
/**
 * Brotli quality 2 with a window that holds a whole chunk: on Sparkplug-like traffic it compresses better than
 * DEFLATE at level 1 and as fast (bench/journal-size.ts; docs/architecture.md#compaction).
 */
const BROTLI_QUALITY = 2;
const BROTLI_WINDOW_BITS = 18;
/** The mask of an entry of a chunk without masks (an outbox's own, from before the journal): every cursor's. */
export const ALL_CURSORS = 0xffff_ffff;
const CHUNK_HEADER_BYTES = 5;
/** Caps per chunk, so a peek or a head lookup never copies much more than it uses. */
export const MAX_CHUNK_ENTRIES = 128;
export const MAX_CHUNK_BYTES = 128 * 1024;
const SEQ_BYTES = 8;
const COUNT_BYTES = 4;

/**
 * The key of a chunk of `count` entries from seq `start`. It sorts after the key `seqKey(prefix, start)` of an
 * entry from before chunks; with count 0xffffffff it sorts after every chunk that starts at `start`, so a reverse
 * range from it finds the chunk holding `start`.
 */
export function chunkKey(prefix: Buffer, start: number, count: number): Buffer {
  const key = Buffer.allocUnsafe(prefix.length + SEQ_BYTES + COUNT_BYTES);
  seqKey(prefix, start).copy(key);
  key.writeUInt32BE(count, prefix.length + SEQ_BYTES);
  return key;
}

/** Seq of the first entry under `key`. */
export function chunkStart(key: Buffer, prefixBytes: number): number {
  return keySeq(key, prefixBytes);
}

/** Entries under `key`: 1 for an entry from before chunks. */
export function chunkCount(key: Buffer, prefixBytes: number): number {
  return key.length === prefixBytes + SEQ_BYTES + COUNT_BYTES ? key.readUInt32BE(prefixBytes + SEQ_BYTES) : 1;
}

/** The value of a chunk of `values[from]` .. `values[to - 1]`, with their cursor masks when given (a journal chunk). */
export function encodeChunk(values: readonly Buffer[], from: number, to: number, masks?: readonly number[]): Buffer {
  const count = to - from;
  const dataStart = CHUNK_HEADER_BYTES + (masks === undefined ? 4 : 8) * count;
  let dataBytes = 0;
  for (let i = from; i < to; i++) dataBytes += values[i].length;
  const buf = Buffer.allocUnsafe(dataStart + dataBytes);
  buf[0] = masks === undefined ? CHUNK_FORMAT : MASKED_CHUNK_FORMAT;
  buf.writeUInt32BE(count, 1);
  let end = 0;
  for (let i = from; i < to; i++) {
    values[i].copy(buf, dataStart + end);
    end += values[i].length;
    buf.writeUInt32BE(end, CHUNK_HEADER_BYTES + 4 * (i - from));
    if (masks !== undefined) buf.writeUInt32BE(masks[i] >>> 0, CHUNK_HEADER_BYTES + 4 * (count + i - from));
  }
  return buf;
}

/**
 * The journal chunk `raw` (encodeChunk with masks) compressed, or undefined when that would not make it smaller
 * by at least a tenth (incompressible payloads stay as they are).
 */
export function compressChunk(raw: Buffer): Buffer | undefined {
  const body = brotliCompressSync(raw, {
    params: {
      [zlibConstants.BROTLI_PARAM_QUALITY]: BROTLI_QUALITY,
      [zlibConstants.BROTLI_PARAM_LGWIN]: BROTLI_WINDOW_BITS,
      [zlibConstants.BROTLI_PARAM_SIZE_HINT]: raw.length,
    },
  });
  if (COMPRESSED_HEADER_BYTES + body.length > raw.length * 0.9) return undefined;
  const buf = Buffer.allocUnsafe(COMPRESSED_HEADER_BYTES + body.length);
  buf[0] = COMPRESSED_CHUNK_FORMAT;
  buf.writeUInt32BE(raw.readUInt32BE(1), 1);
  buf.writeUInt32BE(raw.length, 5);
  buf.writeUInt32BE(crc32(raw), 9);
  body.copy(buf, COMPRESSED_HEADER_BYTES);
  return buf;
}

/** Whether the stored chunk value `value` is compressed. */
export function isCompressedChunk(value: Buffer): boolean {
  return value.length >= COMPRESSED_HEADER_BYTES && value[0] === COMPRESSED_CHUNK_FORMAT;
}

/** The bytes of the stored chunk value `value` before compression: its own length when it is not compressed. */
export function logicalChunkBytes(value: Buffer): number {
  return isCompressedChunk(value) ? value.readUInt32BE(5) : value.length;
}

/**
 * The journal chunk in the compressed chunk value `value`, or undefined when it does not decompress to what its
 * header says (length, CRC-32): damaged.
 */
function decompressChunk(value: Buffer): Buffer | undefined {
  const bytes = value.readUInt32BE(5);
  let raw: Buffer;
  try {
    raw = brotliDecompressSync(value.subarray(COMPRESSED_HEADER_BYTES), { maxOutputLength: bytes });
  } catch {
    return undefined;
  }
  return raw.length === bytes && crc32(raw) === value.readUInt32BE(9) ? raw : undefined;
}

/** Where the next chunk of `values` (from index `from`) ends: at most MAX_CHUNK_ENTRIES and MAX_CHUNK_BYTES. */
export function chunkEnd(values: readonly Buffer[], from: number): number {
  let bytes = values[from].length;
  let to = from + 1;
  while (to < values.length && to - from < MAX_CHUNK_ENTRIES && bytes + values[to].length <= MAX_CHUNK_BYTES) {
    bytes += values[to].length;
    to++;
  }
  return to;
}

/** A stored chunk, read once: its entries are views into one buffer (the copy lmdb-js returned). */
export class Chunk {
  readonly start: number;
  readonly count: number;
  /** Whether it is stored compressed (compaction.ts). */
  readonly compressed: boolean;
  private readonly dataStart: number;
  /** Where the cursor masks start (a journal chunk), -1 when the chunk has none. */
  private readonly masksStart: number;
  /** The chunk's value, decompressed when it is stored compressed (an empty buffer when that failed). */
  private readonly buf: Buffer;

  constructor(
    readonly key: Buffer,
    prefixBytes: number,
    stored: Buffer,
    /** Converts the entries' message expiry back (codec.ts). */
    private readonly clock: SteadyClock,
  ) {
    this.start = chunkStart(key, prefixBytes);
    this.count = chunkCount(key, prefixBytes);
    const chunked = key.length !== prefixBytes + SEQ_BYTES;
    this.compressed = chunked && isCompressedChunk(stored);
    // A compressed chunk that does not decompress whole reads as an empty one: damaged, every entry with it.
    const buf = this.compressed ? (decompressChunk(stored) ?? Buffer.alloc(0)) : stored;
    this.buf = buf;
    const masked = chunked && buf.length > 0 && buf[0] === MASKED_CHUNK_FORMAT;
    const headerBytes = CHUNK_HEADER_BYTES + (masked ? 8 : 4) * this.count;
    this.damaged =
      chunked &&
      (buf.length < headerBytes ||
        (buf[0] !== CHUNK_FORMAT && buf[0] !== MASKED_CHUNK_FORMAT) ||
        buf.readUInt32BE(1) !== this.count);
    this.dataStart = chunked ? headerBytes : -1;
    this.masksStart = masked && !this.damaged ? CHUNK_HEADER_BYTES + 4 * this.count : -1;
  }

  /** The header does not match the key: no entry can be found in it. */
  readonly damaged: boolean;

  /** Its value, when stored as a journal chunk (plain, with masks): what compaction compresses as it is. */
  get journalValue(): Buffer | undefined {
    return this.masksStart >= 0 && !this.compressed ? this.buf : undefined;
  }

  /** Bytes of the chunk's value, decompressed. */
  get size(): number {
    return this.buf.length;
  }

  /** Seq after the last entry. */
  get end(): number {
    return this.start + this.count;
  }

  has(seq: number): boolean {
    return seq >= this.start && seq < this.start + this.count;
  }

  /** Entry `seq` (which `has`), its message a view into the chunk; CorruptValueError when it is damaged. */
  entry(seq: number, released: boolean): OutboxEntry {
    if (this.damaged) throw new CorruptValueError(`outbox chunk at seq ${this.start} does not match its key`);
    const at = this.dataStart < 0 ? 0 : this.dataStart + this.offset(seq - this.start);
    const end = this.dataStart < 0 ? this.buf.length : this.dataStart + this.offset(seq - this.start + 1);
    const { msg, stampMs } = decodeStampedValue(this.buf, this.clock, at, end);
    return { seq, msg, appendedAtMs: stampMs, bytes: end - at, released };
  }

  /** The cursors that want entry `seq` (which `has`): its mask in a journal chunk, else every cursor. */
  mask(seq: number): number {
    return this.masksStart < 0 ? ALL_CURSORS : this.buf.readUInt32BE(this.masksStart + 4 * (seq - this.start));
  }

  /** The stored value of entry `seq` (which `has`), unchecked: a view into the chunk (what migration copies). */
  value(seq: number): Buffer {
    if (this.dataStart < 0) return this.buf;
    return this.buf.subarray(
      this.dataStart + this.offset(seq - this.start),
      this.dataStart + this.offset(seq - this.start + 1),
    );
  }

  /** When entry `seq` (which `has`) was appended (unchecked: 0 when the chunk is damaged, so it goes first). */
  appendedAtMs(seq: number): number {
    const at = this.dataStart < 0 ? 0 : this.dataStart + this.offset(seq - this.start);
    return this.damaged || at + 9 > this.buf.length ? 0 : stampedValueMs(this.buf, at);
  }

  /** Stored bytes of entry `seq` (which `has`): what it counts against `maxBytes` (0 when damaged). */
  bytes(seq: number): number {
    if (this.dataStart < 0) return this.buf.length;
    if (this.damaged) return 0;
    const i = seq - this.start;
    return Math.max(0, this.offset(i + 1) - this.offset(i));
  }

  /** Where entry `i` starts in the data (`count`: where the data ends). */
  private offset(i: number): number {
    return i === 0 ? 0 : this.buf.readUInt32BE(CHUNK_HEADER_BYTES + 4 * (i - 1));
  }
}
