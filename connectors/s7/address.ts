/**
 * S7 tag addresses in the syntax of STEP 7 / TIA Portal and of the common S7 drivers (docs/configuration.md#s7-addresses):
 *
 *   DB10,REAL4   DB10,INT2[5]   DB10,S20.16   DB10,X2.1     data block, typed: DB<n>,<type><byte>[.bit|.length][[count]]
 *   DB10.DBX2.1  DB10.DBB4      DB10.DBW4     DB10.DBD8     data block, STEP 7 style (X bit, B byte, W word, D dword)
 *   I0.3  IB0  IW4  ID8          inputs (German E: E0.3, EB0)
 *   Q1.0  QB1  QW2  QD4          outputs (German A: A1.0, AW2)
 *   M0.1  MB1  MW20  MD24        markers (flags)
 *
 * A sized address (B, W, D) is BYTE, WORD or DWORD unless the tag's `datatype` reads it as another type of that
 * size (INT, DINT, REAL, CHAR). Pure functions: parse errors say what is wrong and what is expected.
 */

/** The S7 elementary types a tag can have. */
export const S7_TYPES = [
  'BOOL',
  'BYTE',
  'CHAR',
  'WORD',
  'INT',
  'DWORD',
  'DINT',
  'REAL',
  'LREAL',
  'STRING',
  'DATE_AND_TIME',
] as const;
export type S7Type = (typeof S7_TYPES)[number];

/** Memory areas, with their S7comm area codes. */
export const AREA_CODES = { I: 0x81, Q: 0x82, M: 0x83, DB: 0x84 } as const;
export type S7Area = keyof typeof AREA_CODES;

export interface S7Address {
  readonly area: S7Area;
  /** The data block number; 0 outside DBs. */
  readonly db: number;
  readonly type: S7Type;
  /** First byte. */
  readonly byte: number;
  /** BOOL: the bit of the first byte (0..7); 0 otherwise. */
  readonly bit: number;
  /** STRING: the declared maximum of characters (STRING[n]); 0 otherwise. */
  readonly maxLength: number;
  /** Elements; 1 for a scalar. */
  readonly count: number;
  /** Written with `[count]`: published as an array (a CHAR array as one string). */
  readonly array: boolean;
}

/** Why an address (or a datatype for it) cannot be used. */
export class AddressError extends Error {
  override readonly name = 'AddressError';
  /** The tag key at fault. */
  constructor(
    message: string,
    readonly key: 'address' | 'datatype' = 'address',
  ) {
    super(message);
  }
}

const TYPE_NAMES: Readonly<Record<string, S7Type>> = {
  X: 'BOOL',
  BOOL: 'BOOL',
  B: 'BYTE',
  BYTE: 'BYTE',
  C: 'CHAR',
  CHAR: 'CHAR',
  W: 'WORD',
  WORD: 'WORD',
  I: 'INT',
  INT: 'INT',
  DW: 'DWORD',
  DWORD: 'DWORD',
  DI: 'DINT',
  DINT: 'DINT',
  R: 'REAL',
  REAL: 'REAL',
  LR: 'LREAL',
  LREAL: 'LREAL',
  S: 'STRING',
  STRING: 'STRING',
  DT: 'DATE_AND_TIME',
  DATE_AND_TIME: 'DATE_AND_TIME',
};

/** Bytes of one element (STRING: with its 2-byte header). */
export function elementSize(type: S7Type, maxLength = 0): number {
  switch (type) {
    case 'BOOL':
    case 'BYTE':
    case 'CHAR':
      return 1;
    case 'WORD':
    case 'INT':
      return 2;
    case 'DWORD':
    case 'DINT':
    case 'REAL':
      return 4;
    case 'LREAL':
    case 'DATE_AND_TIME':
      return 8;
    case 'STRING':
      return 2 + maxLength;
  }
}

/** Bytes between array elements: a STRING element starts on an even byte, as in a non-optimized block. */
export function elementStride(address: Pick<S7Address, 'type' | 'maxLength'>): number {
  const size = elementSize(address.type, address.maxLength);
  return address.type === 'STRING' ? size + (size % 2) : size;
}

/** Bytes the tag occupies, from `byte`. */
export function byteLength(address: S7Address): number {
  if (address.type === 'BOOL') return Math.ceil((address.bit + address.count) / 8);
  return elementStride(address) * (address.count - 1) + elementSize(address.type, address.maxLength);
}

/** `DB10 byte 4..7`, `M byte 20`: where a tag sits, for messages. */
export function describeAddress(address: S7Address): string {
  const area = address.area === 'DB' ? `DB${address.db}` : address.area;
  const length = byteLength(address);
  return `${area} byte ${address.byte}${length > 1 ? `..${address.byte + length - 1}` : ''}`;
}

const MAX_BYTE = 65_535;
const MAX_COUNT = 65_535;
const MAX_STRING = 254;

const TYPED = /^DB(\d+),([A-Z_]+?)(\d+)(?:\.(\d+))?(?:\[(\d+)\])?$/;
const STEP7_DB = /^DB(\d+)\.DB([XBWD])(\d+)(?:\.(\d+))?(?:\[(\d+)\])?$/;
const AREA = /^([IEQAM])([XBWD]?)(\d+)(?:\.(\d+))?(?:\[(\d+)\])?$/;

const SIZED: Readonly<Record<string, S7Type>> = { X: 'BOOL', '': 'BOOL', B: 'BYTE', W: 'WORD', D: 'DWORD' };
const AREA_LETTERS: Readonly<Record<string, S7Area>> = { I: 'I', E: 'I', Q: 'Q', A: 'Q', M: 'M' };

/**
 * Parses a tag address; `datatype` (optional) reads a sized address as another type of the same size. Throws an
 * AddressError that says what is wrong.
 */
export function parseAddress(text: string, datatype?: S7Type): S7Address {
  const source = text.trim().toUpperCase();
  let typed = TYPED.exec(source);
  if (typed) {
    const [, db, name, byte, dotted, count] = typed;
    const type = TYPE_NAMES[name] as S7Type | undefined;
    if (type === undefined) {
      throw new AddressError(
        `"${name}" is no S7 type (BOOL/X, BYTE/B, CHAR/C, WORD/W, INT/I, DWORD/DW, DINT/DI, REAL/R, LREAL/LR, STRING/S, DT)`,
      );
    }
    if (datatype !== undefined && datatype !== type) {
      throw new AddressError(`the address names ${type}, datatype says ${datatype}: leave datatype out`, 'datatype');
    }
    return build('DB', Number(db), type, byte, dotted, count);
  }
  typed = STEP7_DB.exec(source) ?? AREA.exec(source);
  if (typed) {
    const isDb = typed[0].startsWith('DB');
    const [, where, size, byte, dotted, count] = typed;
    const sized = SIZED[size];
    const type = datatype === undefined ? sized : reinterpret(sized, datatype);
    return build(isDb ? 'DB' : AREA_LETTERS[where], isDb ? Number(where) : 0, type, byte, dotted, count);
  }
  if (/^[TCZ]\d+$/.test(source)) {
    throw new AddressError(
      `${text}: timers and counters are not read yet; read the value the program copies to a DB or marker`,
    );
  }
  throw new AddressError(
    `${JSON.stringify(text)} is no S7 address (e.g. DB10,REAL4  DB10.DBX2.1  DB10.DBW4  MW20  I0.3  Q1.0)`,
  );
}

function reinterpret(sized: S7Type, datatype: S7Type): S7Type {
  const size = elementSize(sized);
  if (sized === 'BOOL' || datatype === 'BOOL' || elementSize(datatype) !== size || datatype === 'STRING') {
    const fits = S7_TYPES.filter((t) => t !== 'BOOL' && t !== 'STRING' && elementSize(t) === size);
    throw new AddressError(
      sized === 'BOOL'
        ? `a bit address is BOOL; datatype ${datatype} needs a sized address (B, W, D)`
        : `a ${size}-byte address cannot hold ${datatype} (${fits.join(', ')} fit; LREAL, STRING and DT need the DB<n>,<type><byte> form)`,
      'datatype',
    );
  }
  return datatype;
}

function build(
  area: S7Area,
  db: number,
  type: S7Type,
  byteText: string,
  dotted: string | undefined,
  countText: string | undefined,
): S7Address {
  const byte = Number(byteText);
  if (area === 'DB' && (db < 1 || db > 65_535)) throw new AddressError(`DB number ${db} is outside 1..65535`);
  if (byte > MAX_BYTE) throw new AddressError(`byte ${byte} is beyond ${MAX_BYTE}`);
  let bit = 0;
  let maxLength = 0;
  if (type === 'BOOL') {
    if (dotted === undefined) throw new AddressError(`a BOOL needs a bit: byte.bit, e.g. ${byte}.0`);
    bit = Number(dotted);
    if (bit > 7) throw new AddressError(`bit ${bit} is outside 0..7`);
  } else if (type === 'STRING') {
    maxLength = dotted === undefined ? MAX_STRING : Number(dotted);
    if (maxLength < 1 || maxLength > MAX_STRING) throw new AddressError(`STRING length ${maxLength} is outside 1..254`);
  } else if (dotted !== undefined) {
    throw new AddressError(`.${dotted}: only a BOOL has a bit (and a STRING a length)`);
  }
  const count = countText === undefined ? 1 : Number(countText);
  if (count < 1 || count > MAX_COUNT) throw new AddressError(`array length ${count} is outside 1..${MAX_COUNT}`);
  const address: S7Address = { area, db, type, byte, bit, maxLength, count, array: countText !== undefined };
  if (address.byte + byteLength(address) > MAX_BYTE + 1)
    throw new AddressError(`the value would end beyond byte ${MAX_BYTE}`);
  return address;
}
