/**
 * The uplink goes half-open mid-stream (packets blackholed, no FIN/RST). The gateway must
 * notice through end-to-end liveness (keepalive / ack timeout), reconnect, and lose neither QoS 0 nor QoS 1.
 */
import { describe, expect, it } from 'vitest';
import { checkSequence, collect, connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { bridgePatch, startGateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { delay, waitFor } from '../helpers/wait.js';

const d = useDisposer();

describe('bridge: half-open uplink', { timeout: 120_000 }, () => {
  it('gives up a connect attempt into a dead link after remote.connectTimeoutS, not ackTimeoutS, and is through soon after the link is back', async () => {
    const central = d.add(await startMosquitto());
    const proxy = d.add(await startFaultProxy(central.port));
    proxy.blackhole(); // the SYN is answered, but the CONNECT never arrives and no CONNACK comes back
    const gw = d.add(
      await startGateway(bridgePatch(proxy.url, { ackTimeoutS: 120, remote: { connectTimeoutS: 1 } }), {
        logLevel: 'debug',
      }),
    );
    // Each attempt ends after 1 s: a second one reaches the proxy long before the 120 s of ackTimeoutS.
    await waitFor(() => proxy.accepted >= 2, 15_000, { message: () => gw.output() });
    expect(gw.output()).toContain('no CONNACK within 1 s');
    proxy.restore();
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    await local.publishAsync('plant/after-the-dead-link', 'x', { qos: 1 });
    await waitFor(() => up.payloads().includes('x'), 15_000, { message: 'through after the link is back' });
  });

  for (const qos of [0, 1] as const) {
    it(`detects a blackholed uplink, reconnects, and delivers every QoS ${qos} message accepted meanwhile`, async () => {
      const central = d.add(await startMosquitto());
      const proxy = d.add(await startFaultProxy(central.port));
      const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
      const gw = d.add(await startGateway(bridgePatch(proxy.url, { ackTimeoutS: 2, remote: { keepaliveS: 2 } })));
      const local = await connectClient(gw.url);
      d.defer(() => local.endAsync(true));
      const sent: string[] = [];
      let i = 0;
      // A steady stream, ~200 msg/s; QoS 0 publishes are awaited only to the socket, so pace them.
      let streaming = true as boolean; // cleared below while the stream runs
      const stream = (async () => {
        while (streaming) {
          const payload = `h${i++}`;
          await local.publishAsync('plant/half-open', payload, { qos });
          sent.push(payload);
          await delay(5);
        }
      })();
      await waitFor(() => up.messages.length >= 200, 10_000);
      const acceptedBefore = proxy.accepted;
      proxy.blackhole();
      // Keep the stream going through the blackhole until the bridge gave the link up (keepalive, ack timeout) and
      // its first reconnect landed in the blackhole too.
      await waitFor(() => proxy.accepted > acceptedBefore, 15_000, { message: 'a reconnect into the blackhole' });
      proxy.restore();
      // And on until messages published after the restore arrive: the bridge is through again.
      const restoredAt = i;
      await waitFor(() => up.payloads().includes(`h${restoredAt + 50}`), 20_000, {
        message: 'the stream upstream again after the restore',
      });
      streaming = false;
      await stream;
      await waitFor(() => new Set(up.payloads()).size >= sent.length, 20_000, {
        message: () => `${new Set(up.payloads()).size}/${sent.length} upstream`,
      });
      const check = checkSequence(up.payloads(), sent);
      expect(check.missing).toEqual([]);
      expect(check.outOfOrder).toBe(0);
      console.info(
        `[bridge-half-open] QoS ${qos}: ${sent.length} sent, ${check.duplicates} duplicates after the blackhole`,
      );
    });
  }
});
