/**
 * A tag value as the console's JSON (or a form field) gives it, turned into the value a DCMD would carry for the
 * tag's datatype: 64-bit integers become bigint (sent as strings, so no precision is lost), numbers may come as
 * strings. Only the form is converted here; the range and type checks are the DCMD's own (command-value.ts).
 */
import { DATATYPES, type TagDatatype, type TagValue } from '../../connectors/contract.js';

const INTEGER = /^-?\d+$/;
const NUMBER = /^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;

/** The value for `datatype`, or a string saying why the input cannot be one. */
export function parseTagValue(datatype: TagDatatype, input: unknown): { value: TagValue } | { problem: string } {
  const spec = DATATYPES[datatype];
  const text = typeof input === 'string' ? input.trim() : undefined;
  if (spec.range !== undefined) {
    if (spec.field === 'longValue') {
      if (typeof input === 'number' && Number.isSafeInteger(input)) return { value: BigInt(input) };
      if (text !== undefined && INTEGER.test(text)) return { value: BigInt(text) };
    } else {
      if (typeof input === 'number') return { value: input };
      if (text !== undefined && INTEGER.test(text)) return { value: Number(text) };
    }
    return { problem: `${JSON.stringify(input)} is not an integer (${datatype})` };
  }
  switch (spec.field) {
    case 'floatValue':
    case 'doubleValue':
    case 'longValue':
      if (typeof input === 'number') return { value: input };
      if (text !== undefined && NUMBER.test(text)) return { value: Number(text) };
      return { problem: `${JSON.stringify(input)} is not a number (${datatype})` };
    case 'booleanValue':
      if (typeof input === 'boolean') return { value: input };
      if (text === 'true' || text === 'false') return { value: text === 'true' };
      return { problem: `${JSON.stringify(input)} is not true or false (${datatype})` };
    case 'stringValue':
      return typeof input === 'string' ? { value: input } : { problem: `a string expected (${datatype})` };
    default:
      return { problem: `${datatype} tags cannot be written from the console` };
  }
}
