import { describe, expect, it } from 'vitest';
import mqttPacket from 'mqtt-packet';
import type { IPublishPacket, Packet } from 'mqtt-packet';
import {
  PacketArena,
  PublishEncodings,
  appendPublish,
  createParser,
  decodePublish,
  decodeShortAck,
  encodeAck,
  encodePacket,
  encodePublish,
  newPublishPacket,
  withPacketId,
} from '../../src/protocol/codec.js';
import type { ShortAck } from '../../src/protocol/codec.js';
import type { ProtocolVersion } from '../../src/protocol/codec.js';
import { createMessage } from '../../src/protocol/message.js';
import type { Message, QoS } from '../../src/protocol/message.js';
import { ProtocolError } from '../../src/util/errors.js';

/** Parses `bytes` with mqtt-packet's own parser (an independent decoder) and returns exactly one packet. */
function parseOne(bytes: Buffer, version: ProtocolVersion): Packet {
  const parser = mqttPacket.parser({ protocolVersion: version });
  const packets: Packet[] = [];
  const errors: Error[] = [];
  parser.on('packet', (p: Packet) => packets.push(p));
  parser.on('error', (e: Error) => errors.push(e));
  const left = parser.parse(bytes);
  expect(errors).toEqual([]);
  expect(left).toBe(0); // every byte consumed: the declared remaining length is exact
  expect(packets).toHaveLength(1);
  return packets[0];
}

function parsePublish(bytes: Buffer, version: ProtocolVersion): IPublishPacket {
  const p = parseOne(bytes, version);
  expect(p.cmd).toBe('publish');
  return p as IPublishPacket;
}

const every = createMessage({
  topic: 'plant/ä/line-4',
  payload: Buffer.from('{"t":21.5}'),
  qos: 2,
  retain: true,
  origin: 'client-1',
  properties: {
    payloadFormatIndicator: true,
    messageExpiryInterval: 3600,
    contentType: 'application/json; charset=utf-8',
    responseTopic: 'reply/𝄞/here',
    correlationData: Buffer.from([0, 1, 2, 0xff]),
    userProperties: { site: 'Zürich', tag: ['a', 'b', 'ç'], empty: '' },
  },
});

describe('encodePublish', () => {
  for (const version of [3, 4] as const) {
    for (const qos of [0, 1, 2] as const) {
      for (const retain of [false, true]) {
        for (const dup of qos > 0 ? [false, true] : [false]) {
          it(`round-trips v${version} QoS ${qos} retain=${retain} dup=${dup} through mqtt-packet [MQTT-3.3.1-1]`, () => {
            const msg = createMessage({ topic: 'a/b/c', payload: Buffer.from('hello'), qos, retain, origin: 'x' });
            const { bytes, packetIdOffset } = encodePublish(msg, version, qos, retain, dup, undefined, 4242);
            const p = parsePublish(bytes, version);
            expect(p.topic).toBe('a/b/c');
            expect(p.payload.toString()).toBe('hello');
            expect(p.qos).toBe(qos);
            expect(p.retain).toBe(retain);
            expect(p.dup).toBe(dup);
            expect(p.properties).toBeUndefined();
            if (qos > 0) {
              expect(p.messageId).toBe(4242);
              expect(bytes.readUInt16BE(packetIdOffset)).toBe(4242);
            } else {
              expect(packetIdOffset).toBe(-1);
            }
          });
        }
      }
    }
  }

  it('leaves MQTT 5 properties out of a 3.1.1 PUBLISH', () => {
    const { bytes } = encodePublish(every, 4, 1, false, false, { subscriptionIds: [5], topicAlias: 3 }, 1);
    const p = parsePublish(bytes, 4);
    expect(p.topic).toBe(every.topic);
    expect(p.payload.toString()).toBe('{"t":21.5}');
  });

  it('round-trips an MQTT 5 PUBLISH with every property through mqtt-packet', () => {
    const { bytes } = encodePublish(
      every,
      5,
      2,
      true,
      false,
      { subscriptionIds: [1, 300, 268435455], topicAlias: 7 },
      65535,
    );
    const p = parsePublish(bytes, 5);
    expect(p).toMatchObject({ topic: 'plant/ä/line-4', qos: 2, retain: true, dup: false, messageId: 65535 });
    expect(p.payload.toString()).toBe('{"t":21.5}');
    const props = p.properties!;
    expect(props.payloadFormatIndicator).toBe(true);
    expect(props.messageExpiryInterval).toBe(3600);
    expect(props.contentType).toBe('application/json; charset=utf-8');
    expect(props.responseTopic).toBe('reply/𝄞/here');
    expect(Buffer.compare(props.correlationData!, Buffer.from([0, 1, 2, 0xff]))).toBe(0);
    expect({ ...props.userProperties }).toEqual({ site: 'Zürich', tag: ['a', 'b', 'ç'], empty: '' });
    expect(props.topicAlias).toBe(7);
    expect(props.subscriptionIdentifier).toEqual([1, 300, 268435455]);
  });

  it('encodes a single subscription identifier and payload format 0', () => {
    const msg = createMessage({
      topic: 't',
      payload: Buffer.from([0xff, 0xfe]),
      qos: 0,
      origin: 'x',
      properties: { payloadFormatIndicator: false },
    });
    const p = parsePublish(encodePublish(msg, 5, 0, false, false, { subscriptionIds: [16384] }).bytes, 5);
    expect(p.properties?.payloadFormatIndicator).toBe(false);
    expect(p.properties?.subscriptionIdentifier).toBe(16384);
    expect(Buffer.compare(p.payload as Buffer, Buffer.from([0xff, 0xfe]))).toBe(0);
  });

  it('writes an empty property block for an MQTT 5 PUBLISH without properties', () => {
    const msg = createMessage({ topic: 't', payload: Buffer.from('x'), qos: 1, origin: 'x' });
    const { bytes } = encodePublish(msg, 5, 1, false, false, undefined, 9);
    // fixed header (2) + topic (3) + packet id (2) + property length 0 (1) + payload (1)
    expect(bytes).toEqual(Buffer.from([0x32, 7, 0, 1, 0x74, 0, 9, 0, 0x78]));
    const p = parsePublish(bytes, 5);
    expect(p.messageId).toBe(9);
    expect(p.properties ?? {}).toEqual({});
  });

  it('sends the alias without the topic once the alias is known (omitTopic)', () => {
    const msg = createMessage({ topic: 'a/long/topic/name', payload: Buffer.from('x'), origin: 'x' });
    const first = encodePublish(msg, 5, 0, false, false, { topicAlias: 1 }).bytes;
    const later = encodePublish(msg, 5, 0, false, false, { topicAlias: 1, omitTopic: true }).bytes;
    expect(later.length).toBe(first.length - 'a/long/topic/name'.length);
    const p = parsePublish(later, 5);
    expect(p.topic).toBe('');
    expect(p.properties?.topicAlias).toBe(1);
  });

  it('writes the remaining message expiry, rounded up, not the original interval [MQTT-3.3.2-6]', () => {
    const msg: Message = { ...every, expiresAt: performance.now() + 10_500 };
    const p = parsePublish(encodePublish(msg, 5, 0, false, false).bytes, 5);
    expect(p.properties?.messageExpiryInterval).toBe(11);
    const expired: Message = { ...every, expiresAt: performance.now() - 1 };
    expect(parsePublish(encodePublish(expired, 5, 0, false, false).bytes, 5).properties?.messageExpiryInterval).toBe(0);
  });

  it.each([
    [0, 'empty'],
    [100, '1-byte length'],
    [200, '2-byte length'],
    [20_000, '3-byte length'],
    [2_100_000, '4-byte length'],
  ])('encodes a %i-byte payload (%s remaining length) for v4 and v5', (size) => {
    const payload = Buffer.alloc(size, 0x61);
    const msg = createMessage({ topic: 'big', payload, qos: 1, origin: 'x', properties: { contentType: 'x' } });
    for (const version of [4, 5] as const) {
      const p = parsePublish(encodePublish(msg, version, 1, false, false, undefined, 1).bytes, version);
      expect((p.payload as Buffer).length).toBe(size);
    }
  });

  it('counts topic and property lengths in bytes, not characters', () => {
    const msg = createMessage({
      topic: '€'.repeat(50),
      payload: Buffer.from('p'),
      origin: 'x',
      properties: { userProperties: { ключ: '値'.repeat(40) } },
    });
    const p = parsePublish(encodePublish(msg, 5, 0, false, false).bytes, 5);
    expect(p.topic).toBe('€'.repeat(50));
    expect({ ...p.properties?.userProperties }).toEqual({ ключ: '値'.repeat(40) });
  });

  it('writes every topic name as its UTF-8 bytes: short and long ASCII, Latin-1 range, multi-byte, lone surrogate', () => {
    // writeString takes a different path for short ASCII, longer ASCII and anything else.
    const topics = [
      'a',
      'x'.repeat(16),
      'y'.repeat(17),
      `plant/line-1/${'z'.repeat(300)}`,
      'café/ü',
      '温度/1',
      'bad\uD800',
    ];
    for (const topic of topics) {
      const bytes = encodePublish(
        createMessage({ topic, payload: Buffer.from('p'), origin: 'x' }),
        4,
        0,
        false,
        false,
      ).bytes;
      const expected = Buffer.from(topic, 'utf8');
      const at = bytes.length - 1 - expected.length; // the topic, then a 1-byte payload
      expect(bytes.readUInt16BE(at - 2)).toBe(expected.length);
      expect(bytes.subarray(at, at + expected.length)).toEqual(expected);
    }
  });
});

describe('PacketArena and appendPublish', () => {
  it('encodes packets back to back; what was taken stays intact while later packets fill and outgrow the arena', () => {
    const arena = new PacketArena(16); // small, so the packets below need new memory several times
    const msg = (i: number): Message =>
      createMessage({ topic: `t/${i}`, payload: Buffer.alloc(100, i), qos: 1, origin: 'test' });
    arena.append(encodeAck('pubrel', 12, 0, 5));
    appendPublish(arena, msg(1), 5, 1, false, false, 11);
    appendPublish(arena, msg(2), 5, 1, true, true, 13);
    const first = arena.take();
    const copy = Buffer.from(first);
    for (let i = 3; i < 8; i++) appendPublish(arena, msg(i), 4, 1, false, false, 10 + i);
    const second = arena.take();
    expect(first.equals(copy)).toBe(true);
    expect(arena.empty).toBe(true);
    const expected = Buffer.concat([
      encodeAck('pubrel', 12, 0, 5),
      encodePublish(msg(1), 5, 1, false, false, undefined, 11).bytes,
      encodePublish(msg(2), 5, 1, true, true, undefined, 13).bytes,
    ]);
    expect(first.equals(expected)).toBe(true);
    const parser = mqttPacket.parser({ protocolVersion: 4 });
    const ids: number[] = [];
    parser.on('packet', (p: Packet) => ids.push((p as IPublishPacket).messageId as number));
    parser.parse(second);
    expect(ids).toEqual([13, 14, 15, 16, 17]);
  });
});

describe('withPacketId and PublishEncodings', () => {
  it('patches the packet identifier into a copy and leaves the shared encoding untouched', () => {
    const enc = encodePublish(every, 5, 1, false, false);
    const a = withPacketId(enc, 1);
    const b = withPacketId(enc, 60000);
    expect(parsePublish(a, 5).messageId).toBe(1);
    expect(parsePublish(b, 5).messageId).toBe(60000);
    expect(enc.bytes.readUInt16BE(enc.packetIdOffset)).toBe(0);
    expect(a.subarray(enc.packetIdOffset + 2)).toEqual(b.subarray(enc.packetIdOffset + 2));
  });

  it('encodes each version × QoS × retain variant once and reuses it', () => {
    const encodings = new PublishEncodings(every);
    const seen = new Set<unknown>();
    for (const version of [4, 5] as const) {
      for (const qos of [0, 1, 2] as QoS[]) {
        for (const retain of [false, true]) {
          const first = encodings.bytesFor(version, qos, retain, 77);
          const again = encodings.bytesFor(version, qos, retain, 78);
          seen.add(first);
          // QoS 0 hands out the shared bytes to all; QoS 1/2 a copy from the second delivery on.
          expect(again === first).toBe(qos === 0);
          const p = parsePublish(first, version);
          expect(p).toMatchObject({ qos, retain, dup: false, topic: every.topic });
          expect(p.properties === undefined).toBe(version === 4);
          if (qos > 0) expect([p.messageId, parsePublish(again, version).messageId]).toEqual([77, 78]);
        }
      }
    }
    expect(seen.size).toBe(12);
    // 3.1 and 3.1.1 share the same wire format and so the same slot.
    expect(encodings.bytesFor(3, 0, false, 0)).toBe(encodings.bytesFor(4, 0, false, 0));
  });

  it('gives the first QoS 1 delivery the shared encoding itself and never writes into bytes handed out', () => {
    const encodings = new PublishEncodings(every);
    const reference = encodePublish(every, 4, 1, false, false, undefined, 1).bytes;
    const a = encodings.bytesFor(4, 1, false, 1);
    const b = encodings.bytesFor(4, 1, false, 2);
    const c = encodings.bytesFor(4, 1, false, 3);
    expect(a).toEqual(reference);
    expect([a, b, c].map((bytes) => parsePublish(bytes, 4).messageId)).toEqual([1, 2, 3]);
  });
});

describe('encodePacket and createParser', () => {
  it('drops properties whose value is undefined instead of failing', () => {
    const bytes = encodePacket(
      {
        cmd: 'connack',
        sessionPresent: true,
        reasonCode: 0,
        properties: { assignedClientIdentifier: undefined, serverKeepAlive: 30, receiveMaximum: 10 },
      },
      5,
    );
    const p = parseOne(bytes, 5);
    expect(p).toMatchObject({ cmd: 'connack', sessionPresent: true, reasonCode: 0 });
    expect((p as { properties?: object }).properties).toEqual({ serverKeepAlive: 30, receiveMaximum: 10 });
  });

  it('encodes a 3.1.1 CONNACK with a return code and no properties', () => {
    expect(encodePacket({ cmd: 'connack', sessionPresent: false, returnCode: 2 }, 4)).toEqual(
      Buffer.from([0x20, 2, 0, 2]),
    );
  });

  it('parses MQTT 5 packets after a v5 CONNECT on the same parser (properties included)', () => {
    const parser = createParser();
    const packets: Packet[] = [];
    parser.on('packet', (p: Packet) => packets.push(p));
    const connect = mqttPacket.generate(
      {
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: 5,
        clean: true,
        clientId: 'c',
        keepalive: 10,
        properties: { sessionExpiryInterval: 60 },
      },
      { protocolVersion: 5 },
    );
    const publish = encodePublish(every, 5, 1, false, false, undefined, 3).bytes;
    // Both in one chunk, split at an odd place, as TCP may deliver them.
    const all = Buffer.concat([connect, publish]);
    parser.parse(all.subarray(0, connect.length + 3));
    parser.parse(all.subarray(connect.length + 3));
    expect(packets.map((p) => p.cmd)).toEqual(['connect', 'publish']);
    const p = packets[1] as IPublishPacket;
    expect(p.properties?.contentType).toBe('application/json; charset=utf-8');
    expect(p.messageId).toBe(3);
  });

  it('parses 3.1.1 packets after a v4 CONNECT', () => {
    const parser = createParser();
    const packets: Packet[] = [];
    parser.on('packet', (p: Packet) => packets.push(p));
    parser.parse(
      mqttPacket.generate({
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: 4,
        clean: true,
        clientId: 'c',
        keepalive: 0,
      }),
    );
    parser.parse(encodePublish(every, 4, 2, true, true, undefined, 12).bytes);
    expect(packets[1]).toMatchObject({
      cmd: 'publish',
      qos: 2,
      retain: true,
      dup: true,
      messageId: 12,
      topic: every.topic,
    });
  });
});

describe('decodePublish (the hot-path PUBLISH decoder)', () => {
  /** Splits an encoded packet into the arguments decodePublish takes, with junk around it as in a read buffer. */
  function frame(bytes: Buffer): { data: Buffer; first: number; start: number; end: number } {
    let i = 1;
    while (bytes[i] & 0x80) i++;
    const data = Buffer.concat([Buffer.from([0xde, 0xad]), bytes, Buffer.from([0xbe, 0xef])]);
    return { data, first: bytes[0], start: 2 + i + 1, end: 2 + bytes.length };
  }

  for (const version of [4, 5] as const) {
    for (const qos of [0, 1, 2] as const) {
      it(`decodes what encodePublish wrote: v${version} QoS ${qos}, like mqtt-packet does`, () => {
        const msg = createMessage({
          topic: 'a/ü/c',
          payload: Buffer.from('payload'),
          qos,
          retain: qos === 1,
          origin: 'x',
        });
        const bytes = encodePublish(msg, version, qos, qos === 1, qos === 2, undefined, 513).bytes;
        const f = frame(bytes);
        const p = decodePublish(f.data, f.first, f.start, f.end, version)!;
        const reference = parsePublish(bytes, version);
        expect(p).toMatchObject({
          cmd: 'publish',
          topic: reference.topic,
          qos: reference.qos,
          retain: reference.retain,
          dup: reference.dup,
        });
        expect(p.messageId).toBe(qos > 0 ? 513 : undefined);
        expect((p.payload as Buffer).toString()).toBe('payload');
        // The payload is a copy: reusing the read buffer does not change the message.
        f.data.fill(0);
        expect((p.payload as Buffer).toString()).toBe('payload');
      });
    }
  }

  it('decodes an empty payload', () => {
    const bytes = encodePublish(
      createMessage({ topic: 't', payload: Buffer.alloc(0), origin: 'x' }),
      4,
      0,
      true,
      false,
    ).bytes;
    const f = frame(bytes);
    expect((decodePublish(f.data, f.first, f.start, f.end, 4)!.payload as Buffer).length).toBe(0);
  });

  it('fills the packet it is given, one object for every PUBLISH, each decode replacing every field', () => {
    const into = newPublishPacket();
    const a = frame(
      encodePublish(
        createMessage({ topic: 'a', payload: Buffer.from('1'), origin: 'x' }),
        4,
        1,
        true,
        true,
        undefined,
        9,
      ).bytes,
    );
    expect(decodePublish(a.data, a.first, a.start, a.end, 4, into)).toBe(into);
    expect(into).toMatchObject({ cmd: 'publish', topic: 'a', qos: 1, retain: true, dup: true, messageId: 9 });
    const b = frame(
      encodePublish(createMessage({ topic: 'b/c', payload: Buffer.from('22'), origin: 'x' }), 4, 0, false, false).bytes,
    );
    expect(decodePublish(b.data, b.first, b.start, b.end, 4, into)).toBe(into);
    expect(into).toMatchObject({ topic: 'b/c', qos: 0, retain: false, dup: false, messageId: undefined });
    expect((into.payload as Buffer).toString()).toBe('22');
  });

  it('leaves an MQTT 5 PUBLISH with properties to mqtt-packet (returns undefined)', () => {
    const f = frame(encodePublish(every, 5, 1, false, false, undefined, 1).bytes);
    expect(decodePublish(f.data, f.first, f.start, f.end, 5)).toBeUndefined();
  });

  it('refuses QoS 3 as malformed [MQTT-3.3.1-4]', () => {
    const bytes = encodePublish(
      createMessage({ topic: 't', payload: Buffer.from('x'), origin: 'x' }),
      4,
      1,
      false,
      false,
      undefined,
      1,
    ).bytes;
    const f = frame(bytes);
    expect(() => decodePublish(f.data, f.first | 0x06, f.start, f.end, 4)).toThrow(ProtocolError);
  });

  it('refuses truncated bodies as malformed instead of reading past the packet', () => {
    const bytes = encodePublish(
      createMessage({ topic: 'topic', payload: Buffer.alloc(0), origin: 'x' }),
      5,
      1,
      false,
      false,
      undefined,
      1,
    ).bytes;
    const f = frame(bytes);
    // Cut before the property length, inside the packet id, inside the topic, inside the topic length.
    for (const cut of [1, 2, 4, 7, 9]) {
      let thrown: unknown;
      try {
        decodePublish(f.data, f.first, f.start, f.end - cut, 5);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, `cut ${cut}`).toBeInstanceOf(ProtocolError);
      expect((thrown as ProtocolError).reasonCode).toBe(0x81);
    }
  });
});

describe('decodeShortAck', () => {
  it('fills the acknowledgement it is given and refuses wrong fixed-header flags [MQTT-2.2.2-2]', () => {
    const into: ShortAck = { cmd: 'puback', messageId: 0, reasonCode: 0 };
    expect(decodeShortAck(0x50, 7, into)).toBe(into);
    expect(into).toEqual({ cmd: 'pubrec', messageId: 7, reasonCode: 0 });
    expect(decodeShortAck(0x62, 8, into)).toBe(into);
    expect(into).toEqual({ cmd: 'pubrel', messageId: 8, reasonCode: 0 });
    // PUBREL must have flags 0010, PUBACK 0000.
    expect(decodeShortAck(0x60, 9, into)).toBeUndefined();
    expect(decodeShortAck(0x41, 9, into)).toBeUndefined();
  });
});
