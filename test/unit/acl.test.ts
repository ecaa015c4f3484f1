import { describe, expect, it } from 'vitest';
import { Acl, covers, intersection } from '../../src/broker/acl.js';

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

  it('grants a subscription when some topic it can match is readable, and refuses it only when none is (as Mosquitto)', () => {
    expect(acl.allowsSubscription('#', 'c', 'hmi')).toBe(true);
    expect(acl.allowsSubscription('+/x', 'c', 'hmi')).toBe(true);
    expect(acl.allowsSubscription('plant/#', 'c', 'hmi')).toBe(true);
    expect(acl.allowsSubscription('secret/#', 'c', 'hmi')).toBe(false);
    expect(acl.allowsSubscription('secret/+/x', 'c', 'hmi')).toBe(false);
    // plc-gw reads spBv1.0/# except NCMD: a filter inside the denied part is refused, one reaching beyond it is not.
    expect(acl.allowsSubscription('spBv1.0/+/NCMD/#', 'c', 'plc-gw')).toBe(false);
    expect(acl.allowsSubscription('spBv1.0/g/+/n', 'c', 'plc-gw')).toBe(true);
    // write-only grants give nothing to read.
    expect(acl.allowsSubscription('plant/+/telemetry', 'c', 'plc-gw')).toBe(false);
    // The per-message check still holds the denied part back.
    expect(acl.allows('read', 'secret/a', 'c', 'hmi')).toBe(false);
  });

  it('lets `topic readwrite #` + `topic deny test/nosubscribe` subscribe # and +/+ but not the denied topic', () => {
    const { acl: mosq } = Acl.parse('topic readwrite #\ntopic deny test/nosubscribe\n');
    expect(mosq.allowsSubscription('#', 'c', undefined)).toBe(true);
    expect(mosq.allowsSubscription('+/+', 'c', undefined)).toBe(true);
    expect(mosq.allowsSubscription('test/nosubscribe', 'c', undefined)).toBe(false);
    expect(mosq.allows('read', 'test/nosubscribe', 'c', undefined)).toBe(false);
    expect(mosq.allows('read', 'test/other', 'c', undefined)).toBe(true);
  });

  it('computes the common part of two filters and whether one filter covers another', () => {
    expect(intersection('#', 'a/+')).toBe('a/+');
    expect(intersection('a/#', 'a')).toBe('a');
    expect(intersection('+/b', 'a/+')).toBe('a/b');
    expect(intersection('a/b', 'a/c')).toBeUndefined();
    expect(intersection('a', 'a/+')).toBeUndefined();
    expect(intersection('#', '#')).toBe('#');
    expect(covers('a/#', 'a')).toBe(true);
    expect(covers('a/+', 'a/b/c')).toBe(false);
    expect(covers('+/+', 'a/b')).toBe(true);
    expect(covers('a/b', 'a/+')).toBe(false);
    expect(covers('secret/#', 'secret/+/x')).toBe(true);
    expect(covers('a/+', 'a/#')).toBe(false);
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
