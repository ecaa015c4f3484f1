/**
 * Reload: SIGHUP re-reads and validates the configuration. Changed ACLs apply to new operations of
 * clients that stay connected; an invalid configuration or ACL file is rejected with the reasons logged and the
 * running rules kept; a listener change is logged as needing a restart.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, startGateway, type Gateway } from '../helpers/gateway.js';
import { openClient, type TestClient } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

const ACL_V1 = ['user admin', 'topic readwrite #', '', 'user alice', 'topic readwrite sensors/#', ''].join('\n');
const ACL_V2 = [
  'user admin',
  'topic readwrite #',
  '',
  'user alice',
  'topic read sensors/#',
  'topic readwrite other/#',
  '',
].join('\n');
const ACL_V3 = ['user admin', 'topic readwrite #', '', 'user alice', 'topic readwrite other/#', ''].join('\n');

/** Sends SIGHUP and waits for the next log line with message `msg` (one more than before the signal). */
async function sighup(gw: Gateway, msg: string): Promise<Record<string, unknown>> {
  const before = logLines(gw).filter((l) => l.msg === msg).length;
  gw.proc.kill('SIGHUP');
  return waitFor(() => logLines(gw).filter((l) => l.msg === msg)[before], 10_000, {
    message: () => `log line "${msg}" after SIGHUP; output:\n${gw.output()}`,
  });
}

/** The parts of the written config file these tests edit. */
interface ConfigFile {
  broker: Record<string, unknown>;
  listeners: Record<string, unknown>[];
}

function editConfig(gw: Gateway, edit: (config: ConfigFile) => void): void {
  const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as ConfigFile;
  edit(config);
  writeFileSync(gw.configFile, JSON.stringify(config, null, 2));
}

async function pubackCode(c: TestClient, topic: string, payload: string): Promise<number> {
  try {
    await c.publish(topic, payload, { qos: 1 });
    return 0;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'number') return code;
    throw err;
  }
}

async function subackCode(c: TestClient, filter: string): Promise<number> {
  try {
    return (await c.subscribe(filter, { qos: 1 }))[0];
  } catch (err) {
    const granted = (err as { packet?: { granted?: number[] } }).packet?.granted;
    if (granted) return granted[0];
    throw err;
  }
}

async function aclGateway() {
  const dir = d.tempDir('edgeferry-reload-');
  const aclFile = join(dir, 'acl');
  writeFileSync(aclFile, ACL_V1);
  const gw = d.add(await startGateway({ auth: { aclFile }, broker: { sysIntervalS: 0 } }, { logLevel: 'info' }));
  // Without a password file, loopback clients are who they say they are: enough to exercise the ACL.
  const admin = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'admin', username: 'admin' }));
  const alice = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'alice', username: 'alice' }));
  return { gw, aclFile, admin, alice };
}

describe('SIGHUP reload', { timeout: 60_000 }, () => {
  it('applies a changed ACL to new operations while the connected client stays connected', async () => {
    const { gw, aclFile, admin, alice } = await aclGateway();
    expect(await subackCode(alice, 'sensors/#')).toBe(1);
    expect(await subackCode(alice, 'other/#')).toBe(0x87);
    expect(await pubackCode(alice, 'sensors/a', 'v1 write')).toBe(0);
    await alice.waitForMessages(1);

    // v2: alice may only read sensors/#, and gains other/#.
    writeFileSync(aclFile, ACL_V2);
    await sighup(gw, 'config reloaded');
    expect(logLines(gw).some((l) => l.mod === 'audit' && l.msg === 'authentication and ACL rules reloaded')).toBe(true);
    expect(await pubackCode(alice, 'sensors/a', 'v2 write')).toBe(0x87);
    expect(await subackCode(alice, 'other/#')).toBe(1);
    expect(await pubackCode(admin, 'sensors/b', 'still readable')).toBe(0);
    expect(await pubackCode(alice, 'other/a', 'v2 other')).toBe(0);
    await alice.waitForMessages(3);
    expect(alice.payloads()).toEqual(['v1 write', 'still readable', 'v2 other']);

    // v3: read access to sensors/# is gone: the subscription made under v1 no longer delivers.
    writeFileSync(aclFile, ACL_V3);
    await sighup(gw, 'config reloaded');
    expect(await pubackCode(admin, 'sensors/c', 'no longer readable')).toBe(0);
    expect(await pubackCode(admin, 'other/z', 'marker')).toBe(0);
    await alice.waitForMessages(4);
    expect(alice.payloads()).toEqual(['v1 write', 'still readable', 'v2 other', 'marker']);

    // The same connection throughout: never closed, no DISCONNECT from the server.
    expect(alice.closed).toBe(false);
    expect(alice.disconnects).toEqual([]);
    expect(alice.client.connected).toBe(true);
  });

  it('rejects an invalid configuration file on SIGHUP, logs the reasons and keeps enforcing the old ACL', async () => {
    const { gw, aclFile, alice } = await aclGateway();
    // The ACL file is made permissive and the config file invalid at once: the whole reload must be refused.
    writeFileSync(aclFile, ['user alice', 'topic readwrite #', ''].join('\n'));
    editConfig(gw, (c) => {
      c.broker.maxInflihgt = 5;
    });
    const rejected = await sighup(gw, 'config reload rejected, keeping the running config');
    expect(rejected.level).toBe(50);
    expect(JSON.stringify(rejected.problems)).toMatch(/maxInflihgt/);
    expect(await pubackCode(alice, 'other/a', 'x')).toBe(0x87);
    expect(await pubackCode(alice, 'sensors/a', 'v1 still')).toBe(0);

    // A config that is invalid YAML is refused the same way.
    writeFileSync(gw.configFile, 'listeners: [ {\n');
    await sighup(gw, 'config reload rejected, keeping the running config');
    expect(await pubackCode(alice, 'other/a', 'x')).toBe(0x87);
    expect(alice.closed).toBe(false);
    expect(gw.proc.exitCode).toBeNull();
  });

  it('rejects an invalid ACL file on SIGHUP (valid config) and keeps the old ACL, then applies the fixed file', async () => {
    const { gw, aclFile, alice } = await aclGateway();
    writeFileSync(aclFile, ['user alice', 'topic readwrite #', 'topik read typo/#', ''].join('\n'));
    const failed = await sighup(gw, 'config reload failed');
    expect(failed.level).toBe(50);
    expect(JSON.stringify(failed)).toMatch(/unknown keyword/);
    expect(await pubackCode(alice, 'other/a', 'x')).toBe(0x87);
    expect(await pubackCode(alice, 'sensors/a', 'old rules')).toBe(0);

    writeFileSync(aclFile, ACL_V2);
    await sighup(gw, 'config reloaded');
    expect(await pubackCode(alice, 'other/a', 'fixed')).toBe(0);
    expect(await pubackCode(alice, 'sensors/a', 'x')).toBe(0x87);
    expect(alice.closed).toBe(false);
  });

  it('logs a listener change as needing a restart and keeps serving on the old listener', async () => {
    const port = await freePort();
    let second = await freePort();
    while (second === port) second = await freePort();
    const gw = d.add(
      await startGateway(
        {
          listeners: [
            { type: 'tcp', host: '127.0.0.1', port },
            { type: 'tcp', host: '127.0.0.1', port: second },
          ],
          broker: { sysIntervalS: 0 },
        },
        { logLevel: 'info' },
      ),
    );
    const client = d.add(await openClient(`mqtt://127.0.0.1:${second}`, { protocolVersion: 5 }));
    // Chosen while both listeners are bound, so it is neither of them (a port handed out and released earlier may be
    // handed out again, and an unchanged port is no change).
    const moved = await freePort();
    editConfig(gw, (c) => {
      c.listeners[1].port = moved;
    });
    const before = logLines(gw).filter((l) => l.msg === 'configuration changes that need a restart to apply').length;
    await sighup(gw, 'config reloaded');
    const warning = await waitFor(
      () => logLines(gw).filter((l) => l.msg === 'configuration changes that need a restart to apply')[before],
      5000,
      {
        message: () => `the restart warning after SIGHUP; output:\n${gw.output()}`,
      },
    );
    expect(warning.level).toBe(40);
    expect(warning.sections).toEqual(['listeners']);
    // Nothing was rebound: the old port still serves, the new one is not listening, the client stayed.
    d.add(await openClient(`mqtt://127.0.0.1:${second}`, { protocolVersion: 4 }));
    await expect(openClient(`mqtt://127.0.0.1:${moved}`, {}, 2000)).rejects.toThrow();
    expect(client.closed).toBe(false);
  });
});
