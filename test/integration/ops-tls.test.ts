/**
 * Security: TLS, mutual TLS and secure WebSocket listeners, with a CA, server and client certificates
 * made by openssl at test time (test/fixtures/certs.ts). Clients are MQTT.js, mosquitto_sub/mosquitto_pub and
 * a bare node:tls socket (for the protocol-version floor).
 */
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import tls from 'node:tls';
import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts, opensslVersion, type TestPki } from '../fixtures/certs.js';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway, type Gateway, type GatewayOptions } from '../helpers/gateway.js';
import {
  ConnectFailure,
  openClient,
  runTool,
  runToolOk,
  startMosquittoSub,
  type TestClient,
} from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { RawClient } from '../helpers/raw-client.js';
import { waitFor } from '../helpers/wait.js';
import { removeDir, tempDir } from '../helpers/temp.js';

const d = useDisposer();
let pki: TestPki;

beforeAll(() => {
  expect(opensslVersion()).toMatch(/^OpenSSL 3\./);
  pki = makeCerts(tempDir('edgeferry-pki-'), { clients: ['alice', 'bob'], rsaServer: true, expiredClients: ['carol'] });
});
afterAll(() => {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
  if (pki) removeDir(pki.dir);
});

/** A gateway with a plain TCP listener first (the helper's readiness probe) and `secure` second. */
async function gatewayWith(
  secure: Record<string, unknown>,
  patch: Record<string, unknown> = {},
  options: GatewayOptions = {},
) {
  const tcpPort = await freePort();
  const securePort = await freePort();
  const gw = d.add(
    await startGateway(
      {
        listeners: [
          { type: 'tcp', host: '127.0.0.1', port: tcpPort },
          { host: '127.0.0.1', port: securePort, ...secure },
        ],
        ...patch,
      },
      options,
    ),
  );
  return { gw, securePort };
}

const serverTls = (extra: Record<string, unknown> = {}) => ({
  certFile: pki.server.cert,
  keyFile: pki.server.key,
  ...extra,
});

/** SUBACK codes of one SUBSCRIBE; MQTT.js rejects when any filter was refused, with the SUBACK attached. */
async function subackCodes(c: TestClient, filters: string[], qos: 0 | 1 | 2 = 1): Promise<number[]> {
  try {
    return await c.subscribe(filters, { qos });
  } catch (err) {
    const granted = (err as { packet?: { granted?: number[] } }).packet?.granted;
    if (granted) return granted;
    throw err;
  }
}

/** Publishes QoS 1 on `topic` through `pub` and waits until `sub` received it. */
async function roundTrip(pub: TestClient, sub: TestClient, topic: string) {
  await sub.subscribe(topic, { qos: 1 });
  await pub.publish(topic, 'over-tls', { qos: 1 });
  const [m] = await sub.waitForMessages(1, { topic });
  expect(m.payload).toBe('over-tls');
}

describe('TLS listener', { timeout: 60_000 }, () => {
  it('serves MQTT.js over mqtts:// verified against the CA, and refuses a client that does not trust the CA', async () => {
    const { gw, securePort } = await gatewayWith({ type: 'tls', tls: serverTls() });
    const url = `mqtts://127.0.0.1:${securePort}`;
    const ca = readFileSync(pki.ca);
    const sub = d.add(await openClient(url, { ca, protocolVersion: 5 }));
    const pub = d.add(await openClient(url, { ca, protocolVersion: 4 }));
    await roundTrip(pub, sub, 'tls/a');
    // The TLS socket is really TLS: a client trusting only another CA fails certificate verification.
    const err = await openClient(url, { ca: readFileSync(pki.rogueCa) }).then(
      (c) => (d.add(c), undefined),
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectFailure);
    expect(String((err as Error).message)).toMatch(/certificate/i);
    // A plain MQTT client on the TLS port gets no CONNACK.
    const plain = await openClient(`mqtt://127.0.0.1:${securePort}`, {}, 2000).then(
      (c) => (d.add(c), 'connected'),
      () => 'refused',
    );
    expect(plain).toBe('refused');
    expect(gw.proc.exitCode).toBeNull();
  });

  it('serves mosquitto_sub --cafile and mosquitto_pub --cafile', async () => {
    const { securePort } = await gatewayWith({ type: 'tls', tls: serverTls() });
    const sub = d.add(await startMosquittoSub(securePort, ['--cafile', pki.ca, '-t', 'tls/mosq', '-q', '1']));
    await runToolOk('mosquitto_pub', [
      '-h',
      '127.0.0.1',
      '-p',
      String(securePort),
      '--cafile',
      pki.ca,
      '-t',
      'tls/mosq',
      '-q',
      '1',
      '-m',
      'hello',
    ]);
    const [m] = await sub.waitForMessages(1);
    expect(m).toMatchObject({ topic: 'tls/mosq', payload: 'hello', qos: 1 });
    // Without the CA, mosquitto_pub cannot verify the server and fails.
    const refused = await runTool('mosquitto_pub', [
      '-h',
      '127.0.0.1',
      '-p',
      String(securePort),
      '--cafile',
      pki.rogueCa,
      '-t',
      'tls/mosq',
      '-m',
      'x',
    ]);
    expect(refused.code).not.toBe(0);
  });

  it('refuses a TLS 1.2 handshake when minVersion is TLSv1.3, and accepts TLS 1.3', async () => {
    const { securePort } = await gatewayWith({ type: 'tls', tls: serverTls({ minVersion: 'TLSv1.3' }) });
    const handshake = (maxVersion: tls.SecureVersion) =>
      new Promise<string>((resolve) => {
        const socket = tls.connect({
          host: '127.0.0.1',
          port: securePort,
          ca: readFileSync(pki.ca),
          maxVersion,
          servername: 'localhost',
        });
        socket.once('secureConnect', () => {
          resolve(socket.getProtocol() ?? 'unknown');
          socket.destroy();
        });
        socket.once('error', (err) => resolve(`error: ${err.message}`));
      });
    expect(await handshake('TLSv1.2')).toMatch(/^error: .*(protocol version|alert)/i);
    expect(await handshake('TLSv1.3')).toBe('TLSv1.3');
  });
});

describe('mutual TLS (requireCertificate)', { timeout: 60_000 }, () => {
  it('refuses a client without a certificate or with one from another CA, and accepts a client certificate from the CA', async () => {
    const { securePort } = await gatewayWith({
      type: 'tls',
      tls: serverTls({ caFile: pki.ca, requireCertificate: true }),
    });
    const url = `mqtts://127.0.0.1:${securePort}`;
    const ca = readFileSync(pki.ca);

    const none = await openClient(url, { ca }, 3000).then(
      (c) => (d.add(c), undefined),
      (e: unknown) => e,
    );
    expect(none, 'no client certificate').toBeInstanceOf(ConnectFailure);
    const rogue = await openClient(
      url,
      { ca, cert: readFileSync(pki.rogueClient.cert), key: readFileSync(pki.rogueClient.key) },
      3000,
    ).then(
      (c) => (d.add(c), undefined),
      (e: unknown) => e,
    );
    expect(rogue, 'client certificate from an untrusted CA').toBeInstanceOf(ConnectFailure);

    const alice = { ca, cert: readFileSync(pki.clients.alice.cert), key: readFileSync(pki.clients.alice.key) };
    const sub = d.add(await openClient(url, { ...alice, protocolVersion: 5 }));
    const pub = d.add(await openClient(url, { ...alice, protocolVersion: 4 }));
    await roundTrip(pub, sub, 'mtls/a');

    // Debian's clients with --cert/--key work too; without them the handshake fails.
    await runToolOk('mosquitto_pub', [
      '-h',
      '127.0.0.1',
      '-p',
      String(securePort),
      '--cafile',
      pki.ca,
      '--cert',
      pki.clients.bob.cert,
      '--key',
      pki.clients.bob.key,
      '-t',
      'mtls/a',
      '-q',
      '1',
      '-m',
      'from-bob',
    ]);
    await sub.waitForMessages(2, { topic: 'mtls/a' });
    const bare = await runTool('mosquitto_pub', [
      '-h',
      '127.0.0.1',
      '-p',
      String(securePort),
      '--cafile',
      pki.ca,
      '-t',
      'mtls/a',
      '-m',
      'x',
    ]);
    expect(bare.code).not.toBe(0);
    expect(sub.payloads('mtls/a')).toEqual(['over-tls', 'from-bob']);
  });

  it('logs each rejected client certificate at info with the TLS reason (no certificate, unknown CA, expired), plus an audit line', async () => {
    for (const type of ['tls', 'wss'] as const) {
      const { gw, securePort } = await gatewayWith(
        { type, tls: serverTls({ caFile: pki.ca, requireCertificate: true }) },
        {},
        { logLevel: 'info' },
      );
      const url = type === 'tls' ? `mqtts://127.0.0.1:${securePort}` : `wss://127.0.0.1:${securePort}/mqtt`;
      const ca = readFileSync(pki.ca);
      const attempts = [
        {},
        { cert: readFileSync(pki.rogueClient.cert), key: readFileSync(pki.rogueClient.key) },
        { cert: readFileSync(pki.expiredClients.carol.cert), key: readFileSync(pki.expiredClients.carol.key) },
      ];
      for (const certs of attempts) {
        const outcome = await openClient(url, { ca, ...certs }, 3000).then(
          (c) => (d.add(c), 'connected'),
          () => 'refused',
        );
        expect(outcome, type).toBe('refused');
      }
      const rejections = () =>
        gw
          .output()
          .split('\n')
          .filter((l) => l.includes('"msg":"client certificate rejected"'))
          .map(
            (l) => JSON.parse(l) as { level: number; mod: string; reason: string; subject?: string; remote: string },
          );
      await waitFor(() => rejections().length >= 6, 5000, { message: () => gw.output() });
      const byMod = (mod: string) =>
        rejections()
          .filter((r) => r.mod === mod)
          .map((r) => ({ level: r.level, reason: r.reason, subject: r.subject }));
      const expected = (level: number) => [
        { level, reason: 'no certificate', subject: undefined },
        { level, reason: 'unknown CA', subject: 'rogue' },
        { level, reason: 'expired', subject: 'carol' },
      ];
      expect(byMod('server'), type).toEqual(expected(30)); // info
      expect(byMod('audit'), type).toEqual(expected(40)); // warn, like refused logins
      expect(rejections().every((r) => r.remote.endsWith('127.0.0.1'))).toBe(true);
    }
  });

  it('uses the certificate CN as the user name for the ACL with useIdentityAsUsername, ignoring the CONNECT user name', async () => {
    const dir = d.tempDir('edgeferry-acl-');
    const aclFile = join(dir, 'acl');
    writeFileSync(
      aclFile,
      ['user alice', 'topic readwrite alice/#', '', 'user bob', 'topic readwrite bob/#', ''].join('\n'),
    );
    const { securePort } = await gatewayWith(
      { type: 'tls', tls: serverTls({ caFile: pki.ca, requireCertificate: true, useIdentityAsUsername: true }) },
      { auth: { aclFile } },
    );
    const url = `mqtts://127.0.0.1:${securePort}`;
    const ca = readFileSync(pki.ca);
    // alice's certificate, claiming to be bob in CONNECT (no password: the certificate is the credential).
    const alice = d.add(
      await openClient(url, {
        ca,
        cert: readFileSync(pki.clients.alice.cert),
        key: readFileSync(pki.clients.alice.key),
        protocolVersion: 5,
        username: 'bob',
      }),
    );
    expect(await subackCodes(alice, ['alice/in', 'bob/in'])).toEqual([1, 0x87]);
    await alice.publish('alice/in', 'mine', { qos: 1 });
    await expect(alice.publish('bob/in', 'not mine', { qos: 1 })).rejects.toMatchObject({ code: 0x87 });
    await alice.waitForMessages(1, { topic: 'alice/in' });

    const bob = d.add(
      await openClient(url, {
        ca,
        cert: readFileSync(pki.clients.bob.cert),
        key: readFileSync(pki.clients.bob.key),
        protocolVersion: 5,
      }),
    );
    expect(await bob.subscribe('bob/in', { qos: 1 })).toEqual([1]);
    await bob.publish('bob/in', 'bob-own', { qos: 1 });
    await bob.waitForMessages(1, { topic: 'bob/in' });
    expect(bob.payloads()).toEqual(['bob-own']);
    expect(alice.payloads()).toEqual(['mine']);
  });
});

describe('secure WebSocket listener (wss)', { timeout: 60_000 }, () => {
  it('serves MQTT.js over wss:// on the configured path, verified against the CA', async () => {
    const { securePort } = await gatewayWith({ type: 'wss', path: '/mqtt', tls: serverTls() });
    const url = `wss://127.0.0.1:${securePort}/mqtt`;
    const ca = readFileSync(pki.ca);
    const sub = d.add(await openClient(url, { ca, protocolVersion: 5 }));
    const pub = d.add(await openClient(url, { ca, protocolVersion: 4 }));
    await roundTrip(pub, sub, 'wss/a');
    const untrusted = await openClient(url, { ca: readFileSync(pki.rogueCa) }, 3000).then(
      (c) => (d.add(c), 'connected'),
      () => 'refused',
    );
    expect(untrusted).toBe('refused');
  });

  it('applies mutual TLS and useIdentityAsUsername to wss clients as to TLS ones', async () => {
    const dir = d.tempDir('edgeferry-acl-');
    const aclFile = join(dir, 'acl');
    writeFileSync(aclFile, ['user alice', 'topic readwrite alice/#', ''].join('\n'));
    const { securePort } = await gatewayWith(
      { type: 'wss', tls: serverTls({ caFile: pki.ca, requireCertificate: true, useIdentityAsUsername: true }) },
      { auth: { aclFile } },
    );
    const url = `wss://127.0.0.1:${securePort}/mqtt`;
    const ca = readFileSync(pki.ca);
    const none = await openClient(url, { ca }, 3000).then(
      (c) => (d.add(c), 'connected'),
      () => 'refused',
    );
    expect(none).toBe('refused');
    const alice = d.add(
      await openClient(url, {
        ca,
        cert: readFileSync(pki.clients.alice.cert),
        key: readFileSync(pki.clients.alice.key),
        protocolVersion: 5,
      }),
    );
    expect(await subackCodes(alice, ['alice/#', 'other/#'])).toEqual([1, 0x87]);
    await alice.publish('alice/x', 'via-wss', { qos: 1 });
    await alice.waitForMessages(1);
  });
});

/**
 * The suite `openssl s_client` negotiates with these options, or '(NONE)' when the handshake fails (the server
 * offers none of the client's suites).
 */
function negotiatedCipher(port: number, options: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    // stdin closed at once: s_client ends after the handshake.
    const child = execFile(
      'openssl',
      ['s_client', '-connect', `127.0.0.1:${port}`, '-servername', 'localhost', ...options],
      { timeout: 10_000, encoding: 'utf8' },
      (_err, stdout) => {
        const m = /Cipher is (\S+)/.exec(stdout);
        if (m) resolve(m[1]);
        else reject(new Error(`no "Cipher is" line from openssl s_client ${options.join(' ')}:\n${stdout}`));
      },
    );
    child.stdin?.end();
  });
}

describe('TLS cipher policy (tls.ciphers)', { timeout: 60_000 }, () => {
  const rsaTls = (extra: Record<string, unknown> = {}) => ({
    certFile: pki.rsaServer!.cert,
    keyFile: pki.rsaServer!.key,
    ...extra,
  });

  it('offers only forward-secret AEAD suites on TLS 1.2 by default (ECDHE with AES-GCM or CHACHA20-POLY1305), TLS 1.3 as is', async () => {
    const { securePort } = await gatewayWith({ type: 'tls', tls: rsaTls() });
    // Static RSA key exchange (no forward secrecy) and CBC with SHA-1 (not AEAD) are refused.
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'AES128-SHA'])).toBe('(NONE)');
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-RSA-AES128-SHA'])).toBe('(NONE)');
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-RSA-AES256-SHA384'])).toBe('(NONE)');
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-RSA-AES128-GCM-SHA256'])).toBe(
      'ECDHE-RSA-AES128-GCM-SHA256',
    );
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-RSA-CHACHA20-POLY1305'])).toBe(
      'ECDHE-RSA-CHACHA20-POLY1305',
    );
    // A client offering a weak suite first still gets a strong one: the server's order decides.
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'AES128-SHA:ECDHE-RSA-AES256-GCM-SHA384'])).toBe(
      'ECDHE-RSA-AES256-GCM-SHA384',
    );
    expect(await negotiatedCipher(securePort, ['-tls1_3'])).toMatch(/^TLS_/);
  });

  it('applies the same default to wss listeners, with an ECDSA certificate too', async () => {
    const { securePort } = await gatewayWith({ type: 'wss', tls: serverTls() });
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-ECDSA-AES128-SHA'])).toBe('(NONE)');
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-ECDSA-AES128-GCM-SHA256'])).toBe(
      'ECDHE-ECDSA-AES128-GCM-SHA256',
    );
  });

  it('uses the configured OpenSSL cipher string instead', async () => {
    const { securePort } = await gatewayWith({ type: 'tls', tls: rsaTls({ ciphers: 'ECDHE-RSA-AES256-GCM-SHA384' }) });
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-RSA-AES128-GCM-SHA256'])).toBe('(NONE)');
    expect(await negotiatedCipher(securePort, ['-tls1_2', '-cipher', 'ECDHE-RSA-AES256-GCM-SHA384'])).toBe(
      'ECDHE-RSA-AES256-GCM-SHA384',
    );
  });
});

describe('pre-CONNECT phases bounded by broker.connectTimeoutMs', { timeout: 60_000 }, () => {
  it('closes a socket that never completes its TLS handshake (tls, wss) or WebSocket upgrade (ws) after the connect timeout', async () => {
    const ports = { tls: await freePort(), wss: await freePort(), ws: await freePort() };
    d.add(
      await startGateway({
        listeners: [
          { type: 'tcp', host: '127.0.0.1', port: await freePort() },
          { type: 'tls', host: '127.0.0.1', port: ports.tls, tls: serverTls() },
          { type: 'wss', host: '127.0.0.1', port: ports.wss, tls: serverTls() },
          { type: 'ws', host: '127.0.0.1', port: ports.ws },
        ],
        broker: { connectTimeoutMs: 1000 },
      }),
    );
    // Silent sockets, and one that starts an upgrade request and stops mid-headers.
    const silent = await Promise.all(Object.values(ports).map((port) => RawClient.open(port)));
    const partial = await RawClient.open(ports.ws);
    partial.socket.write('GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\n');
    for (const c of [...silent, partial]) d.add(c);
    // Before: Node's defaults kept them 120 s (TLS handshake) and 60-300 s (HTTP headers and request).
    const names = [...Object.keys(ports), 'ws partial'];
    const outcomes = await Promise.all(
      [...silent, partial].map((c, i) =>
        c.waitForClose(5000).then(
          () => `${names[i]} closed`,
          () => `${names[i]} open`,
        ),
      ),
    );
    expect(outcomes).toEqual(names.map((n) => `${n} closed`));
  });
});

describe('certificate renewal on SIGHUP', { timeout: 60_000 }, () => {
  /** Sends SIGHUP and waits for the next log line with message `msg`. */
  async function sighup(gw: Gateway, msg: string): Promise<void> {
    const count = () =>
      gw
        .output()
        .split('\n')
        .filter((l) => l.includes(`"msg":"${msg}"`)).length;
    const before = count();
    gw.proc.kill('SIGHUP');
    await waitFor(() => count() > before, 10_000, { message: () => `"${msg}" after SIGHUP; output:\n${gw.output()}` });
  }

  it('re-reads the certificate and key files: new handshakes get the new certificate, connected clients stay', async () => {
    const renewed = makeCerts(d.tempDir('edgeferry-pki2-'), { clients: [] });
    const dir = d.tempDir('edgeferry-tls-files-');
    const certFile = join(dir, 'server.pem');
    const keyFile = join(dir, 'server.key');
    copyFileSync(pki.server.cert, certFile);
    copyFileSync(pki.server.key, keyFile);
    const { gw, securePort } = await gatewayWith({ type: 'tls', tls: { certFile, keyFile } }, {}, { logLevel: 'info' });
    const url = `mqtts://127.0.0.1:${securePort}`;
    const before = d.add(await openClient(url, { ca: readFileSync(pki.ca), protocolVersion: 5 }));

    copyFileSync(renewed.server.cert, certFile);
    copyFileSync(renewed.server.key, keyFile);
    await sighup(gw, 'TLS certificates reloaded');
    const after = d.add(await openClient(url, { ca: readFileSync(renewed.ca), protocolVersion: 5 }));
    const oldTrust = await openClient(url, { ca: readFileSync(pki.ca) }, 3000).then(
      (c) => (d.add(c), 'connected'),
      () => 'refused',
    );
    expect(oldTrust).toBe('refused');
    // The client from before the renewal is still on its connection and still served.
    await roundTrip(after, before, 'renew/a');
    expect(before.closed).toBe(false);
  });

  it('keeps the current certificate when the new files do not match, and says so', async () => {
    const renewed = makeCerts(d.tempDir('edgeferry-pki2-'), { clients: [] });
    const dir = d.tempDir('edgeferry-tls-files-');
    const certFile = join(dir, 'server.pem');
    const keyFile = join(dir, 'server.key');
    copyFileSync(pki.server.cert, certFile);
    copyFileSync(pki.server.key, keyFile);
    const { gw, securePort } = await gatewayWith({ type: 'tls', tls: { certFile, keyFile } }, {}, { logLevel: 'info' });
    // Half-renewed: the new certificate with the old key.
    copyFileSync(renewed.server.cert, certFile);
    await sighup(gw, 'TLS files not reloaded, the listeners keep their current certificates');
    const c = d.add(
      await openClient(`mqtts://127.0.0.1:${securePort}`, { ca: readFileSync(pki.ca), protocolVersion: 5 }),
    );
    expect(c.closed).toBe(false);
    expect(gw.proc.exitCode).toBeNull();
  });
});
