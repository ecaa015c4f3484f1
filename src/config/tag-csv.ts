/**
 * A device's tags as CSV (docs/console.md#tag-lists-in-csv): edgeferry's own columns (the tag keys of the file) both
 * ways, and a Kepware tag export read in. Every bad row is named by its line with the problem; the schema's own
 * problems are mapped back to their lines by the caller (config-editor.ts).
 */

export type CsvFormat = 'edgeferry' | 'kepware';

export interface CsvProblem {
  readonly line: number;
  readonly message: string;
}

/** Rows that cannot be tags; nothing of the file is used. */
export class CsvError extends Error {
  constructor(readonly problems: readonly CsvProblem[]) {
    super(
      `${problems.length} bad row${problems.length === 1 ? '' : 's'}: ${problems.map((p) => `line ${p.line}: ${p.message}`).join('; ')}`,
    );
  }
}

/** The columns of edgeferry's CSV, in this order when exported (those no tag has are left out). */
const COLUMNS = [
  'name',
  'table',
  'address',
  'datatype',
  'length',
  'bit',
  'byteOrder',
  'scale',
  'offset',
  'deadband',
  'writable',
  'roundWrites',
  'nodeId',
  'browsePath',
  'engUnit',
  'engLow',
  'engHigh',
  'description',
] as const;
const NUMBERS: ReadonlySet<string> = new Set([
  'address',
  'length',
  'bit',
  'scale',
  'offset',
  'deadband',
  'engLow',
  'engHigh',
]);
const BOOLEANS: ReadonlySet<string> = new Set(['writable', 'roundWrites']);
const MAX_ROWS = 10_000;

/** RFC 4180 records: quoted fields with doubled quotes, commas and line breaks inside quotes, CRLF or LF. */
export function parseCsv(text: string): { cells: string[]; line: number }[] {
  const records: { cells: string[]; line: number }[] = [];
  let cells: string[] = [];
  let cell = '';
  let quoted = false;
  let line = 1;
  let start = 1;
  const text0 = text.replace(/^\uFEFF/, '');
  for (let i = 0; i < text0.length; i++) {
    const c = text0[i];
    if (quoted) {
      if (c === '"' && text0[i + 1] === '"') {
        cell += '"';
        i++;
      } else if (c === '"') quoted = false;
      else {
        if (c === '\n') line++;
        cell += c;
      }
    } else if (c === '"' && cell === '') quoted = true;
    else if (c === ',') {
      cells.push(cell);
      cell = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text0[i + 1] === '\n') i++;
      cells.push(cell);
      if (cells.some((x) => x !== '')) records.push({ cells, line: start });
      cells = [];
      cell = '';
      line++;
      start = line;
    } else cell += c;
  }
  cells.push(cell);
  if (cells.some((x) => x !== '')) records.push({ cells, line: start });
  return records;
}

/**
 * The tags of a CSV file with the line each came from, and the rows that are no tag by line (the caller refuses
 * the file then, after checking the good rows too, so every bad row is named at once). A file whose header is
 * wrong throws a CsvError. `addressBase` is the device's: Kepware addresses (400001) are register numbers, 1-based.
 */
export function tagsFromCsv(
  text: string,
  format: CsvFormat,
  addressBase: 0 | 1,
): { tags: Record<string, unknown>[]; lines: number[]; problems: CsvProblem[] } {
  const records = parseCsv(text);
  const header = records.at(0);
  const rows = records.slice(1);
  if (header === undefined) throw new CsvError([{ line: 1, message: 'the file is empty: a header row is required' }]);
  if (rows.length > MAX_ROWS)
    throw new CsvError([{ line: rows[MAX_ROWS].line, message: `more than ${MAX_ROWS} tags` }]);
  const columns = header.cells.map((c) => c.trim());
  const problems: CsvProblem[] = [];
  const read = format === 'kepware' ? kepwareColumns(columns, header.line) : ownColumns(columns, header.line);
  const tags: Record<string, unknown>[] = [];
  const lines: number[] = [];
  for (const row of rows) {
    if (row.cells.length !== columns.length) {
      problems.push({ line: row.line, message: `${row.cells.length} cells, the header has ${columns.length}` });
      continue;
    }
    const field = (name: string): string => row.cells[columns.indexOf(name)]?.trim() ?? '';
    try {
      tags.push(read(field, addressBase));
      lines.push(row.line);
    } catch (err) {
      if (!(err instanceof RowError)) throw err;
      problems.push({ line: row.line, message: err.message });
    }
  }
  const seen = new Map<string, number>();
  tags.forEach((tag, i) => {
    const earlier = seen.get(String(tag.name));
    if (earlier !== undefined)
      problems.push({ line: lines[i], message: `name "${String(tag.name)}" is on line ${earlier} too` });
    else seen.set(String(tag.name), lines[i]);
  });
  return { tags, lines, problems: problems.sort((a, b) => a.line - b.line) };
}

/** edgeferry's CSV of `tags`: one column per key any of them has, in the order of COLUMNS. */
export function tagsToCsv(tags: readonly Record<string, unknown>[]): string {
  const used = COLUMNS.filter((c) => tags.some((t) => t[c] !== undefined));
  const quote = (v: unknown): string => {
    if (v === undefined || v === null) return '';
    const s = String(v as string | number | boolean);
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  return `${[used.join(','), ...tags.map((t) => used.map((c) => quote(t[c])).join(','))].join('\r\n')}\r\n`;
}

class RowError extends Error {}

type RowReader = (field: (name: string) => string, addressBase: 0 | 1) => Record<string, unknown>;

function ownColumns(columns: readonly string[], line: number): RowReader {
  const unknown = columns.filter((c) => !(COLUMNS as readonly string[]).includes(c));
  if (unknown.length > 0)
    throw new CsvError([
      {
        line,
        message: `unknown column${unknown.length > 1 ? 's' : ''} ${unknown.map((c) => `"${c}"`).join(', ')}: the columns are ${COLUMNS.join(', ')}`,
      },
    ]);
  if (!columns.includes('name')) throw new CsvError([{ line, message: 'a "name" column is required' }]);
  return (field) => {
    const tag: Record<string, unknown> = {};
    for (const column of columns) {
      const text = field(column);
      if (text === '') continue;
      if (NUMBERS.has(column)) tag[column] = number(column, text);
      else if (BOOLEANS.has(column)) tag[column] = boolean(column, text);
      else tag[column] = text;
    }
    if (tag.name === undefined) throw new RowError('name is empty');
    return tag;
  };
}

/** Kepware's Modbus data types and the datatype of the tag that reads the same registers. */
const KEPWARE_TYPES: Readonly<Partial<Record<string, string>>> = {
  boolean: 'bool',
  word: 'uint16',
  short: 'int16',
  dword: 'uint32',
  long: 'int32',
  float: 'float32',
  double: 'float64',
  llong: 'int64',
  qword: 'uint64',
  string: 'string',
};
const KEPWARE_TABLES: Readonly<Record<string, string>> = { '0': 'coil', '1': 'discrete', '3': 'input', '4': 'holding' };
const KEPWARE_REQUIRED = ['Tag Name', 'Address', 'Data Type'];

function kepwareColumns(columns: readonly string[], line: number): RowReader {
  const missing = KEPWARE_REQUIRED.filter((c) => !columns.includes(c));
  if (missing.length > 0)
    throw new CsvError([
      { line, message: `not a Kepware tag export: no ${missing.map((c) => `"${c}"`).join(', ')} column` },
    ]);
  return (field, addressBase) => {
    const name = field('Tag Name');
    if (name === '') throw new RowError('Tag Name is empty');
    const typeName = field('Data Type');
    const datatype = KEPWARE_TYPES[typeName.toLowerCase()];
    if (datatype === undefined) throw new RowError(`Kepware data type "${typeName}" has no Modbus tag datatype here`);
    const address = /^([0134])(\d{4,5})(?:\.(\d{1,3}))?(?:\s*([HL]))?$/i.exec(field('Address'));
    if (address === null)
      throw new RowError(`address "${field('Address')}" is not a Modbus address such as 400001 or 400001.3`);
    const [, tablePrefix, digits, suffix, byteOrder] = address as unknown as [string, string, string, string?, string?];
    const register = Number(digits);
    if (register < 1) throw new RowError(`address "${field('Address')}": register numbers start at 1`);
    const tag: Record<string, unknown> = {
      name,
      table: KEPWARE_TABLES[tablePrefix],
      address: register - 1 + addressBase,
    };
    if (datatype === 'string') {
      if (suffix === undefined) throw new RowError('a String address gives its length in characters: 400001.20');
      tag.datatype = 'string';
      tag.length = Math.ceil(Number(suffix) / 2);
      if (byteOrder?.toUpperCase() === 'L') tag.byteOrder = 'BADC';
    } else if (suffix !== undefined) {
      if (datatype !== 'bool' || (tablePrefix !== '3' && tablePrefix !== '4'))
        throw new RowError(`"${field('Address')}": a bit of a register is a Boolean of a 3xxxxx or 4xxxxx address`);
      tag.datatype = 'bit';
      tag.bit = Number(suffix);
    } else {
      tag.datatype = datatype;
    }
    if (/write/i.test(field('Client Access'))) tag.writable = true;
    const scaling = field('Scaling');
    if (/^linear$/i.test(scaling)) {
      const [rawLow, rawHigh, low, high] = ['Raw Low', 'Raw High', 'Scaled Low', 'Scaled High'].map((c) =>
        number(c, field(c)),
      );
      if (rawHigh === rawLow) throw new RowError('Raw Low and Raw High are the same: no linear scaling');
      const scale = (high - low) / (rawHigh - rawLow);
      tag.scale = scale;
      tag.offset = low - rawLow * scale;
    } else if (scaling !== '' && !/^none$/i.test(scaling)) {
      throw new RowError(`Scaling "${scaling}": only Linear (scale and offset) is supported`);
    }
    const unit = field('Eng Units');
    if (unit !== '') tag.engUnit = unit;
    const description = field('Description');
    if (description !== '') tag.description = description;
    return tag;
  };
}

function number(column: string, text: string): number {
  const value = Number(text);
  if (text === '' || !Number.isFinite(value)) throw new RowError(`${column} "${text}" is not a number`);
  return value;
}

function boolean(column: string, text: string): boolean {
  if (/^(true|yes|1)$/i.test(text)) return true;
  if (/^(false|no|0)$/i.test(text)) return false;
  throw new RowError(`${column} "${text}" is not true or false`);
}
