/**
 * Scenario 1 (steady stream) and 8 (inbound, no echo): the gateway process bridging to a real
 * Mosquitto "central broker".
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkSequence, collect, connectClient, publishSequence, sequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, runCli, startGateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { afterMarker, waitFor } from '../helpers/wait.js';

const d = useDisposer();

describe('bridge: steady stream and inbound commands', { timeout: 120_000 }, () => {
  it('forwards a steady QoS 1 stream from MQTT.js upstream: every message once, in order', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const gw = d.add(await startGateway(bridgePatch(central.url)));
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    const acked = await publishSequence(local, 'plant/line4/temp', 2000, { qos: 1, prefix: 's', concurrency: 50 });
    expect(acked).toHaveLength(2000);
    await waitFor(() => up.messages.length >= 2000, 20_000, { message: () => `${up.messages.length}/2000 upstream` });
    expect(checkSequence(up.payloads(), sequence(2000, 's'))).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
  });

  it("bridges over WebSocket (ws://) to Mosquitto's websockets listener: every QoS 1 and QoS 0 message, in order", async () => {
    const wsPort = await freePort();
    const central = d.add(await startMosquitto({ extraConf: `listener ${wsPort} 127.0.0.1\nprotocol websockets` }));
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const gw = d.add(await startGateway(bridgePatch(`ws://127.0.0.1:${wsPort}`)));
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    const acked = await publishSequence(local, 'plant/ws/q1', 500, { qos: 1, prefix: 'w', concurrency: 50 });
    const q0 = await publishSequence(local, 'plant/ws/q0', 100, { qos: 0, prefix: 'z', concurrency: 10 });
    await waitFor(() => up.messages.length >= 600, 20_000, { message: () => `${up.messages.length}/600 upstream` });
    const on = (topic: string): string[] =>
      up.messages.filter((m) => m.topic === topic).map((m) => m.payload.toString());
    expect(checkSequence(on('plant/ws/q1'), acked)).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
    expect(checkSequence(on('plant/ws/q0'), q0)).toMatchObject({ missing: [], outOfOrder: 0 });
  });

  it('with dead letters off, drops a message the central broker refuses (PUBACK 0x87), counts it, and goes on', async () => {
    const acl = join(d.tempDir('edgeferry-acl-'), 'acl');
    writeFileSync(acl, 'topic read #\ntopic write plant/ok/#\n'); // anonymous clients: read all, write plant/ok/#
    const central = d.add(await startMosquitto({ extraConf: `acl_file ${acl}` }));
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const gw = d.add(
      await startGateway(
        bridgePatch(central.url, {
          topics: [{ filter: 'plant/#', direction: 'out', qos: 1 }],
          queue: { deadLetter: { maxMessages: 0 } },
        }),
      ),
    );
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    await local.publishAsync('plant/secret/x', 'refused', { qos: 1 });
    await local.publishAsync('plant/ok/y', 'accepted', { qos: 1 });
    await waitFor(() => up.messages.length >= 1, 10_000, { message: () => 'nothing arrived upstream' });
    await local.endAsync(true);
    await gw.stop();
    expect(up.payloads()).toEqual(['accepted']);
    // The refused one left the outbox (a retry would block its head forever), counted as refused upstream.
    const listed = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(listed.stdout).toContain('outbox central: 0 messages, 0 bytes, oldest -, dropped rejected_upstream 1');
  });

  it('forwards lines published with mosquitto_pub -l, in order, and keeps QoS 0 as QoS 0 upstream', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const gw = d.add(await startGateway(bridgePatch(central.url)));
    const expected = sequence(500, 'line');
    await new Promise<void>((resolve, reject) => {
      const pub = spawn('mosquitto_pub', [
        '-h',
        '127.0.0.1',
        '-p',
        String(gw.port),
        '-t',
        'plant/pub',
        '-q',
        '0',
        '-l',
      ]);
      pub.on('error', reject);
      pub.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`mosquitto_pub exited ${code}`))));
      pub.stdin.end(expected.join('\n') + '\n');
    });
    await waitFor(() => up.messages.length >= 500, 10_000, { message: () => `${up.messages.length}/500 upstream` });
    expect(checkSequence(up.payloads(), expected)).toMatchObject({ missing: [], outOfOrder: 0 });
    expect(up.messages.every((m) => m.qos === 0)).toBe(true);
  });

  it('publishes an inbound command locally and never echoes it back upstream (no-local + origin marking)', async () => {
    const central = d.add(await startMosquitto());
    const upCmd = d.add(await collect(central.url, 'cmd/#', { qos: 1 }));
    const gw = d.add(
      await startGateway(
        bridgePatch(central.url, {
          topics: [
            { filter: 'plant/#', direction: 'out' },
            { filter: '#', direction: 'both', localPrefix: 'cmd/', remotePrefix: 'cmd/' },
          ],
        }),
      ),
    );
    const localSub = d.add(await collect(gw.url, 'cmd/#', { qos: 1 }));
    const remote = await connectClient(central.url);
    d.defer(() => remote.endAsync(true));
    // Until the bridge's SUBACK upstream, a remote publish has no bridge subscriber: retry until one crosses.
    let sent = 0;
    await waitFor(
      async () => {
        await remote.publishAsync('cmd/line4/stop', `stop${sent++}`, { qos: 1 });
        return localSub.messages.length > 0;
      },
      10_000,
      { intervalMs: 250 },
    );
    const first = localSub.messages[0];
    expect(first.topic).toBe('cmd/line4/stop');
    // A last remote command: once it is local, every earlier one that crossed is too (one subscription, in order).
    await afterMarker(
      () => remote.publishAsync('cmd/line4/stop', 'last', { qos: 1 }),
      () => localSub.payloads().includes('last'),
    );
    // A local publish on a both-direction topic goes up exactly once.
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    // It goes up behind any echo of the remote commands (one outbox, in order): once it is in, an echo would be too.
    await afterMarker(
      () => local.publishAsync('cmd/line4/start', 'from-local', { qos: 1 }),
      () => upCmd.payloads().includes('from-local'),
    );
    // Each remote command exactly once upstream, none duplicated.
    const counts = new Map<string, number>();
    for (const p of upCmd.payloads()) counts.set(p, (counts.get(p) ?? 0) + 1);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    expect(upCmd.payloads().length).toBe(sent + 2);
    // And the local subscriber got the remote commands once each (not our own bridged-back copy).
    expect(new Set(localSub.payloads()).size).toBe(localSub.payloads().length);
  });
});
