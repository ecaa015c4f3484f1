/** Our SUBSCRIBE decoder against mqtt-packet's: the same fields for what we decode, mqtt-packet for the rest. */
import { describe, expect, it } from 'vitest';
import { parseWithMqttPacket } from '../helpers/mqtt-packet-parse.js';
import mqttPacket from 'mqtt-packet';
import type { ISubscribePacket, ISubscription } from 'mqtt-packet';
import { decodeSubscribe } from '../../src/protocol/subscribe-codec.js';

type Version = 4 | 5;

/** Where the body of one whole packet starts (after a fixed header of 2-5 bytes); -1 if its length is not the buffer's. */
function bodyStart(bytes: Buffer): number {
  let length = 0;
  let i = 1;
  for (let shift = 0; i < 5 && i < bytes.length; i++, shift += 7) {
    length += (bytes[i] & 0x7f) * 2 ** shift;
    if ((bytes[i] & 0x80) === 0) break;
  }
  return i + 1 + length === bytes.length ? i + 1 : -1;
}

/** Our decoding of one whole packet. */
function decode(bytes: Buffer, version: Version): ISubscribePacket | undefined {
  return decodeSubscribe(bytes, bytes[0], bodyStart(bytes), bytes.length, version);
}

/** The fields the SUBSCRIBE handler reads, as plain values. */
function fields(p: ISubscribePacket): Record<string, unknown> {
  return {
    cmd: p.cmd,
    messageId: p.messageId,
    subscriptions: p.subscriptions.map((s) => ({ ...s })),
    properties: p.properties,
  };
}

const filters = ['a', 'r/1/y', '#', 'a/+/c', '$share/g/x/#', 'ünïcødé/☃', 'x'.repeat(300), ''];

function subscriptions(version: Version, n: number, seed: number): ISubscription[] {
  const out: ISubscription[] = [];
  for (let i = 0; i < n; i++) {
    const k = seed + i;
    const s: ISubscription = { topic: filters[k % filters.length], qos: (k % 3) as 0 | 1 | 2 };
    if (version === 5) Object.assign(s, { nl: k % 2 === 0, rap: k % 4 < 2, rh: k % 3 });
    out.push(s);
  }
  return out;
}

function encode(version: Version, messageId: number, subs: ISubscription[], properties?: object): Buffer {
  return mqttPacket.generate(
    { cmd: 'subscribe', messageId, subscriptions: subs, ...(properties ? { properties } : {}) },
    { protocolVersion: version },
  );
}

describe('decodeSubscribe', () => {
  for (const version of [4, 5] as const) {
    it(`decodes what mqtt-packet decodes, field for field (MQTT ${version === 5 ? '5' : '3.1.1'})`, () => {
      let compared = 0;
      for (const n of [1, 2, 7, 1000])
        for (const messageId of [1, 2, 65535]) {
          const bytes = encode(version, messageId, subscriptions(version, n, messageId + n));
          const theirs = parseWithMqttPacket(bytes, version);
          expect(theirs.error).toBeUndefined();
          const ours = decode(bytes, version);
          expect(ours).toBeDefined();
          expect(fields(ours!)).toEqual(fields(theirs.packet as ISubscribePacket));
          compared++;
        }
      expect(compared).toBe(12);
    });
  }

  it('leaves an MQTT 5 SUBSCRIBE with properties to mqtt-packet', () => {
    const bytes = encode(5, 7, subscriptions(5, 3, 0), { subscriptionIdentifier: 42 });
    expect(decode(bytes, 5)).toBeUndefined();
    expect((parseWithMqttPacket(bytes, 5).packet as ISubscribePacket).properties).toEqual({
      subscriptionIdentifier: 42,
    });
  });

  it('decodes nothing that mqtt-packet refuses, and what it decodes from mutated bytes it decodes alike', () => {
    // Reserved bits, QoS 3, retain handling 3, wrong fixed-header flags, lengths that do not add up, no filter.
    let random = 12345;
    const next = (): number => (random = (Math.imul(random, 1103515245) + 12345) >>> 0);
    let decodedByUs = 0;
    let refusedByThem = 0;
    for (const version of [4, 5] as const)
      for (let round = 0; round < 3000; round++) {
        const bytes = Buffer.from(encode(version, 1 + (round % 9), subscriptions(version, 1 + (round % 4), round)));
        // Mutate one to three bytes after the fixed header (or the first byte itself).
        for (let m = 0, count = 1 + (next() % 3); m < count; m++) {
          const at = next() % 5 === 0 ? 0 : 2 + (next() % (bytes.length - 2));
          bytes[at] = next() & 0xff;
        }
        // The framer hands over whole packets only: a mutated length makes another packet, not this one.
        if (bodyStart(bytes) < 0) continue;
        const theirs = parseWithMqttPacket(bytes, version);
        const ours = decode(bytes, version);
        if (theirs.error !== undefined || theirs.packet?.cmd !== 'subscribe') {
          refusedByThem++;
          expect(ours, `${version} ${bytes.toString('hex')}: ${theirs.error}`).toBeUndefined();
          continue;
        }
        if (ours === undefined) continue;
        decodedByUs++;
        expect(fields(ours)).toEqual(fields(theirs.packet as ISubscribePacket));
      }
    // Both kinds were met (the mutations are not all harmless, nor all fatal).
    expect(decodedByUs).toBeGreaterThan(500);
    expect(refusedByThem).toBeGreaterThan(500);
  });

  it('refuses an empty SUBSCRIBE and one that ends inside a filter', () => {
    expect(decodeSubscribe(Buffer.from([0x82, 0x02, 0x00, 0x01]), 0x82, 2, 4, 4)).toBeUndefined();
    expect(decodeSubscribe(Buffer.from([0x82, 0x05, 0x00, 0x01, 0x00, 0x01, 0x61]), 0x82, 2, 7, 4)).toBeUndefined();
  });
});
