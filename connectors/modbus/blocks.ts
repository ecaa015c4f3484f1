/**
 * Block planning: adjacent and near tags of one table are read with one request, within the protocol limits
 * (125 registers, 2000 bits, or the connector's lower limits) and a maximum gap of unused addresses.
 *
 * "Cuts" are addresses a block may not cross: they come from Modbus exceptions. When a block is refused with
 * "illegal data address", the connector splits it in two and reads the halves; a cut remembers where (so the
 * next plan does not merge the halves again), and a tag that is refused on its own is read alone, with cuts on
 * both sides, so one bad tag does not blind its neighbours.
 */
import type { ModbusTable } from './schema.js';

export interface PlannedTag {
  /** Index into the connector's tag list. */
  readonly index: number;
  readonly table: ModbusTable;
  /** Protocol (0-based) address of the first register or bit. */
  readonly address: number;
  /** Registers (or bits) it spans. */
  readonly width: number;
}

export interface Block {
  readonly table: ModbusTable;
  readonly address: number;
  readonly count: number;
  /** Sorted by address. */
  readonly tags: readonly PlannedTag[];
}

export interface PlanLimits {
  readonly maxRegisters: number;
  readonly maxBits: number;
  readonly maxGapRegisters: number;
  readonly maxGapBits: number;
}

/** Per table, addresses that start a new block. */
export type Cuts = ReadonlyMap<ModbusTable, ReadonlySet<number>>;

const isBitTable = (table: ModbusTable): boolean => table === 'coil' || table === 'discrete';

export function blockOf(tags: readonly PlannedTag[]): Block {
  const start = Math.min(...tags.map((t) => t.address));
  const end = Math.max(...tags.map((t) => t.address + t.width));
  return { table: tags[0].table, address: start, count: end - start, tags };
}

function crossesCut(cuts: ReadonlySet<number> | undefined, from: number, to: number): boolean {
  if (!cuts) return false;
  for (const cut of cuts) if (cut > from && cut <= to) return true;
  return false;
}

/** The fewest blocks that cover every tag, greedy by address within each table. */
export function planBlocks(tags: readonly PlannedTag[], limits: PlanLimits, cuts: Cuts = new Map()): Block[] {
  const byTable = new Map<ModbusTable, PlannedTag[]>();
  for (const tag of tags) {
    const list = byTable.get(tag.table) ?? [];
    list.push(tag);
    byTable.set(tag.table, list);
  }
  const blocks: Block[] = [];
  for (const [table, list] of byTable) {
    list.sort((a, b) => a.address - b.address || b.width - a.width);
    const maxCount = isBitTable(table) ? limits.maxBits : limits.maxRegisters;
    const maxGap = isBitTable(table) ? limits.maxGapBits : limits.maxGapRegisters;
    const tableCuts = cuts.get(table);
    let current: PlannedTag[] = [];
    let start = 0;
    let end = 0;
    for (const tag of list) {
      const tagEnd = tag.address + tag.width;
      const fits =
        current.length > 0 &&
        tag.address - end <= maxGap &&
        Math.max(end, tagEnd) - start <= maxCount &&
        !crossesCut(tableCuts, start, tag.address);
      if (fits) {
        current.push(tag);
        end = Math.max(end, tagEnd);
        continue;
      }
      if (current.length > 0) blocks.push({ table, address: start, count: end - start, tags: current });
      current = [tag];
      start = tag.address;
      end = tagEnd;
    }
    if (current.length > 0) blocks.push({ table, address: start, count: end - start, tags: current });
  }
  return blocks;
}

/** Two halves by tag count (tags sharing an address stay together), or undefined for a single address. */
export function splitBlock(block: Block): [Block, Block] | undefined {
  const tags = block.tags;
  if (tags.length < 2) return undefined;
  let mid = Math.floor(tags.length / 2);
  // Never separate tags that start at the same address: they would be refused together anyway.
  while (mid < tags.length && tags[mid].address === tags[mid - 1].address) mid++;
  if (mid === tags.length) {
    mid = Math.floor(tags.length / 2);
    while (mid > 0 && tags[mid].address === tags[mid - 1].address) mid--;
    if (mid === 0) return undefined;
  }
  return [blockOf(tags.slice(0, mid)), blockOf(tags.slice(mid))];
}
