/** Variant ↔ TagValue conversion and the OPC UA connector's config schema (no server needed). */
import { describe, expect, it } from 'vitest';
import { opcuaConnectorSchema } from '../../connectors/opcua/schema.js';
import {
  ArrayKind,
  BuiltInType,
  builtInTypeName,
  sameValue,
  sparkplugDatatypeFor,
  tagValueToVariant,
  variantToTagValue,
  VariantMismatchError,
  WriteTypeError,
  zeroValue,
} from '../../connectors/opcua/variants.js';

const scalar = (dataType: number, value: unknown) => ({ dataType, arrayType: ArrayKind.Scalar, value });
const array = (dataType: number, value: unknown) => ({ dataType, arrayType: ArrayKind.Array, value });

describe('OPC UA variants', () => {
  it('maps every listed built-in type and its arrays to a Sparkplug datatype, and nothing else', () => {
    expect(sparkplugDatatypeFor(BuiltInType.SByte, -1)).toBe('Int8');
    expect(sparkplugDatatypeFor(BuiltInType.Byte, 1)).toBe('UInt8Array');
    expect(sparkplugDatatypeFor(BuiltInType.ByteString, -1)).toBe('Bytes');
    expect(sparkplugDatatypeFor(BuiltInType.ByteString, 1)).toBeUndefined(); // Sparkplug has no array of Bytes
    expect(sparkplugDatatypeFor(BuiltInType.DateTime, 1)).toBe('DateTimeArray');
    expect(sparkplugDatatypeFor(BuiltInType.LocalizedText, -1)).toBeUndefined();
    expect(sparkplugDatatypeFor(BuiltInType.Guid, -1)).toBeUndefined();
    expect(sparkplugDatatypeFor(BuiltInType.Double, 2)).toBeUndefined(); // a matrix
    expect(sparkplugDatatypeFor(BuiltInType.Double, -3, true)).toBe('DoubleArray'); // ScalarOrOneDimension
    expect(sparkplugDatatypeFor(BuiltInType.Double, -2, false)).toBe('Double');
  });

  it('carries 64-bit integers as exact bigints in both directions', () => {
    expect(variantToTagValue(scalar(BuiltInType.Int64, [0xfffffeff, 0xfffffffb]), 'Int64')).toBe(-(2n ** 40n) - 5n);
    expect(variantToTagValue(scalar(BuiltInType.UInt64, [0xffffffff, 0xffffffff]), 'UInt64')).toBe(2n ** 64n - 1n);
    expect(
      variantToTagValue(
        array(BuiltInType.Int64, [
          [0, 1],
          [0xffffffff, 0xffffffff],
        ]),
        'Int64Array',
      ),
    ).toEqual([1n, -1n]);
    expect(tagValueToVariant(-1n, BuiltInType.Int64, false).value).toEqual([0xffffffff, 0xffffffff]);
    expect(tagValueToVariant(2n ** 53n + 1n, BuiltInType.UInt64, false).value).toEqual([2 ** 21, 1]);
    expect(tagValueToVariant(7, BuiltInType.Int64, false).value).toEqual([0, 7]);
    expect(() => tagValueToVariant(-1n, BuiltInType.UInt64, false)).toThrow(/out of range for UInt64/);
  });

  it('turns DateTime into epoch ms and back, and typed arrays into plain arrays', () => {
    const when = new Date('2024-05-01T12:34:56.789Z');
    expect(variantToTagValue(scalar(BuiltInType.DateTime, when), 'DateTime')).toBe(when.getTime());
    expect(tagValueToVariant(when.getTime(), BuiltInType.DateTime, false).value).toEqual(when);
    expect(variantToTagValue(array(BuiltInType.Float, new Float32Array([0.5, 2])), 'FloatArray')).toEqual([0.5, 2]);
    const written = tagValueToVariant([1, 2, 3], BuiltInType.Int16, true);
    expect(written.value).toBeInstanceOf(Int16Array);
    expect(written.arrayType).toBe(ArrayKind.Array);
  });

  it('returns undefined for a null variant (bad status without a value) and has a zero for every datatype', () => {
    expect(variantToTagValue({ dataType: BuiltInType.Null, value: null }, 'Double')).toBeUndefined();
    expect(zeroValue('Int64')).toBe(0n);
    expect(zeroValue('Bytes')).toEqual(Buffer.alloc(0));
    expect(zeroValue('StringArray')).toEqual([]);
    expect(zeroValue('Text')).toBe('');
  });

  it('rejects variants that do not fit the tag, and writes that do not fit the node', () => {
    expect(() => variantToTagValue(scalar(BuiltInType.Int32, 5), 'Int16')).toThrow(VariantMismatchError);
    expect(() => variantToTagValue(array(BuiltInType.Int32, [5]), 'Int32')).toThrow(/expected a scalar/);
    expect(variantToTagValue(scalar(BuiltInType.String, 'x'), 'Text')).toBe('x');
    expect(() => tagValueToVariant('1', BuiltInType.Double, false)).toThrow(WriteTypeError);
    expect(() => tagValueToVariant(true, BuiltInType.Int32, false)).toThrow(/the node is Int32; got boolean true/);
    expect(() => tagValueToVariant(256, BuiltInType.Byte, false)).toThrow(/out of range for Byte/);
    expect(() => tagValueToVariant([1, 'a'], BuiltInType.Int32, true)).toThrow(/at \[1\]/);
    expect(() => tagValueToVariant(Buffer.from('x'), BuiltInType.String, false)).toThrow(/got bytes/);
  });

  it("range-checks writes against the node's DataType like Modbus registers: every integer type, NaN/Infinity, float32", () => {
    const bounds: [number, bigint, bigint][] = [
      [BuiltInType.SByte, -128n, 127n],
      [BuiltInType.Byte, 0n, 255n],
      [BuiltInType.Int16, -32_768n, 32_767n],
      [BuiltInType.UInt16, 0n, 65_535n],
      [BuiltInType.Int32, -(2n ** 31n), 2n ** 31n - 1n],
      [BuiltInType.UInt32, 0n, 2n ** 32n - 1n],
      [BuiltInType.Int64, -(2n ** 63n), 2n ** 63n - 1n],
      [BuiltInType.UInt64, 0n, 2n ** 64n - 1n],
    ];
    for (const [builtIn, min, max] of bounds) {
      const name = builtInTypeName(builtIn);
      expect(() => tagValueToVariant(min, builtIn, false)).not.toThrow();
      expect(() => tagValueToVariant(max, builtIn, false)).not.toThrow();
      expect(() => tagValueToVariant(min - 1n, builtIn, false)).toThrow(`${min - 1n} is out of range for ${name}`);
      expect(() => tagValueToVariant(max + 1n, builtIn, false)).toThrow(`${max + 1n} is out of range for ${name}`);
      expect(() => tagValueToVariant(Number.NaN, builtIn, false)).toThrow(WriteTypeError);
      expect(() => tagValueToVariant(Infinity, builtIn, false)).toThrow(WriteTypeError);
    }
    expect(() => tagValueToVariant(70_000, BuiltInType.Int16, false)).toThrow(
      '70000 is out of range for Int16 (-32768..32767)',
    );
    expect(() => tagValueToVariant(1e39, BuiltInType.Float, false)).toThrow('1e+39 is out of range for Float');
    expect(tagValueToVariant(1e39, BuiltInType.Double, false).value).toBe(1e39);
    expect(tagValueToVariant(Number.NaN, BuiltInType.Float, false).value).toBeNaN();
  });
});

describe('OPC UA write read-back comparison', () => {
  it("matches a read-back at the node's precision and tells a different value apart", () => {
    expect(sameValue(0.1, Math.fround(0.1), BuiltInType.Float)).toBe(true);
    expect(sameValue(0.1, Math.fround(0.1), BuiltInType.Double)).toBe(false);
    expect(sameValue(250, 100, BuiltInType.UInt16)).toBe(false);
    expect(sameValue(7, 7n, BuiltInType.Int64)).toBe(true);
    expect(sameValue(2n ** 53n + 1n, 2n ** 53n, BuiltInType.UInt64)).toBe(false);
    expect(sameValue(Number.NaN, Number.NaN, BuiltInType.Double)).toBe(true);
    expect(sameValue([1, 2], [1, 2], BuiltInType.Int16)).toBe(true);
    expect(sameValue([1, 2], [1, 3], BuiltInType.Int16)).toBe(false);
    expect(sameValue('on', 'on', BuiltInType.String)).toBe(true);
    expect(sameValue(Buffer.from([1]), Buffer.from([2]), BuiltInType.ByteString)).toBe(false);
  });
});

describe('OPC UA connector config', () => {
  const base = {
    id: 'press-2',
    type: 'opcua',
    endpoint: 'opc.tcp://10.0.0.30:4840',
    tags: [{ name: 't', nodeId: 'ns=3;s=Line4.Press.Temperature', datatype: 'Double' }],
  };
  const problems = (input: unknown) => {
    const result = opcuaConnectorSchema.safeParse(input);
    return result.success ? [] : result.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
  };

  it('fills in defaults: no security, anonymous, Basic256Sha256 once secured', () => {
    const config = opcuaConnectorSchema.parse(base);
    expect(config).toMatchObject({ securityMode: 'None', securityPolicy: 'None', user: { type: 'anonymous' } });
    expect(config.subscription).toEqual({
      publishingIntervalMs: 1000,
      keepAliveCount: 10,
      lifetimeCount: 60,
      maxNotificationsPerPublish: 0,
      priority: 0,
    });
    expect(config.tags[0]).toMatchObject({
      queueSize: 1,
      discardOldest: true,
      trigger: 'status-value',
      writable: false,
    });
    expect(opcuaConnectorSchema.parse({ ...base, securityMode: 'SignAndEncrypt' }).securityPolicy).toBe(
      'Basic256Sha256',
    );
  });

  it('accepts every NodeId form and browse paths', () => {
    const ids = [
      'i=2258',
      'ns=2;i=1001',
      'ns=3;s=Line4.Press.Temperature',
      'ns=2;g=09087e75-8e5e-499b-954f-f2a9603db28a',
      'ns=2;b=M/RbKBsRVkePCePcx24oRA==',
      'nsu=urn:acme:plc;s=Press.T',
    ];
    for (const nodeId of ids)
      expect(problems({ ...base, tags: [{ name: 't', nodeId, datatype: 'Double' }] }), nodeId).toEqual([]);
    expect(
      problems({ ...base, tags: [{ name: 't', browsePath: '/Objects/3:Line4/3:Press', datatype: 'Double' }] }),
    ).toEqual([]);
  });

  it('reports every mistake at once, on the key that is wrong', () => {
    const issues = problems({
      ...base,
      endpoint: 'http://plc',
      securityMode: 'None',
      securityPolicy: 'Basic256Sha256',
      user: { type: 'username', username: 'u' },
      subscription: { keepAliveCount: 30, lifetimeCount: 60 },
      tags: [
        { name: 'a', nodeId: 'Line4.Press', datatype: 'Double' },
        { name: 'b', datatype: 'Double' },
        { name: 'c', nodeId: 'ns=1;i=1', browsePath: '/Objects/x', datatype: 'Double' },
        { name: 'd', nodeId: 'ns=1;i=2', datatype: 'String', deadband: { value: 1 } },
        { name: 'd', nodeId: 'ns=1;i=3', datatype: 'Float' },
      ],
    });
    expect(issues).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^endpoint: must be an opc\.tcp:/),
        expect.stringMatching(/^user\.password: set exactly one of password or passwordFile/),
        expect.stringMatching(/^subscription\.lifetimeCount: must be >= 3 × keepAliveCount \(90\)/),
        expect.stringMatching(/^tags\.0\.nodeId: must be a NodeId/),
        expect.stringMatching(/^tags\.1\.nodeId: set exactly one of nodeId or browsePath/),
        expect.stringMatching(/^tags\.2\.nodeId: set exactly one of nodeId or browsePath/),
        expect.stringMatching(/^tags\.3\.deadband: a deadband needs a numeric datatype/),
      ]),
    );
    // Cross-field rules of the connector object run once its fields are valid.
    expect(problems({ ...base, securityMode: 'None', securityPolicy: 'Basic256Sha256' })).toEqual([
      'securityPolicy: securityMode None takes securityPolicy None, not Basic256Sha256',
    ]);
    expect(problems({ ...base, securityMode: 'Sign', securityPolicy: 'Basic128Rsa15' })).toEqual([
      'securityPolicy: Basic128Rsa15 is deprecated (SHA-1); set allowDeprecatedPolicies: true to use it anyway',
    ]);
    expect(problems({ ...base, tags: [base.tags[0], base.tags[0]] })).toEqual([
      'tags.1.name: "t" is already the name of tags.0',
    ]);
  });
});
