/**
 * The read plan: every tag read with as few Read Var requests as the negotiated PDU size allows
 * (docs/configuration.md#s7-addresses). Tags of one area (one DB) close together are coalesced into one group
 * (unused bytes up to `maxGapBytes` between them are read along); groups are cut into items at tag boundaries, so
 * a tag is read by one item, whole and consistent, and items are packed into requests until the request or its
 * answer would outgrow the PDU (or the CPU's item limit). A tag too large for one item (a long array or string) is
 * read in parts, assembled before it is decoded.
 */
import type { S7Area } from './address.js';
import type { ReadItem } from './s7comm.js';
import { readRoom } from './s7comm.js';

export interface PlannedTag {
  /** Index into the connector's tag list. */
  readonly index: number;
  readonly area: S7Area;
  readonly db: number;
  /** Bytes [start, end). */
  readonly start: number;
  readonly end: number;
}

/** One item of a request: whole tags, or one part (`offset` bytes into it) of a tag too large for an item. */
export type Piece =
  | { readonly item: ReadItem; readonly tags: readonly PlannedTag[] }
  | { readonly item: ReadItem; readonly part: PlannedTag; readonly offset: number };

export type ReadRequest = readonly Piece[];

export interface PlanLimits {
  /** Negotiated with the CPU. */
  readonly pduSize: number;
  readonly maxItems: number;
  readonly maxGapBytes: number;
}

/** Tags coalesced: one area, sorted by start, each gap at most maxGapBytes (isolated tags stay alone). */
export function groupTags(
  tags: readonly PlannedTag[],
  maxGapBytes: number,
  isolated: ReadonlySet<number>,
): PlannedTag[][] {
  const sorted = [...tags].sort(
    (a, b) => a.area.localeCompare(b.area) || a.db - b.db || a.start - b.start || b.end - a.end,
  );
  const groups: PlannedTag[][] = [];
  let current: PlannedTag[] = [];
  let end = 0;
  for (const tag of sorted) {
    const first = current[0] as PlannedTag | undefined;
    const joins =
      first !== undefined &&
      first.area === tag.area &&
      first.db === tag.db &&
      tag.start - end <= maxGapBytes &&
      !isolated.has(tag.index) &&
      !isolated.has(first.index);
    if (joins) {
      current.push(tag);
      end = Math.max(end, tag.end);
      continue;
    }
    if (current.length > 0) groups.push(current);
    current = [tag];
    end = tag.end;
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

const item = (tag: PlannedTag, start: number, end: number): ReadItem => ({
  area: tag.area,
  db: tag.db,
  start,
  length: end - start,
});

/** The requests that read every tag, in order. */
export function planReads(
  tags: readonly PlannedTag[],
  limits: PlanLimits,
  isolated: ReadonlySet<number> = new Set(),
): ReadRequest[] {
  const requests: Piece[][] = [];
  let current: Piece[] = [];
  const lengths = (): number[] => current.map((p) => p.item.length);
  const room = (): number => (current.length >= limits.maxItems ? 0 : readRoom(lengths(), limits.pduSize));
  const flush = (): void => {
    if (current.length > 0) requests.push(current);
    current = [];
  };
  const fullRoom = readRoom([], limits.pduSize);
  for (const group of groupTags(tags, limits.maxGapBytes, isolated)) {
    let i = 0;
    while (i < group.length) {
      const tag = group[i];
      if (tag.end - tag.start > fullRoom) {
        // Too large for any item: in parts, each filling what room there is.
        for (let offset = 0; offset < tag.end - tag.start;) {
          if (room() === 0) flush();
          const length = Math.min(room(), tag.end - tag.start - offset);
          current.push({ item: item(tag, tag.start + offset, tag.start + offset + length), part: tag, offset });
          offset += length;
        }
        i++;
        continue;
      }
      // As many whole tags from i as fit the room left in this request (or else in a new one).
      let space = room();
      if (tag.end - tag.start > space) {
        flush();
        space = fullRoom;
      }
      const start = tag.start;
      let end = tag.end;
      let j = i + 1;
      while (
        j < group.length &&
        group[j].end - group[j].start <= fullRoom &&
        Math.max(end, group[j].end) - start <= space
      ) {
        end = Math.max(end, group[j].end);
        j++;
      }
      current.push({ item: item(tag, start, end), tags: group.slice(i, j) });
      i = j;
    }
  }
  flush();
  return requests;
}
