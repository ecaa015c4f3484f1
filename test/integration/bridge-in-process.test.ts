/**
 * The Bridge class in-process (real Broker, in-memory outbox) against a real Mosquitto upstream and the fault
 * proxy. The gateway-process scenarios (SIGKILL, LMDB) are in test/integration/bridge-*.test.ts.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Bridge } from '../../src/bridge/bridge.js';
import type { UplinkHooks } from '../../src/bridge/bridge.js';
import { DEFAULT_TLS_CIPHERS } from '../../src/config/schema.js';
import { createMessage } from '../../src/protocol/message.js';
import type { Message, QoS } from '../../src/protocol/message.js';
import type { OutboxEntry } from '../../src/store/types.js';
import { checkSequence, collect, connectClient, sequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { afterMarker, waitFor } from '../helpers/wait.js';
import { bridgeConfig, recordingLogger, retainedPayload, testBroker } from '../helpers/bridge-setup.js';

const d = useDisposer();

function setup(urls: string[], patch: Parameters<typeof bridgeConfig>[1] = {}, hooks?: UplinkHooks) {
  const { broker, store } = testBroker();
  const config = bridgeConfig(urls, patch);
  const outbox = store.outbox(config.name, config.queue);
  const log = recordingLogger();
  const bridge = new Bridge({ config, broker, outbox, log, hooks });
  d.add(bridge);
  return { broker, store, outbox, bridge, log, config };
}

const publishLocal = (broker: ReturnType<typeof testBroker>['broker'], topic: string, payload: string, qos: QoS = 1) =>
  broker.publish(createMessage({ topic, payload: Buffer.from(payload), qos, origin: 'local-client' }));

describe('bridge forwarding to a real Mosquitto', () => {
  it('sends local QoS 1 messages upstream once each, in order, and empties the outbox on PUBACK', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const { broker, outbox, bridge } = setup([central.url]);
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    const expected = sequence(500, 'm');
    // Concurrent publishes: the journal keeps their order, and each PUBACK waits for its append.
    await Promise.all(expected.map((p) => publishLocal(broker, 'plant/line4/temp', p)));
    await waitFor(() => up.messages.length >= 500, 10_000);
    expect(checkSequence(up.payloads(), expected)).toEqual({
      missing: [],
      unexpected: [],
      duplicates: 0,
      outOfOrder: 0,
    });
    await waitFor(() => outbox.depth.messages === 0, 5000);
    expect(bridge.stats.acked).toBe(500);
    expect(up.messages.every((m) => m.qos === 1)).toBe(true);
  });

  it('keeps sent QoS 0 entries until a PINGRESP proves the broker read them, then releases them', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 0 }));
    const { broker, outbox, bridge } = setup([central.url], { inflight: 10 });
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    const expected = sequence(300, 'q');
    for (const p of expected) void publishLocal(broker, 'plant/x', p, 0);
    await waitFor(() => up.messages.length >= 300, 10_000);
    expect(checkSequence(up.payloads(), expected).missing).toEqual([]);
    await waitFor(() => outbox.depth.messages === 0, 5000);
    expect(bridge.stats.acked).toBe(300);
  });

  it('bridges over MQTT 3.1.1 as well (protocolVersion 4), QoS 0, 1 and 2', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 2 }));
    const { broker, outbox, bridge } = setup([central.url], { remote: { protocolVersion: 4 } as never });
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    const expected = sequence(300, 'v');
    await Promise.all(expected.map((p, i) => publishLocal(broker, `plant/q${i % 3}`, p, (i % 3) as QoS)));
    await waitFor(() => new Set(up.payloads()).size >= 300, 10_000);
    expect(checkSequence(up.payloads(), expected)).toMatchObject({ missing: [], duplicates: 0 });
    // Each arrived at the QoS it was published with: QoS 2 went through PUBREC/PUBREL/PUBCOMP upstream.
    expect(up.messages.every((m) => m.topic === `plant/q${m.qos}`)).toBe(true);
    await waitFor(() => outbox.depth.messages === 0, 5000);
    expect(bridge.stats.acked).toBe(300);
  });

  it('applies the out-filter QoS and remote prefix upstream', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, '#', { qos: 2 }));
    const { broker, bridge } = setup([central.url], {
      topics: [{ filter: '#', direction: 'out', qos: 0, localPrefix: 'line4/', remotePrefix: 'plant1/line4/' }],
    });
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    await publishLocal(broker, 'line4/press/temp', '21.5', 1);
    await publishLocal(broker, 'other/topic', 'not bridged', 1);
    await waitFor(() => up.messages.length >= 1, 5000);
    expect(up.messages[0]).toMatchObject({ topic: 'plant1/line4/press/temp', qos: 0 });
    expect(up.messages[0].payload.toString()).toBe('21.5');
  });

  it('buffers while the central broker is down and sends the backlog in order when it returns', async () => {
    const central = d.add(await startMosquitto({ persistence: true }));
    const collectorId = 'checker-backlog';
    // A persistent checker session, so messages queued upstream while it reconnects are not lost to it.
    let up = await collect(central.url, 'plant/#', { qos: 1, clientId: collectorId, clean: false });
    const { broker, outbox, bridge, log } = setup([central.url]);
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    await up.stop();
    await central.stop();
    await waitFor(() => bridge.status.type === 'offline', 5000);
    const expected = sequence(1000, 'b');
    await Promise.all(expected.map((p) => publishLocal(broker, 'plant/a', p)));
    expect(outbox.depth.messages).toBe(1000);
    await central.restart();
    up = d.add(await collect(central.url, 'plant/#', { qos: 1, clientId: collectorId, clean: false }));
    await waitFor(() => new Set(up.payloads()).size >= 1000, 15_000, {
      message: () =>
        `${new Set(up.payloads()).size}/1000 upstream; bridge ${bridge.status.type}, outbox ${outbox.depth.messages}, ` +
        `sent ${bridge.stats.sent}, acked ${bridge.stats.acked}, reconnects ${bridge.stats.reconnects}`,
    });
    expect(checkSequence(up.payloads(), expected)).toMatchObject({ missing: [], outOfOrder: 0 });
    await waitFor(() => outbox.depth.messages === 0, 5000);
    // Warned once for the whole outage, however many attempts it took.
    expect(log.lines.filter((l) => l.level === 'warn' && l.msg.includes('offline')).length).toBeLessThanOrEqual(1);
    expect(bridge.stats.reconnects).toBe(1);
  });

  it('detects a half-open uplink (blackhole) by the ack timeout, reconnects, and loses no QoS 0 or 1 message', async () => {
    const central = d.add(await startMosquitto());
    const proxy = d.add(await startFaultProxy(central.port));
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const { broker, outbox, bridge } = setup([proxy.url], {
      ackTimeoutS: 1,
      remote: { keepaliveS: 2 } as never,
      inflight: 20,
    });
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    const expected: string[] = [];
    let i = 0;
    const publishSome = async (n: number) => {
      for (let k = 0; k < n; k++, i++) {
        const p = `h${i}`;
        expected.push(p);
        await publishLocal(broker, i % 2 ? 'plant/q1' : 'plant/q0', p, (i % 2) as 0 | 1);
      }
    };
    await publishSome(100);
    await waitFor(() => up.messages.length >= 100, 5000);
    proxy.blackhole();
    const acceptedBefore = proxy.accepted;
    await publishSome(100); // these vanish into the blackhole
    proxy.restore();
    // Detected and reconnected within the bound (the ack timeout and keepalive decide when; no speed window here).
    await waitFor(() => proxy.accepted > acceptedBefore && bridge.status.type === 'online', 10_000);
    await publishSome(100);
    await waitFor(() => new Set(up.payloads()).size >= 300, 10_000);
    const check = checkSequence(up.payloads(), expected);
    expect(check.missing).toEqual([]);
    // Order per topic: Mosquitto itself may pass QoS 0 ahead of QoS 1 queued for a busy subscriber.
    for (const topic of ['plant/q0', 'plant/q1']) {
      const onTopic = up.messages.filter((m) => m.topic === topic).map((m) => m.payload.toString());
      const expectedOnTopic = expected.filter((p) => (Number(p.slice(1)) % 2 ? 'plant/q1' : 'plant/q0') === topic);
      expect(checkSequence(onTopic, expectedOnTopic)).toMatchObject({ missing: [], outOfOrder: 0 });
    }
    expect(bridge.stats.resent).toBeGreaterThan(0); // the blackhole really swallowed something
    await waitFor(() => outbox.depth.messages === 0, 5000);
  });

  it('publishes inbound messages locally with origin bridge:<name> and never bridges them back out', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'cmd/#', { qos: 1 }));
    const { broker, bridge, outbox } = setup([central.url], {
      topics: [
        { filter: 'cmd/#', direction: 'both', localPrefix: '', remotePrefix: '' },
        { filter: 'plant/#', direction: 'out', localPrefix: '', remotePrefix: '' },
      ],
    });
    const local: Message[] = [];
    broker.subscribe('cmd/#', { qos: 1, origin: 'observer' }, (msg) => {
      local.push(msg);
    });
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    await waitFor(() => bridge.stats.state === 'online', 5000);
    const remote = await connectClient(central.url);
    d.defer(() => remote.endAsync(true));
    // The SUBACK may lag the CONNACK: publish until the first one crosses.
    await waitFor(
      async () => {
        await remote.publishAsync('cmd/line4/stop', 'now', { qos: 1 });
        return local.length > 0;
      },
      5000,
      { intervalMs: 200 },
    );
    expect(local[0]).toMatchObject({ topic: 'cmd/line4/stop', origin: 'bridge:central' });
    // A last remote command: once it is local, every earlier one that crossed is too (one subscription, in order).
    await afterMarker(
      () => remote.publishAsync('cmd/line4/stop', 'last', { qos: 1 }),
      () => local.some((m) => m.payload.toString() === 'last'),
    );
    // A local command goes up once, behind any echo of the remote ones (one outbox, in order): once it is in, an
    // echo would be too. The remote one never comes back up as a second copy.
    await afterMarker(
      () => publishLocal(broker, 'cmd/line4/start', 'local'),
      () => up.payloads().includes('local'),
    );
    const nowCount = up.payloads().filter((p) => p === 'now').length;
    const sentNow = local.filter((m) => m.payload.toString() === 'now').length;
    expect(nowCount).toBe(sentNow); // each remote publish seen once upstream: not echoed
    expect(up.payloads().filter((p) => p === 'local').length).toBe(1);
    expect(outbox.depth.messages).toBe(0);
    // Our own 'local' is not sent back to us by the central broker (v5 no-local).
    expect(bridge.stats.received).toBe(sentNow + 1); // and 'last'
  });

  it('drops a message the central broker refuses (PUBACK >= 0x80), counts it, and keeps the queue moving', async () => {
    const aclFile = join(d.tempDir(), 'acl');
    writeFileSync(aclFile, 'topic readwrite plant/ok/#\n');
    const central = d.add(await startMosquitto({ extraConf: `acl_file ${aclFile}` }));
    // Mosquitto answers a v5 QoS 1 PUBLISH outside the ACL with PUBACK 0x87 Not authorized.
    const { broker, outbox, bridge, log } = setup([central.url]);
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    await publishLocal(broker, 'plant/denied', 'x');
    await publishLocal(broker, 'plant/denied', 'y');
    await publishLocal(broker, 'plant/ok/1', 'z');
    await waitFor(() => outbox.depth.dropped.rejected_upstream === 2 && bridge.stats.acked === 1, 5000);
    expect(outbox.depth.messages).toBe(0);
    expect(log.lines.filter((l) => l.msg.includes('refused a message')).length).toBe(1);
  });

  it('keeps a retained $SYS/broker/connection/<clientId>/state of 1 online and 0 offline', async () => {
    const central = d.add(await startMosquitto());
    const { broker, bridge, store } = setup([central.url]);
    void broker;
    await bridge.start();
    const topic = '$SYS/broker/connection/edgeferry-test/state';
    await waitFor(() => retainedPayload(store, topic) === '1', 5000);
    await central.stop();
    await waitFor(() => retainedPayload(store, topic) === '0', 5000);
  });

  it('paces backlog replay with the token bucket', async () => {
    const central = d.add(await startMosquitto());
    const proxy = d.add(await startFaultProxy(central.port));
    proxy.refuse();
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const { broker, bridge } = setup([proxy.url], { replay: { messagesPerS: 500, bytesPerS: 0, share: 0.5 } });
    await bridge.start();
    const expected = sequence(1000, 'r');
    await Promise.all(expected.map((p) => publishLocal(broker, 'plant/r', p)));
    proxy.restore();
    await waitFor(() => bridge.status.type === 'online', 5000);
    const t0 = Date.now();
    await waitFor(() => up.messages.length >= 1000, 10_000);
    const elapsedS = (Date.now() - t0) / 1000;
    // 1000 at 500/s take about 2 s (less the 50-message burst): never sooner. A lower bound only; the bucket's
    // arithmetic is test/unit/bridge-token-bucket.test.ts on its own clock, speed is the benchmarks'.
    expect(elapsedS).toBeGreaterThan(1.6);
    expect(checkSequence(up.payloads(), expected)).toMatchObject({ missing: [], outOfOrder: 0 });
  });

  it('calls the Sparkplug seam: Will on every connect, prologue first after CONNACK, rewrite with the backlog flag', async () => {
    const central = d.add(await startMosquitto());
    const proxy = d.add(await startFaultProxy(central.port));
    proxy.refuse();
    const up = d.add(await collect(central.url, ['spBv1.0/#', 'plant/#'], { qos: 1 }));
    const seen: boolean[] = [];
    let births = 0;
    const hooks: UplinkHooks = {
      will: () =>
        createMessage({ topic: 'spBv1.0/g/NDEATH/n', payload: Buffer.from('death'), qos: 1, origin: 'edge-node' }),
      prologue: () => [
        createMessage({
          topic: 'spBv1.0/g/NBIRTH/n',
          payload: Buffer.from(`birth${births++}`),
          qos: 0,
          origin: 'edge-node',
        }),
      ],
      rewrite: (e: OutboxEntry, backlog: boolean) => {
        seen.push(backlog);
        if (e.msg.payload.toString() === 'drop-me') return null;
        return { ...e.msg, payload: Buffer.from(`${e.msg.payload.toString()}${backlog ? '/historical' : ''}`) };
      },
    };
    const { broker, bridge, outbox } = setup([proxy.url], {}, hooks);
    await bridge.start();
    await publishLocal(broker, 'plant/a', 'old');
    await publishLocal(broker, 'plant/a', 'drop-me');
    proxy.restore();
    await waitFor(() => up.messages.length >= 2, 5000);
    await publishLocal(broker, 'plant/a', 'new');
    await waitFor(() => up.messages.length >= 3, 5000);
    expect(up.payloads()).toEqual(['birth0', 'old/historical', 'new']);
    expect(seen).toEqual([true, true, false]);
    await waitFor(() => outbox.depth.messages === 0, 5000);
    // An ungraceful loss makes the central broker publish the registered Will; the next CONNACK re-births.
    proxy.reset();
    await waitFor(() => up.payloads().includes('death') && up.payloads().includes('birth1'), 10_000);
  });
});

describe('bridge uplink connection management', () => {
  it('tries remote.urls in turn and connects to the first one that answers', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const { broker, bridge } = setup(['mqtt://127.0.0.1:1', central.url]);
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    await publishLocal(broker, 'plant/a', 'second-url');
    await waitFor(() => up.payloads().includes('second-url'), 5000);
  });

  it('keeps buffering when the central broker refuses the CONNECT, logging an error once, not per attempt, retrying slowly (docs/architecture.md#reconnect)', async () => {
    const dir = d.tempDir();
    const passwordFile = join(dir, 'passwd');
    writeFileSync(passwordFile, '');
    const central = d.add(await startMosquitto({ extraConf: `allow_anonymous false\npassword_file ${passwordFile}` }));
    const { broker, bridge, outbox, log } = setup([central.url], { reconnect: { minDelayMs: 50, maxDelayMs: 100 } });
    await bridge.start();
    await publishLocal(broker, 'plant/a', 'kept');
    const failedAttempts = (): number => log.lines.filter((l) => l.msg.startsWith('uplink attempt failed (')).length;
    // The first refusal is the error; the next one (after 5-15 s, not the configured 50-100 ms) only a debug line.
    await waitFor(() => failedAttempts() >= 1, 20_000);
    const refused = log.lines.filter((l) => l.msg.includes('refused the uplink'));
    expect(refused.length).toBe(1);
    expect((refused[0].obj as { retryInMs: number }).retryInMs).toBeGreaterThanOrEqual(5000);
    expect(log.lines.filter((l) => l.level === 'warn' || l.level === 'error').length).toBe(1);
    expect(outbox.depth.messages).toBe(1);
  });

  it('keeps buffering and retrying when its TLS key and certificate are not PEM (a failed attempt, not a crash)', async () => {
    const dir = d.tempDir();
    writeFileSync(join(dir, 'client.key'), 'not a key');
    writeFileSync(join(dir, 'client.crt'), 'not a certificate');
    const tls = {
      keyFile: join(dir, 'client.key'),
      certFile: join(dir, 'client.crt'),
      rejectUnauthorized: true,
      ciphers: DEFAULT_TLS_CIPHERS,
    };
    const { broker, bridge, outbox, log } = setup(['mqtts://127.0.0.1:1'], {
      reconnect: { minDelayMs: 50, maxDelayMs: 100 },
      remote: { tls },
    });
    await bridge.start();
    await publishLocal(broker, 'plant/a', 'kept');
    const failedAttempts = (): number => log.lines.filter((l) => l.msg.startsWith('uplink attempt failed (')).length;
    await waitFor(() => failedAttempts() >= 3, 5000);
    expect(bridge.status).toMatchObject({
      type: 'offline',
      error: expect.stringMatching(/^cannot connect to mqtts:\/\/127\.0\.0\.1:1: .*PEM/),
    });
    expect(outbox.depth.messages).toBe(1);
  });

  it('reports status and stats: connecting, online with backlog, offline with retry, then stopped', async () => {
    const central = d.add(await startMosquitto());
    const { broker, bridge } = setup([central.url]);
    expect(bridge.stats.state).toBe('stopped');
    await bridge.start();
    await waitFor(() => bridge.status.type === 'online', 5000);
    await publishLocal(broker, 'plant/a', 'x');
    await waitFor(() => bridge.stats.acked === 1, 5000);
    await central.stop();
    await waitFor(() => bridge.status.type === 'offline', 5000);
    const status = bridge.status;
    expect(status.type === 'offline' && status.retryInMs).toBeGreaterThan(0);
    await publishLocal(broker, 'plant/a', 'y');
    expect(bridge.stats).toMatchObject({ state: 'offline', connected: false, backlogMessages: 1, sent: 1, acked: 1 });
    await bridge.stop();
    expect(bridge.stats.state).toBe('stopped');
  });
});
