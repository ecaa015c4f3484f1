import { describe, expect, it } from 'vitest';
import { Acl } from '../../src/broker/acl.js';

const text = `
# anonymous clients
topic read public/#

user plc-gw
topic readwrite spBv1.0/#
topic deny spBv1.0/+/NCMD/#
topic write plant/+/telemetry

user hmi
topic read #
topic deny secret/#

pattern readwrite site/%u/#
pattern write devices/%c/state
`;

describe('Mosquitto ACL files', () => {
  const { acl, problems } = Acl.parse(text);

  it('parses every line of a valid file', () => {
    expect(problems).toEqual([]);
  });

  it('applies the anonymous block to clients without a user name', () => {
    expect(acl.allows('read', 'public/a', 'c1', undefined)).toBe(true);
    expect(acl.allows('write', 'public/a', 'c1', undefined)).toBe(false);
    expect(acl.allows('read', 'spBv1.0/g/NDATA/n', 'c1', undefined)).toBe(false);
  });

  it('grants by user block and lets deny win over a broader grant', () => {
    expect(acl.allows('write', 'spBv1.0/g/NDATA/n', 'c', 'plc-gw')).toBe(true);
    expect(acl.allows('write', 'spBv1.0/g/NCMD/n', 'c', 'plc-gw')).toBe(false);
    expect(acl.allows('write', 'plant/4/telemetry', 'c', 'plc-gw')).toBe(true);
    expect(acl.allows('read', 'plant/4/telemetry', 'c', 'plc-gw')).toBe(false);
  });

  it('refuses a subscription whose filter overlaps a deny, so # cannot bypass it', () => {
    expect(acl.allows('read', '#', 'c', 'hmi', true)).toBe(false);
    expect(acl.allows('read', 'plant/#', 'c', 'hmi', true)).toBe(true);
    expect(acl.allows('read', '+/x', 'c', 'hmi', true)).toBe(false);
    expect(acl.allows('read', 'secret/a', 'c', 'hmi')).toBe(false);
  });

  it('substitutes %u and %c as whole levels and ignores identities containing wildcards (CVE-2017-7650)', () => {
    expect(acl.allows('write', 'site/alice/x', 'c', 'alice')).toBe(true);
    expect(acl.allows('write', 'site/bob/x', 'c', 'alice')).toBe(false);
    expect(acl.allows('write', 'devices/press-1/state', 'press-1', 'someone')).toBe(true);
    expect(acl.allows('write', 'devices/x/state', '#', 'someone')).toBe(false);
    expect(acl.allows('write', 'site/a/x', 'c', '+')).toBe(false);
  });

  it('denies everything with an empty file (CVE-2018-12550)', () => {
    const empty = Acl.parse('').acl;
    expect(empty.allows('read', 'a', 'c', 'u')).toBe(false);
    expect(empty.allows('write', 'a', 'c', undefined)).toBe(false);
  });

  it('reports invalid lines with their line numbers', () => {
    const { problems: bad } = Acl.parse('topic read a/#/b\nbogus line\nuser\n');
    expect(bad.map((p) => p.line)).toEqual([1, 2, 3]);
  });
});
