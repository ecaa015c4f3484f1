/**
 * Compressed Sparkplug payloads (src/sparkplug/compression.ts) against Eclipse Tahu's JavaScript client, the
 * reference of the convention: ours decoded by Tahu's decoder, Tahu's decoded by ours.
 */
import { deflateSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { compressPayload, COMPRESSED_UUID, decodeCommandPayload } from '../../src/sparkplug/compression.js';
import { decodePayload, encodePayload, type MetricOut } from '../../src/sparkplug/payload.js';
import { tahuCompress, tahuDecode, tahuDecompress } from '../helpers/tahu.js';

const METRICS: MetricOut[] = Array.from({ length: 50 }, (_, i) => ({
  alias: i + 1,
  timestamp: 1_796_000_000_000 + i,
  valueType: 'Float',
  value: 20 + i / 4,
}));
const DATA = encodePayload({ timestamp: 1_796_000_000_123, seq: 42, metrics: METRICS });
const noLookup = (): undefined => undefined;
const asNumber = (v: unknown): number => (typeof v === 'number' ? v : (v as { toNumber(): number }).toNumber());

describe('Sparkplug payload compression, the Eclipse Tahu convention', () => {
  for (const algorithm of ['DEFLATE', 'GZIP'] as const) {
    it(`${algorithm}: Tahu's decoder gets back the exact payload; the outer one keeps timestamp and seq`, () => {
      const wire = compressPayload(DATA, algorithm);
      expect(Buffer.from(tahuDecompress(wire)).equals(DATA)).toBe(true);
      const outer = tahuDecode(wire);
      expect(outer.uuid).toBe(COMPRESSED_UUID);
      expect(outer.metrics).toEqual([expect.objectContaining({ name: 'algorithm', value: algorithm })]);
      expect(asNumber(outer.seq)).toBe(42);
      expect(asNumber(outer.timestamp)).toBe(1_796_000_000_123);
      expect(wire.length).toBeLessThan(DATA.length / 2);
    });

    it(`${algorithm}: a command Tahu compressed decodes to its metrics`, () => {
      const command = encodePayload({
        timestamp: 1,
        metrics: [{ name: 'setpoint', datatype: 'Int16', value: 77 }],
      });
      const decoded = decodeCommandPayload(tahuCompress(command, algorithm), noLookup);
      expect(decoded.metrics).toEqual(decodePayload(command).metrics);
    });
  }

  it('leaves a payload that would not get smaller as it is', () => {
    const one = encodePayload({ timestamp: 1, seq: 3, metrics: [{ alias: 1, valueType: 'Int32', value: 7 }] });
    expect(compressPayload(one, 'DEFLATE')).toBe(one);
    expect(decodePayload(compressPayload(DATA, 'DEFLATE')).uuid).toBe(COMPRESSED_UUID);
  });

  it('a command without compression decodes as it is', () => {
    const command = encodePayload({ timestamp: 1, metrics: [{ name: 'x', datatype: 'Boolean', value: true }] });
    expect(decodeCommandPayload(command, noLookup).metrics[0]?.value).toBe(true);
  });

  it('refuses an unknown algorithm, a body that does not inflate and one that inflates past 16 MiB', () => {
    const wrapped = (body: Buffer, algorithm: string): Buffer =>
      encodePayload({
        timestamp: 1,
        uuid: COMPRESSED_UUID,
        body,
        metrics: [{ name: 'algorithm', datatype: 'String', value: algorithm }],
      });
    expect(() => decodeCommandPayload(wrapped(deflateSync(DATA), 'LZ4'), noLookup)).toThrow(
      /unknown compression algorithm LZ4/,
    );
    expect(() => decodeCommandPayload(wrapped(Buffer.from('not deflate'), 'DEFLATE'), noLookup)).toThrow(
      /does not inflate/,
    );
    const bomb = deflateSync(Buffer.alloc(17 * 1024 * 1024));
    expect(bomb.length).toBeLessThan(64 * 1024);
    expect(() => decodeCommandPayload(wrapped(bomb, 'DEFLATE'), noLookup)).toThrow(/does not inflate/);
  });
});
