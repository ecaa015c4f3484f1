/**
 * docs/reliability.md#fault-scenarios, "DNS failure or address change for uplink": the central broker is named by a host name that
 * resolves through a hosts file only the gateway process sees (its own mount namespace, the file bound over
 * /etc/hosts), so the test makes the name fail, appear and move. The bridge must retry while the name does not
 * resolve, keep what it buffers, and resolve the name again on every attempt.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { checkSequence, collect, connectClient, publishSequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgeGauge, bridgePatch, privateHostsProblem, startGateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();
const NAME = 'central.edgeferry.test';

describe('bridge: the central broker by host name (docs/reliability.md#fault-scenarios)', { timeout: 90_000 }, () => {
  it('retries while the name does not resolve, goes up once it does, and follows the name to a new address', async (ctx) => {
    const problem = privateHostsProblem();
    if (problem !== undefined) {
      ctx.skip(`needs root and mount namespaces for a private /etc/hosts (${problem})`);
      return;
    }
    const hosts = join(d.tempDir(), 'hosts');
    const resolveTo = (address?: string): void =>
      writeFileSync(hosts, `127.0.0.1 localhost\n${address === undefined ? '' : `${address} ${NAME}\n`}`);
    resolveTo(undefined);
    // Two brokers on the same port, one per address: the URL stays the same, only the name moves.
    const port = await freePort();
    const first = d.add(await startMosquitto({ port }));
    const second = d.add(await startMosquitto({ port, host: '127.0.0.2' }));
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway(
        { ...bridgePatch(`mqtt://${NAME}:${port}`), metrics: { host: '127.0.0.1', port: metricsPort } },
        { hostsFile: hosts },
      ),
    );
    const local = await connectClient(gw.url);
    d.defer(() => local.endAsync(true));

    // The name does not resolve: said in the log, the bridge stays down and keeps what comes in.
    const early = await publishSequence(local, 'plant/dns', 200, { qos: 1, prefix: 'a' });
    await waitFor(() => gw.output().includes('ENOTFOUND'), 10_000, { message: () => gw.output() });
    expect(await bridgeGauge(metricsPort, 'edgeferry_bridge_connected')).toBe(0);
    expect(await bridgeGauge(metricsPort, 'edgeferry_bridge_backlog_messages')).toBe(200);

    // The name appears: a later attempt resolves it and the backlog goes up, in order.
    const atFirst = d.add(await collect(first.url, 'plant/#', { qos: 1 }));
    resolveTo('127.0.0.1');
    await waitFor(() => atFirst.messages.length >= 200, 20_000, {
      message: () => `${atFirst.messages.length}/200 at the first broker`,
    });
    expect(checkSequence(atFirst.payloads(), early)).toMatchObject({ missing: [], unexpected: [], outOfOrder: 0 });

    // The name moves to another address and the first broker goes away: the reconnect resolves the name again.
    const atSecond = d.add(await collect(second.url, 'plant/#', { qos: 1 }));
    resolveTo('127.0.0.2');
    await first.stop();
    const late = await publishSequence(local, 'plant/dns', 200, { qos: 1, prefix: 'b' });
    await waitFor(() => atSecond.messages.length >= 200, 20_000, {
      message: () => `${atSecond.messages.length}/200 at the second broker`,
    });
    expect(checkSequence(atSecond.payloads(), late)).toMatchObject({ missing: [], unexpected: [], outOfOrder: 0 });
    expect(await bridgeGauge(metricsPort, 'edgeferry_bridge_connected')).toBe(1);
  });
});
