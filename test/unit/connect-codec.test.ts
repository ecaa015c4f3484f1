import { describe, expect, it } from 'vitest';
import { parseWithMqttPacket } from '../helpers/mqtt-packet-parse.js';
import mqttPacket from 'mqtt-packet';
import type { IConnectPacket } from 'mqtt-packet';
import { decodeConnectV4, encodeConnackV3 } from '../../src/protocol/connect-codec.js';

/** Our decoding of one whole packet (fixed header of 2-5 bytes). */
function decode(bytes: Buffer): IConnectPacket | undefined {
  let i = 1;
  while (bytes[i] & 0x80) i++;
  return decodeConnectV4(bytes, bytes[0], i + 1, bytes.length);
}

/** The fields the CONNECT handler reads, as plain values (mqtt-packet's Packet class adds null topic/payload). */
function fields(p: IConnectPacket): Record<string, unknown> {
  return {
    cmd: p.cmd,
    protocolId: p.protocolId,
    protocolVersion: p.protocolVersion,
    clean: p.clean,
    keepalive: p.keepalive,
    clientId: p.clientId,
    username: p.username,
    password: p.password === undefined ? undefined : Buffer.from(p.password),
    will: p.will && {
      topic: p.will.topic,
      payload: Buffer.from(p.will.payload),
      qos: p.will.qos,
      retain: p.will.retain,
    },
    length: p.length,
  };
}

const connects: IConnectPacket[] = [];
for (const clean of [true, false])
  for (const keepalive of [0, 1, 60, 65535])
    // mqtt-packet does not generate an empty client id without clean session (the handler refuses it [MQTT-3.1.3-8]).
    for (const clientId of clean ? ['', 'c', 'idle-12345', 'ünïcødé-id', 'x'.repeat(300)] : ['c', 'ünïcødé-id'])
      for (const username of [undefined, '', 'user'])
        for (const password of username === undefined
          ? [undefined]
          : [undefined, Buffer.alloc(0), Buffer.from('s3cret')])
          for (const will of [
            undefined,
            { topic: 'w/t', payload: Buffer.from('gone'), qos: 1 as const, retain: true },
            { topic: 'w', payload: Buffer.alloc(0), qos: 2 as const, retain: false },
          ])
            connects.push({
              cmd: 'connect',
              protocolId: 'MQTT',
              protocolVersion: 4,
              clean,
              keepalive,
              clientId,
              username,
              password,
              will,
            });

describe('decodeConnectV4 (MQTT 3.1.1 CONNECT without mqtt-packet)', () => {
  it('decodes every well-formed MQTT 3.1.1 CONNECT as mqtt-packet does', () => {
    for (const connect of connects) {
      const bytes = mqttPacket.generate(connect);
      const ours = decode(bytes);
      const theirs = parseWithMqttPacket(bytes);
      expect(ours, JSON.stringify(connect)).toBeDefined();
      expect(fields(ours!)).toEqual(fields(theirs.packet as IConnectPacket));
    }
  });

  it('leaves everything else to mqtt-packet: other protocol levels, reserved bits, bad lengths, trailing bytes', () => {
    const base = mqttPacket.generate({
      cmd: 'connect',
      protocolId: 'MQTT',
      protocolVersion: 4,
      clean: true,
      keepalive: 30,
      clientId: 'abc',
      username: 'u',
    });
    const flagsAt = 2 + 7;
    const mutate = (f: (b: Buffer) => void): Buffer => {
      const b = Buffer.from(base);
      f(b);
      return b;
    };
    const refused = [
      mqttPacket.generate({
        cmd: 'connect',
        protocolId: 'MQIsdp',
        protocolVersion: 3,
        clean: true,
        keepalive: 0,
        clientId: 'v31',
      }),
      mqttPacket.generate({ cmd: 'connect', protocolVersion: 5, clean: true, keepalive: 0, clientId: 'v5' }),
      mutate((b) => (b[2 + 6] = 6)), // protocol level 6 [MQTT-3.1.2-2]
      mutate((b) => (b[2 + 6] = 0x84)), // bridge bit
      mutate((b) => (b[2 + 3] = 0x4e)), // protocol name "MNTT" [MQTT-3.1.2-1]
      mutate((b) => (b[flagsAt] |= 0x01)), // reserved flag [MQTT-3.1.2-3]
      mutate((b) => (b[flagsAt] |= 0x08)), // will QoS without will flag [MQTT-3.1.2-13]
      mutate((b) => (b[flagsAt] |= 0x20)), // will retain without will flag [MQTT-3.1.2-15]
      mutate((b) => (b[flagsAt] |= 0x40)), // password flag, no password in the payload
      mutate((b) => b.writeUInt16BE(200, 2 + 10)), // client id longer than the packet
      mutate((b) => (b[0] = 0x12)), // fixed header flags not 0 [MQTT-2.2.2-2]
      Buffer.concat([mutate((b) => (b[1] += 1)), Buffer.from([0])]), // a byte after the last field
      mqttPacket.generate({
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: 4,
        clean: true,
        keepalive: 0,
        clientId: 'q3',
        will: { topic: 't', payload: Buffer.alloc(0), qos: 1, retain: false },
      }),
    ];
    refused[refused.length - 1][flagsAt] |= 0x18; // will QoS 3 [MQTT-3.1.2-14]
    for (const bytes of refused) expect(decode(bytes), bytes.toString('hex')).toBeUndefined();
    // Cut short anywhere: never decoded, never read past its end.
    for (let cut = 3; cut < base.length; cut++) {
      const short = Buffer.from(base.subarray(0, cut));
      short[1] = cut - 2;
      expect(decode(short)).toBeUndefined();
    }
  });

  it('encodes MQTT 3.1.x CONNACKs byte for byte as mqtt-packet does', () => {
    for (const sessionPresent of [false, true]) {
      for (const returnCode of [0, 1, 2, 3, 4, 5]) {
        expect(encodeConnackV3(sessionPresent, returnCode)).toEqual(
          mqttPacket.generate({ cmd: 'connack', sessionPresent, returnCode }),
        );
      }
    }
  });
});
