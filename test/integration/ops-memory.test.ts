/**
 * Memory: packages and Node modules that only some configurations need are loaded when first needed, and an idle
 * gateway stays within its resident-memory bound (docs/operations.md#memory). The gateway runs as a real process
 * with a preload that lists, at exit, every CommonJS package and every public Node module it loaded.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway } from '../helpers/gateway.js';
import { freePort } from '../helpers/ports.js';

const d = useDisposer();
const PRELOAD = resolve(fileURLToPath(new URL('../fixtures/loaded-packages.mjs', import.meta.url)));
const ON_FIRST_USE = [
  'modbus-serial',
  'node-opcua-client',
  'pino-pretty',
  'ws',
  'prom-client',
  'sparkplug-payload',
  'node:http',
  'node:https',
  'node:tls',
];
/**
 * An idle gateway's VmRSS on this machine (one TCP listener, the store, no metrics, devices or bridges): 72 MB on
 * Node.js 20 and 75-76 MB on the release's Node.js 24; 85-87 MB when every part loaded at start.
 */
const IDLE_RSS_BOUND_MB = 80;

/** VmRSS of a process, in MB. */
function rssMb(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
}

/** The packages a gateway with this configuration loaded by the time it stopped. */
async function loadedPackages(patch: object): Promise<string[]> {
  const file = join(d.tempDir('edgeferry-packages-'), 'packages.json');
  const gw = d.add(
    await startGateway(patch, { env: { NODE_OPTIONS: `--import=${PRELOAD}`, LOADED_PACKAGES_FILE: file } }),
  );
  await gw.stop();
  return JSON.parse(readFileSync(file, 'utf8')) as string[];
}

describe('packages loaded on first use', () => {
  it('a gateway with a TCP listener, JSON logs, no metrics, bridges or devices loads none of them', async () => {
    const loaded = await loadedPackages({});
    expect(loaded).toContain('mqtt-packet'); // the preload sees what the gateway loads
    expect(loaded.filter((name) => ON_FIRST_USE.includes(name))).toEqual([]);
  });

  it('a WebSocket listener loads ws', async () => {
    const port = await freePort();
    const loaded = await loadedPackages({
      listeners: [
        { type: 'tcp', host: '127.0.0.1', port: await freePort() },
        { type: 'ws', host: '127.0.0.1', port },
      ],
    });
    expect(loaded).toContain('ws');
    expect(loaded).toContain('node:http');
    expect(loaded).not.toContain('modbus-serial');
  });

  it('the metrics endpoint loads prom-client and node:http, not what prom-client has for pushing (node:tls)', async () => {
    const loaded = await loadedPackages({ metrics: { host: '127.0.0.1', port: await freePort() } });
    expect(loaded).toEqual(expect.arrayContaining(['prom-client', 'node:http']));
    expect(loaded.filter((name) => ['node:https', 'node:tls', 'sparkplug-payload'].includes(name))).toEqual([]);
  });
});

describe('resident memory', () => {
  it(`an idle gateway stays under ${IDLE_RSS_BOUND_MB} MB resident`, async () => {
    const gw = d.add(await startGateway({}));
    const rss = rssMb(gw.proc.pid!);
    expect(rss, `idle VmRSS ${rss.toFixed(1)} MB`).toBeLessThan(IDLE_RSS_BOUND_MB);
  });
});
