/**
 * Filling a gateway's store with numbered 1 KiB QoS 1 messages until it refuses, and draining a persistent
 * session's queue again: the store-full tests (disk and `storage.maxBytes`) check what was accepted against what
 * each target delivers.
 */
import type { IPubackPacket } from 'mqtt-packet';
import type { Disposer } from './disposer.js';
import type { Gateway } from './gateway.js';
import { openClient } from './mqtt-client.js';
import { RawClient } from './raw-client.js';

/** Publishes in flight at once, like a busy publisher. */
const WINDOW = 32;
const PAYLOAD_BYTES = 1024;

export const persistent = (clientId: string) => ({
  clientId,
  clean: false,
  protocolVersion: 5 as const,
  properties: { sessionExpiryInterval: 3600 },
});

/** Message `id`'s payload: `m<id>;` padded to 1 KiB. */
export const payload = (id: number): Buffer => {
  const buf = Buffer.alloc(PAYLOAD_BYTES, 0x61);
  buf.write(`m${id};`);
  return buf;
};
export const idOf = (p: Buffer | string): number => Number(String(p).slice(1, String(p).indexOf(';')));

/**
 * Publishes QoS 1 messages on `topic` (MQTT 5) with WINDOW in flight until `refusals` were refused; returns the
 * ids accepted and refused and every refusal's reason code.
 */
export async function fillStore(d: Disposer, gw: Gateway, topic: string, firstId: number, refusals: number) {
  const pub = d.add(await RawClient.connect(gw.port, { clientId: `filler-${firstId}` }, { protocolVersion: 5 }));
  const accepted: number[] = [];
  const refused: number[] = [];
  const codes = new Set<number>();
  let id = firstId;
  while (refused.length < refusals && id < firstId + 100_000) {
    const sent = new Map<number, number>();
    for (let i = 1; i <= WINDOW; i++, id++) {
      pub.publish(topic, payload(id), { qos: 1, messageId: i });
      sent.set(i, id);
    }
    for (let n = 0; n < WINDOW; n++) {
      const ack = (await pub.expect('puback', 10_000)) as IPubackPacket;
      const code = ack.reasonCode ?? 0;
      const msgId = sent.get(ack.messageId!)!;
      if (code === 0) accepted.push(msgId);
      else {
        refused.push(msgId);
        codes.add(code);
      }
    }
  }
  pub.stop();
  return { accepted, refused, codes: [...codes], next: id };
}

/**
 * Connects persistent session `clientId` and reads its whole queue on `topic` (acknowledging, which frees the
 * store): at least `expected` messages, then whatever else arrives before a round trip of its own.
 */
export async function drainSession(
  d: Disposer,
  gw: Gateway,
  clientId: string,
  topic: string,
  expected: number,
): Promise<number[]> {
  const sub = d.add(await openClient(gw.url, persistent(clientId)));
  await sub.waitForMessages(expected, { topic, timeoutMs: 30_000 });
  await sub.publish(`probe/${clientId}`, 'x', { qos: 1 });
  const ids = sub.received(topic).map((m) => idOf(m.payload));
  await sub.disconnect();
  return ids;
}
