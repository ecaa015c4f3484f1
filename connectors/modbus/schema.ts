/**
 * The config of one Modbus connector (= one Sparkplug device = one unit id). A pure schema file: config/schema.ts
 * composes it into the `connectors:` list.
 *
 *   - id: press-1
 *     type: modbus
 *     transport: tcp            # required: tcp (host, port) | rtu (path, baudRate, parity, dataBits, stopBits)
 *     host: 10.0.0.21
 *     unitId: 1
 *     addressBase: 0            # required: are tag addresses 0-based (protocol) or 1-based (register numbers)?
 *     pollIntervalMs: 1000
 *     tags:
 *       - { name: temperature, table: holding, address: 100, datatype: float32, byteOrder: CDAB }
 */
import { z } from 'zod';
import { checkTagProperties, tagPropertyKeys } from '../tag-properties.js';

export const MODBUS_TABLES = ['coil', 'discrete', 'input', 'holding'] as const;
export type ModbusTable = (typeof MODBUS_TABLES)[number];

export const MODBUS_DATATYPES = [
  'bool',
  'bit',
  'int16',
  'uint16',
  'int32',
  'uint32',
  'int64',
  'uint64',
  'float32',
  'float64',
  'string',
] as const;
export type ModbusDatatype = (typeof MODBUS_DATATYPES)[number];

/**
 * Byte order of a multi-register value, named by where the bytes of the big-endian value A(B(C(D…))) sit in
 * register order. The 4-letter names apply to any width: ABCD = big endian; BADC = bytes swapped in each
 * register; CDAB = registers in reverse order ("word swap"); DCBA = little endian. The 8-letter names are the
 * same four orders spelled out for 64-bit values.
 */
export const BYTE_ORDERS = ['ABCD', 'BADC', 'CDAB', 'DCBA', 'ABCDEFGH', 'BADCFEHG', 'GHEFCDAB', 'HGFEDCBA'] as const;
export type ByteOrder = (typeof BYTE_ORDERS)[number];

/** Registers a value occupies (bits for coils and discrete inputs). */
export function widthOf(tag: { table: ModbusTable; datatype: ModbusDatatype; length?: number }): number {
  switch (tag.datatype) {
    case 'int32':
    case 'uint32':
    case 'float32':
      return 2;
    case 'int64':
    case 'uint64':
    case 'float64':
      return 4;
    case 'string':
      return tag.length ?? 1;
    default:
      return 1;
  }
}

const isBitTable = (table: ModbusTable): boolean => table === 'coil' || table === 'discrete';

type OverlapTag = { table: ModbusTable; address: number; datatype: ModbusDatatype; length?: number };

/**
 * Pairs of tags (indexes, lower first) whose registers or bits overlap in one table, e.g. a float32 at 0 and an
 * int16 at 1. `bit` tags select one bit of a register and are meant to share it, so they never count.
 */
export function overlappingTags(tags: readonly OverlapTag[]): [number, number][] {
  const order = tags
    .map((tag, index) => ({ tag, index }))
    .filter((e) => e.tag.datatype !== 'bit')
    .sort((a, b) => a.tag.table.localeCompare(b.tag.table) || a.tag.address - b.tag.address);
  const pairs: [number, number][] = [];
  for (let i = 0; i < order.length; i++) {
    const a = order[i].tag;
    const end = a.address + widthOf(a);
    for (let j = i + 1; j < order.length && order[j].tag.table === a.table && order[j].tag.address < end; j++) {
      pairs.push([Math.min(order[i].index, order[j].index), Math.max(order[i].index, order[j].index)]);
    }
  }
  return pairs;
}

/** `holding 0..1` or `coil 5`: where a tag sits, in the config's own addresses. */
export function describeSpan(tag: OverlapTag): string {
  const width = widthOf(tag);
  return `${tag.table} ${tag.address}${width > 1 ? `..${tag.address + width - 1}` : ''}`;
}

const tagSchema = z
  .strictObject({
    /** The Sparkplug metric name; `/` builds folders in host applications. */
    name: z.string().min(1),
    table: z.enum(MODBUS_TABLES),
    /** In the convention of the connector's `addressBase`. */
    address: z.number().int().min(0).max(65_536),
    datatype: z.enum(MODBUS_DATATYPES),
    /** string: number of registers (2 characters each). */
    length: z.number().int().min(1).max(125).optional(),
    /** bit: which bit of the register, 0 = least significant. */
    bit: z.number().int().min(0).max(15).optional(),
    byteOrder: z.enum(BYTE_ORDERS).default('ABCD'),
    /** Published value = raw * scale + offset (then a Double). */
    scale: z
      .number()
      .refine((s) => s !== 0 && Number.isFinite(s), 'must be a finite number other than 0')
      .default(1),
    offset: z.number().refine(Number.isFinite, 'must be finite').default(0),
    /** Report by exception: a numeric change smaller than this is not published. */
    deadband: z.number().nonnegative().optional(),
    writable: z.boolean().default(false),
    /**
     * Writes to a scaled integer tag: a value between two register values is refused (false), or the nearest
     * register value is written (true).
     */
    roundWrites: z.boolean().default(false),
    /** engUnit, engLow, engHigh, description: published in the DBIRTH (engLow/engHigh in published units). */
    ...tagPropertyKeys,
  })
  .superRefine((tag, ctx) => {
    const issue = (path: string, message: string): void => ctx.addIssue({ code: 'custom', path: [path], message });
    if (isBitTable(tag.table) && tag.datatype !== 'bool') issue('datatype', `a ${tag.table} holds one bit: use bool`);
    if (tag.datatype === 'string' && tag.length === undefined) issue('length', 'required for a string (registers)');
    if (tag.datatype !== 'string' && tag.length !== undefined) issue('length', 'only strings have a length');
    if (tag.datatype === 'bit' && tag.bit === undefined) issue('bit', 'required for datatype bit (0..15)');
    if (tag.datatype !== 'bit' && tag.bit !== undefined) issue('bit', 'only datatype bit selects a bit');
    if (tag.byteOrder.length === 8 && !['int64', 'uint64', 'float64'].includes(tag.datatype)) {
      issue('byteOrder', 'the 8-letter orders are for 64-bit values; use ABCD, BADC, CDAB or DCBA');
    }
    const numeric = !['bool', 'bit', 'string'].includes(tag.datatype);
    checkTagProperties(tag, numeric, issue);
    if (!numeric && (tag.scale !== 1 || tag.offset !== 0))
      issue('scale', `scale and offset apply to numbers, not ${tag.datatype}`);
    if (!numeric && tag.deadband !== undefined) issue('deadband', `a deadband applies to numbers, not ${tag.datatype}`);
    if (tag.roundWrites && (!tag.writable || !tag.datatype.includes('int') || (tag.scale === 1 && tag.offset === 0))) {
      issue('roundWrites', 'applies to writable integer tags with a scale or offset only');
    }
    if (tag.writable && (tag.table === 'discrete' || tag.table === 'input')) {
      issue('writable', `${tag.table} ${tag.table === 'input' ? 'registers' : 'inputs'} are read-only in Modbus`);
    }
    if (tag.writable && tag.datatype === 'bit') {
      issue('writable', 'a single bit of a register cannot be written without a racy read-modify-write');
    }
  });

const common = {
  id: z.string().regex(/^[^+/#\u0000]+$/, 'must be a non-empty Sparkplug device id without +, /, # (or NUL)'),
  type: z.literal('modbus'),
  /** Set by the profile expansion (src/config/profiles.ts): the device profile whose tags this device has. */
  profile: z.string().optional(),
  /** Modbus unit (slave) id. */
  unitId: z.number().int().min(0).max(255).default(1),
  /** Whether tag addresses count from 0 (protocol addresses) or 1 (register numbers as in many manuals). */
  addressBase: z.literal([0, 1]),
  pollIntervalMs: z.number().int().min(10).default(1000),
  /** Per request. */
  timeoutMs: z.number().int().positive().default(1000),
  /** A request that timed out is repeated this many times before the device counts as lost. */
  retries: z.number().int().min(0).max(10).default(1),
  /** Unused registers (bits) between tags that may still be read to save a request. */
  maxGapRegisters: z.number().int().min(0).max(124).default(16),
  maxGapBits: z.number().int().min(0).max(1999).default(128),
  /** Protocol limits are 125 registers and 2000 bits per read; some devices need less. */
  maxRegistersPerRead: z.number().int().min(1).max(125).default(125),
  maxBitsPerRead: z.number().int().min(1).max(2000).default(2000),
  /** Always use FC 15/16 (write multiple), also for one coil or register, for devices without FC 5/6. */
  writeMultiple: z.boolean().default(false),
  tags: z.array(tagSchema).min(1),
};

const tcp = {
  transport: z.literal('tcp'),
  host: z.string().min(1),
  port: z.number().int().min(1).max(65_535).default(502),
};

const rtu = {
  transport: z.literal('rtu'),
  /** Serial device, e.g. /dev/ttyUSB0; connectors with the same path share the bus. */
  path: z.string().min(1),
  baudRate: z.number().int().positive().default(9600),
  parity: z.enum(['none', 'even', 'odd']).default('none'),
  dataBits: z.literal([7, 8]).default(8),
  stopBits: z.literal([1, 2]).default(1),
};

const tcpSchema = z.strictObject({ ...common, ...tcp });
const rtuSchema = z.strictObject({ ...common, ...rtu });

/**
 * A device profile of Modbus connectors (`profiles:` in the config): any connector key but `id`, tags required;
 * each device that names it gets these keys unless it sets them itself (src/config/profiles.ts).
 */
export const modbusProfileSchema = z
  .strictObject({ ...common, ...tcp, ...rtu, transport: z.enum(['tcp', 'rtu']) })
  .omit({ id: true, profile: true })
  .partial()
  .required({ type: true, tags: true });

export const modbusConnectorSchema = z.discriminatedUnion('transport', [tcpSchema, rtuSchema]).superRefine((c, ctx) => {
  const seen = new Map<string, number>();
  c.tags.forEach((tag, i) => {
    const first = seen.get(tag.name);
    if (first !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['tags', i, 'name'],
        message: `"${tag.name}" is already the name of tags.${first}`,
      });
    } else seen.set(tag.name, i);
    const start = tag.address - c.addressBase;
    if (start < 0)
      ctx.addIssue({ code: 'custom', path: ['tags', i, 'address'], message: 'must be >= 1 with addressBase 1' });
    if (start + widthOf(tag) > 65_536) {
      ctx.addIssue({
        code: 'custom',
        path: ['tags', i, 'address'],
        message: 'the value would end beyond address 65535',
      });
    }
    const limit = isBitTable(tag.table) ? c.maxBitsPerRead : c.maxRegistersPerRead;
    if (widthOf(tag) > limit) {
      ctx.addIssue({
        code: 'custom',
        path: ['tags', i, 'length'],
        message: `longer than maxRegistersPerRead (${limit})`,
      });
    }
  });
  // Two tags over the same registers read them two ways; with a writable one, a write changes the other.
  for (const [i, j] of overlappingTags(c.tags)) {
    const [a, b] = [c.tags[i], c.tags[j]];
    if (!a.writable && !b.writable) continue; // read-only overlaps are allowed, and logged at start
    ctx.addIssue({
      code: 'custom',
      path: ['tags', b.writable ? j : i, 'address'],
      message:
        `"${b.name}" (${describeSpan(b)}) overlaps "${a.name}" (${describeSpan(a)}); ` +
        'a writable tag must not share registers or bits with another tag',
    });
  }
  if (c.transport === 'rtu' && (c.unitId < 1 || c.unitId > 247)) {
    ctx.addIssue({ code: 'custom', path: ['unitId'], message: 'RTU unit ids are 1..247' });
  }
});

export type ModbusConnectorConfig = z.output<typeof modbusConnectorSchema>;
export type ModbusTagConfig = ModbusConnectorConfig['tags'][number];
