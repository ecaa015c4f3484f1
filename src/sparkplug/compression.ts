/**
 * Compressed Sparkplug payloads, as Eclipse Tahu's clients write and read them (its Java `PayloadUtil` and the
 * JavaScript `sparkplug-client`): a payload whose `uuid` is `SPBV1.0_COMPRESSED` carries the real payload, DEFLATE
 * (zlib format) or GZIP compressed, in its `body`, and names the algorithm in a String metric `algorithm` (absent
 * means DEFLATE). Sparkplug 3.0 defines neither; host applications that follow Tahu (Ignition's MQTT Engine among
 * them) decompress it. The outer payload keeps the real one's timestamp and seq, as Tahu's Java does, so that a
 * host checks the order without decompressing (docs/sparkplug.md#compression).
 */
import { deflateSync, gunzipSync, gzipSync, inflateSync } from 'node:zlib';
import { asError } from '../util/errors.js';
import { decodePayload, encodePayload, readSeq, readTimestamp } from './payload.js';
import type { DatatypeLookup, PayloadIn } from './payload.js';

export const COMPRESSED_UUID = 'SPBV1.0_COMPRESSED';

export type CompressionAlgorithm = 'DEFLATE' | 'GZIP';

/** The algorithm of the `sparkplug.compression` setting, undefined for none. */
export function compressionAlgorithm(setting: 'none' | 'deflate' | 'gzip'): CompressionAlgorithm | undefined {
  return setting === 'none' ? undefined : setting === 'gzip' ? 'GZIP' : 'DEFLATE';
}

/** A compressed payload inflating past this is refused: no command is that large, and a zip bomb stops here. */
const MAX_INFLATED_BYTES = 16 * 1024 * 1024;

/**
 * `payload` (an encoded Sparkplug payload) wrapped, compressed, the Tahu way; or `payload` itself where that would
 * not be smaller (a DATA message of a value or a few: the wrapper costs about 60 bytes). A host that follows Tahu
 * tells the two apart by the `uuid`.
 */
export function compressPayload(payload: Buffer, algorithm: CompressionAlgorithm): Buffer {
  const compressed = wrap(payload, algorithm);
  return compressed.length < payload.length ? compressed : payload;
}

function wrap(payload: Buffer, algorithm: CompressionAlgorithm): Buffer {
  return encodePayload({
    timestamp: readTimestamp(payload) ?? Date.now(),
    seq: readSeq(payload),
    uuid: COMPRESSED_UUID,
    body: algorithm === 'GZIP' ? gzipSync(payload) : deflateSync(payload),
    metrics: [{ name: 'algorithm', datatype: 'String', value: algorithm }],
  });
}

/**
 * A command's payload decoded, through the compression when it is compressed: a host that compresses what it
 * sends compresses its commands too. Throws (RangeError) on an unknown algorithm, a body that does not inflate, or
 * one inflating past 16 MiB, as `decodePayload` throws on what does not decode.
 */
export function decodeCommandPayload(payload: Uint8Array, lookup: DatatypeLookup): PayloadIn {
  const outer = decodePayload(payload, lookup);
  if (outer.uuid !== COMPRESSED_UUID) return outer;
  const named = outer.metrics.find((m) => m.name === 'algorithm')?.value;
  const algorithm = typeof named === 'string' ? named.toUpperCase() : 'DEFLATE';
  if (algorithm !== 'DEFLATE' && algorithm !== 'GZIP')
    throw new RangeError(`unknown compression algorithm ${algorithm}`);
  let inner: Buffer;
  try {
    const inflate = algorithm === 'GZIP' ? gunzipSync : inflateSync;
    inner = inflate(outer.body ?? Buffer.alloc(0), { maxOutputLength: MAX_INFLATED_BYTES });
  } catch (err) {
    throw new RangeError(`compressed payload (${algorithm}) does not inflate: ${asError(err).message}`, {
      cause: err,
    });
  }
  return decodePayload(inner, lookup);
}
