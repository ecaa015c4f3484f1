/**
 * `edgeferry store list | delete-outbox NAME` (bounded disk use): the backlog of a bridge removed
 * from the configuration stays on disk, is reported at start and by `store list`, and an operator deletes it
 * while edgeferry is stopped. Real gateway processes on one data directory.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { runCli, startGateway } from '../helpers/gateway.js';
import { openClient } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';

const d = useDisposer();

describe('edgeferry store', { timeout: 90_000 }, () => {
  it('lists the outbox of a removed bridge, warns about it at start, and deletes it on request', async () => {
    // The upstream port has no listener: the bridge buffers everything.
    const deadPort = await freePort();
    const gw = d.add(
      await startGateway({
        bridges: [
          {
            name: 'retired',
            remote: { urls: [`mqtt://127.0.0.1:${deadPort}`] },
            topics: [{ filter: 'plant/#', direction: 'out', qos: 1 }],
          },
        ],
      }),
    );
    // A persistent session offline: its queue is counted too.
    const sub = await openClient(gw.url, {
      clientId: 'store-cmd-sub',
      clean: false,
      protocolVersion: 5,
      properties: { sessionExpiryInterval: 3600 },
    });
    await sub.subscribe('plant/#', { qos: 1 });
    await sub.disconnect();
    const pub = await openClient(gw.url, { clientId: 'store-cmd-pub' });
    for (let i = 0; i < 3; i++) await pub.publish(`plant/line/${i}`, `m${i}`, { qos: 1 });
    await pub.stop();

    // One process at a time: the running gateway holds the store.
    const busy = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(busy.code).toBe(3);
    expect(busy.stderr).toMatch(/EF_STORE_IN_USE: .* in use by another edgeferry, process \d+/);
    await gw.stop();

    const listed = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(listed, listed.stderr).toMatchObject({ code: 0 });
    expect(listed.stdout).toMatch(
      /outbox retired: 3 messages, \d+ bytes, oldest \d+ s, dropped none; cursor slot 0, floor 1, marks 0 removed \/ 0 released\n/,
    );
    expect(listed.stdout).toMatch(
      /journal \(shared by the outboxes\): 3 entries in \d+ chunks, \d+ bytes, seq 1\.\.3\n/,
    );
    expect(listed.stdout).toContain('persistent sessions: 1 (3 queued messages)');
    // Still configured: deleting it would only last until the next start.
    const refused = await runCli(['store', 'delete-outbox', 'retired', '-c', gw.configFile]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('still in the configuration');

    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { bridges?: unknown };
    delete config.bridges;
    writeFileSync(gw.configFile, JSON.stringify(config));
    await gw.restart();
    expect(gw.output()).toMatch(
      /outboxes of bridges no longer in the configuration stay on disk.*"outboxes":\["retired"\]|"outboxes":\["retired"\].*outboxes of bridges no longer in the configuration/,
    );
    await gw.stop();

    const listedAgain = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(listedAgain.stdout).toContain('outbox retired: 3 messages');
    expect(listedAgain.stdout).toContain('(no bridge of this name in the configuration)');
    const deleted = await runCli(['store', 'delete-outbox', 'retired', '-c', gw.configFile]);
    expect(deleted, deleted.stderr).toMatchObject({ code: 0 });
    expect(deleted.stdout).toBe('deleted outbox "retired" with 3 messages\n');
    const after = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(after.stdout).toContain('outboxes: none');
    // Its cursor was the journal's only claim on the entries: they went with it.
    expect(after.stdout).toContain('journal (shared by the outboxes): 0 entries in 0 chunks, 0 bytes, empty');
  });

  it('never creates a store: a data directory that does not exist is reported, not made', async () => {
    const gw = d.add(await startGateway());
    await gw.stop();
    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { storage: { path: string } };
    config.storage.path = `${config.storage.path}-typo`;
    writeFileSync(gw.configFile, JSON.stringify(config));
    const listed = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain('no data directory yet');
    expect((await runCli(['store', 'wipe', '-c', gw.configFile])).code).toBe(2);
  });
});
