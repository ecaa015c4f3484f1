/**
 * Commissioning reads (docs/console.md#modbus-test-read): a register range of a unit read now and decoded every way a
 * tag can lay it out, side by side, so the person commissioning picks the layout whose values make sense; and a
 * bounded scan of the unit ids behind a gateway or on an RTU bus. Requests go through the gateway's link pool,
 * so a serial bus the connectors use is shared, one request at a time, never opened twice.
 */
import { z } from 'zod';
import { parseRequest, RequestError, type TagValue } from '../contract.js';
import { LinkError, ModbusException, type LinkPool, type LinkTarget } from './modbus-link.js';
import { decodeRegisters } from './registers.js';
import { BYTE_ORDERS, MODBUS_TABLES, type ByteOrder, type ModbusDatatype } from './schema.js';

/** Registers per read request (FC 3/4), bits per FC 1/2 read: the protocol's own limits. */
const MAX_REGISTERS = 125;
const MAX_BITS = 2000;
/** Units one scan asks, and the longest wait for each. */
const MAX_SCAN_UNITS = 32;
const MAX_TIMEOUT_MS = 5000;

const link = z.discriminatedUnion('transport', [
  z.strictObject({
    transport: z.literal('tcp'),
    host: z.string().min(1),
    port: z.number().int().min(1).max(65_535).default(502),
  }),
  z.strictObject({
    transport: z.literal('rtu'),
    path: z.string().min(1),
    baudRate: z.number().int().min(300).max(921_600).default(19_200),
    parity: z.enum(['none', 'even', 'odd']).default('even'),
    dataBits: z.literal([7, 8]).default(8),
    stopBits: z.literal([1, 2]).default(1),
  }),
]);

export const testReadSchema = z.strictObject({
  link,
  unitId: z.number().int().min(0).max(255),
  table: z.enum(MODBUS_TABLES),
  /** In the convention of `addressBase`, as the device's tags are written. */
  address: z.number().int().min(0).max(65_536),
  addressBase: z.literal([0, 1]).default(0),
  count: z.number().int().min(1).max(MAX_BITS),
  timeoutMs: z.number().int().min(100).max(MAX_TIMEOUT_MS).default(1000),
});

export const unitScanSchema = z.strictObject({
  link,
  from: z.number().int().min(0).max(255),
  to: z.number().int().min(0).max(255),
  table: z.enum(MODBUS_TABLES).default('holding'),
  address: z.number().int().min(0).max(65_535).default(0),
  timeoutMs: z.number().int().min(100).max(MAX_TIMEOUT_MS).default(300),
});

export type TestRead = z.input<typeof testReadSchema>;
export type UnitScan = z.input<typeof unitScanSchema>;

/** One register and what it is when a tag of each layout starts at it. */
export interface RegisterRow {
  readonly address: number;
  readonly raw: number;
  readonly hex: string;
  /** Bit 15 first, as a PLC's programming software shows a word. */
  readonly bits: string;
  readonly int16: number;
  readonly uint16: number;
  /** Each 32-bit layout by byte order (ABCD, BADC, CDAB, DCBA), when two registers start here. */
  readonly int32?: Record<string, number>;
  readonly uint32?: Record<string, number>;
  readonly float32?: Record<string, number | string>;
  /** 64-bit layouts by byte order (ABCDEFGH, ...), integers as decimal strings, when four registers start here. */
  readonly int64?: Record<string, string>;
  readonly uint64?: Record<string, string>;
  readonly float64?: Record<string, number | string>;
  /** The characters from here to the end of the range, as `string` tags read them (ABCD, BADC). */
  readonly string: Record<string, string>;
}

export type TestReadResult =
  | { readonly table: 'holding' | 'input'; readonly rows: RegisterRow[] }
  | { readonly table: 'coil' | 'discrete'; readonly bits: { address: number; value: boolean }[] };

export interface UnitAnswer {
  readonly unitId: number;
  /** It answered, with the register or an exception: a device is there. */
  readonly present: boolean;
  readonly detail: string;
}

const WORD_ORDERS = BYTE_ORDERS.filter((o) => o.length === 4);
const LONG_ORDERS = BYTE_ORDERS.filter((o) => o.length === 8);

/** Reads the range now and decodes it; a refusal of the device (exception) or no answer throws its message. */
export async function testRead(pool: LinkPool, input: unknown): Promise<TestReadResult> {
  const request = parseRequest(testReadSchema, input);
  const start = request.address - request.addressBase;
  if (start < 0) throw new RequestError('address', 'must be >= 1 with addressBase 1');
  const registers = request.table === 'holding' || request.table === 'input';
  if (registers && request.count > MAX_REGISTERS)
    throw new RequestError('count', `at most ${MAX_REGISTERS} registers in one read`);
  if (start + request.count > 65_536) throw new RequestError('count', 'the range ends past address 65535');
  const values = await withLink(pool, request.link, request.timeoutMs, (l) =>
    l.read(request.unitId, request.table, start, request.count, request.timeoutMs),
  );
  if (!registers) {
    return {
      table: request.table as 'coil' | 'discrete',
      bits: (values as readonly boolean[]).map((value, i) => ({ address: request.address + i, value })),
    };
  }
  const words = values as readonly number[];
  return {
    table: request.table as 'holding' | 'input',
    rows: words.map((_, i) => decodeRow(words, i, request.address + i)),
  };
}

/** Asks each unit of `from..to` for one register; those that answer (with data or an exception) are there. */
export async function scanUnits(pool: LinkPool, input: unknown): Promise<UnitAnswer[]> {
  const scan = parseRequest(unitScanSchema, input);
  if (scan.to < scan.from) throw new RequestError('to', 'must be >= from');
  if (scan.to - scan.from + 1 > MAX_SCAN_UNITS)
    throw new RequestError('to', `at most ${MAX_SCAN_UNITS} units in one scan`);
  return withLink(pool, scan.link, scan.timeoutMs, async (l) => {
    const answers: UnitAnswer[] = [];
    for (let unitId = scan.from; unitId <= scan.to; unitId++) {
      try {
        await l.read(unitId, scan.table, scan.address, 1, scan.timeoutMs);
        answers.push({ unitId, present: true, detail: `${scan.table} ${scan.address} read` });
      } catch (err) {
        if (err instanceof ModbusException) answers.push({ unitId, present: true, detail: err.message });
        else if (err instanceof LinkError) answers.push({ unitId, present: false, detail: err.message });
        else throw err;
      }
    }
    return answers;
  });
}

/** The pool's link for `target` (the connectors' own when they use it), held for the requests. */
async function withLink<T>(
  pool: LinkPool,
  target: LinkTarget,
  timeoutMs: number,
  use: (l: ReturnType<LinkPool['acquire']>) => Promise<T>,
): Promise<T> {
  const l = pool.acquire(target);
  try {
    await l.open(timeoutMs);
    return await use(l);
  } finally {
    await pool.release(l);
  }
}

function decodeRow(words: readonly number[], i: number, address: number): RegisterRow {
  const raw = words[i] & 0xffff;
  const left = words.length - i;
  const as = (datatype: ModbusDatatype, byteOrder: ByteOrder, length?: number): TagValue =>
    decodeRegisters({ table: 'holding', datatype, byteOrder, scale: 1, offset: 0, length }, words, i);
  const each = <V>(orders: readonly ByteOrder[], datatype: ModbusDatatype, shown: (v: TagValue) => V) =>
    Object.fromEntries(orders.map((order) => [order, shown(as(datatype, order))]));
  const float = (v: TagValue): number | string => (Number.isFinite(v) ? (v as number) : String(v));
  return {
    address,
    raw,
    hex: `0x${raw.toString(16).padStart(4, '0')}`,
    bits: raw.toString(2).padStart(16, '0'),
    int16: as('int16', 'ABCD') as number,
    uint16: raw,
    ...(left >= 2
      ? {
          int32: each(WORD_ORDERS, 'int32', Number),
          uint32: each(WORD_ORDERS, 'uint32', Number),
          float32: each(WORD_ORDERS, 'float32', float),
        }
      : {}),
    ...(left >= 4
      ? {
          int64: each(LONG_ORDERS, 'int64', String),
          uint64: each(LONG_ORDERS, 'uint64', String),
          float64: each(LONG_ORDERS, 'float64', float),
        }
      : {}),
    string: { ABCD: as('string', 'ABCD', left) as string, BADC: as('string', 'BADC', left) as string },
  };
}
