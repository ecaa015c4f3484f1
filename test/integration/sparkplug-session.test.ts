/**
 * The Sparkplug session rules of the upstream session, against the gateway process, a central Mosquitto and a
 * host application written with sparkplug-payload (docs/architecture.md#sparkplug-session).
 */
import { createServer, type Socket } from 'node:net';
import mqttPacket from 'mqtt-packet';
import type { IConnectPacket } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { decodePayload } from '../../src/sparkplug/payload.js';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, startGateway } from '../helpers/gateway.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { startSparkplugHost } from '../helpers/sparkplug-host.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();
const GROUP = 'plant1';
const NODE = 'line4-gw';

const bdSeq = (m: { payload: { metrics: readonly { name?: string; value: unknown }[] } }) =>
  Number(m.payload.metrics.find((x) => x.name === 'bdSeq')?.value);

/** The Sparkplug uplink bridge to `url`, with the in filters the edge node needs. */
const uplinkBridge = (url: string, extraIn: readonly string[] = []) => ({
  name: 'central',
  remote: { urls: [url], clientId: NODE },
  reconnect: { minDelayMs: 100, maxDelayMs: 200 },
  topics: [
    { filter: 'spBv1.0/#', direction: 'out' },
    { filter: `spBv1.0/${GROUP}/NCMD/${NODE}`, direction: 'in' },
    { filter: `spBv1.0/${GROUP}/DCMD/${NODE}/#`, direction: 'in' },
    ...extraIn.map((filter) => ({ filter, direction: 'in' })),
  ],
});

/** A TCP server that reads CONNECT packets and never answers them: the gateway waits for a CONNACK. */
async function startSilentBroker(port: number): Promise<{ connects: IConnectPacket[]; close(): Promise<void> }> {
  const connects: IConnectPacket[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    const parser = mqttPacket.parser();
    parser.on('packet', (packet) => {
      if (packet.cmd === 'connect') connects.push(packet);
    });
    socket.on('data', (chunk) => parser.parse(chunk));
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    connects,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

const willBdSeq = (connect: IConnectPacket): number =>
  Number(decodePayload(connect.will?.payload as Buffer).metrics.find((m) => m.name === 'bdSeq')?.value);

describe('Sparkplug upstream session', () => {
  it('bdSeq counts CONNECTs sent, not attempts: refused attempts take none, and after a SIGKILL between CONNECT and CONNACK the next NBIRTH and Will carry the next one [tck-id-payloads-nbirth-bdseq-increment] [tck-id-payloads-nbirth-bdseq] [tck-id-payloads-ndeath-bdseq]', async () => {
    const port = await freePort();
    // Nothing listens yet: every attempt is refused before a CONNECT can leave.
    const gw = d.add(
      await startGateway({ bridges: [uplinkBridge(`mqtt://127.0.0.1:${port}`)], sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central' } }, { logLevel: 'debug' }),
    );
    const refused = () => logLines(gw).filter((l) => l.msg === 'uplink error').length;
    await waitFor(() => refused() >= 5, 10_000, { message: 'five refused uplink attempts' });
    const silent = await startSilentBroker(port);
    try {
      await waitFor(() => silent.connects.length > 0, 10_000, { message: 'a CONNECT at the silent broker' });
      // The first CONNECT this node ever sent: bdSeq 0, however many attempts failed before.
      expect(willBdSeq(silent.connects[0])).toBe(0);
      // Killed between CONNECT and CONNACK: bdSeq 0 has been used.
      await gw.kill('SIGKILL');
    } finally {
      await silent.close();
    }
    const central = d.add(await startMosquitto({ port }));
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    await gw.restart();
    await host.waitFor((h) => h.of('NBIRTH').length === 1, 10_000, 'NBIRTH after the restart');
    expect(bdSeq(host.of('NBIRTH')[0])).toBe(1);
    // The Will registered with that CONNECT carries the same bdSeq: the central broker publishes it on a crash.
    await gw.kill('SIGKILL');
    await host.waitFor((h) => h.of('NDEATH').length === 1, 10_000, 'the Will NDEATH after the crash');
    expect(bdSeq(host.of('NDEATH')[0])).toBe(1);
    expect(host.isOnline(NODE)).toBe(false);
    expect(host.violations).toEqual([]);
  });
});
