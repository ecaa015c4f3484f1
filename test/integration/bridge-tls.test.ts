/**
 * Issue 3 scenario 9: TLS and mutual TLS uplinks to Mosquitto, with a CA, server and client certificates made
 * by openssl at test time (test/fixtures/certs.ts).
 */
import { describe, expect, it } from 'vitest';
import { makeCerts } from '../fixtures/certs.js';
import { collect, connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, startGateway } from '../helpers/gateway.js';
import { startTlsMosquitto } from '../helpers/mosquitto.js';
import { delay, waitFor } from '../helpers/wait.js';

const d = useDisposer();

describe('bridge: TLS uplinks (issue 3 scenario 9)', { timeout: 120_000 }, () => {
  it('bridges over TLS, verifying the central broker against the configured CA', async () => {
    const certs = makeCerts(d.tempDir());
    const { central, tlsUrl } = await startTlsMosquitto(certs);
    d.add(central);
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const gw = d.add(await startGateway(bridgePatch(tlsUrl, { remote: { tls: { caFile: certs.ca } } })));
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    await local.publishAsync('plant/tls', 'secret', { qos: 1 });
    await waitFor(() => up.payloads().includes('secret'), 10_000);
  });

  it('bridges over mutual TLS with a client certificate, and buffers (does not deliver) without one', async () => {
    const certs = makeCerts(d.tempDir());
    const { central, tlsUrl } = await startTlsMosquitto(certs, { requireCertificate: true });
    d.add(central);
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const withCert = d.add(
      await startGateway(bridgePatch(tlsUrl, { remote: { tls: { caFile: certs.ca, certFile: certs.clients.client.cert, keyFile: certs.clients.client.key } } })),
    );
    const local = await connectClient(withCert.url);
    d.defer(() => local.endAsync(true));
    await local.publishAsync('plant/mtls', 'with-cert', { qos: 1 });
    await waitFor(() => up.payloads().includes('with-cert'), 10_000);

    const withoutCert = d.add(
      await startGateway(bridgePatch(tlsUrl, { name: 'central', remote: { clientId: 'no-cert', tls: { caFile: certs.ca } } })),
    );
    const local2 = await connectClient(withoutCert.url);
    d.defer(() => local2.endAsync(true));
    await local2.publishAsync('plant/mtls', 'without-cert', { qos: 1 }); // accepted locally: buffered
    await delay(1500);
    expect(up.payloads()).not.toContain('without-cert');
  });
});
