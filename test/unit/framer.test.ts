import { describe, expect, it } from 'vitest';
import mqttPacket from 'mqtt-packet';
import { PacketFramer, pushChunk } from '../../src/protocol/framer.js';
import type { FrameHandler } from '../../src/protocol/framer.js';

function collect(): FrameHandler & { packets: Buffer[]; headers: [number, number][] } {
  const packets: Buffer[] = [];
  const headers: [number, number][] = [];
  return {
    packets,
    headers,
    header: (type, length) => void headers.push([type, length]),
    packet: (data, _first, start, _body, end) => void packets.push(Buffer.from(data.subarray(start, end))),
    isOpen: () => true,
    canTakeMore: () => true,
  };
}

const stream = Buffer.concat(
  Array.from({ length: 50 }, (_, i) =>
    mqttPacket.generate({
      cmd: 'publish',
      topic: `t/${i}`,
      payload: Buffer.alloc(i * 7, i),
      qos: 1,
      messageId: i + 1,
      retain: false,
      dup: false,
    }),
  ),
);

describe('PacketFramer', () => {
  it('yields the same packets whatever the read boundaries are', () => {
    const whole = collect();
    new PacketFramer().push(stream, whole);
    expect(whole.packets).toHaveLength(50);
    for (const size of [1, 2, 3, 5, 7, 64, 333]) {
      const framer = new PacketFramer();
      const split = collect();
      for (let i = 0; i < stream.length; i += size) framer.push(stream.subarray(i, i + size), split);
      expect(split.packets).toEqual(whole.packets);
      expect(framer.pendingBytes).toBe(0);
    }
  });

  it('holds what the handler is not ready for and frames it first at the next push, in order, whatever the read boundaries', () => {
    const whole = collect();
    new PacketFramer().push(stream, whole);
    for (const size of [7, 333, stream.length]) {
      const framer = new PacketFramer();
      const packets: Buffer[] = [];
      // Takes three packets per turn, like a connection that yields the event loop after its routing budget.
      let budget = 3;
      const handler: FrameHandler = {
        header: () => {},
        packet: (data, _first, start, _body, end) => {
          budget--;
          packets.push(Buffer.from(data.subarray(start, end)));
        },
        isOpen: () => true,
        canTakeMore: () => budget > 0,
      };
      for (let i = 0; i < stream.length; i += size) {
        budget = 3;
        framer.push(stream.subarray(i, i + size), handler);
      }
      for (let turns = 0; framer.pendingBytes > 0 && turns < 100; turns++) {
        budget = 3;
        framer.push(Buffer.alloc(0), handler);
      }
      expect(packets).toEqual(whole.packets);
      expect(framer.pendingBytes).toBe(0);
    }
  });

  it('reports a huge declared length from the header alone, before the body arrives [docs/reliability.md rule 1]', () => {
    const h = collect();
    const framer = new PacketFramer();
    framer.push(Buffer.from([0x10, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x04]), h);
    expect(h.headers).toEqual([[1, 268435455]]);
    expect(h.packets).toHaveLength(0);
  });

  it('refuses a remaining length longer than four bytes as malformed', () => {
    expect(() => new PacketFramer().push(Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]), collect())).toThrow(
      /longer than 4 bytes/,
    );
  });

  it('gives a connection a framer of its own only once a read ends inside a packet (pushChunk)', () => {
    const whole = collect();
    new PacketFramer().push(stream, whole);
    // Reads that end on packet boundaries: no framer is kept.
    const aligned = collect();
    let framer: PacketFramer | undefined;
    for (const packet of whole.packets) framer = pushChunk(framer, packet, aligned);
    expect(framer).toBeUndefined();
    expect(aligned.packets).toEqual(whole.packets);
    // A read that ends inside a packet: a framer holds the rest, and is kept.
    const split = collect();
    framer = undefined;
    for (let i = 0; i < stream.length; i += 100) framer = pushChunk(framer, stream.subarray(i, i + 100), split);
    expect(framer).toBeDefined();
    expect(framer!.pendingBytes).toBe(0);
    expect(split.packets).toEqual(whole.packets);
  });

  it("keeps two streams apart when one is framed from within the other's handler (pushChunk)", () => {
    const whole = collect();
    new PacketFramer().push(stream, whole);
    const inner = collect();
    let innerFramer: PacketFramer | undefined;
    let innerAt = 0;
    const outerPackets: Buffer[] = [];
    const outer: FrameHandler = {
      header: () => {},
      packet: (data, _first, start, _body, end) => {
        outerPackets.push(Buffer.from(data.subarray(start, end)));
        // Another connection's read, handled while this one's is being framed: it ends inside a packet.
        if (innerAt < stream.length)
          innerFramer = pushChunk(innerFramer, stream.subarray(innerAt, (innerAt += 37)), inner);
      },
      isOpen: () => true,
      canTakeMore: () => true,
    };
    let outerFramer: PacketFramer | undefined;
    for (let i = 0; i < stream.length; i += 251)
      outerFramer = pushChunk(outerFramer, stream.subarray(i, i + 251), outer);
    while (innerAt < stream.length)
      innerFramer = pushChunk(innerFramer, stream.subarray(innerAt, (innerAt += 37)), inner);
    expect(outerPackets).toEqual(whole.packets);
    expect(inner.packets).toEqual(whole.packets);
    expect(outerFramer).not.toBe(innerFramer);
  });
});
