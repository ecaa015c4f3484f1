/**
 * Tag lists as CSV (docs/console.md#tag-lists-in-csv): RFC 4180 records, edgeferry's columns both ways, a Kepware
 * tag export mapped to Modbus tags, and every bad row named by its line.
 */
import { describe, expect, it } from 'vitest';
import { CsvError, parseCsv, tagsFromCsv, tagsToCsv } from '../../src/config/tag-csv.js';

/** The bad rows of a file: the rows that are no tag, or the header's problem. */
function problemsOf(run: () => { problems: unknown[] }): unknown {
  try {
    return run().problems;
  } catch (err) {
    if (err instanceof CsvError) return err.problems;
    throw err;
  }
}

describe('tag CSV', () => {
  it('reads quoted fields with commas, doubled quotes and line breaks, and counts lines as an editor does', () => {
    expect(parseCsv('a,b\r\n"x, y","say ""hi"""\n\n"two\nlines",z\n')).toEqual([
      { cells: ['a', 'b'], line: 1 },
      { cells: ['x, y', 'say "hi"'], line: 2 },
      { cells: ['two\nlines', 'z'], line: 4 },
    ]);
  });

  it('round-trips edgeferry columns, numbers and booleans typed', () => {
    const tags = [
      { name: 'temp, top', table: 'holding', address: 10, datatype: 'float32', byteOrder: 'CDAB', engUnit: '°C' },
      { name: 'run', table: 'coil', address: 3, datatype: 'bool', writable: true },
    ];
    const csv = tagsToCsv(tags);
    expect(csv.split('\r\n')[0]).toBe('name,table,address,datatype,byteOrder,writable,engUnit');
    expect(tagsFromCsv(csv, 'edgeferry', 0).tags).toEqual(tags);
  });

  it('names every bad row by line, and an unknown column at the header', () => {
    const csv =
      'name,table,address,datatype\na,holding,1,uint16\nb,holding,x,uint16\nc,holding,3\na,holding,4,uint16\n';
    expect(problemsOf(() => tagsFromCsv(csv, 'edgeferry', 0))).toEqual([
      { line: 3, message: 'address "x" is not a number' },
      { line: 4, message: '3 cells, the header has 4' },
      { line: 5, message: 'name "a" is on line 2 too' },
    ]);
    expect(problemsOf(() => tagsFromCsv('name,adress\n', 'edgeferry', 0))).toEqual([
      { line: 1, message: expect.stringMatching(/unknown column "adress"/) },
    ]);
  });

  it('maps a Kepware export: register numbers, data types, access, linear scaling, units', () => {
    const csv = [
      '"Tag Name","Address","Data Type","Respect Data Type","Client Access","Scan Rate","Scaling","Raw Low","Raw High","Scaled Low","Scaled High","Scaled Data Type","Clamp Low","Clamp High","Eng Units","Description","Negate Value"',
      '"Speed","400001","Word","1","Read/Write","100","Linear","0","1000","0","100","Float","","","rpm","Spindle","0"',
      '"Temp","300011","Float","1","RO","100","","","","","","","","","°C","",""',
      '"Alarm","400020.3","Boolean","1","RO","100","","","","","","","","","","",""',
      '"Recipe","400030.10 L","String","1","RO","100","","","","","","","","","","",""',
      '"Run","000005","Boolean","1","Read/Write","100","","","","","","","","","","",""',
      '"Code","400040","BCD","1","RO","100","","","","","","","","","","",""',
    ].join('\r\n');
    expect(problemsOf(() => tagsFromCsv(csv, 'kepware', 1))).toEqual([
      { line: 7, message: 'Kepware data type "BCD" has no Modbus tag datatype here' },
    ]);
    const { tags } = tagsFromCsv(csv.split('\r\n').slice(0, 6).join('\r\n'), 'kepware', 0);
    expect(tags).toEqual([
      {
        name: 'Speed',
        table: 'holding',
        address: 0,
        datatype: 'uint16',
        writable: true,
        scale: 0.1,
        offset: 0,
        engUnit: 'rpm',
        description: 'Spindle',
      },
      { name: 'Temp', table: 'input', address: 10, datatype: 'float32', engUnit: '°C' },
      { name: 'Alarm', table: 'holding', address: 19, datatype: 'bit', bit: 3 },
      { name: 'Recipe', table: 'holding', address: 29, datatype: 'string', length: 5, byteOrder: 'BADC' },
      { name: 'Run', table: 'coil', address: 4, datatype: 'bool', writable: true },
    ]);
  });
});
