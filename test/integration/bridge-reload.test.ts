/**
 * Reload of bridges: SIGHUP adds, reconfigures and removes bridges one by one, while local clients stay
 * connected and the other bridges carry on; a reconfigured bridge keeps its outbox.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { collect } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, startGateway, type Gateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

function logCount(gw: Gateway, msg: string): number {
  return gw
    .output()
    .split('\n')
    .filter((l) => l.includes(`"msg":"${msg}"`)).length;
}

/** The parts of the written config file these tests edit. */
interface ConfigFile {
  bridges: (Record<string, unknown> & { remote: object })[];
}

/** Rewrites the config file, sends SIGHUP and waits until the gateway logged `msg` once more. */
async function reload(gw: Gateway, edit: (config: ConfigFile) => void, msg: string): Promise<void> {
  const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as ConfigFile;
  edit(config);
  writeFileSync(gw.configFile, JSON.stringify(config, null, 2));
  const before = logCount(gw, msg);
  gw.proc.kill('SIGHUP');
  await waitFor(() => logCount(gw, msg) > before, 10_000, { message: () => `"${msg}" after SIGHUP:\n${gw.output()}` });
}

describe('SIGHUP reload of bridges', { timeout: 60_000 }, () => {
  it('reconfigures a bridge, adds one and removes one without dropping the local client', async () => {
    const central = d.add(await startMosquitto());
    const backup = d.add(await startMosquitto());
    const gw = d.add(await startGateway(bridgePatch(central.url), { logLevel: 'info' }));
    const local = d.add(await openClient(gw.url, { clientId: 'local-pub', protocolVersion: 5 }));
    const atCentral = d.add(await collect(central.url, '#'));
    const atBackup = d.add(await collect(backup.url, '#'));

    await local.publish('plant/1', 'before', { qos: 1 });
    await waitFor(() => atCentral.payloads().includes('before'), 10_000);

    // central now forwards line/# instead of plant/#; a second bridge sends plant/# to backup.
    await reload(
      gw,
      (config) => {
        config.bridges[0].topics = [{ filter: 'line/#', direction: 'out' }];
        config.bridges.push({
          ...config.bridges[0],
          name: 'backup',
          remote: { ...config.bridges[0].remote, urls: [backup.url], clientId: 'edgeferry-backup' },
          topics: [{ filter: 'plant/#', direction: 'out' }],
        });
      },
      'bridge added',
    );
    await local.publish('plant/2', 'to-backup', { qos: 1 });
    await local.publish('line/1', 'to-central', { qos: 1 });
    await waitFor(
      () => atBackup.payloads().includes('to-backup') && atCentral.payloads().includes('to-central'),
      10_000,
    );
    expect(atCentral.payloads()).not.toContain('to-backup');

    // Removing backup stops it; its messages are no longer forwarded, central carries on.
    await reload(gw, (config) => void config.bridges.pop(), 'bridge removed; its outbox stays on disk');
    await local.publish('plant/3', 'nobody', { qos: 1 });
    await local.publish('line/2', 'still-central', { qos: 1 });
    await waitFor(() => atCentral.payloads().includes('still-central'), 10_000);
    expect(atBackup.payloads()).not.toContain('nobody');
    expect(local.closed).toBe(false);
  });
});
