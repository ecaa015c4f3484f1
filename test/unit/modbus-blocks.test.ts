import { describe, expect, it } from 'vitest';
import { planBlocks, splitBlock } from '../../connectors/modbus/blocks.js';
import type { PlannedTag } from '../../connectors/modbus/blocks.js';
import { modbusConnectorSchema, overlappingTags } from '../../connectors/modbus/schema.js';
import type { ModbusTable } from '../../connectors/modbus/schema.js';

const LIMITS = { maxRegisters: 125, maxBits: 2000, maxGapRegisters: 4, maxGapBits: 16 };
let n = 0;
const t = (table: ModbusTable, address: number, width = 1): PlannedTag => ({ index: n++, table, address, width });
const shape = (blocks: ReturnType<typeof planBlocks>) =>
  blocks.map((b) => [b.table, b.address, b.count, b.tags.length]);

describe('Modbus block planning', () => {
  it('coalesces adjacent and near tags of one table into one read, and never mixes tables', () => {
    const tags = [t('holding', 0, 2), t('holding', 2), t('holding', 7, 2), t('input', 0), t('coil', 3), t('coil', 10)];
    expect(shape(planBlocks(tags, LIMITS))).toEqual([
      ['holding', 0, 9, 3],
      ['input', 0, 1, 1],
      ['coil', 3, 8, 2],
    ]);
  });

  it('starts a new block when the gap exceeds the maximum', () => {
    expect(shape(planBlocks([t('holding', 0), t('holding', 6)], LIMITS))).toEqual([
      ['holding', 0, 1, 1],
      ['holding', 6, 1, 1],
    ]);
    expect(shape(planBlocks([t('holding', 0), t('holding', 5)], LIMITS))).toEqual([['holding', 0, 6, 2]]);
  });

  it('respects the protocol limits: 125 registers and 2000 bits per request', () => {
    const regs = Array.from({ length: 130 }, (_, i) => t('holding', i));
    expect(shape(planBlocks(regs, LIMITS))).toEqual([
      ['holding', 0, 125, 125],
      ['holding', 125, 5, 5],
    ]);
    const bits = Array.from({ length: 2001 }, (_, i) => t('coil', i));
    expect(shape(planBlocks(bits, LIMITS))).toEqual([
      ['coil', 0, 2000, 2000],
      ['coil', 2000, 1, 1],
    ]);
    // A 4-register value is never cut in two.
    const wide = [t('holding', 0, 120), t('holding', 120, 4), t('holding', 124, 4)];
    expect(shape(planBlocks(wide, LIMITS))).toEqual([
      ['holding', 0, 124, 2],
      ['holding', 124, 4, 1],
    ]);
  });

  it('200 contiguous 32-bit tags need 4 requests instead of 200', () => {
    const tags = Array.from({ length: 200 }, (_, i) => t('holding', i * 2, 2));
    expect(planBlocks(tags, LIMITS)).toHaveLength(4);
  });

  it('does not merge across a cut learnt from an exception', () => {
    const tags = [t('holding', 0), t('holding', 1), t('holding', 2), t('holding', 3)];
    const cuts = new Map([['holding' as ModbusTable, new Set([2, 3])]]);
    expect(shape(planBlocks(tags, LIMITS, cuts))).toEqual([
      ['holding', 0, 2, 2],
      ['holding', 2, 1, 1],
      ['holding', 3, 1, 1],
    ]);
  });

  it('splits a block in two by tags, keeping tags at one address together', () => {
    const [block] = planBlocks([t('holding', 0), t('holding', 1), t('holding', 2), t('holding', 3)], LIMITS);
    const halves = splitBlock(block);
    expect(halves?.map((b) => [b.address, b.count])).toEqual([
      [0, 2],
      [2, 2],
    ]);
    const [same] = planBlocks([t('holding', 5), t('holding', 5), t('holding', 6)], LIMITS);
    expect(splitBlock(same)?.map((b) => [b.address, b.count, b.tags.length])).toEqual([
      [5, 1, 2],
      [6, 1, 1],
    ]);
    const [single] = planBlocks([t('holding', 9), t('holding', 9)], LIMITS);
    expect(splitBlock(single)).toBeUndefined();
  });
});

describe('Modbus connector config', () => {
  const base = { id: 'press-1', type: 'modbus', transport: 'tcp', host: '127.0.0.1', addressBase: 0 };

  it('accepts a TCP and an RTU device with defaults filled in', () => {
    const tcp = modbusConnectorSchema.parse({
      ...base,
      tags: [{ name: 't', table: 'holding', address: 0, datatype: 'float32' }],
    });
    expect(tcp).toMatchObject({
      port: 502,
      unitId: 1,
      pollIntervalMs: 1000,
      retries: 1,
      tags: [{ byteOrder: 'ABCD', writable: false }],
    });
    const rtu = modbusConnectorSchema.parse({
      id: 'meter-3',
      type: 'modbus',
      transport: 'rtu',
      path: '/dev/ttyUSB0',
      unitId: 3,
      addressBase: 1,
      tags: [{ name: 'kwh', table: 'input', address: 1, datatype: 'uint32' }],
    });
    expect(rtu).toMatchObject({ baudRate: 9600, parity: 'none', dataBits: 8, stopBits: 1 });
  });

  it('refuses what cannot work, naming the key', () => {
    const problems = (tags: unknown[], extra: object = {}) => {
      const r = modbusConnectorSchema.safeParse({ ...base, ...extra, tags });
      return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    };
    expect(problems([{ name: 'a', table: 'coil', address: 0, datatype: 'int16' }])).toEqual([
      'tags.0.datatype: a coil holds one bit: use bool',
    ]);
    expect(problems([{ name: 'a', table: 'input', address: 0, datatype: 'int16', writable: true }])[0]).toMatch(
      /tags.0.writable: input registers are read-only/,
    );
    expect(problems([{ name: 'a', table: 'holding', address: 0, datatype: 'string' }])[0]).toMatch(
      /tags.0.length: required/,
    );
    expect(problems([{ name: 'a', table: 'holding', address: 0, datatype: 'bit' }])[0]).toMatch(/tags.0.bit: required/);
    expect(
      problems([{ name: 'a', table: 'holding', address: 0, datatype: 'int32', byteOrder: 'HGFEDCBA' }])[0],
    ).toMatch(/tags.0.byteOrder/);
    expect(
      problems([
        { name: 'a', table: 'holding', address: 0, datatype: 'int16' },
        { name: 'a', table: 'holding', address: 1, datatype: 'int16' },
      ])[0],
    ).toMatch(/tags.1.name: "a" is already/);
    expect(problems([{ name: 'a', table: 'holding', address: 0, datatype: 'int16' }], { addressBase: 1 })[0]).toMatch(
      /tags.0.address: must be >= 1/,
    );
    expect(problems([{ name: 'a', table: 'holding', address: 65_535, datatype: 'int32' }])[0]).toMatch(
      /beyond address 65535/,
    );
    expect(problems([{ name: 'a', table: 'holding', address: 0, datatype: 'int16' }], { id: 'a/b' })[0]).toMatch(
      /^id: /,
    );
    expect(
      modbusConnectorSchema.safeParse({
        ...base,
        addressBase: undefined,
        tags: [{ name: 'a', table: 'holding', address: 0, datatype: 'int16' }],
      }).success,
    ).toBe(false);
    expect(
      problems([{ name: 'a', table: 'holding', address: 0, datatype: 'int16', roundWrites: true, writable: true }]),
    ).toEqual(['tags.0.roundWrites: applies to writable integer tags with a scale or offset only']);
  });

  it('refuses overlapping tags when one of them is writable, naming both; read-only overlaps and bits of one register pass', () => {
    const problems = (tags: unknown[], extra: object = {}) => {
      const r = modbusConnectorSchema.safeParse({ ...base, ...extra, tags });
      return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    };
    const temperature = { name: 'temperature', table: 'holding', address: 0, datatype: 'float32' };
    const mode = { name: 'mode', table: 'holding', address: 1, datatype: 'int16' };
    expect(problems([temperature, { ...mode, writable: true }])).toEqual([
      'tags.1.address: "mode" (holding 1) overlaps "temperature" (holding 0..1); a writable tag must not share registers or bits with another tag',
    ]);
    expect(problems([{ ...temperature, writable: true }, mode])).toEqual([
      'tags.0.address: "mode" (holding 1) overlaps "temperature" (holding 0..1); a writable tag must not share registers or bits with another tag',
    ]);
    // Register numbers as configured (addressBase 1), and a long string over several tags.
    expect(
      problems(
        [
          { name: 'label', table: 'holding', address: 10, datatype: 'string', length: 4, writable: true },
          { name: 'code', table: 'holding', address: 13, datatype: 'uint32' },
        ],
        { addressBase: 1 },
      ),
    ).toEqual([
      'tags.0.address: "code" (holding 13..14) overlaps "label" (holding 10..13); a writable tag must not share registers or bits with another tag',
    ]);
    expect(problems([temperature, mode])).toEqual([]);
    expect(
      problems([
        { ...mode, writable: true },
        { ...mode, name: 'mode-coil', table: 'coil', datatype: 'bool', writable: true },
      ]),
    ).toEqual([]);
    expect(
      problems([
        { ...mode, writable: true },
        { name: 'ready', table: 'holding', address: 1, datatype: 'bit', bit: 3 },
      ]),
    ).toEqual([]);
    expect(
      overlappingTags(
        modbusConnectorSchema.parse({ ...base, tags: [temperature, mode, { ...mode, name: 'm2', address: 2 }] }).tags,
      ),
    ).toEqual([[0, 1]]);
  });
});
