/**
 * Offline persistent sessions cannot starve the bridges (docs/reliability.md#sessions-share): together they hold at
 * most `storage.sessionShare` of `storage.maxBytes`; beyond it they stop queueing (`quota_exceeded`), publishers are
 * not refused for it and bridge outboxes keep their room. No session outlives `broker.maxSessionExpiryS`: announced
 * in CONNACK, the expiry of 3.1.1 clean-session-0 sessions, and applied to sessions stored under a higher cap.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { collect } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, logLines, metricValue, startGateway, type Gateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();
const NEVER_EXPIRES = 0xffffffff;
/** The default of broker.maxSessionExpiryS: 7 days. */
const DEFAULT_MAX_EXPIRY_S = 604_800;
/** A small store: its default share for sessions (0.25) is 1 MiB. */
const MAX_BYTES = 4 * 1024 * 1024;
/** 64 KiB messages, twice the whole store's worth for the two sessions together. */
const PAYLOAD = Buffer.alloc(64 * 1024, 0x61);
const FLOOD = 64;
const QUOTA_DROPS = 'edgeferry_broker_messages_dropped_total{reason="quota_exceeded"}';

async function metricsGateway(patch: Record<string, unknown>): Promise<{ gw: Gateway; metricsPort: number }> {
  const metricsPort = await freePort();
  const gw = d.add(await startGateway({ ...patch, metrics: { host: '127.0.0.1', port: metricsPort } }));
  return { gw, metricsPort };
}

/** Waits until the gateway holds no session (the gauge counts offline persistent ones). */
async function sessionsGone(metricsPort: number): Promise<void> {
  await waitFor(async () => (await metricValue(metricsPort, 'edgeferry_broker_sessions')) === 0, 10_000, {
    message: 'every session expired',
  });
}

describe('offline sessions against the bridges', { timeout: 120_000 }, () => {
  it('stops queueing for sessions at their share of the store; the publisher and the bridge are not refused', async () => {
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const { gw, metricsPort } = await metricsGateway({ storage: { maxBytes: MAX_BYTES }, ...bridgePatch(central.url) });
    await waitFor(
      async () => (await metricValue(metricsPort, 'edgeferry_bridge_connected{bridge="central"}')) === 1,
      15_000,
    );

    // The review's attack: two anonymous sessions that ask never to expire, subscribed to everything of atk/, offline.
    for (const clientId of ['atk-1', 'atk-2']) {
      const atk = await openClient(gw.url, {
        protocolVersion: 5,
        clientId,
        clean: false,
        properties: { sessionExpiryInterval: NEVER_EXPIRES },
      });
      // MQTT 5 §3.2.2.3.2: the server announces the Session Expiry Interval it uses instead of the client's.
      expect(atk.connack.properties?.sessionExpiryInterval).toBe(DEFAULT_MAX_EXPIRY_S);
      await atk.subscribe('atk/#', { qos: 1 });
      await atk.disconnect();
    }
    // A legitimate subscriber with a persistent session, connected: it still gets what it can take at once.
    const hmi = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'hmi',
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
      }),
    );
    await hmi.subscribe('plant/#', { qos: 1 });

    const pub = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'flooder' }));
    const refusals: number[] = [];
    for (let i = 0; i < FLOOD; i++) {
      await pub.publish('atk/x', PAYLOAD, { qos: 1 }).catch((err: { code?: number }) => refusals.push(err.code ?? -1));
    }
    // Twice the store was routed to the sessions: none of it refused to the publisher [MQTT-3.4.2-1], only dropped
    // for the sessions, counted.
    expect(refusals).toEqual([]);
    expect(await metricValue(metricsPort, QUOTA_DROPS)).toBeGreaterThan(FLOOD / 2);
    // They filled their share, and passed it by no more than a batch.
    const share = await metricValue(metricsPort, 'edgeferry_store_session_max_bytes');
    expect(share).toBe(MAX_BYTES / 4);
    const held = await metricValue(metricsPort, 'edgeferry_store_session_bytes');
    expect(held).toBeGreaterThan(share! * 0.9);
    expect(held).toBeLessThan(share! * 1.5);

    // Bridge-bound publishes are acknowledged with success and arrive upstream, and at the connected session.
    for (let i = 0; i < 10; i++) await pub.publish('plant/line4', `m${i}`, { qos: 1 });
    await waitFor(() => up.messages.length >= 10, 15_000, {
      message: () => `10 messages upstream, got ${up.payloads().join(',')}`,
    });
    expect(up.payloads()).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`));
    await hmi.waitForMessages(10, { topic: 'plant/line4' });

    // One warning for the episode, not one per message.
    const warnings = logLines(gw).filter((l) => String(l.msg).startsWith('persistent sessions hold their share'));
    expect(warnings).toHaveLength(1);

    // The sessions kept what fitted their share, and deliver it.
    const back = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'atk-1',
        clean: false,
        properties: { sessionExpiryInterval: 60 },
      }),
    );
    await pub.publish('atk/marker', 'end', { qos: 1 });
    const got = await back.waitForMessages(1, { topic: 'atk/marker', timeoutMs: 15_000 });
    const queued = back.received('atk/x').length;
    expect(queued).toBeGreaterThan(0);
    expect(queued).toBeLessThan(FLOOD);
    expect(got.length).toBe(1);
  });
});

describe('broker.maxSessionExpiryS', { timeout: 60_000 }, () => {
  it('is the expiry of an MQTT 3.1.1 session with clean session 0 (which would never expire)', async () => {
    const { gw, metricsPort } = await metricsGateway({ broker: { maxSessionExpiryS: 1 } });
    const c = await openClient(gw.url, { protocolVersion: 4, clientId: 'historian', clean: false });
    await c.subscribe('plant/#', { qos: 1 });
    await c.disconnect();
    await sessionsGone(metricsPort);
    const again = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'historian', clean: false }));
    expect(again.connack.sessionPresent).toBe(false);
  });

  it('caps a DISCONNECT that raises the expiry to never', async () => {
    const { gw, metricsPort } = await metricsGateway({ broker: { maxSessionExpiryS: 1 } });
    const c = await openClient(gw.url, {
      protocolVersion: 5,
      clientId: 'raiser',
      clean: false,
      properties: { sessionExpiryInterval: 1 },
    });
    expect(c.connack.properties?.sessionExpiryInterval).toBeUndefined(); // within the cap: the client's own
    await c.subscribe('plant/#', { qos: 1 });
    await new Promise<void>((resolve) =>
      c.client.end(false, { reasonCode: 0, properties: { sessionExpiryInterval: NEVER_EXPIRES } }, () => resolve()),
    );
    await sessionsGone(metricsPort);
  });

  it('caps a session stored under a higher cap when the gateway starts again', async () => {
    const { gw, metricsPort } = await metricsGateway({ broker: { maxSessionExpiryS: NEVER_EXPIRES } });
    const c = await openClient(gw.url, {
      protocolVersion: 5,
      clientId: 'forever',
      clean: false,
      properties: { sessionExpiryInterval: NEVER_EXPIRES },
    });
    expect(c.connack.properties?.sessionExpiryInterval).toBeUndefined();
    await c.subscribe('plant/#', { qos: 1 });
    await c.disconnect();
    expect(await metricValue(metricsPort, 'edgeferry_broker_sessions')).toBe(1);
    await gw.stop();
    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { broker: Record<string, unknown> };
    config.broker.maxSessionExpiryS = 1;
    writeFileSync(gw.configFile, JSON.stringify(config));
    await gw.restart();
    // Expired at the start already, or a second later: the time down counts.
    await sessionsGone(metricsPort);
    const again = d.add(
      await openClient(gw.url, {
        protocolVersion: 5,
        clientId: 'forever',
        clean: false,
        properties: { sessionExpiryInterval: 60 },
      }),
    );
    expect(again.connack.sessionPresent).toBe(false);
  });
});
