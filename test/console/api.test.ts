/**
 * The web console's JSON API over HTTP against the gateway process: logins and their cookie, who may read and who
 * may act, CSRF refusal, each action's effect seen from outside (an MQTT client, Mosquitto, the Modbus simulator,
 * the config file), and the audit lines. The browser tests (browser.test.ts) drive the same API through the page.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import https from 'node:https';
import { makeCerts } from '../fixtures/certs.js';
import { describe, expect, it } from 'vitest';
import { collect, connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, logLines, runCli } from '../helpers/gateway.js';
import { modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { tempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';
import { HttpBurst, type BurstRequest } from '../helpers/http-burst.js';
import { expectSlowedChecks } from '../helpers/login-throttle.js';
import { ConsoleClient, loggedIn, PASSWORDS, startConsoleGateway } from './console-setup.js';

const d = useDisposer();

const SPARKPLUG = { groupId: 'plant', edgeNodeId: 'line4', deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 } };

describe('console configuration', () => {
  it('refuses a console off loopback without TLS unless allowInsecureRemote, and one without the metrics listener or password file, naming the key', async () => {
    const dir = tempDir('edgeferry-console-cfg-');
    const check = async (config: object) => {
      const file = `${dir}/c.yaml`;
      writeFileSync(file, JSON.stringify({ storage: { path: `${dir}/data` }, ...config }));
      return runCli(['--config', file, '--check-config']);
    };
    writeFileSync(`${dir}/pw`, '');
    const remote = await check({
      auth: { passwordFile: `${dir}/pw` },
      metrics: { host: '0.0.0.0', allowUnauthenticated: true },
      console: { viewers: ['a'] },
    });
    expect(remote.code).toBe(2);
    expect(remote.stderr).toMatch(/console\.allowInsecureRemote.*not a loopback address/);
    const allowed = await check({
      auth: { passwordFile: `${dir}/pw` },
      metrics: { host: '0.0.0.0', allowUnauthenticated: true },
      console: { viewers: ['a'], allowInsecureRemote: true },
    });
    expect(allowed.code, allowed.stderr).toBe(0);
    const noMetrics = await check({ auth: { passwordFile: `${dir}/pw` }, console: { viewers: ['a'] } });
    expect(noMetrics.stderr).toMatch(/console.*add a metrics section/);
    const noPasswords = await check({ metrics: {}, console: { operators: ['a'] } });
    expect(noPasswords.stderr).toMatch(/console.*auth\.passwordFile/);
    const nobody = await check({ auth: { passwordFile: `${dir}/pw` }, metrics: {}, console: {} });
    expect(nobody.stderr).toMatch(/console\.viewers.*at least one user/);
    // With the listener's own certificate, off loopback is fine.
    const pki = makeCerts(dir);
    const tls = { certFile: pki.server.cert, keyFile: pki.server.key };
    const withTls = await check({
      auth: { passwordFile: `${dir}/pw` },
      metrics: { host: '0.0.0.0', allowUnauthenticated: true, tls },
      console: { viewers: ['a'] },
    });
    expect(withTls.code, withTls.stderr).toBe(0);
  });

  it(
    'serves the console over HTTPS with metrics.tls, and the login cookie is then Secure',
    { timeout: 60_000 },
    async () => {
      const pki = makeCerts(tempDir('edgeferry-console-pki-'));
      const { base } = d.add(
        await startConsoleGateway({ metrics: { tls: { certFile: pki.server.cert, keyFile: pki.server.key } } }),
      );
      const port = Number(new URL(base).port);
      const answer = await new Promise<{ status: number; cookie: string; body: string }>((resolve, reject) => {
        const req = https.request(
          {
            host: '127.0.0.1',
            port,
            path: '/api/login',
            method: 'POST',
            ca: readFileSync(pki.ca),
            servername: 'localhost',
            headers: { 'content-type': 'application/json' },
          },
          (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () =>
              resolve({ status: res.statusCode ?? 0, cookie: String(res.headers['set-cookie']), body }),
            );
          },
        );
        req.on('error', reject);
        req.end(JSON.stringify({ user: 'maint', password: PASSWORDS.maint }));
      });
      expect(answer.status, answer.body).toBe(200);
      expect(answer.cookie).toMatch(/; Secure$/);
      // Plain HTTP is not answered on that port.
      await expect(fetch(`${base}/api/session`)).rejects.toThrow();
    },
  );
});

describe('console logins, roles and CSRF', { timeout: 60_000 }, () => {
  it('reads only with a login; the cookie is HttpOnly and SameSite=Strict; bad passwords and non-console users are refused and audited', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const anonymous = new ConsoleClient(base);
    expect((await anonymous.get('overview')).status).toBe(401);
    expect((await anonymous.get('events')).status).toBe(401);

    expect((await anonymous.login('maint', 'wrong')).status).toBe(401);
    expect((await anonymous.login('plc', PASSWORDS.plc)).status).toBe(401);
    // People type passwords into the user field: a name that is no user is logged as <unknown>, as MQTT's are.
    const typedIntoUserField = 'Sup3r-Secret-typed-as-user';
    expect((await anonymous.login(typedIntoUserField, 'x')).status).toBe(401);
    await waitFor(() => logLines(gw).filter((l) => l.msg === 'console login refused').length === 3, 5000, {
      message: 'three refusals audited',
    });
    const refusals = logLines(gw).filter((l) => l.msg === 'console login refused');
    expect(refusals.map((l) => [l.mod, l.user, l.why])).toEqual([
      ['audit', 'maint', 'bad user name or password'],
      ['audit', 'plc', 'not a console user'],
      ['audit', '<unknown>', 'bad user name or password'],
    ]);
    expect(JSON.stringify(refusals)).not.toContain('wrong');
    expect(gw.output()).not.toContain(typedIntoUserField);

    const viewer = new ConsoleClient(base);
    const login = await viewer.login('shift', PASSWORDS.shift);
    expect(login.status).toBe(200);
    expect(login.body).toMatchObject({ user: 'shift', role: 'viewer' });
    const cookie = login.headers.get('set-cookie') ?? '';
    expect(cookie).toMatch(/^edgeferry_console=[\w-]{32}; /);
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    // Nor does a viewer see it in the Log view.
    const logView = await viewer.get<unknown[]>('log');
    expect(JSON.stringify(logView.body)).toContain('<unknown>');
    expect(JSON.stringify(logView.body)).not.toContain(typedIntoUserField);
    const overview = await viewer.get('overview');
    expect(overview.status).toBe(200);
    expect(overview.body).toMatchObject({
      version: expect.any(String),
      configFile: gw.configFile,
      clients: 0,
      ready: true,
      problems: [],
    });

    // Logging out ends the login on the server, not only in the browser.
    expect((await viewer.post('logout', {})).status).toBe(200);
    expect((await viewer.get('overview')).status).toBe(401);
  });

  it('ends a live stream with its login', async () => {
    const { base } = d.add(await startConsoleGateway());
    const viewer = await loggedIn(base, 'shift');
    const res = await fetch(`${base}/api/events`, { headers: { cookie: viewer.cookie! } });
    const reader = res.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    expect((await viewer.post('logout', {})).status).toBe(200);
    // The stream ends at the next tick; reads until then return the events already sent.
    await waitFor(async () => (await reader.read()).done, 5000, { message: 'the stream ends after the logout' });
  });

  it('checks five of 100 logins sent at once for one user together, the rest one at a time 250 ms, 500 ms, 1 s apart or answered 429 unchecked; another user gets in meanwhile', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const port = Number(new URL(base).port);
    const login = (password: string): BurstRequest => ({
      method: 'POST',
      path: '/api/login',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ user: 'maint', password }),
    });
    // The right password is the 20th.
    const burst = d.add(
      await HttpBurst.send(
        port,
        Array.from({ length: 100 }, (_, i) => login(i === 19 ? PASSWORDS.maint : `guess-${i}`)),
      ),
    );
    // At most ten wait for their turn: the others are answered at once, most of them 429 without a check.
    await waitFor(() => burst.answered >= 90, 10_000, {
      message: () => `90 answers, got ${JSON.stringify(burst.statuses)}`,
    });
    expect(burst.count(429)).toBeGreaterThanOrEqual(80);
    // The operator's colleague on the same address gets in while maint's attempts still wait.
    await loggedIn(base, 'shift');
    expect(burst.answered).toBeLessThan(100);
    // Five checked together, then one at a time, each 250 ms, 500 ms, 1 s after the previous ended (the audit
    // log's times: the server's clock).
    const checkedAt = () =>
      logLines(gw)
        .filter((l) => l.user === 'maint' && (l.msg === 'console login' || l.why === 'bad user name or password'))
        .map((l) => Number(l.time));
    await waitFor(() => checkedAt().length >= 8, 10_000, { message: 'eight of the waiting logins checked' });
    expectSlowedChecks(checkedAt());
    expect(
      logLines(gw).filter((l) => l.msg === 'console login refused' && /are waiting/.test(String(l.why))).length,
    ).toBe(burst.count(429));
  });

  it("never refuses the operator's correct login because of failed logins of others from the same address, and slows a user's own after five failures", async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const guesser = new ConsoleClient(base);
    for (let i = 0; i < 6; i++) expect((await guesser.login(`nobody-${i}`, 'x')).status).toBe(401);
    for (let i = 0; i < 6; i++) expect((await guesser.login('shift', `guess-${i}`)).status).toBe(401);
    await loggedIn(base, 'maint');
    for (let i = 0; i < 5; i++) expect((await guesser.login('maint', `guess-${i}`)).status).toBe(401);
    // Slowed (250 ms after the last check ended, by the audit log's times), not refused.
    await loggedIn(base, 'maint');
    const maint = await waitFor(
      () => {
        const lines = logLines(gw).filter(
          (l) => l.user === 'maint' && (l.msg === 'console login' || l.msg === 'console login refused'),
        );
        return lines.length === 7 ? lines : undefined;
      },
      5000,
      { message: "maint's logins audited" },
    );
    // Her first login cleared the key: the five failures and the login after them.
    expectSlowedChecks(maint.slice(1).map((l) => Number(l.time)));
  });

  it('a viewer cannot act; an operator acts only with the CSRF token of the login, in JSON; refusals are audited', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const mqtt = d.add(await openClient(`mqtt://127.0.0.1:${gw.port}`, { clientId: 'hmi-3', protocolVersion: 5 }));
    const viewer = await loggedIn(base, 'shift');
    const refused = await viewer.act('disconnect-client', { clientId: 'hmi-3' });
    expect(refused.status).toBe(403);
    expect(refused.body.error).toMatch(/shift may view, not act/);

    const operator = await loggedIn(base, 'maint');
    expect((await operator.act('disconnect-client', { clientId: 'hmi-3' }, { csrf: false })).status).toBe(403);
    // The token of another login does not do either.
    operator.csrf = viewer.csrf;
    expect((await operator.act('disconnect-client', { clientId: 'hmi-3' })).status).toBe(403);
    // A cross-site form can send text/plain without asking first; it cannot send application/json.
    const operator2 = await loggedIn(base, 'maint');
    expect(
      (await operator2.act('disconnect-client', { clientId: 'hmi-3' }, { contentType: 'text/plain' })).status,
    ).toBe(415);
    expect(mqtt.closed).toBe(false);
    await waitFor(() => logLines(gw).filter((l) => l.msg === 'console action refused').length === 3, 5000, {
      message: 'three action refusals audited',
    });
    expect(
      logLines(gw)
        .filter((l) => l.msg === 'console action refused')
        .map((l) => [l.user, l.why]),
    ).toEqual([
      ['shift', 'not an operator'],
      ['maint', 'missing or wrong CSRF token'],
      ['maint', 'missing or wrong CSRF token'],
    ]);
  });
});

describe('console limits per user, and routes named after Object.prototype members', { timeout: 90_000 }, () => {
  it("a viewer who logs in 1,000 times evicts only their own oldest logins, never the operator's", async () => {
    const { base } = d.add(await startConsoleGateway());
    const operator = await loggedIn(base, 'maint');
    const firstOfViewer = await loggedIn(base, 'shift');
    for (let i = 0; i < 1000; i++) await loggedIn(base, 'shift');
    expect((await operator.get('overview')).status).toBe(200);
    expect((await firstOfViewer.get('overview')).status).toBe(401);
  });

  it("a viewer with 50 live streams keeps no other user's out: the limit is per user", async () => {
    const { base } = d.add(await startConsoleGateway());
    const abort = new AbortController();
    d.defer(() => abort.abort());
    const stream = (client: ConsoleClient) =>
      fetch(`${base}/api/events`, { headers: { cookie: client.cookie! }, signal: abort.signal });
    const viewer = await loggedIn(base, 'shift');
    const viewers = await Promise.all(Array.from({ length: 50 }, () => stream(viewer)));
    const statuses = viewers.map((res) => res.status);
    expect([statuses.filter((s) => s === 200).length, statuses.filter((s) => s === 503).length]).toEqual([20, 30]);
    const operator = await stream(await loggedIn(base, 'maint'));
    expect(operator.status).toBe(200);
    expect(operator.headers.get('content-type')).toBe('text/event-stream');
  });

  it('answers /api/hasOwnProperty, /api/__proto__, /api/valueOf and the actions toString, __proto__ 404, without an error or an audited action', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const operator = await loggedIn(base, 'maint');
    for (const route of ['hasOwnProperty', '__proto__', 'valueOf', 'toString', 'constructor']) {
      const answer = await operator.get(route);
      expect(answer.status, route).toBe(404);
      expect(answer.body.error).toBe(`no such endpoint: /api/${route}`);
    }
    for (const action of ['toString', '__proto__', 'hasOwnProperty', 'constructor']) {
      const answer = await operator.act(action, {});
      expect(answer.status, action).toBe(404);
      expect(answer.body.error).toBe(`no such action: ${action}`);
    }
    // A marker action after them: its audit line is the first, and nothing failed on the way.
    expect((await operator.act('disconnect-client', { clientId: 'nobody' })).status).toBe(404);
    await waitFor(() => logLines(gw).some((l) => l.msg === 'console action failed'), 5000, {
      message: 'the marker action audited',
    });
    const lines = logLines(gw);
    expect(lines.filter((l) => l.msg === 'console action')).toEqual([]);
    expect(lines.filter((l) => l.level === 'error' || l.level === 50)).toEqual([]);
  });
});

describe('console actions', { timeout: 90_000 }, () => {
  it('disconnects a client with DISCONNECT 0x98 (MQTT 5 §3.14.2.1, administrative action) and deletes an offline persistent session', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const url = `mqtt://127.0.0.1:${gw.port}`;
    const hmi = d.add(await openClient(url, { clientId: 'hmi-3', protocolVersion: 5 }));
    const operator = await loggedIn(base, 'maint');
    const listed = await operator.get<{ connected: { clientId: string; protocolVersion: number; listener: string }[] }>(
      'clients',
    );
    expect(listed.body.connected).toEqual([
      expect.objectContaining({ clientId: 'hmi-3', protocolVersion: 5, listener: `tcp:${gw.port}` }),
    ]);

    expect((await operator.act('disconnect-client', { clientId: 'hmi-3' })).body).toEqual({ done: true });
    await hmi.waitForClose();
    expect(hmi.disconnects.map((p) => p.reasonCode)).toEqual([0x98]);
    expect((await operator.act('disconnect-client', { clientId: 'hmi-3' })).status).toBe(404);

    // A persistent session with a queued message, offline.
    const durable = await openClient(url, {
      clientId: 'historian',
      protocolVersion: 5,
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
    });
    await durable.subscribe('plant/#', { qos: 1 });
    await durable.disconnect();
    const publisher = d.add(await openClient(url, { clientId: 'plc-sim' }));
    await publisher.publish('plant/line4/count', '1', { qos: 1 });
    const offline = await waitFor(
      async () => {
        const c = await operator.get<{ offline: { clientId: string; queued: number; subscriptions: number }[] }>(
          'clients',
        );
        return c.body.offline.find((s) => s.clientId === 'historian' && s.queued === 1);
      },
      5000,
      { message: 'historian listed offline with one queued message' },
    );
    expect(offline.subscriptions).toBe(1);
    expect((await operator.act('delete-session', { clientId: 'plc-sim' })).status).toBe(409);
    expect((await operator.act('delete-session', { clientId: 'historian' })).body).toEqual({ done: true });
    // The session is gone: resuming it finds none [MQTT-3.2.2-3 / MQTT-3.2.2-2].
    const back = d.add(
      await openClient(url, {
        clientId: 'historian',
        protocolVersion: 5,
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
      }),
    );
    expect(back.connack.sessionPresent).toBe(false);
    const audited = logLines(gw)
      .filter((l) => l.msg === 'console action')
      .map((l) => [l.user, l.action, (l.body as { clientId: string }).clientId]);
    expect(audited).toEqual([
      ['maint', 'disconnect-client', 'hmi-3'],
      ['maint', 'delete-session', 'historian'],
    ]);
  });

  it('reloads the configuration as SIGHUP does: errors come back with the key, and the overview shows the last result', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const operator = await loggedIn(base, 'maint');
    const good = readFileSync(gw.configFile, 'utf8');
    const config = JSON.parse(good) as { broker?: Record<string, unknown> };
    writeFileSync(gw.configFile, JSON.stringify({ ...config, broker: { maxInflight: -1 } }));
    const bad = await operator.act('reload');
    expect(bad.status).toBe(422);
    expect(bad.body.problems).toEqual([expect.objectContaining({ path: 'broker.maxInflight' })]);
    expect((await operator.get('overview')).body.lastReload).toMatchObject({
      ok: false,
      error: expect.stringContaining('broker.maxInflight'),
    });

    writeFileSync(gw.configFile, good);
    expect((await operator.act('reload')).body).toEqual({ done: true, needsRestart: [] });
    expect((await operator.get('overview')).body.lastReload).toMatchObject({ ok: true, needsRestart: [] });
    await waitFor(() => logLines(gw).some((l) => l.msg === 'config reloaded'), 5000, {
      message: 'the gateway logs the reload',
    });

    // A change the running broker was built from applies only after a restart: the answer and the overview say which.
    writeFileSync(gw.configFile, JSON.stringify({ ...config, broker: { ...config.broker, maxInflight: 7 } }));
    expect((await operator.act('reload')).body).toEqual({ done: true, needsRestart: ['broker'] });
    expect((await operator.get('overview')).body.lastReload).toMatchObject({ ok: true, needsRestart: ['broker'] });
  });

  it('reconnects a bridge now: the bridge card says online again with one more reconnect, and Mosquitto saw a new connection', async () => {
    const central = d.add(await startMosquitto());
    const { base } = d.add(await startConsoleGateway(bridgePatch(central.url)));
    const operator = await loggedIn(base, 'maint');
    type Card = { name: string; state: string; reconnects: number; urls: string[] };
    const before = await waitFor(
      async () => (await operator.get<Card[]>('bridges')).body.find((b) => b.state === 'online'),
      10_000,
      {
        message: 'bridge online',
      },
    );
    expect(before.urls).toEqual([central.url]);
    expect((await operator.act('reconnect-bridge', { bridge: 'central' })).body).toEqual({ done: true });
    await waitFor(
      async () =>
        (await operator.get<Card[]>('bridges')).body.find(
          (b) => b.state === 'online' && b.reconnects > before.reconnects,
        ),
      10_000,
      {
        message: 'bridge online again after the reconnect',
      },
    );
    expect(central.log().match(/New client connected .* as edgeferry-central/g)?.length).toBe(2);
    expect((await operator.act('reconnect-bridge', { bridge: 'nope' })).status).toBe(404);
  });

  it("requeues a bridge's dead letters once Mosquitto's ACL allows them (they arrive in order) and deletes them, counted as dropped", async () => {
    // Mosquitto's ACL refuses plant/held/# (PUBACK 0x87 Not authorized): the bridge keeps those as dead letters.
    const aclFile = join(d.tempDir(), 'acl');
    writeFileSync(aclFile, 'topic readwrite plant/ok/#\n');
    const central = d.add(await startMosquitto({ extraConf: `acl_file ${aclFile}` }));
    const { gw, base } = d.add(await startConsoleGateway(bridgePatch(central.url)));
    type Card = { name: string; state: string; deadLetters: number; dropped: Record<string, number> };
    const operator = await loggedIn(base, 'maint');
    const card = async (): Promise<Card> => (await operator.get<Card[]>('bridges')).body[0];
    const makeDeadLetters = async (payloads: string[]): Promise<void> => {
      const local = await connectClient(gw.url);
      for (const payload of payloads) await local.publishAsync('plant/held/count', payload, { qos: 1 });
      await local.endAsync();
      await waitFor(async () => (await card()).deadLetters === payloads.length, 15_000, {
        message: `${payloads.length} dead letters on the card`,
      });
    };
    const payloads = ['1', '2', '3', '4', '5'];
    await makeDeadLetters(payloads);

    // The cause is fixed upstream.
    writeFileSync(aclFile, 'topic readwrite plant/#\n');
    await central.restart();
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const viewer = await loggedIn(base, 'shift');
    expect((await viewer.post('bridges/central/dead-letters/requeue', {})).status).toBe(403);
    expect((await viewer.post('bridges/central/dead-letters/delete', {})).status).toBe(403);
    expect((await operator.post('bridges/nope/dead-letters/requeue', {})).status).toBe(404);
    expect((await operator.post('bridges/central/dead-letters/requeue', {}, { csrf: false })).status).toBe(403);
    expect((await card()).deadLetters).toBe(5);

    const requeued = await operator.post('bridges/central/dead-letters/requeue', {});
    expect(requeued.body).toEqual({ moved: 5, left: 0 });
    await waitFor(() => up.payloads().length === payloads.length, 15_000, {
      message: () => `upstream got [${up.payloads().join(', ')}]`,
    });
    expect(up.payloads()).toEqual(payloads);
    expect(await card()).toMatchObject({ deadLetters: 0, dropped: { dead_letter_deleted: 0 } });

    // Refused again (the ACL back as it was), then deleted: gone, counted in the drops of /metrics.
    writeFileSync(aclFile, 'topic readwrite plant/ok/#\n');
    await central.restart();
    await makeDeadLetters(['6', '7']);
    expect((await operator.post('bridges/central/dead-letters/delete', {})).body).toEqual({ deleted: 2 });
    expect(await card()).toMatchObject({ deadLetters: 0, dropped: { dead_letter_deleted: 2 } });
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toMatch(/^edgeferry_bridge_dropped_total\{bridge="central",reason="dead_letter_deleted"\} 2$/m);
    expect((await operator.post('bridges/central/dead-letters/delete', {})).body).toEqual({ deleted: 0 });

    const audited = logLines(gw).filter((l) => l.msg === 'console action' && l.bridge === 'central');
    expect(audited.map((l) => [l.user, l.action, l.result])).toEqual([
      ['maint', 'requeue-dead-letters', { moved: 5, left: 0 }],
      ['maint', 'delete-dead-letters', { deleted: 2 }],
      ['maint', 'delete-dead-letters', { deleted: 0 }],
    ]);
    const refused = logLines(gw).filter((l) => l.msg === 'console action refused' && l.bridge === 'central');
    expect(refused.map((l) => [l.user, l.action, l.why])).toEqual([
      ['shift', 'requeue-dead-letters', 'not an operator'],
      ['shift', 'delete-dead-letters', 'not an operator'],
      ['maint', 'requeue-dead-letters', 'missing or wrong CSRF token'],
    ]);
  });

  it('writes a tag through the DCMD checks and read-back (the register changes in the simulator), refuses what does not fit, and requests a rebirth', async () => {
    const sim = d.add(await startModbusSim({ units: [1] }));
    await sim.set(1, 'hr', 0, [5, 100]);
    const press = modbusPress(sim, [
      { name: 'count', table: 'holding', address: 0, datatype: 'uint16' },
      { name: 'setpoint', table: 'holding', address: 1, datatype: 'uint16', writable: true },
    ]);
    const { gw, base } = d.add(await startConsoleGateway({ sparkplug: SPARKPLUG, connectors: [press] }));
    const operator = await loggedIn(base, 'maint');
    type DeviceCard = {
      id: string;
      online: boolean;
      readP50Ms?: number;
      readP99Ms?: number;
      tags: { name: string; value: unknown; good: boolean }[];
    };
    const card = await waitFor(
      async () =>
        (await operator.get<DeviceCard[]>('devices')).body.find((dev) => dev.online && dev.tags[1].value === 100),
      15_000,
      {
        message: 'press-1 up with setpoint 100',
      },
    );
    // The poll latency of a polling connector: its recent cycles, p50 no more than p99.
    expect(card.readP50Ms).toBeGreaterThanOrEqual(0);
    expect(card.readP99Ms).toBeGreaterThanOrEqual(card.readP50Ms ?? Infinity);

    const write = await operator.act('write-tag', { device: 'press-1', tag: 'setpoint', value: '250' });
    expect(write.body).toEqual({ done: true, readBack: '250', matches: true });
    expect(await sim.get(1, 'hr', 1, 1)).toEqual([250]);

    const outOfRange = await operator.act('write-tag', { device: 'press-1', tag: 'setpoint', value: 70_000 });
    expect(outOfRange.status).toBe(422);
    expect(outOfRange.body.error).toMatch(/70000 is outside UInt16/);
    expect((await operator.act('write-tag', { device: 'press-1', tag: 'count', value: 1 })).body.error).toBe(
      'read-only metric',
    );
    expect((await operator.act('write-tag', { device: 'press-1', tag: 'setpoint', value: 'abc' })).body.error).toMatch(
      /not an integer/,
    );
    expect((await operator.act('write-tag', { device: 'press-9', tag: 'setpoint', value: 1 })).status).toBe(404);
    expect(await sim.get(1, 'hr', 1, 1)).toEqual([250]);

    // The same audit lines as a DCMD's, naming the console user.
    const writes = logLines(gw).filter((l) => l.msg === 'console write done' || l.msg === 'command refused');
    expect(writes.map((l) => [l.msg, l.who, l.user, l.metric])).toEqual([
      ['console write done', 'web-console', 'maint', 'setpoint'],
      ['command refused', 'web-console', 'maint', 'setpoint'],
      ['command refused', 'web-console', 'maint', 'count'],
    ]);
    // One line per write: the write path's above carries the outcome. `console action failed` only for what the
    // console refused before the write path (a value of another type, an unknown device), which has no line of its own.
    const consoleLines = logLines(gw).filter((l) => l.action === 'write-tag');
    expect(consoleLines.map((l) => [l.msg, (l.body as { value: unknown }).value])).toEqual([
      ['console action failed', 'abc'],
      ['console action failed', 1],
    ]);

    const host = d.add(await openClient(`mqtt://127.0.0.1:${gw.port}`, { clientId: 'host-app' }));
    await host.subscribe('spBv1.0/plant/NBIRTH/line4');
    expect((await operator.act('rebirth')).body).toEqual({ done: true });
    await host.waitForMessages(1, { topic: 'spBv1.0/plant/NBIRTH/line4' });
    const sp = await operator.get<{ lastCommand: { kind: string; user: string; topic: string }; rebirths: number }>(
      'sparkplug',
    );
    expect(sp.body.lastCommand).toMatchObject({ kind: 'console', user: 'maint', topic: 'spBv1.0/plant/NCMD/line4' });
    expect(sp.body.rebirths).toBe(1);
  });
});

describe('console overview of a working gateway', { timeout: 60_000 }, () => {
  it("counts the edge node's publishes in and the bridge's forwards out, with no MQTT client connected", async () => {
    const sim = d.add(await startModbusSim({ units: [1] }));
    const press = modbusPress(sim, [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }]);
    const central = d.add(await startMosquitto());
    const bridge = bridgePatch(central.url, { topics: [{ filter: 'spBv1.0/#', direction: 'out' }] });
    const { base } = d.add(await startConsoleGateway({ sparkplug: SPARKPLUG, connectors: [press], ...bridge }));
    const viewer = await loggedIn(base, 'shift');
    const upstream = d.add(await collect(central.url, 'spBv1.0/plant/DDATA/#'));
    // The register counts up every 100 ms: each change is a DDATA the bridge forwards.
    let count = 0;
    type Rates = { clients: number; msgInPerS: number; msgOutPerS: number };
    const rates = await waitFor(
      async () => {
        await sim.set(1, 'hr', 0, [++count]);
        const o = (await viewer.get<Rates>('overview')).body;
        return o.msgInPerS >= 2 && o.msgOutPerS >= 2 ? o : undefined;
      },
      20_000,
      { message: "the overview counts the DDATA in and the bridge's forwards out", intervalMs: 100 },
    );
    expect(rates.clients).toBe(0);
    expect(upstream.messages.length).toBeGreaterThan(0);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(Number(/^edgeferry_broker_messages_published_locally_total (\d+)/m.exec(metrics)?.[1])).toBeGreaterThan(
      count / 2,
    );
  });

  it('shows a device that stops answering on the overview, and keeps its last values marked stale until it answers again', async () => {
    const sim = d.add(await startModbusSim({ units: [1] }));
    await sim.set(1, 'hr', 0, [42]);
    const press = modbusPress(sim, [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }]);
    const { base } = d.add(await startConsoleGateway({ sparkplug: SPARKPLUG, connectors: [press] }));
    const viewer = await loggedIn(base, 'shift');
    type Overview = { devices: number; devicesDown: { id: string; since: number; lastError?: string }[] };
    type Tag = { name: string; value: unknown; quality: string; stale: boolean; timestamp?: number };
    const tag = async () => (await viewer.get<{ online: boolean; tags: Tag[] }[]>('devices')).body[0];
    const read = await waitFor(
      async () => ((await tag()).tags[0].value === 42 ? (await tag()).tags[0] : undefined),
      15_000,
      { message: 'count 42 read' },
    );
    expect(read).toMatchObject({ quality: 'good', stale: false });
    expect((await viewer.get<Overview>('overview')).body).toMatchObject({ devices: 1, devicesDown: [] });

    await sim.mute(1);
    const down = await waitFor(async () => (await viewer.get<Overview>('overview')).body.devicesDown[0], 15_000, {
      message: 'press-1 listed down on the overview',
    });
    expect(down).toEqual({ id: 'press-1', since: expect.any(Number), lastError: expect.any(String) });
    const stale = await tag();
    expect(stale.online).toBe(false);
    // The last value read before it stopped answering, with that reading's time.
    expect(stale.tags[0]).toEqual({ ...read, timestamp: expect.any(Number), stale: true });
    expect(stale.tags[0].timestamp).toBeGreaterThanOrEqual(read.timestamp!);
    expect(stale.tags[0].timestamp).toBeLessThanOrEqual(down.since);

    await sim.set(1, 'hr', 0, [43]);
    await sim.unmute(1);
    await waitFor(async () => (await tag()).tags[0].value === 43, 15_000, {
      message: 'count 43 read once press-1 answers again',
    });
    expect((await tag()).tags[0]).toMatchObject({ quality: 'good', stale: false });
    expect((await viewer.get<Overview>('overview')).body.devicesDown).toEqual([]);
  });
});

describe('console live stream, log and static files', { timeout: 60_000 }, () => {
  it('streams the live views by SSE at about 2 updates a second, and lists audit lines in the log', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const viewer = await loggedIn(base, 'shift');
    const res = await fetch(`${base}/api/events`, { headers: { cookie: viewer.cookie! } });
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const reader = res.body!.getReader();
    let text = '';
    const started = Date.now();
    while ((text.match(/^data: /gm) ?? []).length < 4) text += new TextDecoder().decode((await reader.read()).value);
    const elapsed = Date.now() - started;
    await reader.cancel();
    // Four events: the first at once, then one per 500 ms tick.
    expect(elapsed).toBeGreaterThanOrEqual(1400);
    const first = JSON.parse(/^data: (.*)$/m.exec(text)![1]) as Record<string, unknown>;
    expect(Object.keys(first).sort()).toEqual(['at', 'bridges', 'devices', 'overview', 'sparkplug']);

    const log = await viewer.get<{ msg: string; mod?: string; user?: string }[]>('log');
    expect(log.body).toContainEqual(expect.objectContaining({ msg: 'console login', mod: 'audit', user: 'shift' }));
    expect(gw.output()).toContain('console login');
  });

  it('serves the front end with its content types and caching, and nothing outside it', async () => {
    const { base } = d.add(await startConsoleGateway());
    const root = await fetch(`${base}/`, { redirect: 'manual' });
    expect(root.status).toBe(302);
    expect(root.headers.get('location')).toBe('/console/');
    const page = await fetch(`${base}/console/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('cache-control')).toBe('no-cache');
    expect(page.headers.get('content-security-policy')).toContain("default-src 'self'");
    const html = await page.text();
    const script = /src="(\/console\/assets\/[^"]+\.js)"/.exec(html)![1];
    const js = await fetch(`${base}${script}`);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(js.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
    expect(html).not.toMatch(/https?:\/\//);
    expect((await fetch(`${base}/console/%2e%2e/%2e%2e/package.json`)).status).toBe(404);
    expect((await fetch(`${base}/console/nope.js`)).status).toBe(404);
    expect((await fetch(`${base}/console/%E0%A4%A`)).status).toBe(404);
    // The metrics endpoints are unchanged.
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
  });
});
