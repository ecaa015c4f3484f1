/**
 * Whether a command (NCMD/DCMD) value may be written to a metric of a declared datatype: the right kind of
 * value and, for integers, inside the datatype's range. A value that does not fit is refused whole, never
 * narrowed: 70000 for an Int16 must not reach a device as 4464.
 */
import { DATATYPES, type TagDatatype } from '../../connectors/contract.js';
import type { MetricIn } from './payload.js';

const FLOAT32_MAX = 3.4028234663852886e38;

/** Why a command value does not fit the metric's declared datatype, or undefined if it does. */
export function commandValueProblem(
  datatype: TagDatatype,
  metric: Pick<MetricIn, 'datatype' | 'value'>,
): string | undefined {
  if (metric.datatype !== undefined && metric.datatype !== datatype) {
    return `wrong type: the metric is ${datatype}, the command says ${metric.datatype}`;
  }
  const v = metric.value;
  if (v === null) return 'no value';
  const { field, range } = DATATYPES[datatype];
  if (range !== undefined) {
    if (typeof v === 'number' && !Number.isInteger(v)) return `${v} is not an integer (${datatype})`;
    if (typeof v !== 'number' && typeof v !== 'bigint') return `wrong type: ${datatype} expected`;
    const n = BigInt(v);
    if (n < range[0] || n > range[1]) return `${n} is outside ${datatype} (${range[0]}..${range[1]})`;
    return undefined;
  }
  const wrong = `wrong type: ${datatype} expected`;
  switch (field) {
    case 'floatValue':
      if (typeof v !== 'number') return wrong;
      // NaN and infinities are Float values; a finite number beyond float32 is not.
      return Number.isFinite(v) && Math.abs(v) > FLOAT32_MAX ? `${v} is outside Float` : undefined;
    case 'doubleValue':
      return typeof v === 'number' ? undefined : wrong;
    case 'longValue': // DateTime: epoch ms
      return typeof v === 'number' && Number.isFinite(v) ? undefined : wrong;
    case 'booleanValue':
      return typeof v === 'boolean' ? undefined : wrong;
    case 'stringValue':
      return typeof v === 'string' ? undefined : wrong;
    default:
      return (datatype === 'Bytes' ? Buffer.isBuffer(v) : Array.isArray(v)) ? undefined : wrong;
  }
}
