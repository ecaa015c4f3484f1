/**
 * Whether a command (NCMD/DCMD) value may be written to a metric of a declared datatype: the right kind of
 * value and, for integers, inside the datatype's range. A value that does not fit is refused whole, never
 * narrowed: 70000 for an Int16 must not reach a device as 4464.
 */
import type { TagDatatype } from '../../connectors/contract.js';
import type { MetricIn } from './payload.js';

/** Inclusive ranges of the Sparkplug 3.0 integer datatypes (§6.4.16). */
const INTEGER_RANGES: Partial<Record<TagDatatype, readonly [bigint, bigint]>> = {
  Int8: [-128n, 127n],
  Int16: [-32_768n, 32_767n],
  Int32: [-2_147_483_648n, 2_147_483_647n],
  Int64: [-(2n ** 63n), 2n ** 63n - 1n],
  UInt8: [0n, 255n],
  UInt16: [0n, 65_535n],
  UInt32: [0n, 4_294_967_295n],
  UInt64: [0n, 2n ** 64n - 1n],
};

const FLOAT32_MAX = 3.4028234663852886e38;

/** Why a command value does not fit the metric's declared datatype, or undefined if it does. */
export function commandValueProblem(datatype: TagDatatype, metric: MetricIn): string | undefined {
  if (metric.datatype !== undefined && metric.datatype !== datatype) {
    return `wrong type: the metric is ${datatype}, the command says ${metric.datatype}`;
  }
  const v = metric.value;
  if (v === null) return 'no value';
  const range = INTEGER_RANGES[datatype];
  if (range !== undefined) {
    if (typeof v === 'number' && !Number.isInteger(v)) return `${v} is not an integer (${datatype})`;
    if (typeof v !== 'number' && typeof v !== 'bigint') return `wrong type: ${datatype} expected`;
    const n = BigInt(v);
    if (n < range[0] || n > range[1]) return `${n} is outside ${datatype} (${range[0]}..${range[1]})`;
    return undefined;
  }
  switch (datatype) {
    case 'Float':
      if (typeof v !== 'number') return `wrong type: ${datatype} expected`;
      // NaN and infinities are Float values; a finite number beyond float32 is not.
      return Number.isFinite(v) && Math.abs(v) > FLOAT32_MAX ? `${v} is outside Float` : undefined;
    case 'Double':
      return typeof v === 'number' ? undefined : `wrong type: ${datatype} expected`;
    case 'DateTime':
      return typeof v === 'number' && Number.isFinite(v) ? undefined : `wrong type: ${datatype} expected`;
    case 'Boolean':
      return typeof v === 'boolean' ? undefined : `wrong type: ${datatype} expected`;
    case 'String':
    case 'Text':
      return typeof v === 'string' ? undefined : `wrong type: ${datatype} expected`;
    case 'Bytes':
      return Buffer.isBuffer(v) ? undefined : `wrong type: ${datatype} expected`;
    default:
      return Array.isArray(v) ? undefined : `wrong type: ${datatype} expected`;
  }
}
