/**
 * Observability: the HTTP endpoint scraped over a real socket after a known workload. `/metrics`
 * (Prometheus text, names `edgeferry_<module>_<thing>_<unit>`), `/healthz`, and `/readyz` with a bridge whose
 * upstream is down and then up.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, logLines, runCli, startGateway } from '../helpers/gateway.js';
import { expectSlowedChecks } from '../helpers/login-throttle.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { openClient } from '../helpers/mqtt-client.js';
import { HttpBurst, type BurstRequest } from '../helpers/http-burst.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

interface Sample {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly value: number;
}

interface Scrape {
  readonly status: number;
  readonly contentType: string;
  readonly samples: Sample[];
  /** `# TYPE` lines: metric family → counter | gauge | histogram | summary. */
  readonly types: Map<string, string>;
  /** The value of the one sample of `name` with exactly these labels (undefined if absent). */
  value(name: string, labels?: Record<string, string>): number | undefined;
}

/** Parses the Prometheus text exposition format (the subset prom-client writes). */
function parseMetrics(text: string): Pick<Scrape, 'samples' | 'types'> {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1], type[2]);
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of ((m[2] as string | undefined) ?? '').matchAll(
      /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g,
    ))
      labels[k] = v;
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { samples, types };
}

async function scrape(port: number): Promise<Scrape> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  const { samples, types } = parseMetrics(await res.text());
  return {
    status: res.status,
    contentType: res.headers.get('content-type') ?? '',
    samples,
    types,
    value: (name, labels = {}) =>
      samples.find(
        (s) =>
          s.name === name &&
          Object.keys(s.labels).length === Object.keys(labels).length &&
          Object.entries(labels).every(([k, v]) => s.labels[k] === v),
      )?.value,
  };
}

async function getJson(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.text() };
}

async function metricsGateway(patch: Record<string, unknown> = {}) {
  const metricsPort = await freePort();
  const gw = d.add(
    await startGateway({ metrics: { host: '127.0.0.1', port: metricsPort }, broker: { sysIntervalS: 0 }, ...patch }),
  );
  return { gw, metricsPort };
}

describe('metrics endpoint', { timeout: 60_000 }, () => {
  it('reports clients, messages by QoS, retained messages and subscriptions with the documented names after a known workload', async () => {
    const { gw, metricsPort } = await metricsGateway();
    const sub1 = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'm-sub1' }));
    await sub1.subscribe('m/#', { qos: 2 });
    await sub1.subscribe('$share/g/m/shared', { qos: 1 });
    const sub2 = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'm-sub2' }));
    await sub2.subscribe('m/a', { qos: 0 });
    const pub = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'm-pub' }));
    for (let i = 0; i < 3; i++) await pub.publish('m/a', `q0-${i}`, { qos: 0 });
    for (let i = 0; i < 2; i++) await pub.publish('m/b', `q1-${i}`, { qos: 1 });
    await pub.publish('m/c', 'q2', { qos: 2 });
    await pub.publish('r/1', 'kept', { qos: 1, retain: true });
    await pub.publish('r/2', 'kept', { qos: 1, retain: true });
    await sub1.waitForMessages(6);
    await sub2.waitForMessages(3);

    // Scraped until the three clients are counted (connections are registered asynchronously).
    const m = await waitFor(
      async () => {
        const s = await scrape(metricsPort);
        return s.value('edgeferry_broker_clients_connected') === 3 ? s : undefined;
      },
      5000,
      { message: 'edgeferry_broker_clients_connected == 3' },
    );
    expect(m.status).toBe(200);
    expect(m.contentType).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(m.value('edgeferry_broker_connections_total')).toBe(3);
    expect(m.value('edgeferry_broker_sessions')).toBe(3);
    expect(m.value('edgeferry_broker_messages_received_total', { qos: '0' })).toBe(3);
    expect(m.value('edgeferry_broker_messages_received_total', { qos: '1' })).toBe(4);
    expect(m.value('edgeferry_broker_messages_received_total', { qos: '2' })).toBe(1);
    // sub1 got m/a x3 at QoS 0, m/b x2 at QoS 1, m/c at QoS 2; sub2 got m/a x3 at QoS 0.
    expect(m.value('edgeferry_broker_messages_sent_total', { qos: '0' })).toBe(6);
    expect(m.value('edgeferry_broker_messages_sent_total', { qos: '1' })).toBe(2);
    expect(m.value('edgeferry_broker_messages_sent_total', { qos: '2' })).toBe(1);
    expect(m.value('edgeferry_broker_retained_messages')).toBe(2);
    expect(m.value('edgeferry_broker_subscriptions', { type: 'normal' })).toBe(2);
    expect(m.value('edgeferry_broker_subscriptions', { type: 'shared' })).toBe(1);
    expect(m.value('edgeferry_broker_bytes_received_total')).toBeGreaterThan(0);
    expect(m.value('edgeferry_broker_bytes_sent_total')).toBeGreaterThan(0);
    expect(m.value('edgeferry_store_size_bytes')).toBeGreaterThan(0);
    expect(m.value('edgeferry_store_commits_total')).toBeGreaterThan(0); // the sessions' state, at least
    // Process figures the issue asks for: CPU, memory, event-loop lag.
    expect(m.value('edgeferry_process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(m.value('edgeferry_process_resident_memory_bytes')).toBeGreaterThan(0);
    expect(m.value('edgeferry_nodejs_eventloop_lag_seconds')).toBeGreaterThanOrEqual(0);

    // Naming (docs/architecture.md#naming): every family is edgeferry_*, counters end in _total.
    const families = [...m.types.keys()];
    expect(families.length).toBeGreaterThan(20);
    for (const name of families) expect(name).toMatch(/^edgeferry_[a-z0-9]+_[a-z0-9_]+$/);
    for (const [name, type] of m.types) if (type === 'counter') expect(name, name).toMatch(/_total$/);
    expect(m.types.get('edgeferry_broker_messages_received_total')).toBe('counter');
    expect(m.types.get('edgeferry_broker_clients_connected')).toBe('gauge');

    // A client leaving and a retained message cleared show up on the next scrape.
    await pub.publish('r/1', '', { qos: 1, retain: true });
    await sub2.disconnect();
    const after = await waitFor(
      async () => {
        const s = await scrape(metricsPort);
        return s.value('edgeferry_broker_clients_connected') === 2 ? s : undefined;
      },
      5000,
      { message: 'edgeferry_broker_clients_connected == 2' },
    );
    expect(after.value('edgeferry_broker_retained_messages')).toBe(1);
    expect(after.value('edgeferry_broker_messages_received_total', { qos: '1' })).toBe(5);
  });

  it('answers /healthz and /readyz with 200, and an unknown path with 404', async () => {
    const { metricsPort } = await metricsGateway();
    const health = await getJson(metricsPort, '/healthz');
    expect(health.status).toBe(200);
    const ready = await getJson(metricsPort, '/readyz');
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.body)).toEqual({ ready: true, problems: [] });
    expect((await getJson(metricsPort, '/nope')).status).toBe(404);
  });

  it('answers / without a console section with a page that says how to turn the console on', async () => {
    const { metricsPort } = await metricsGateway();
    for (const path of ['/', '/console/']) {
      const res = await fetch(`http://127.0.0.1:${metricsPort}${path}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      const page = await res.text();
      expect(page).toMatch(/^edgeferry: the web console is off\./);
      expect(page).toContain('  console:\n    viewers: [shift]');
      expect(page).toContain('auth.passwordFile');
    }
  });

  it('answers /readyz with 503 naming the bridge while its upstream is down, and 200 once it is connected', async () => {
    const central = d.add(await startMosquitto());
    await central.stop();
    const { gw, metricsPort } = await metricsGateway(bridgePatch(central.url));
    const down = await getJson(metricsPort, '/readyz');
    expect(down.status).toBe(503);
    const body = JSON.parse(down.body) as { ready: boolean; problems: string[] };
    expect(body.ready).toBe(false);
    expect(body.problems.join('\n')).toMatch(/bridge central/);
    expect((await getJson(metricsPort, '/healthz')).status).toBe(200);
    expect((await scrape(metricsPort)).value('edgeferry_bridge_connected', { bridge: 'central' })).toBe(0);

    await central.restart();
    let last = down;
    await waitFor(async () => (last = await getJson(metricsPort, '/readyz')).status === 200, 15_000, {
      // Seen once under full-suite load, not reproduced: say what was not ready, and what the gateway logged.
      message: () =>
        `/readyz 200 after the upstream came back; last answer ${last.status} ${last.body}\n${gw.output().slice(-2000)}`,
    });
    expect((await scrape(metricsPort)).value('edgeferry_bridge_connected', { bridge: 'central' })).toBe(1);
  });
});

describe('metrics.auth', { timeout: 60_000 }, () => {
  const request = async (port: number, path: string, authorization?: string) => {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, { headers: authorization ? { authorization } : {} });
    return { status: res.status, challenge: res.headers.get('www-authenticate'), body: await res.text() };
  };
  const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

  it('asks for basic auth (401 with WWW-Authenticate) and admits only the listed users with their password from auth.passwordFile', async () => {
    const dir = d.tempDir('edgeferry-metrics-auth-');
    const passwordFile = join(dir, 'passwd');
    execFileSync('mosquitto_passwd', ['-c', '-b', passwordFile, 'prometheus', 'scrape-secret'], { stdio: 'pipe' });
    execFileSync('mosquitto_passwd', ['-b', passwordFile, 'alice', 'alice-secret'], { stdio: 'pipe' });
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway({
        auth: { passwordFile },
        listeners: [{ type: 'tcp', host: '127.0.0.1', port: await freePort(), allowAnonymous: true }],
        metrics: { host: '127.0.0.1', port: metricsPort, auth: { users: ['prometheus'] } },
      }),
    );
    const none = await request(metricsPort, '/metrics');
    expect(none.status).toBe(401);
    expect(none.challenge).toMatch(/^Basic realm="edgeferry metrics"/);
    expect(none.body).not.toMatch(/edgeferry_/);
    expect((await request(metricsPort, '/metrics', basic('prometheus', 'wrong'))).status).toBe(401);
    // A valid MQTT user that is not listed for metrics.
    expect((await request(metricsPort, '/metrics', basic('alice', 'alice-secret'))).status).toBe(401);
    expect((await request(metricsPort, '/readyz')).status).toBe(401);

    const ok = await request(metricsPort, '/metrics', basic('prometheus', 'scrape-secret'));
    expect(ok.status).toBe(200);
    expect(ok.body).toMatch(/^edgeferry_broker_clients_connected 0$/m);
    expect((await request(metricsPort, '/readyz', basic('prometheus', 'scrape-secret'))).status).toBe(200);
    // /healthz tells only that the process answers: open, for a service manager's probe.
    expect((await request(metricsPort, '/healthz')).status).toBe(200);
    // Refusals are audited, without the credentials.
    await waitFor(() => (gw.output().match(/"msg":"metrics request refused"/g) ?? []).length >= 4, 5000, {
      message: () => gw.output(),
    });
    expect(gw.output()).not.toMatch(/scrape-secret|wrong|alice-secret/);
  });

  it('slows basic auth guesses with the login throttle MQTT and the console share: five of 100 checked together, then 250 ms, 500 ms, 1 s apart, the rest 429', async () => {
    const dir = d.tempDir('edgeferry-metrics-guess-');
    const passwordFile = join(dir, 'passwd');
    execFileSync('mosquitto_passwd', ['-c', '-b', passwordFile, 'prometheus', 'scrape-secret'], { stdio: 'pipe' });
    execFileSync('mosquitto_passwd', ['-b', passwordFile, 'alice', 'alice-secret'], { stdio: 'pipe' });
    const tokenFile = join(dir, 'metrics.token');
    writeFileSync(tokenFile, 'scrape-token\n');
    const metricsPort = await freePort();
    const mqttPort = await freePort();
    const gw = d.add(
      await startGateway(
        {
          auth: { passwordFile },
          listeners: [{ type: 'tcp', host: '127.0.0.1', port: mqttPort, allowAnonymous: true }],
          metrics: { host: '127.0.0.1', port: metricsPort, auth: { users: ['prometheus'], tokenFile } },
        },
        { logLevel: 'info' },
      ), // accepted logins are audited at info
    );
    const guess = (password: string): BurstRequest => ({
      method: 'GET',
      path: '/metrics',
      headers: { authorization: basic('prometheus', password) },
    });
    const burst = d.add(
      await HttpBurst.send(
        metricsPort,
        Array.from({ length: 100 }, (_, i) => guess(i === 19 ? 'scrape-secret' : `guess-${i}`)),
      ),
    );
    await waitFor(() => burst.answered >= 90, 10_000, {
      message: () => `90 answers, got ${JSON.stringify(burst.statuses)}`,
    });
    expect(burst.count(429)).toBeGreaterThanOrEqual(80);
    // The token, and another user of the password file from the same address, are not held up.
    expect((await request(metricsPort, '/metrics', 'Bearer scrape-token')).status).toBe(200);
    const mqttUrl = `mqtt://127.0.0.1:${mqttPort}`;
    d.add(await openClient(mqttUrl, { username: 'alice', password: 'alice-secret', protocolVersion: 5 }));
    expect(burst.answered).toBeLessThan(100);
    // Five checked together, then one at a time (the audit log's times: the server's clock).
    const checkedAt = () =>
      logLines(gw)
        .filter((l) => l.user === 'prometheus' && l.why === 'bad user name or password')
        .map((l) => Number(l.time));
    await waitFor(() => checkedAt().length >= 8, 10_000, { message: 'eight of the guesses checked' });
    expectSlowedChecks(checkedAt());
    // One throttle: five guesses of alice's password here slow her next MQTT login from this address (250 ms after
    // the last guess was checked, by the audit log's times).
    for (let i = 0; i < 5; i++)
      expect((await request(metricsPort, '/metrics', basic('alice', `guess-${i}`))).status).toBe(401);
    d.add(await openClient(mqttUrl, { username: 'alice', password: 'alice-secret', protocolVersion: 5 }));
    const lines = await waitFor(
      () => {
        const guesses = logLines(gw).filter((l) => l.msg === 'metrics request refused' && l.user === 'alice');
        const mqtt = logLines(gw).filter((l) => l.msg === 'login' && l.username === 'alice');
        return guesses.length === 5 && mqtt.length === 2 ? [...guesses, mqtt[1]] : undefined;
      },
      5000,
      { message: "alice's guesses and her second login audited" },
    );
    expectSlowedChecks(lines.map((l) => Number(l.time)));
  });

  it('accepts a bearer token from metrics.auth.tokenFile, re-read on SIGHUP', async () => {
    const dir = d.tempDir('edgeferry-metrics-token-');
    const tokenFile = join(dir, 'metrics.token');
    writeFileSync(tokenFile, 'first-token-0123456789\n');
    const metricsPort = await freePort();
    const gw = d.add(await startGateway({ metrics: { host: '127.0.0.1', port: metricsPort, auth: { tokenFile } } }));
    const none = await request(metricsPort, '/metrics');
    expect(none.status).toBe(401);
    expect(none.challenge).toBe('Bearer realm="edgeferry metrics"');
    expect((await request(metricsPort, '/metrics', 'Bearer first-token-012345678')).status).toBe(401);
    expect((await request(metricsPort, '/metrics', 'Bearer first-token-01234567890')).status).toBe(401);
    expect((await request(metricsPort, '/metrics', basic('first-token-0123456789', ''))).status).toBe(401);
    expect((await request(metricsPort, '/metrics', 'first-token-0123456789')).status).toBe(401);
    expect((await request(metricsPort, '/metrics', 'Bearer first-token-0123456789')).status).toBe(200);
    // Refusals are audited without what was sent, even a bare token without a scheme.
    await waitFor(() => (gw.output().match(/"msg":"metrics request refused"/g) ?? []).length >= 5, 5000, {
      message: () => gw.output(),
    });
    expect(gw.output()).not.toContain('first-token');

    writeFileSync(tokenFile, 'second-token\n');
    gw.proc.kill('SIGHUP');
    await waitFor(async () => (await request(metricsPort, '/metrics', 'Bearer second-token')).status === 200, 10_000);
    expect((await request(metricsPort, '/metrics', 'Bearer first-token-0123456789')).status).toBe(401);
  });

  it('refuses to start with metrics off loopback and no auth, unless allowUnauthenticated: true', async () => {
    const dir = d.tempDir('edgeferry-metrics-cfg-');
    const file = join(dir, 'gw.yaml');
    writeFileSync(file, 'metrics: { host: 0.0.0.0, port: 9883 }\n');
    const refused = await runCli(['--check-config', '--config', file]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(
      /metrics\.auth: 0\.0\.0\.0 is not a loopback address: set metrics\.auth \(users or tokenFile\), or allowUnauthenticated: true/,
    );
    writeFileSync(file, 'metrics: { host: 0.0.0.0, port: 9883, allowUnauthenticated: true }\n');
    expect((await runCli(['--check-config', '--config', file])).code).toBe(0);
  });
});

describe('/readyz and the devices behind the connectors', { timeout: 90_000 }, () => {
  it('counts a device that does not answer (a dead PLC) when asked with ?devices=1, or always with metrics.readyRequiresDevices', async () => {
    const sim = d.add(await startModbusSim({ units: [1] }));
    await sim.set(1, 'hr', 0, [5]);
    const press = modbusPress(sim, [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }]);
    const sparkplug = { groupId: 'plant', edgeNodeId: 'line4', deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 } };
    const { gw, metricsPort } = await metricsGateway({ sparkplug, connectors: [press] });
    const readyz = async (query = '') => {
      const { status, body } = await getJson(metricsPort, `/readyz${query}`);
      return { status, problems: (JSON.parse(body) as { problems: string[] }).problems };
    };
    await waitFor(async () => (await readyz('?devices=1')).status === 200, 15_000, { message: 'press-1 answering' });

    await sim.mute(1);
    const dead = await waitFor(
      async () => {
        const r = await readyz('?devices=1');
        return r.status === 503 ? r : undefined;
      },
      15_000,
      { message: '/readyz?devices=1 503 once press-1 stopped answering' },
    );
    expect(dead.problems).toEqual([expect.stringMatching(/^device press-1 is not answering \((backoff|starting)\)$/)]);
    // Without the question, the PLC is not the gateway's readiness.
    expect(await readyz()).toEqual({ status: 200, problems: [] });
    expect(await readyz('?devices=0')).toEqual({ status: 200, problems: [] });

    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { metrics: Record<string, unknown> };
    config.metrics.readyRequiresDevices = true;
    writeFileSync(gw.configFile, JSON.stringify(config));
    await gw.restart();
    const always = await readyz();
    expect(always.status).toBe(503);
    expect(always.problems.join('\n')).toMatch(/device press-1 is not answering/);

    await sim.unmute(1);
    await waitFor(async () => (await readyz()).status === 200, 15_000, {
      message: '/readyz 200 once press-1 answers again',
    });
  });
});
