/**
 * The S7 address syntax (connectors/s7/address.ts): the typed DB form, STEP 7's DB and area forms (English and
 * German mnemonics), arrays, and a clear error for each kind of bad address.
 */
import { describe, expect, it } from 'vitest';
import { byteLength, parseAddress } from '../../connectors/s7/address.js';
import { s7ConnectorSchema } from '../../connectors/s7/schema.js';

const at = (text: string, datatype?: Parameters<typeof parseAddress>[1]) => {
  const a = parseAddress(text, datatype);
  return { ...a, bytes: byteLength(a) };
};

describe('S7 addresses', () => {
  it.each([
    ['DB10,REAL4', { area: 'DB', db: 10, type: 'REAL', byte: 4, count: 1, array: false, bytes: 4 }],
    ['db10,real4', { area: 'DB', db: 10, type: 'REAL', byte: 4 }],
    ['DB10,R4', { type: 'REAL', byte: 4 }],
    ['DB1,X2.7', { type: 'BOOL', byte: 2, bit: 7, bytes: 1 }],
    ['DB1,BYTE0', { type: 'BYTE', bytes: 1 }],
    ['DB1,C3', { type: 'CHAR', byte: 3 }],
    ['DB1,WORD6', { type: 'WORD', bytes: 2 }],
    ['DB1,I6', { type: 'INT', bytes: 2 }],
    ['DB1,DW8', { type: 'DWORD', bytes: 4 }],
    ['DB1,DI8', { type: 'DINT', bytes: 4 }],
    ['DB1,LREAL16', { type: 'LREAL', bytes: 8 }],
    ['DB1,LR16', { type: 'LREAL', bytes: 8 }],
    ['DB1,DT20', { type: 'DATE_AND_TIME', bytes: 8 }],
    ['DB1,DATE_AND_TIME20', { type: 'DATE_AND_TIME', bytes: 8 }],
    ['DB1,S30.16', { type: 'STRING', maxLength: 16, bytes: 18 }],
    ['DB1,STRING30', { type: 'STRING', maxLength: 254, bytes: 256 }],
    ['DB1,INT0[10]', { type: 'INT', count: 10, array: true, bytes: 20 }],
    ['DB1,X0.6[4]', { type: 'BOOL', bit: 6, count: 4, bytes: 2 }],
    ['DB1,S0.5[3]', { type: 'STRING', maxLength: 5, count: 3, bytes: 8 + 8 + 7 }],
    ['DB10.DBX2.1', { area: 'DB', db: 10, type: 'BOOL', byte: 2, bit: 1 }],
    ['DB10.DBB4', { type: 'BYTE', byte: 4 }],
    ['DB10.DBW4', { type: 'WORD', byte: 4 }],
    ['DB10.DBD8', { type: 'DWORD', byte: 8 }],
    ['DB10.DBW4[3]', { type: 'WORD', count: 3, bytes: 6 }],
    ['MW20', { area: 'M', db: 0, type: 'WORD', byte: 20 }],
    ['MB1', { area: 'M', type: 'BYTE' }],
    ['MD24', { area: 'M', type: 'DWORD' }],
    ['M0.1', { area: 'M', type: 'BOOL', bit: 1 }],
    ['I0.3', { area: 'I', type: 'BOOL', byte: 0, bit: 3 }],
    ['E0.3', { area: 'I', type: 'BOOL', bit: 3 }],
    ['IW4', { area: 'I', type: 'WORD', byte: 4 }],
    ['EB2', { area: 'I', type: 'BYTE', byte: 2 }],
    ['Q1.0', { area: 'Q', type: 'BOOL', byte: 1, bit: 0 }],
    ['A1.0', { area: 'Q', type: 'BOOL', byte: 1 }],
    ['QD4', { area: 'Q', type: 'DWORD' }],
    ['AW2', { area: 'Q', type: 'WORD', byte: 2 }],
    [' MX3.2 ', { area: 'M', type: 'BOOL', byte: 3, bit: 2 }],
  ])('%s', (text, expected) => {
    expect(at(text)).toMatchObject(expected);
  });

  it('reads a sized address as another type of that size', () => {
    expect(at('MD20', 'REAL')).toMatchObject({ type: 'REAL', bytes: 4 });
    expect(at('DB1.DBD0', 'DINT')).toMatchObject({ type: 'DINT' });
    expect(at('MW2', 'INT')).toMatchObject({ type: 'INT' });
    expect(at('IB0', 'CHAR')).toMatchObject({ type: 'CHAR' });
  });

  it.each([
    ['DB10', /no S7 address/],
    ['DB10,REAL', /no S7 address/],
    ['MW', /no S7 address/],
    ['X1.0', /no S7 address/],
    ['DB10,FLOAT4', /"FLOAT" is no S7 type/],
    ['DB0,INT0', /DB number 0 is outside 1..65535/],
    ['DB70000,INT0', /DB number 70000 is outside/],
    ['DB1.DBX2', /a BOOL needs a bit: byte.bit, e.g. 2.0/],
    ['I0', /a BOOL needs a bit/],
    ['M0.8', /bit 8 is outside 0..7/],
    ['MW2.1', /only a BOOL has a bit/],
    ['DB1,S0.255', /STRING length 255 is outside 1..254/],
    ['DB1,S0.0', /STRING length 0 is outside/],
    ['DB1,INT0[0]', /array length 0 is outside/],
    ['DB1,INT65535', /end beyond byte 65535/],
    ['T5', /timers and counters are not read yet/],
    ['C3', /timers and counters/],
    ['Z3', /timers and counters/],
  ])('refuses %s', (text, message) => {
    expect(() => parseAddress(text)).toThrow(message);
  });

  it('refuses a datatype that does not fit the address', () => {
    expect(() => parseAddress('MW20', 'REAL')).toThrow(/a 2-byte address cannot hold REAL \(WORD, INT fit/);
    expect(() => parseAddress('M0.0', 'INT')).toThrow(/a bit address is BOOL/);
    expect(() => parseAddress('MB0', 'STRING')).toThrow(/cannot hold STRING/);
    expect(() => parseAddress('DB1,REAL0', 'DINT')).toThrow(/the address names REAL, datatype says DINT/);
  });

  it('the config names the tag key and the problem', () => {
    const result = s7ConnectorSchema.safeParse({
      id: 'cpu',
      type: 's7',
      host: 'plc',
      rack: 0,
      localTsap: 0x100,
      tags: [
        { name: 'a', address: 'DB1,FLOAT0' },
        { name: 'b', address: 'MW0', datatype: 'REAL' },
        { name: 'c', address: 'I0.0', writable: true },
        { name: 'd', address: 'DB1,X0.1[8]', writable: true },
        { name: 'e', address: 'DB1,STRING0', deadband: 1 },
        { name: 'e', address: 'DB1,INT0' },
      ],
    });
    expect(result.success).toBe(false);
    const issues = result.error?.issues.map((i) => [i.path.join('.'), i.message]);
    expect(issues).toEqual(
      expect.arrayContaining([
        ['tags.0.address', expect.stringMatching(/"FLOAT" is no S7 type/)],
        ['tags.1.datatype', expect.stringMatching(/cannot hold REAL/)],
        ['tags.2.writable', 'inputs (I/E) are read-only: the CPU overwrites them'],
        ['tags.3.writable', expect.stringMatching(/whole bytes/)],
        ['tags.4.deadband', 'a deadband applies to single numbers only'],
        ['tags.5.name', '"e" is already the name of tags.4'],
        ['remoteTsap', 'set both TSAPs, or neither (rack and slot)'],
      ]),
    );
  });

  it('refuses TSAPs with rack or slot, and a writable tag larger than one write can carry', () => {
    const result = s7ConnectorSchema.safeParse({
      id: 'cpu',
      type: 's7',
      host: 'plc',
      slot: 2,
      localTsap: 0x100,
      remoteTsap: 0x200,
      pduSize: 240,
      tags: [
        { name: 'big', address: 'DB1,INT0[200]', writable: true },
        { name: 'fits', address: 'DB1,INT0[106]', writable: true },
      ],
    });
    expect(result.error?.issues.map((i) => [i.path.join('.'), i.message])).toEqual([
      ['slot', 'rack and slot make the TSAPs: set one or the other'],
      ['tags.0.writable', '400 bytes do not fit one write with pduSize 240 (at most 212)'],
    ]);
  });
});
