/**
 * Tag values as plain JSON, both ways: the value of a plain topic (`{"value":21.5,"ts":...,"quality":"good"}`)
 * and the value of a `/set` write. JSON has no 64-bit integers, bytes or NaN, so:
 * - 64-bit integers go out as exact JSON numbers (digits) and come in as numbers up to 2^53 or as strings of
 *   digits (JSON.parse would round a bigger number, and a rounded value must never reach a device);
 * - Bytes travel as base64 strings; NaN and the infinities go out as the strings "NaN", "Infinity", "-Infinity".
 */
import { DATATYPES, type TagDatatype, type TagValue } from '../../connectors/contract.js';

/** A decoded `/set` payload: the value to write, or why there is none. Range and type checks come after. */
export type PlainCommand = { readonly value: TagValue | null } | { readonly why: string };

const DIGITS = /^-?\d+$/;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** One value as JSON text (null for a value that is unknown or bad). */
export function plainJson(value: TagValue | null): string {
  switch (typeof value) {
    case 'number':
      return Number.isFinite(value) ? String(value) : `"${value}"`;
    case 'bigint':
      return value.toString();
    case 'boolean':
      return value ? 'true' : 'false';
    case 'string':
      return JSON.stringify(value);
    default:
      if (value === null) return 'null';
      if (Buffer.isBuffer(value)) return `"${value.toString('base64')}"`;
      return `[${(value as readonly (number | bigint | boolean | string)[]).map(plainJson).join(',')}]`;
  }
}

/**
 * A `/set` payload, `{"value": ...}` or the bare JSON value, as the value for a tag of `datatype`: integers of
 * 64-bit types as bigint, Bytes from base64. What is not of the right kind passes through for the command checks
 * (`commandValueProblem`) to refuse with the same words as a DCMD.
 */
export function decodePlainCommand(datatype: TagDatatype, payload: Buffer): PlainCommand {
  let json: unknown;
  try {
    json = JSON.parse(payload.toString('utf8'));
  } catch {
    return { why: 'not JSON: send {"value": ...} or a bare JSON value' };
  }
  if (typeof json === 'object' && json !== null && !Array.isArray(json)) {
    if (!('value' in json)) return { why: 'a JSON object needs a "value"' };
    json = json.value;
  }
  if (json === null) return { value: null };
  const spec = DATATYPES[datatype];
  if (spec.range !== undefined) return integer(json, spec.field === 'longValue');
  if (datatype === 'Bytes') {
    return typeof json === 'string' && BASE64.test(json)
      ? { value: Buffer.from(json, 'base64') }
      : { why: 'wrong type: Bytes expected as base64' };
  }
  if (Array.isArray(json) && datatype.endsWith('Array')) {
    const long = datatype === 'Int64Array' || datatype === 'UInt64Array';
    const items: (number | bigint | boolean | string)[] = [];
    for (const item of json as unknown[]) {
      const one = long ? integer(item, true) : { value: item };
      if ('why' in one) return one;
      const v = one.value;
      if (long ? typeof v === 'bigint' : typeof v === 'number' || typeof v === 'boolean' || typeof v === 'string')
        items.push(v as number | bigint | boolean | string);
      else return { why: `wrong type: ${datatype} expected` };
    }
    return { value: items };
  }
  if (typeof json === 'object') return { why: `wrong type: ${datatype} expected` };
  return { value: json as TagValue };
}

/** An integer from a JSON number (exact only up to 2^53) or a string of digits; others pass through. */
function integer(json: unknown, long: boolean): PlainCommand {
  if (typeof json === 'number' && Number.isInteger(json)) {
    if (!Number.isSafeInteger(json))
      return { why: `${json} is beyond 2^53 and was rounded by JSON: send it as a string of digits` };
    return { value: long ? BigInt(json) : json };
  }
  if (typeof json === 'string' && DIGITS.test(json)) {
    const n = BigInt(json);
    // A number when exact, else the bigint: the range check then reports it as sent.
    return {
      value: long || n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER) ? n : Number(n),
    };
  }
  return { value: json as TagValue };
}
