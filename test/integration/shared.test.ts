/**
 * Shared subscriptions `$share/<group>/<filter>` (MQTT 5 §4.8.2): round robin among the members, one copy
 * per group, unacknowledged QoS 1 redelivered to another member when one disconnects, malformed share names
 * refused per filter with 0x8F [docs/reliability.md rule 24], no-local on a shared subscription a protocol error.
 */
import type { MqttClient } from 'mqtt';
import { describe, expect, it } from 'vitest';
import { connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { useGateway } from '../helpers/gateway.js';
import { RawClient } from '../helpers/raw-client.js';
import { waitFor } from '../helpers/wait.js';

const gw = useGateway();
const d = useDisposer();

interface Member {
  readonly client: MqttClient;
  readonly payloads: string[];
}

async function client(options: Parameters<typeof connectClient>[1] = {}): Promise<MqttClient> {
  const c = await connectClient(gw.url, options);
  d.defer(() => c.endAsync(true));
  return c;
}

async function member(filter: string, options: { protocolVersion?: 4 | 5; qos?: 0 | 1 | 2 } = {}): Promise<Member> {
  const c = await client({ protocolVersion: options.protocolVersion ?? 5 });
  const payloads: string[] = [];
  c.on('message', (_topic, payload) => payloads.push(payload.toString()));
  await c.subscribeAsync(filter, { qos: options.qos ?? 1 });
  return { client: c, payloads };
}

function numbered(prefix: string, n: number): string[] {
  return Array.from({ length: n }, (_, i) => `${prefix}${i}`);
}

describe('shared subscriptions: distribution', () => {
  it('distributes messages round robin among the members of one group, each message to exactly one member (MQTT 5 §4.8.2)', async () => {
    const members = [
      await member('$share/rr/shared/rr/+'),
      await member('$share/rr/shared/rr/+'),
      await member('$share/rr/shared/rr/+'),
    ];
    const pub = await client();
    const sent = numbered('rr', 30);
    for (const p of sent) await pub.publishAsync('shared/rr/x', p, { qos: 1 });
    const total = (): number => members.reduce((n, m) => n + m.payloads.length, 0);
    await waitFor(() => total() >= 30, 5000, { message: () => `members got ${members.map((m) => m.payloads.length)}` });
    // Every message exactly once across the group...
    expect(members.flatMap((m) => m.payloads).sort()).toEqual([...sent].sort());
    // ...and in strict turns: with all members online and keeping up, each gets every third message.
    expect(members.map((m) => m.payloads.length)).toEqual([10, 10, 10]);
    for (const m of members) {
      const indices = m.payloads.map((p) => Number(p.slice(2)));
      for (let i = 1; i < indices.length; i++) expect(indices[i] - indices[i - 1]).toBe(3);
    }
  });

  it('gives every group one copy and ordinary subscribers their own copy of each message (MQTT 5 §4.8.2)', async () => {
    const g1 = [await member('$share/one/shared/groups/#'), await member('$share/one/shared/groups/#')];
    const g2 = [
      await member('$share/two/shared/groups/#', { protocolVersion: 4 }),
      await member('$share/two/shared/groups/+'),
    ];
    const plain = await member('shared/groups/#');
    const pub = await client();
    const sent = numbered('g', 12);
    for (const p of sent) await pub.publishAsync('shared/groups/t', p, { qos: 1 });
    await waitFor(() => plain.payloads.length >= 12, 5000, { message: () => `plain got ${plain.payloads.length}` });
    await waitFor(() => g1[0].payloads.length + g1[1].payloads.length >= 12, 5000, { message: 'group one incomplete' });
    // Group two's members use different inner filters, so they are two groups that happen to share a name: each
    // group delivers every message once.
    await waitFor(() => g2[0].payloads.length >= 12 && g2[1].payloads.length >= 12, 5000, {
      message: () => `group two got ${g2.map((m) => m.payloads.length)}`,
    });
    expect(plain.payloads).toEqual(sent);
    expect([...g1[0].payloads, ...g1[1].payloads].sort()).toEqual([...sent].sort());
    expect(g1[0].payloads.length).toBe(6);
    expect(g2[0].payloads).toEqual(sent);
    expect(g2[1].payloads).toEqual(sent);
  });

  it('lets MQTT 3.1.1 clients join a shared group as Mosquitto does', async () => {
    const members = [
      await member('$share/v3/shared/v3', { protocolVersion: 4 }),
      await member('$share/v3/shared/v3', { protocolVersion: 4 }),
    ];
    const pub = await client();
    for (const p of numbered('v', 4)) await pub.publishAsync('shared/v3', p, { qos: 1 });
    await waitFor(() => members[0].payloads.length + members[1].payloads.length >= 4, 5000, { message: 'incomplete' });
    expect(members.map((m) => m.payloads.length)).toEqual([2, 2]);
  });

  it('does not send retained messages to a new shared subscription (MQTT 5 §4.8.2)', async () => {
    const pub = await client();
    await pub.publishAsync('shared/retained', 'old', { qos: 1, retain: true });
    const m = await member('$share/ret/shared/retained');
    const plain = await member('shared/retained');
    await waitFor(() => plain.payloads.length >= 1, 5000, {
      message: 'the ordinary subscriber got no retained message',
    });
    await pub.publishAsync('shared/retained', 'new', { qos: 1 });
    await waitFor(() => m.payloads.length >= 1, 5000, { message: 'the shared member got nothing' });
    expect(m.payloads).toEqual(['new']);
    await pub.publishAsync('shared/retained', '', { qos: 1, retain: true });
  });

  it('stops delivering to a member that unsubscribed; the rest of the group gets everything', async () => {
    const a = await member('$share/unsub/shared/unsub');
    const b = await member('$share/unsub/shared/unsub');
    await a.client.unsubscribeAsync('$share/unsub/shared/unsub');
    const pub = await client();
    const sent = numbered('u', 6);
    for (const p of sent) await pub.publishAsync('shared/unsub', p, { qos: 1 });
    await waitFor(() => b.payloads.length >= 6, 5000, { message: () => `b got ${b.payloads.length}` });
    expect(b.payloads).toEqual(sent);
    expect(a.payloads).toEqual([]);
  });
});

describe('shared subscriptions: redelivery', () => {
  it('redelivers an unacknowledged QoS 1 message to another member when its member disconnects (MQTT 5 §4.8.2)', async () => {
    // A raw member that never acknowledges, and an MQTT.js member that does.
    const silent = d.add(await RawClient.connect(gw.port, { clientId: 'shared-silent' }, { protocolVersion: 5 }));
    expect((await silent.subscribe([{ topic: '$share/redeliver/shared/redeliver', qos: 1 }])).granted).toEqual([1]);
    const good = await member('$share/redeliver/shared/redeliver');
    const pub = await client();
    for (const p of ['r0', 'r1', 'r2', 'r3']) await pub.publishAsync('shared/redeliver', p, { qos: 1 });
    // Round robin: the silent member holds two of the four, unacknowledged.
    await silent.until(() => silent.publishes.length >= 2, 5000, 'two PUBLISHes to the silent member');
    const held = silent.publishes.map((p) => p.payload.toString());
    expect(held).toHaveLength(2);
    await waitFor(() => good.payloads.length >= 2, 5000, { message: 'the good member got nothing' });
    silent.destroy();
    await waitFor(() => good.payloads.length >= 4, 5000, {
      message: () => `after the silent member left, the good member has ${JSON.stringify(good.payloads)}`,
    });
    expect([...good.payloads].sort()).toEqual(['r0', 'r1', 'r2', 'r3']);
  });

  it('redelivers messages queued behind a full inflight window too, and keeps the group working afterwards', async () => {
    const silent = d.add(
      await RawClient.connect(
        gw.port,
        { clientId: 'shared-window', properties: { receiveMaximum: 1 } },
        { protocolVersion: 5 },
      ),
    );
    await silent.subscribe([{ topic: '$share/window/shared/window', qos: 1 }]);
    const good = await member('$share/window/shared/window');
    const pub = await client();
    const sent = numbered('w', 10);
    for (const p of sent) await pub.publishAsync('shared/window', p, { qos: 1 });
    // The silent member can take one at a time: one in flight, four queued behind it.
    await silent.until(() => silent.publishes.length >= 1, 5000, 'a PUBLISH to the silent member');
    await waitFor(() => good.payloads.length >= 5, 5000, { message: 'the good member got less than its half' });
    silent.destroy();
    await waitFor(() => good.payloads.length >= 10, 5000, {
      message: () => `good member has ${good.payloads.length} of 10`,
    });
    expect([...new Set(good.payloads)].sort()).toEqual([...sent].sort());
    // The group still has its remaining member: new messages keep flowing.
    await pub.publishAsync('shared/window', 'after', { qos: 1 });
    await waitFor(() => good.payloads.includes('after'), 5000, { message: 'group stopped after a member left' });
  });
});

describe('shared subscriptions: bad filters', () => {
  const invalid = [
    '$share/ab',
    '$share//shared/x',
    '$share/g+/shared/x',
    '$share/g#/shared/x',
    '$share/g/',
    '$share/',
    '$share',
    '$share/g/a/#/b',
  ];

  it('refuses malformed shared filters per filter with SUBACK 0x8F, keeps the connection, and stores nothing [MQTT-4.8.2-1] [MQTT-4.8.2-2] [docs/reliability.md rule 24]', async () => {
    const raw = d.add(await RawClient.connect(gw.port, {}, { protocolVersion: 5 }));
    const suback = await raw.subscribe([
      ...invalid.map((topic) => ({ topic, qos: 1 as const })),
      { topic: 'shared/bad/ok', qos: 1 },
    ]);
    expect(suback.granted).toEqual([...invalid.map(() => 0x8f), 1]);
    // Nothing was stored under the bad filters: publishing to what they might have meant reaches nobody.
    const pub = await client();
    for (const topic of ['ab', 'shared/x', 'a/x/b']) await pub.publishAsync(topic, 'x', { qos: 1 });
    await pub.publishAsync('shared/bad/ok', 'ok', { qos: 1 });
    await raw.until(() => raw.publishes.length >= 1, 5000, "the valid subscription's message");
    await raw.ping();
    expect(raw.publishes.map((p) => p.topic)).toEqual(['shared/bad/ok']);
  });

  it('refuses malformed shared filters with SUBACK 0x80 for MQTT 3.1.1 clients [MQTT-3.9.3-2]', async () => {
    const raw = d.add(await RawClient.connect(gw.port, {}, { protocolVersion: 4 }));
    const suback = await raw.subscribe(invalid.map((topic) => ({ topic, qos: 0 as const })));
    expect(suback.granted).toEqual(invalid.map(() => 0x80));
    await raw.ping();
  });

  it('treats No Local on a shared subscription as a protocol error: DISCONNECT 0x82 and close [MQTT-3.8.3-4]', async () => {
    const raw = d.add(await RawClient.connect(gw.port, {}, { protocolVersion: 5 }));
    raw.send({ cmd: 'subscribe', messageId: 3, subscriptions: [{ topic: '$share/nl/shared/nl', qos: 1, nl: true }] });
    const disconnect = await raw.expectDisconnect();
    expect(disconnect.reasonCode).toBe(0x82);
    await raw.waitForClose(3000);
    expect(raw.packets('suback')).toEqual([]);
    // The broker is fine and the group was not created half-way.
    const m = await member('$share/nl/shared/nl');
    const pub = await client();
    await pub.publishAsync('shared/nl', 'still-up', { qos: 1 });
    await waitFor(() => m.payloads.length >= 1, 5000, { message: 'no delivery after the protocol error' });
    expect(m.payloads).toEqual(['still-up']);
  });
});
