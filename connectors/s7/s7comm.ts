/**
 * The S7comm codec (docs/configuration.md#s7-protocol): S7comm PDUs in COTP data TPDUs (ISO 8073 class 0) in TPKT
 * frames (RFC 1006, ISO-on-TCP, port 102). Builds the frames the connector sends (connection request, setup
 * communication, Read Var and Write Var with several items) and parses the answers, with the S7 error class and
 * code, and each item's return code, in words. Pure functions over Buffers; `s7-link.ts` owns the socket.
 */
import { AREA_CODES, type S7Area } from './address.js';

/** A malformed or unexpected frame: the connection is no longer trustworthy. */
export class FrameError extends Error {
  override readonly name = 'FrameError';
}

/** The PLC refused a whole request: an S7 error class and code in the answer's header. */
export class S7Error extends Error {
  override readonly name = 'S7Error';
  constructor(
    readonly errorClass: number,
    readonly errorCode: number,
    what: string,
  ) {
    super(`${what}: ${describeS7Error(errorClass, errorCode)}`);
  }
}

const ERROR_CLASSES: Readonly<Record<number, string>> = {
  0x81: 'application relationship error',
  0x82: 'object definition error',
  0x83: 'no resources available',
  0x84: 'error on service processing',
  0x85: 'error on supplies',
  0x87: 'access error',
};

/** Known class+code pairs, with what the user can do about them. */
const ERRORS: Readonly<Record<number, string>> = {
  0x8104: 'the CPU does not offer this service (on an S7-1200/1500: enable "Permit access with PUT/GET")',
  0x8500: 'the request is larger than the negotiated PDU size',
  0x8304: 'the CPU has no free connection resources',
  0xd401: 'syntax error in the request',
};

export function describeS7Error(errorClass: number, errorCode: number): string {
  const pair = (errorClass << 8) | errorCode;
  const known = ERRORS[pair];
  const hex = `0x${pair.toString(16).padStart(4, '0')}`;
  return `error ${hex} (${ERROR_CLASSES[errorClass] ?? 'unknown error class'}${known ? `: ${known}` : ''})`;
}

/** Return codes of one item of a Read/Write Var answer (0xff: success). */
const ITEM_CODES: Readonly<Record<number, string>> = {
  0x01: 'hardware fault',
  0x03: 'access to the object not allowed (on an S7-1200/1500: PUT/GET access, block protection)',
  0x05: 'address out of range (beyond the end of the area or block)',
  0x06: 'data type not supported',
  0x07: 'data type inconsistent',
  0x0a: 'object does not exist (no such DB, or a DB with optimized block access)',
};
export const ITEM_OK = 0xff;

export function describeItemCode(code: number): string {
  return `return code 0x${code.toString(16).padStart(2, '0')} (${ITEM_CODES[code] ?? 'unknown item error'})`;
}

/** Bytes of the S7 header of a job request, and of an ack-data answer (which adds error class and code). */
const JOB_HEADER = 10;
const ACK_HEADER = 12;
/** TPKT (4) + COTP data header (3). */
const FRAME_HEADER = 7;
/** Bytes of one Read/Write Var item in the parameters. */
const ITEM_SPEC = 12;

/**
 * The most bytes one more item can read in a Read Var request that already reads items of `lengths` bytes, within
 * the PDU size: the request's item specs, and the answer's header, item headers and fill bytes. 0: no room.
 */
export function readRoom(lengths: readonly number[], pduSize: number): number {
  if (JOB_HEADER + 2 + (lengths.length + 1) * ITEM_SPEC > pduSize) return 0;
  // Every item but the last is followed by a fill byte when its length is odd.
  const answer = lengths.reduce((sum, length) => sum + 4 + length + (length % 2), ACK_HEADER + 2);
  return Math.max(0, pduSize - answer - 4);
}

/** The most bytes one Write Var request can carry with the PDU size (one item). */
export const writeLimit = (pduSize: number): number => pduSize - JOB_HEADER - 2 - ITEM_SPEC - 4;

export interface ItemAddress {
  readonly area: S7Area;
  readonly db: number;
  /** First byte. */
  readonly start: number;
}

export interface ReadItem extends ItemAddress {
  readonly length: number;
}

export type ItemResult = { readonly ok: true; readonly data: Buffer } | { readonly ok: false; readonly code: number };

function frame(payload: Buffer): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER + payload.length);
  out.writeUInt8(3, 0); // TPKT version
  out.writeUInt8(0, 1);
  out.writeUInt16BE(out.length, 2);
  out.writeUInt8(2, 4); // COTP header length
  out.writeUInt8(0xf0, 5); // DT data
  out.writeUInt8(0x80, 6); // last data unit
  payload.copy(out, FRAME_HEADER);
  return out;
}

/** The remote TSAP of a CPU by rack and slot, as a PG connection (what STEP 7 and snap7 use). */
export const rackSlotTsap = (rack: number, slot: number): number => 0x0100 | (rack << 5) | slot;

/** COTP connection request (CR) with the calling and called TSAPs and a TPDU size of 1024. */
export function connectionRequest(localTsap: number, remoteTsap: number): Buffer {
  const out = Buffer.from([3, 0, 0, 22, 17, 0xe0, 0, 0, 0, 1, 0, 0xc1, 2, 0, 0, 0xc2, 2, 0, 0, 0xc0, 1, 0x0a]);
  out.writeUInt16BE(localTsap, 13);
  out.writeUInt16BE(remoteTsap, 17);
  return out;
}

/** Throws unless `tpkt` is a COTP connection confirm (CC). */
export function parseConnectionConfirm(tpkt: Buffer): void {
  if (tpkt.length < 7 || tpkt[5] !== 0xd0) {
    throw new FrameError(
      tpkt[5] === 0x80
        ? 'the PLC refused the connection (COTP disconnect: check rack and slot, or the TSAPs)'
        : 'no COTP connection confirm',
    );
  }
}

function job(ref: number, params: Buffer, data: Buffer = Buffer.alloc(0)): Buffer {
  const header = Buffer.from([0x32, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
  header.writeUInt16BE(ref, 4);
  header.writeUInt16BE(params.length, 6);
  header.writeUInt16BE(data.length, 8);
  return frame(Buffer.concat([header, params, data]));
}

/** Setup communication: one job at a time each way, asking for `pduSize`. */
export function setupCommunication(ref: number, pduSize: number): Buffer {
  const params = Buffer.from([0xf0, 0, 0, 1, 0, 1, 0, 0]);
  params.writeUInt16BE(pduSize, 6);
  return job(ref, params);
}

interface Ack {
  readonly ref: number;
  readonly params: Buffer;
  readonly data: Buffer;
}

/** The PDU reference of an answer frame (to match it to its request), or undefined if it is no S7 answer. */
export function answerRef(tpkt: Buffer): number | undefined {
  if (tpkt.length < FRAME_HEADER + ACK_HEADER || tpkt[FRAME_HEADER] !== 0x32) return undefined;
  return tpkt.readUInt16BE(FRAME_HEADER + 4);
}

/** The parameters and data of an ack-data answer; throws an S7Error when its header carries an error. */
function parseAck(tpkt: Buffer, what: string): Ack {
  const s7 = tpkt.subarray(FRAME_HEADER);
  if (s7.length < ACK_HEADER || s7[0] !== 0x32) throw new FrameError(`${what}: not an S7comm answer`);
  if (s7[1] !== 3 && s7[1] !== 2) throw new FrameError(`${what}: unexpected S7comm message type ${s7[1]}`);
  const header = ACK_HEADER; // ack (2) and ack-data (3) both carry error class and code
  const paramLength = s7.readUInt16BE(6);
  const dataLength = s7.readUInt16BE(8);
  if (s7[10] !== 0 || s7[11] !== 0) throw new S7Error(s7[10], s7[11], what);
  if (header + paramLength + dataLength > s7.length) throw new FrameError(`${what}: truncated answer`);
  const params = s7.subarray(header, header + paramLength);
  return {
    ref: s7.readUInt16BE(4),
    params,
    data: s7.subarray(header + paramLength, header + paramLength + dataLength),
  };
}

/** The PDU size the PLC granted. */
export function parseSetupCommunication(tpkt: Buffer): number {
  const { params } = parseAck(tpkt, 'setup communication');
  if (params.length < 8 || params[0] !== 0xf0) throw new FrameError('setup communication: unexpected answer');
  return params.readUInt16BE(6);
}

function itemSpec(out: Buffer, at: number, item: ItemAddress, transport: number, count: number, bit = 0): void {
  out.writeUInt8(0x12, at); // variable specification
  out.writeUInt8(10, at + 1);
  out.writeUInt8(0x10, at + 2); // S7ANY addressing
  out.writeUInt8(transport, at + 3);
  out.writeUInt16BE(count, at + 4);
  out.writeUInt16BE(item.area === 'DB' ? item.db : 0, at + 6);
  out.writeUInt8(AREA_CODES[item.area], at + 8);
  const bitAddress = item.start * 8 + bit;
  out.writeUInt8((bitAddress >> 16) & 0xff, at + 9);
  out.writeUInt16BE(bitAddress & 0xffff, at + 10);
}

const TRANSPORT_BIT = 0x01;
const TRANSPORT_BYTE = 0x02;

/** Read Var of `items` (bytes each) in one request. */
export function readVar(ref: number, items: readonly ReadItem[]): Buffer {
  const params = Buffer.alloc(2 + items.length * ITEM_SPEC);
  params.writeUInt8(0x04, 0);
  params.writeUInt8(items.length, 1);
  items.forEach((item, i) => itemSpec(params, 2 + i * ITEM_SPEC, item, TRANSPORT_BYTE, item.length));
  return job(ref, params);
}

/** The data of each item of a Read Var answer, in request order; a failed item carries its return code. */
export function parseReadVar(tpkt: Buffer, items: readonly ReadItem[], what: string): ItemResult[] {
  const { params, data } = parseAck(tpkt, what);
  if (params.length < 2 || params[0] !== 0x04 || params[1] !== items.length) {
    throw new FrameError(`${what}: the answer does not match the request`);
  }
  const results: ItemResult[] = [];
  let at = 0;
  for (const item of items) {
    if (at + 4 > data.length) throw new FrameError(`${what}: truncated answer`);
    const code = data[at];
    const transport = data[at + 1];
    const raw = data.readUInt16BE(at + 2);
    // Lengths of bit/byte/integer transports are in bits; of REAL and octet strings in bytes.
    const length = transport === 0x03 || transport === 0x04 || transport === 0x05 ? raw >> 3 : raw;
    at += 4;
    if (code !== ITEM_OK) {
      results.push({ ok: false, code });
      continue;
    }
    if (length !== item.length || at + length > data.length) {
      throw new FrameError(`${what}: ${length} bytes where ${item.length} were asked for`);
    }
    results.push({ ok: true, data: data.subarray(at, at + length) });
    at += length + (length % 2);
  }
  return results;
}

/** Write Var of one item: bytes from `start`, or one bit (a BOOL written alone, without touching its neighbours). */
export function writeVar(ref: number, item: ItemAddress, value: Buffer | { bit: number; state: boolean }): Buffer {
  const params = Buffer.alloc(2 + ITEM_SPEC);
  params.writeUInt8(0x05, 0);
  params.writeUInt8(1, 1);
  const isBit = !Buffer.isBuffer(value);
  const bytes = isBit ? Buffer.from([value.state ? 1 : 0]) : value;
  itemSpec(params, 2, item, isBit ? TRANSPORT_BIT : TRANSPORT_BYTE, bytes.length, isBit ? value.bit : 0);
  const data = Buffer.alloc(4 + bytes.length);
  data.writeUInt8(0, 0);
  data.writeUInt8(isBit ? 0x03 : 0x04, 1);
  data.writeUInt16BE(isBit ? 1 : bytes.length * 8, 2);
  bytes.copy(data, 4);
  return job(ref, params, data);
}

/** The return code of the one item of a Write Var answer. */
export function parseWriteVar(tpkt: Buffer, what: string): number {
  const { params, data } = parseAck(tpkt, what);
  if (params.length < 2 || params[0] !== 0x05 || data.length < 1) throw new FrameError(`${what}: unexpected answer`);
  return data[0];
}

/** Splits complete TPKT frames off a receive buffer; the rest waits for more bytes. */
export class TpktReader {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer, onFrame: (tpkt: Buffer) => void): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 4) {
      if (this.pending[0] !== 3) throw new FrameError('not a TPKT frame (is this an S7 port?)');
      const length = this.pending.readUInt16BE(2);
      if (length < 7) throw new FrameError(`TPKT length ${length} is too short`);
      if (this.pending.length < length) return;
      const tpkt = this.pending.subarray(0, length);
      this.pending = this.pending.subarray(length);
      onFrame(tpkt);
    }
  }
}
