/** What mqtt-packet, the reference our own decoders are held to, makes of one packet's bytes. */
import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';

/** The first packet mqtt-packet parses from `bytes`, or its first error. */
export function parseWithMqttPacket(bytes: Buffer, version: 3 | 4 | 5 = 4): { packet?: Packet; error?: string } {
  const parser = mqttPacket.parser({ protocolVersion: version });
  const result: { packet?: Packet; error?: string } = {};
  parser.on('packet', (packet: Packet) => (result.packet ??= packet));
  parser.on('error', (err: Error) => (result.error ??= err.message));
  parser.parse(bytes);
  return result;
}
