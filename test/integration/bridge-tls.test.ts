/**
 * Issue 3 scenario 9: TLS and mutual TLS uplinks to Mosquitto, with a CA, server and client certificates made
 * by openssl at test time.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { collect, connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, startGateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { delay, waitFor } from '../helpers/wait.js';

const d = useDisposer();

interface Certs {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

function makeCerts(dir: string): Certs {
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=edgeferry-test-ca', '-keyout', 'ca.key', '-out', 'ca.pem']);
  const leaf = (name: string, ext: string) => {
    run(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.csr`]);
    run(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-out', `${name}.pem`, '-extfile', ext]);
  };
  execFileSync('sh', ['-c', 'printf "subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n" > server.ext; printf "extendedKeyUsage=clientAuth\\n" > client.ext'], { cwd: dir });
  leaf('server', 'server.ext');
  leaf('client', 'client.ext');
  return {
    ca: join(dir, 'ca.pem'),
    serverCert: join(dir, 'server.pem'),
    serverKey: join(dir, 'server.key'),
    clientCert: join(dir, 'client.pem'),
    clientKey: join(dir, 'client.key'),
  };
}

async function tlsCentral(certs: Certs, requireCertificate: boolean) {
  const tlsPort = await freePort();
  const central = await startMosquitto({
    extraConf: [
      `listener ${tlsPort} 127.0.0.1`,
      `cafile ${certs.ca}`,
      `certfile ${certs.serverCert}`,
      `keyfile ${certs.serverKey}`,
      `require_certificate ${requireCertificate}`,
    ].join('\n'),
  });
  return { central, tlsUrl: `mqtts://127.0.0.1:${tlsPort}` };
}

describe('bridge: TLS uplinks (issue 3 scenario 9)', { timeout: 120_000 }, () => {
  it('bridges over TLS, verifying the central broker against the configured CA', async () => {
    const certs = makeCerts(d.tempDir());
    const { central, tlsUrl } = await tlsCentral(certs, false);
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
    const { central, tlsUrl } = await tlsCentral(certs, true);
    d.add(central);
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const withCert = d.add(
      await startGateway(bridgePatch(tlsUrl, { remote: { tls: { caFile: certs.ca, certFile: certs.clientCert, keyFile: certs.clientKey } } })),
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
