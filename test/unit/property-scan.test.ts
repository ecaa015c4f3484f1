import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { countUserProperties } from '../../src/protocol/property-scan.js';

/** The packet's first byte, body start and end, as the framer hands them over. */
function count(bytes: Buffer): number {
  let i = 1;
  while (bytes[i] & 0x80) i++;
  return countUserProperties(bytes, bytes[0], i + 1, bytes.length);
}

const userProperties = { a: ['1', '2'], b: '3', '': ['', ''] };
/** Every other property type of each packet, so the walk must skip each value layout right. */
const packets: Packet[] = [
  {
    cmd: 'connect',
    protocolId: 'MQTT',
    protocolVersion: 5,
    clean: true,
    keepalive: 30,
    clientId: 'c',
    properties: {
      sessionExpiryInterval: 9,
      receiveMaximum: 5,
      maximumPacketSize: 1000,
      topicAliasMaximum: 3,
      requestProblemInformation: true,
      userProperties,
      authenticationMethod: 'm',
      authenticationData: Buffer.from([1, 2]),
    },
    will: {
      topic: 't',
      payload: Buffer.from('p'),
      qos: 1,
      retain: false,
      properties: {
        willDelayInterval: 5,
        payloadFormatIndicator: true,
        contentType: 'c',
        responseTopic: 'r',
        correlationData: Buffer.from([3]),
        userProperties,
      },
    },
  },
  {
    cmd: 'publish',
    topic: 't',
    payload: Buffer.from('x'),
    qos: 1,
    messageId: 3,
    dup: false,
    retain: false,
    properties: { messageExpiryInterval: 4, topicAlias: 2, subscriptionIdentifier: 300, userProperties },
  },
  {
    cmd: 'publish',
    topic: 't',
    payload: Buffer.from('x'),
    qos: 0,
    dup: false,
    retain: false,
    properties: { userProperties },
  },
  { cmd: 'puback', messageId: 3, reasonCode: 0x10, properties: { reasonString: 'why', userProperties } },
  { cmd: 'pubrec', messageId: 3, reasonCode: 0x10, properties: { reasonString: 'why', userProperties } },
  { cmd: 'pubrel', messageId: 3, reasonCode: 0x92, properties: { reasonString: 'why', userProperties } },
  { cmd: 'pubcomp', messageId: 3, reasonCode: 0x92, properties: { reasonString: 'why', userProperties } },
  {
    cmd: 'subscribe',
    messageId: 3,
    subscriptions: [{ topic: 'a', qos: 1 }],
    properties: { subscriptionIdentifier: 7, userProperties },
  },
  { cmd: 'unsubscribe', messageId: 3, unsubscriptions: ['a'], properties: { userProperties } },
  { cmd: 'disconnect', reasonCode: 0, properties: { sessionExpiryInterval: 0, reasonString: 'bye', userProperties } },
  { cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'm', userProperties } },
] as Packet[];

describe('countUserProperties', () => {
  for (const p of packets) {
    const expected = p.cmd === 'connect' ? 10 : 5;
    it(`counts the user properties of a ${p.cmd}${p.cmd === 'connect' ? ' and its will' : ''} (${expected}), repeated names included`, () => {
      expect(count(mqttPacket.generate(p, { protocolVersion: 5 }))).toBe(expected);
    });
  }

  it('counts none in a 3.1.1 CONNECT, a short acknowledgement or a DISCONNECT without properties', () => {
    expect(
      count(
        mqttPacket.generate({
          cmd: 'connect',
          protocolId: 'MQTT',
          protocolVersion: 4,
          clean: true,
          keepalive: 0,
          clientId: 'c',
        } as Packet),
      ),
    ).toBe(0);
    expect(count(Buffer.from([0x40, 0x02, 0x00, 0x01]))).toBe(0);
    expect(count(Buffer.from([0x62, 0x03, 0x00, 0x01, 0x92]))).toBe(0);
    expect(count(Buffer.from([0xe0, 0x01, 0x00]))).toBe(0);
  });

  it('refuses properties that run past the packet, and an unknown property identifier, as malformed', () => {
    const publish = mqttPacket.generate(packets[2], { protocolVersion: 5 });
    // Cut inside the properties: the declared property length is now beyond the end.
    expect(() => countUserProperties(publish, publish[0], 2, 12)).toThrow(
      /longer than the packet|shorter than its fields/,
    );
    // A property length that claims a user property's name runs past the section.
    expect(() => count(Buffer.from([0xe0, 0x05, 0x00, 0x03, 0x26, 0x00, 0x05]))).toThrow(/past the end|shorter/);
    expect(() => count(Buffer.from([0xe0, 0x03, 0x00, 0x01, 0x7f]))).toThrow(/unknown property identifier 0x7f/);
  });
});
