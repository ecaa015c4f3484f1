/**
 * Dead letters (docs/reliability.md#fault-scenarios "upstream rejects"): a message the central broker refuses (here Mosquitto's ACL,
 * PUBACK 0x87 Not authorized) leaves the queue head, so the rest keeps flowing, but it is kept, not dropped:
 * `edgeferry store list` shows it, `edgeferry store requeue` puts it back once the cause is fixed, and it
 * arrives. Real gateway processes, a real Mosquitto, the CLI. (Mosquitto 2.0.11 also drops the connection after
 * each refused QoS 1 publish, "Bad socket read/write" in its log: the bridge reconnects and goes on.)
 */
import { join } from 'node:path';
import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { collect, connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, runCli, startGateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

describe('bridge: dead letters', { timeout: 120_000 }, () => {
  it('keeps what the central broker refuses, lists it, and sends it again after "store requeue"', async () => {
    const aclFile = join(d.tempDir(), 'acl');
    writeFileSync(aclFile, 'topic readwrite plant/ok/#\n');
    const central = d.add(await startMosquitto({ extraConf: `acl_file ${aclFile}` }));
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway({ ...bridgePatch(central.url), metrics: { host: '127.0.0.1', port: metricsPort } }),
    );
    const local = await connectClient(gw.url);
    for (const [topic, payload] of [
      ['plant/denied', 'x'],
      ['plant/denied', 'y'],
      ['plant/ok/1', 'z'],
    ]) {
      await local.publishAsync(topic, payload, { qos: 1 });
    }
    await local.endAsync();
    // The refused ones do not block the queue: 'z' behind them arrives.
    await waitFor(() => up.payloads().includes('z'), 10_000);
    const gauge = async (): Promise<string | undefined> => {
      const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
      return /^edgeferry_bridge_dead_letter_messages\{bridge="central"\} (\d+)$/m.exec(text)?.[1];
    };
    await waitFor(async () => (await gauge()) === '2', 5000);
    expect(gw.output()).toContain('central broker refused a message; kept as a dead letter');
    await gw.stop();

    const listed = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(listed, listed.stderr).toMatchObject({ code: 0 });
    expect(listed.stdout).toContain('outbox central: 0 messages');
    expect(listed.stdout).toMatch(
      /outbox central\.dead-letter: 2 messages, \d+ bytes, oldest \d+ s, dropped none; cursor slot \d+, floor \d+, marks 0 removed \/ 0 released {2}\(refused/,
    );
    expect(listed.stdout).toContain(
      '(refused by the central broker; send again with "edgeferry store requeue central")',
    );
    // Not warned about as an orphan at start: it belongs to a configured bridge.
    expect(gw.output()).not.toContain('outboxes of bridges no longer in the configuration');

    // The cause is fixed upstream; the operator requeues.
    writeFileSync(aclFile, 'topic readwrite plant/#\n');
    await central.restart();
    const after = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    const requeued = await runCli(['store', 'requeue', 'central', '-c', gw.configFile]);
    expect(requeued, requeued.stderr).toMatchObject({
      code: 0,
      stdout: 'moved 2 dead letters of bridge "central" to its outbox\n',
    });
    const again = await runCli(['store', 'requeue', 'central', '-c', gw.configFile]);
    expect(again.stdout).toBe('bridge "central" has no dead letters\n');

    await gw.restart();
    await waitFor(() => after.payloads().includes('y'), 10_000, {
      message: () => `upstream got [${after.payloads().join(', ')}]`,
    });
    expect(after.payloads()).toEqual(['x', 'y']);
    await waitFor(async () => (await gauge()) === '0', 5000);
  });
});
