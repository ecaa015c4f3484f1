/**
 * Compaction of the journal (docs/architecture.md#compaction): chunks that stay (the uplink is down, or slower
 * than the traffic) are merged, up to MAX_CHUNK_ENTRIES entries, and stored compressed as one unit
 * (outbox-chunk.ts), where similar messages compress far better together than one by one. A batch at a low rate
 * holds a message or two, so the chunks appended are small; merged, they also fill their pages.
 *
 * Entries acknowledged within `afterMs` of their append are never compacted: the live path pays nothing. The
 * journal runs one compaction per batch of at most COMPACT_IN_BATCHES_UP_TO appends, in the batch's transaction
 * (the merged chunk and the deletes of the chunks it replaces commit together or not at all), and compaction takes
 * at most DUTY of the time, so that a backlog at a high rate is stored as it came rather than slowing the appends.
 */
import type { SteadyClock } from '../../util/clock.js';
import { Chunk, chunkKey, compressChunk, encodeChunk, MAX_CHUNK_BYTES, MAX_CHUNK_ENTRIES } from './outbox-chunk.js';

/**
 * Chunks whose first entry is older than this are compacted: an outage of a minute or less (and a live uplink, even
 * a slow one) costs nothing; a long one is stored compacted but for its last minute.
 */
export const COMPACT_AFTER_MS = 60_000;
/**
 * Compaction runs in batches that append at most this many entries: a gateway under a heavy load (many writers
 * waiting for each commit, so large batches, whose chunks are full already) spends nothing on it, where rewriting
 * every chunk would make each commit write more; a site's steady rate (a message or a few per commit) or the quiet
 * after a burst compacts what stays.
 */
export const COMPACT_IN_BATCHES_UP_TO = 16;
/** The share of time compaction may take: after one that took d ms the next waits d × (1 / DUTY − 1). */
const DUTY = 0.02;

/** A run of chunks replaced by one: the keys to delete, then the value to put under `key`. */
export interface Compaction {
  readonly start: number;
  readonly end: number;
  readonly replaced: readonly Buffer[];
  readonly key: Buffer;
  readonly value: Buffer;
}

/** The entries of `chunks` (consecutive) as one journal chunk, with their masks. */
function mergedChunk(chunks: readonly Chunk[]): Buffer {
  const values: Buffer[] = [];
  const masks: number[] = [];
  for (const chunk of chunks) {
    for (let seq = chunk.start; seq < chunk.end; seq++) {
      values.push(chunk.value(seq));
      masks.push(chunk.mask(seq));
    }
  }
  return encodeChunk(values, 0, values.length, masks);
}

/** A run of plain chunks, old enough, that may still grow: seqs `start` .. `end` (exclusive). */
interface Run {
  readonly start: number;
  end: number;
  entries: number;
  bytes: number;
}

export class JournalCompactor {
  /** No plain chunk to compact starts below it: those are compacted, or left as they are for good. */
  compacted: number;
  /** Before this (store clock), no run is ready or the duty cycle says wait. */
  private notBeforeMs = 0;
  /** The run found so far, so that the next look goes on after it rather than read its chunks again. */
  private run: Run | undefined;

  constructor(
    compacted: number,
    private readonly prefix: Buffer,
    private readonly clock: SteadyClock,
    private readonly afterMs: number,
  ) {
    this.compacted = compacted;
  }

  /**
   * The next run of plain chunks among the stored ones from `floor` on (`chunksFrom`, in order) merged and
   * compressed, when one is ready: chunks all older than `afterMs`, up to MAX_CHUNK_ENTRIES entries or
   * MAX_CHUNK_BYTES, ending at those caps, at a gap in the seqs, or at a compressed or damaged chunk. Undefined when
   * none is ready; it advances `compacted` past the chunks it leaves as they are (compressed, damaged,
   * incompressible).
   */
  next(chunksFrom: (seq: number) => Iterable<Chunk>, floor: number): Compaction | undefined {
    const nowMs = this.clock.nowMs();
    if (nowMs < this.notBeforeMs) return undefined;
    const startedMs = performance.now();
    if (this.run !== undefined && this.run.start < Math.max(floor, this.compacted)) this.run = undefined;
    let run = this.run;
    let closed = false;
    this.notBeforeMs = nowMs + this.afterMs;
    for (const chunk of chunksFrom(run?.end ?? Math.max(this.compacted, floor))) {
      if (chunk.compressed || chunk.damaged) {
        if (run !== undefined) {
          closed = true;
          break;
        }
        this.compacted = Math.max(this.compacted, chunk.end);
        continue;
      }
      const appendedAtMs = chunk.appendedAtMs(chunk.start);
      if (run !== undefined && chunk.start !== run.end) closed = true;
      else if (appendedAtMs > nowMs - this.afterMs) this.notBeforeMs = appendedAtMs + this.afterMs;
      else if (
        run !== undefined &&
        (run.entries + chunk.count > MAX_CHUNK_ENTRIES || run.bytes + chunk.size > MAX_CHUNK_BYTES)
      )
        closed = true;
      else {
        run ??= { start: chunk.start, end: chunk.start, entries: 0, bytes: 0 };
        run.end = chunk.end;
        run.entries += chunk.count;
        run.bytes += chunk.size;
        closed = run.entries >= MAX_CHUNK_ENTRIES;
        if (!closed) continue;
      }
      break;
    }
    this.run = run;
    if (!closed || run === undefined) return undefined;
    this.run = undefined;
    const merged = this.merge(run, chunksFrom(run.start));
    this.compacted = run.end;
    const tookMs = performance.now() - startedMs;
    this.notBeforeMs = nowMs + tookMs * (1 / DUTY - 1);
    return merged;
  }

  /** The chunks of `run` (first ones of `chunks`) as one chunk, compressed; undefined when that gains nothing. */
  private merge(run: Run, chunks: Iterable<Chunk>): Compaction | undefined {
    const members: Chunk[] = [];
    for (const chunk of chunks) {
      if (chunk.start >= run.end) break;
      members.push(chunk);
    }
    // A run of one chunk (a batch of 128 at a high rate) is compressed as it is stored, and keeps its key.
    const plain = (members.length === 1 ? members[0].journalValue : undefined) ?? mergedChunk(members);
    const compressed = compressChunk(plain);
    if (compressed === undefined && members.length === 1) return undefined;
    return {
      start: run.start,
      end: run.end,
      replaced: members.length > 1 ? members.map((chunk) => chunk.key) : [],
      key: chunkKey(this.prefix, run.start, run.end - run.start),
      // Merged but not compressed (an incompressible payload), a run still fills its pages.
      value: compressed ?? plain,
    };
  }

  /** The batch that compacted failed: the run is looked for again. */
  rollback(compacted: number): void {
    this.compacted = compacted;
    this.run = undefined;
  }
}
