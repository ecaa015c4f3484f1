/**
 * TLS and mutual TLS uplinks to Mosquitto (mqtts:// and wss://), with a CA, server and client certificates made
 * by openssl at test time (test/fixtures/certs.ts).
 */
import { readFileSync } from 'node:fs';
import { connect as netConnect, type AddressInfo } from 'node:net';
import tls from 'node:tls';
import { describe, expect, it } from 'vitest';
import { makeCerts } from '../fixtures/certs.js';
import { checkSequence, collect, connectClient, publishSequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, startGateway } from '../helpers/gateway.js';
import { startMosquitto, startTlsMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

describe('bridge: TLS uplinks', { timeout: 120_000 }, () => {
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
      await startGateway(
        bridgePatch(tlsUrl, {
          remote: { tls: { caFile: certs.ca, certFile: certs.clients.client.cert, keyFile: certs.clients.client.key } },
        }),
      ),
    );
    const local = await connectClient(withCert.url);
    d.defer(() => local.endAsync(true));
    await local.publishAsync('plant/mtls', 'with-cert', { qos: 1 });
    await waitFor(() => up.payloads().includes('with-cert'), 10_000);

    const withoutCert = d.add(
      await startGateway(
        bridgePatch(tlsUrl, { name: 'central', remote: { clientId: 'no-cert', tls: { caFile: certs.ca } } }),
        { logLevel: 'debug' },
      ),
    );
    const local2 = await connectClient(withoutCert.url);
    d.defer(() => local2.endAsync(true));
    await local2.publishAsync('plant/mtls', 'without-cert', { qos: 1 }); // accepted locally: buffered
    // Two more refused attempts after the publish (debug logs each): the message was there to go, and did not.
    const failures = () => withoutCert.output().split(/uplink offline|uplink attempt failed/).length - 1;
    const failedBefore = failures();
    await waitFor(() => failures() >= failedBefore + 2, 15_000, { message: 'two more refused uplink attempts' });
    expect(up.payloads()).not.toContain('without-cert');
    expect(withoutCert.output()).not.toContain('uplink online');
  });

  it('bridges over WSS (WebSocket over TLS) with a client certificate, verifying the broker against the configured CA', async () => {
    const certs = makeCerts(d.tempDir());
    const wssPort = await freePort();
    const central = d.add(
      await startMosquitto({
        extraConf: [
          `listener ${wssPort} 127.0.0.1`,
          'protocol websockets',
          `cafile ${certs.ca}`,
          `certfile ${certs.server.cert}`,
          `keyfile ${certs.server.key}`,
          'require_certificate true',
        ].join('\n'),
      }),
    );
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const remoteTls = { caFile: certs.ca, certFile: certs.clients.client.cert, keyFile: certs.clients.client.key };
    const gw = d.add(await startGateway(bridgePatch(`wss://127.0.0.1:${wssPort}`, { remote: { tls: remoteTls } })));
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));
    const acked = await publishSequence(local, 'plant/wss', 300, { qos: 1, prefix: 's', concurrency: 30 });
    await waitFor(() => up.messages.length >= 300, 20_000, { message: () => `${up.messages.length}/300 upstream` });
    expect(checkSequence(up.payloads(), acked)).toEqual({ missing: [], unexpected: [], duplicates: 0, outOfOrder: 0 });
  });

  it('offers only forward-secret AEAD suites on TLS 1.2 by default, and remote.tls.ciphers when set', async () => {
    const certs = makeCerts(d.tempDir());
    const central = d.add(await startMosquitto());
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    // A TLS front of the central broker that speaks only TLS 1.2 with a CBC suite (not AEAD), as old appliances do.
    const front = tls.createServer(
      {
        cert: readFileSync(certs.server.cert),
        key: readFileSync(certs.server.key),
        maxVersion: 'TLSv1.2',
        ciphers: 'ECDHE-ECDSA-AES128-SHA',
      },
      (socket) => {
        const upstream = netConnect(central.port, '127.0.0.1');
        socket.pipe(upstream).pipe(socket);
        socket.on('error', () => upstream.destroy());
        upstream.on('error', () => socket.destroy());
      },
    );
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
    d.defer(() => new Promise<void>((resolve) => front.close(() => resolve())));
    const frontUrl = `mqtts://127.0.0.1:${(front.address() as AddressInfo).port}`;
    const handshakes = { failed: 0 };
    front.on('tlsClientError', () => handshakes.failed++);

    const strict = d.add(
      await startGateway(bridgePatch(frontUrl, { remote: { clientId: 'strict', tls: { caFile: certs.ca } } })),
    );
    const local = await connectClient(strict.url);
    d.defer(() => local.endAsync(true));
    await local.publishAsync('plant/ciphers', 'refused-suite', { qos: 1 }); // accepted locally: buffered
    await waitFor(() => handshakes.failed >= 2, 10_000, { message: 'the default bridge did not fail its handshakes' });
    expect(up.payloads()).not.toContain('refused-suite');

    const legacy = d.add(
      await startGateway(
        bridgePatch(frontUrl, {
          remote: { clientId: 'legacy', tls: { caFile: certs.ca, ciphers: 'ECDHE-ECDSA-AES128-SHA' } },
        }),
      ),
    );
    const local2 = await connectClient(legacy.url);
    d.defer(() => local2.endAsync(true));
    await local2.publishAsync('plant/ciphers', 'chosen-suite', { qos: 1 });
    await waitFor(() => up.payloads().includes('chosen-suite'), 10_000);
  });
});
