/**
 * The S7comm codec (connectors/s7/s7comm.ts), the value images (values.ts) and the read plan (plan.ts), on known
 * frames and memory images: frames as in the S7comm dissector of Wireshark and in snap7's client, answers with
 * failed items, errors in words, and how many requests a plan takes within a PDU size.
 */
import { describe, expect, it } from 'vitest';
import { parseAddress } from '../../connectors/s7/address.js';
import { planReads } from '../../connectors/s7/plan.js';
import type { PlannedTag } from '../../connectors/s7/plan.js';
import {
  connectionRequest,
  describeS7Error,
  parseConnectionConfirm,
  parseReadVar,
  parseSetupCommunication,
  parseWriteVar,
  rackSlotTsap,
  readRoom,
  readVar,
  S7Error,
  setupCommunication,
  TpktReader,
  writeLimit,
  writeVar,
} from '../../connectors/s7/s7comm.js';
import { decodeValue, encodeValue } from '../../connectors/s7/values.js';

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s/g, ''), 'hex');

describe('S7comm frames', () => {
  it('connection request with rack/slot TSAPs, and its confirm', () => {
    expect(rackSlotTsap(0, 2)).toBe(0x0102);
    expect(rackSlotTsap(1, 3)).toBe(0x0123);
    expect(connectionRequest(0x0100, rackSlotTsap(0, 1))).toEqual(
      hex('0300 0016 11 e0 0000 0001 00 c1020100 c2020101 c0010a'),
    );
    expect(() => parseConnectionConfirm(hex('0300 0016 11 d0 0001 0044 00 c0010a c1020100 c2020101'))).not.toThrow();
    expect(() => parseConnectionConfirm(hex('0300 000b 06 80 0001 0044 00'))).toThrow(/check rack and slot/);
  });

  it('setup communication asks for a PDU size and learns the one granted', () => {
    expect(setupCommunication(1, 960)).toEqual(hex('0300 0019 02f080 32 01 0000 0001 0008 0000 f0 00 0001 0001 03c0'));
    expect(parseSetupCommunication(hex('0300 001b 02f080 32 03 0000 0001 0008 0000 0000 f0 00 0001 0001 00f0'))).toBe(
      240,
    );
  });

  it('Read Var with several items, and an answer with data, fill bytes and a failed item', () => {
    const items = [
      { area: 'DB', db: 10, start: 4, length: 3 },
      { area: 'M', db: 0, start: 20, length: 2 },
      { area: 'DB', db: 99, start: 0, length: 2 },
    ] as const;
    expect(readVar(7, items)).toEqual(
      hex(`0300 0037 02f080 32 01 0000 0007 0026 0000 04 03
           120a10 02 0003 000a 84 000020
           120a10 02 0002 0000 83 0000a0
           120a10 02 0002 0063 84 000000`),
    );
    const answer = hex(`0300 0027 02f080 32 03 0000 0007 0002 0012 0000 04 03
                        ff 04 0018 0a0b0c 00
                        ff 04 0010 beef
                        0a 00 0000`);
    expect(parseReadVar(answer, items, 'read')).toEqual([
      { ok: true, data: hex('0a0b0c') },
      { ok: true, data: hex('beef') },
      { ok: false, code: 0x0a },
    ]);
    expect(() => parseReadVar(answer, items.slice(0, 2), 'read')).toThrow(/does not match the request/);
  });

  it('an error class in the answer header is an S7Error in words', () => {
    const refused = hex('0300 0013 02f080 32 03 0000 0007 0002 0000 8104 04 00');
    expect(() => parseReadVar(refused, [{ area: 'DB', db: 1, start: 0, length: 2 }], 'read 1 item')).toThrow(
      new S7Error(0x81, 0x04, 'read 1 item'),
    );
    expect(describeS7Error(0x81, 0x04)).toBe(
      'error 0x8104 (application relationship error: the CPU does not offer this service (on an S7-1200/1500: enable "Permit access with PUT/GET"))',
    );
    expect(describeS7Error(0x87, 0x22)).toBe('error 0x8722 (access error)');
  });

  it('Write Var of bytes and of one bit, and the return code of its answer', () => {
    expect(writeVar(2, { area: 'DB', db: 5, start: 2 }, hex('fed4'))).toEqual(
      hex('0300 0025 02f080 32 01 0000 0002 000e 0006 05 01 120a10 02 0002 0005 84 000010 00 04 0010 fed4'),
    );
    expect(writeVar(3, { area: 'Q', db: 0, start: 1 }, { bit: 3, state: true })).toEqual(
      hex('0300 0024 02f080 32 01 0000 0003 000e 0005 05 01 120a10 01 0001 0000 82 00000b 00 03 0001 01'),
    );
    expect(parseWriteVar(hex('0300 0016 02f080 32 03 0000 0003 0002 0001 0000 05 01 ff'), 'write')).toBe(0xff);
  });

  it('PDU limits: items packed until the request or its answer would outgrow the PDU', () => {
    expect(readRoom([], 240)).toBe(222);
    expect(readRoom([221], 240)).toBe(0);
    expect(readRoom([100, 99], 240)).toBe(240 - 14 - 104 - 104 - 4);
    // 19 item specs of 12 bytes fill a request of 240: a 20th does not fit.
    expect(readRoom(Array<number>(18).fill(1), 240)).toBeGreaterThan(0);
    expect(readRoom(Array<number>(19).fill(1), 240)).toBe(0);
    expect(writeLimit(240)).toBe(212);
  });

  it('TPKT frames split across and joined in TCP chunks', () => {
    const frames: string[] = [];
    const reader = new TpktReader();
    const two = Buffer.concat([hex('0300 0008 02f080 aa'), hex('0300 0009 02f080 bbcc')]);
    reader.push(two.subarray(0, 5), (f) => frames.push(f.toString('hex')));
    reader.push(two.subarray(5, 12), (f) => frames.push(f.toString('hex')));
    reader.push(two.subarray(12), (f) => frames.push(f.toString('hex')));
    expect(frames).toEqual(['0300000802f080aa', '0300000902f080bbcc']);
    expect(() => new TpktReader().push(hex('1603 0100'), () => undefined)).toThrow(/not a TPKT frame/);
  });
});

describe('S7 value images', () => {
  it.each([
    ['DB1,REAL0', '41480000', 12.5],
    ['DB1,LREAL0', 'bff8000000000000', -1.5],
    ['DB1,INT0', '8000', -32768],
    ['DB1,WORD0', 'ffff', 65535],
    ['DB1,DINT0', 'ffffff85', -123],
    ['DB1,DWORD0', '80000000', 2147483648],
    ['DB1,BYTE0', '7f', 127],
    ['DB1,CHAR0', '41', 'A'],
    ['DB1,S0.6', '0603 414243 000000', 'ABC'],
    ['DB1,S0.4', '04ff 41424344', 'ABCD'], // a length beyond the maximum is cut to it
    ['DB1,DT0', '2402291345567895', Date.UTC(2024, 1, 29, 13, 45, 56, 789)], // weekday 5: Thursday
    ['DB1,C0[4]', '41420000', 'AB'],
    ['DB1,DT0', '9912311259591236', Date.UTC(1999, 11, 31, 12, 59, 59, 123)], // BCD, weekday 6: Friday
    ['DB1,INT0[2]', '0001ffff', [1, -1]],
    ['DB1,X0.6[4]', 'c001', [true, true, true, false]],
    ['DB1,S0.3[2]', '0302 4142 00 00 0301 43 0000', ['AB', 'C']],
  ])('%s from %s', (address, image, value) => {
    const a = parseAddress(address);
    expect(decodeValue(a, hex(image), 0)).toEqual(value);
    // And back: the encoded value decodes to the same (a BOOL array off bit 0 is read-only, see the schema).
    if (address !== 'DB1,X0.6[4]') expect(decodeValue(a, encodeValue(a, value) as Buffer, 0)).toEqual(value);
  });

  it('encodes DATE_AND_TIME in BCD with the weekday, and refuses what does not fit', () => {
    expect(encodeValue(parseAddress('DB1,DT0'), Date.UTC(2024, 1, 29, 13, 45, 56, 789))).toEqual(
      hex('2402291345567895'),
    );
    const refusals: [string, unknown, RegExp][] = [
      ['DB1,INT0', 32768, /32768 is outside INT \(-32768..32767\)/],
      ['DB1,BYTE0', -1, /outside BYTE/],
      ['DB1,DWORD0', 2 ** 32, /outside DWORD/],
      ['DB1,DINT0', 1.5, /expects an integer for DINT/],
      ['DB1,REAL0', 1e39, /outside REAL/],
      ['DB1,REAL0', true, /expects a number/],
      ['DB1,CHAR0', 'AB', /one character/],
      ['DB1,S0.3', 'ABCD', /4 characters do not fit STRING\[3\]/],
      ['DB1,S0.3', '€', /Latin-1/],
      ['DB1,C0[2]', 'ABC', /3 characters do not fit CHAR\[2\]/],
      ['DB1,DT0', Date.UTC(1989, 11, 31), /outside DATE_AND_TIME/],
      ['DB1,DT0', 'today', /epoch milliseconds/],
      ['DB1,INT0[2]', [1, 2, 3], /expects 2 elements, got 3/],
      ['DB1,INT0[2]', [1, 'x'], /element 1: expects an integer/],
      ['DB1,X0.0', 1, /expects a boolean/],
      ['DB1,X0.0[8]', [true], /expects 8 elements/],
    ];
    for (const [address, value, message] of refusals) {
      expect(() => encodeValue(parseAddress(address), value as never), address).toThrow(message);
    }
  });
});

describe('the S7 read plan', () => {
  const tag = (index: number, area: PlannedTag['area'], db: number, start: number, length: number): PlannedTag => ({
    index,
    area,
    db,
    start,
    end: start + length,
  });
  const limits = { pduSize: 240, maxItems: 20, maxGapBytes: 8 };

  it('coalesces near tags of one area, never across areas or DBs, and packs the items into one request', () => {
    const tags = [
      tag(0, 'DB', 1, 0, 4),
      tag(1, 'DB', 1, 10, 2),
      tag(2, 'DB', 1, 30, 2),
      tag(3, 'DB', 2, 0, 2),
      tag(4, 'M', 0, 0, 1),
    ];
    const plan = planReads(tags, limits);
    expect(plan).toHaveLength(1);
    expect(plan[0].map((p) => p.item)).toEqual([
      { area: 'DB', db: 1, start: 0, length: 12 },
      { area: 'DB', db: 1, start: 30, length: 2 },
      { area: 'DB', db: 2, start: 0, length: 2 },
      { area: 'M', db: 0, start: 0, length: 1 },
    ]);
  });

  it('cuts a long group at tag boundaries into as few requests as the PDU allows; a tag is never split', () => {
    // 100 REALs back to back: 400 bytes; an answer of 240 holds 222 bytes in one item.
    const tags = Array.from({ length: 100 }, (_, i) => tag(i, 'DB', 1, i * 4, 4));
    const plan = planReads(tags, limits);
    expect(plan.map((r) => r.map((p) => p.item.length))).toEqual([[220], [180]]);
    for (const request of plan) for (const piece of request) expect(piece.item.length % 4).toBe(0);
  });

  it('reads a tag larger than one item in parts; isolated tags alone', () => {
    const plan = planReads(
      [tag(0, 'DB', 1, 0, 500), tag(1, 'DB', 1, 500, 2), tag(2, 'DB', 1, 502, 2)],
      limits,
      new Set([1]),
    );
    const pieces = plan.flat();
    expect(pieces.filter((p) => 'part' in p).map((p) => [p.item.start, p.item.length])).toEqual([
      [0, 222],
      [222, 222],
      [444, 56],
    ]);
    expect(pieces.filter((p) => 'tags' in p).map((p) => ('tags' in p ? p.tags.map((t) => t.index) : []))).toEqual([
      [1],
      [2],
    ]);
  });
});
