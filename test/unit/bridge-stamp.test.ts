/**
 * The bridge's MQTT 5 user properties (message id, historical flag) as encoded into its PUBLISH packets: parsed
 * back by mqtt-packet, next to the message's own user properties.
 */
import { describe, expect, it } from 'vitest';
import mqttPacket, { type IPublishPacket, type Packet } from 'mqtt-packet';
import { appendPublish, PacketArena } from '../../src/protocol/codec.js';
import { createMessage } from '../../src/protocol/message.js';
import { UplinkStamp } from '../../src/bridge/stamp.js';

function roundTrip(stamp: UplinkStamp, seqs: number[], version: 4 | 5 = 5): IPublishPacket[] {
  const arena = new PacketArena(64);
  const msg = createMessage({
    topic: 'plant/a',
    payload: Buffer.from('v'),
    qos: 1,
    origin: 'test',
    properties: { userProperties: { site: 'north' } },
  });
  for (const seq of seqs) appendPublish(arena, msg, version, 1, false, false, 7, stamp, seq);
  const packets: IPublishPacket[] = [];
  const parser = mqttPacket.parser({ protocolVersion: version });
  parser.on('packet', (p: Packet) => packets.push(p as IPublishPacket));
  parser.on('error', (err: Error) => {
    throw err;
  });
  parser.parse(arena.take());
  return packets;
}

describe('UplinkStamp', () => {
  it('writes `<gateway id>:<seq>` after the message user properties, for seqs of any length [MQTT-3.3.2-17]', () => {
    const seqs = [0, 9, 10, 12_345, 9_007_199_254_740_991];
    const packets = roundTrip(new UplinkStamp('edgeferry-id', 'gw-1', false), seqs);
    expect(packets.map((p) => p.properties?.userProperties)).toEqual(
      seqs.map((seq) => ({ site: 'north', 'edgeferry-id': `gw-1:${seq}` })),
    );
    expect(packets.every((p) => p.payload.toString() === 'v' && p.messageId === 7)).toBe(true);
  });

  it('adds `edgeferry-historical: true` with or without the id, and nothing when it is empty', () => {
    expect(roundTrip(new UplinkStamp('x-id', 'gw', true), [42])[0].properties?.userProperties).toEqual({
      site: 'north',
      'x-id': 'gw:42',
      'edgeferry-historical': 'true',
    });
    expect(roundTrip(new UplinkStamp(undefined, 'gw', true), [42])[0].properties?.userProperties).toEqual({
      site: 'north',
      'edgeferry-historical': 'true',
    });
    expect(new UplinkStamp(undefined, 'gw', false).empty).toBe(true);
  });

  it('adds nothing to an MQTT 3.1.1 PUBLISH, which has no properties', () => {
    const [p] = roundTrip(new UplinkStamp('edgeferry-id', 'gw', true), [5], 4);
    expect(p.properties).toBeUndefined();
    expect(p.payload.toString()).toBe('v');
  });
});
