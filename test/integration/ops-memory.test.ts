/**
 * Memory: packages that only some configurations need are loaded when first needed (docs/operations.md#memory).
 * The gateway runs as a real process with a preload that lists, at exit, every CommonJS package it loaded.
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
const ON_FIRST_USE = ['modbus-serial', 'node-opcua-client', 'pino-pretty', 'ws'];

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
  it('a gateway with a TCP listener, JSON logs and no devices loads none of them', async () => {
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
    expect(loaded).not.toContain('modbus-serial');
  });
});
