import { describe, expect, it } from 'vitest';
import sparkplugProto from 'sparkplug-payload/lib/sparkplugPayloadProto.js';
import { get as getSparkplug } from 'sparkplug-payload';
import {
  asHistorical,
  decodePayload,
  encodePayload,
  Quality,
  readSeq,
  readTimestamp,
  withBdSeq,
  withSeq,
} from '../../src/sparkplug/payload.js';
import type { MetricDatatype } from '../../src/sparkplug/payload.js';
import { isValidSparkplugId, parseTopic } from '../../src/sparkplug/topics.js';
import type { TagValue } from '../../connectors/contract.js';

/** An independent decoder: the generated protobuf code, no value interpretation. */
const rawDecode = (buf: Buffer) => sparkplugProto.org.eclipse.tahu.protobuf.Payload.decode(buf);

const CASES: [MetricDatatype, TagValue][] = [
  ['Int8', -5],
  ['Int16', -30_000],
  ['Int32', -2_000_000_000],
  ['Int64', -(2n ** 62n)],
  ['UInt8', 250],
  ['UInt16', 65_000],
  ['UInt32', 4_000_000_000],
  ['UInt64', 2n ** 64n - 1n],
  ['Float', 1.5],
  ['Double', Math.PI],
  ['Boolean', true],
  ['String', 'grüße'],
  ['Text', 'long text'],
  ['DateTime', 1_700_000_000_123],
  ['Bytes', Buffer.from([1, 2, 3])],
  ['Int16Array', [-1, 2, -3]],
  ['UInt32Array', [1, 4_000_000_000]],
  ['Int64Array', [-1n, 2n ** 40n]],
  ['FloatArray', [1.5, -2.25]],
  ['DoubleArray', [Math.E]],
  ['BooleanArray', [true, false, true, true, false, false, false, false, true]],
  ['StringArray', ['a', 'bc', '']],
];

describe('Sparkplug payload encoding', () => {
  for (const [datatype, value] of CASES) {
    it(`round-trips a ${datatype} metric in a birth, and in data where the datatype comes from the birth`, () => {
      const birth = decodePayload(
        encodePayload({ timestamp: 1, seq: 0, metrics: [{ name: 'm', alias: 7, datatype, timestamp: 2, value }] }),
      );
      expect(birth.metrics[0]).toMatchObject({ name: 'm', alias: 7, datatype, timestamp: 2, value, isNull: false });
      const data = encodePayload({
        timestamp: 1,
        seq: 1,
        metrics: [{ alias: 7, valueType: datatype, timestamp: 3, value }],
      });
      const decoded = decodePayload(data, (m) => (m.alias === 7 ? datatype : undefined));
      expect(decoded.metrics[0]).toMatchObject({ alias: 7, timestamp: 3, value });
      expect(decoded.metrics[0].datatype).toBeUndefined();
      expect(decoded.metrics[0].name).toBeUndefined();
    });
  }

  it('carries 8-32 bit integers (UInt32 too) in int_value and 64-bit ones in long_value [sparkplug-payload gap]', () => {
    const raw = rawDecode(
      encodePayload({
        timestamp: 1,
        metrics: [
          { name: 'u32', datatype: 'UInt32', value: 4_000_000_000 },
          { name: 'i32', datatype: 'Int32', value: -1 },
          { name: 'i64', datatype: 'Int64', value: -1n },
        ],
      }),
    );
    expect(Object.keys(raw.metrics[0])).toContain('intValue');
    expect(Object.keys(raw.metrics[0])).not.toContain('longValue');
    expect(raw.metrics[1].intValue).toBe(0xffffffff);
    expect(Object.keys(raw.metrics[2])).toContain('longValue');
    // And the reference decoder reads our signed 32-bit values right.
    const reference = getSparkplug('spBv1.0')?.decodePayload(
      encodePayload({ timestamp: 1, metrics: [{ name: 'i', datatype: 'Int32', value: -7 }] }),
    );
    expect(reference?.metrics?.[0].value).toBe(-7);
  });

  it('writes no datatype and no name into data metrics [tck-id-payloads-alias-data-cmd-requirement]', () => {
    const raw = rawDecode(
      encodePayload({ timestamp: 1, seq: 5, metrics: [{ alias: 3, valueType: 'Double', timestamp: 2, value: 1.5 }] }),
    );
    expect(Object.keys(raw.metrics[0]).sort()).toEqual(['alias', 'doubleValue', 'timestamp']);
  });

  it('sends a bad reading as is_null with the Quality property (Int32 0) and no stale value', () => {
    const buf = encodePayload({
      timestamp: 1,
      metrics: [{ alias: 1, valueType: 'Float', timestamp: 2, value: null, quality: Quality.Bad }],
    });
    const raw = rawDecode(buf);
    expect(raw.metrics[0].isNull).toBe(true);
    expect(Object.keys(raw.metrics[0])).not.toContain('floatValue');
    expect(raw.metrics[0].properties?.keys).toEqual(['Quality']);
    expect(raw.metrics[0].properties?.values?.[0]).toMatchObject({ type: 3, intValue: 0 });
    expect(decodePayload(buf).metrics[0]).toMatchObject({ value: null, isNull: true, quality: 0 });
  });

  it("puts a birth metric's Quality and its meaning in one PropertySet, one typed value per key [tck-id-payloads-propertyset-keys-array-size] [tck-id-payloads-metric-propertyvalue-type-req]", () => {
    const properties = { engUnit: 'bar', engLow: -1, engHigh: 250, documentation: 'Pump pressure', readOnly: true };
    const buf = encodePayload({
      timestamp: 1,
      seq: 0,
      metrics: [
        { name: 'p', alias: 1, datatype: 'Float', timestamp: 2, value: null, quality: Quality.Stale, properties },
      ],
    });
    const raw = rawDecode(buf);
    expect(raw.metrics[0].properties?.keys).toEqual([
      'Quality',
      'engUnit',
      'engLow',
      'engHigh',
      'documentation',
      'readOnly',
    ]);
    expect(raw.metrics[0].properties?.values?.map((v) => v.type)).toEqual([3, 12, 10, 10, 12, 11]);
    const tahu = getSparkplug('spBv1.0')!.decodePayload(buf) as unknown as {
      metrics: { properties: Record<string, { type: string; value: unknown }> }[];
    };
    expect(tahu.metrics[0].properties).toEqual({
      Quality: { type: 'Int32', value: 500 },
      engUnit: { type: 'String', value: 'bar' },
      engLow: { type: 'Double', value: -1 },
      engHigh: { type: 'Double', value: 250 },
      documentation: { type: 'String', value: 'Pump pressure' },
      readOnly: { type: 'Boolean', value: true },
    });
    // Properties left out are not sent, not even as null.
    const bare = rawDecode(
      encodePayload({
        timestamp: 1,
        metrics: [{ name: 'q', datatype: 'Boolean', value: true, properties: { readOnly: false } }],
      }),
    );
    expect(bare.metrics[0].properties?.keys).toEqual(['readOnly']);
  });

  it('writes a Template definition without template_ref and members without values, an instance with its ref and member values; both decode back [tck-id-payloads-template-ref-definition] [tck-id-payloads-template-instance-ref]', () => {
    const buf = encodePayload({
      timestamp: 1,
      seq: 0,
      metrics: [
        {
          name: 'press',
          datatype: 'Template',
          template: { isDefinition: true, members: [{ name: 't', datatype: 'Int16', properties: { readOnly: true } }] },
        },
        {
          name: 'p1',
          alias: 4,
          datatype: 'Template',
          template: { isDefinition: false, ref: 'press', members: [{ name: 't', datatype: 'Int16', value: -3 }] },
        },
      ],
    });
    const [definition, instance] = rawDecode(buf).metrics;
    expect(Object.keys(definition.templateValue!)).not.toContain('templateRef');
    expect(definition.templateValue?.isDefinition).toBe(true);
    expect(Object.keys(definition.templateValue!.metrics![0]).sort()).toEqual(['datatype', 'name', 'properties']);
    expect([instance.templateValue?.isDefinition, instance.templateValue?.templateRef]).toEqual([false, 'press']);
    const decoded = decodePayload(buf).metrics;
    expect(decoded[0].template).toMatchObject({
      ref: undefined,
      isDefinition: true,
      members: [{ name: 't', datatype: 'Int16', value: null, isNull: false }],
    });
    expect(decoded[1]).toMatchObject({
      alias: 4,
      datatype: 'Template',
      value: null,
      template: { ref: 'press', isDefinition: false, members: [{ name: 't', value: -3 }] },
    });
  });

  it('rewrites seq in place, keeps everything else, and flags history', () => {
    const original = encodePayload({
      timestamp: 1_700_000_000_000,
      seq: 200,
      metrics: [{ alias: 1, valueType: 'Int16', timestamp: 5, value: -3 }],
    });
    const renumbered = withSeq(original, 7);
    expect(readSeq(renumbered)).toBe(7);
    expect(readTimestamp(renumbered)).toBe(1_700_000_000_000);
    expect(decodePayload(renumbered, () => 'Int16').metrics[0]).toMatchObject({
      alias: 1,
      value: -3,
      isHistorical: false,
    });
    expect(readSeq(withSeq(encodePayload({ timestamp: 1, metrics: [] }), 0))).toBe(0);
    const historical = decodePayload(asHistorical(original, 9), () => 'Int16');
    expect(historical.seq).toBe(9);
    expect(historical.metrics[0]).toMatchObject({ value: -3, timestamp: 5, isHistorical: true });
    const birth = encodePayload({ timestamp: 1, seq: 0, metrics: [{ name: 'bdSeq', datatype: 'Int64', value: 3n }] });
    expect(decodePayload(withBdSeq(birth, 42, 0)).metrics[0].value).toBe(42n);
  });
});

describe('Sparkplug topics', () => {
  it('parses node and device topics and refuses others', () => {
    expect(parseTopic('spBv1.0/g/NBIRTH/n')).toEqual({ groupId: 'g', type: 'NBIRTH', edgeNodeId: 'n' });
    expect(parseTopic('spBv1.0/g/DDATA/n/d')).toEqual({ groupId: 'g', type: 'DDATA', edgeNodeId: 'n', deviceId: 'd' });
    expect(parseTopic('spBv1.0/g/DDATA/n')).toBeUndefined();
    expect(parseTopic('spBv1.0/g/NDATA/n/d')).toBeUndefined();
    expect(parseTopic('spBv1.0/STATE/host')).toBeUndefined();
    expect(parseTopic('site/spBv1.0/g/NDATA/n')).toBeUndefined();
    expect(parseTopic('site/spBv1.0/g/NDATA/n', true)).toMatchObject({ type: 'NDATA', edgeNodeId: 'n' });
  });

  it('accepts ids without + / # [tck-id-topic-structure-namespace-valid-edge-node-id]', () => {
    expect(isValidSparkplugId('line4-gw')).toBe(true);
    for (const bad of ['', 'a/b', 'a+', '#', 'a\u0000']) expect(isValidSparkplugId(bad)).toBe(false);
  });
});
