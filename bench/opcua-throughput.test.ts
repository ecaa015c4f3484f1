/**
 * Throughput of the OPC UA connector: 1,000 monitored items on a node-opcua server, each changing every
 * 100 ms (10,000 value changes/s offered). Measures notifications/s delivered to the TagSink and the CPU share
 * of this process (the connector side) and of the server process. A benchmark, not part of `npm test`:
 *
 *   npm run bench:opcua
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { TagSample, TagSink } from '../connectors/contract.js';
import { OpcuaConnector } from '../connectors/opcua/opcua-connector.js';
import { opcuaConnectorSchema } from '../connectors/opcua/schema.js';
import type { ConnectorError } from '../src/util/errors.js';
import { silentLogger } from '../src/util/logger.js';
import { useDisposer } from '../test/helpers/disposer.js';
import { delay, waitFor } from '../test/helpers/wait.js';
import { startOpcuaFixture } from '../test/fixtures/opcua-fixture.js';

const items = Number(process.env.EDGEFERRY_BENCH_ITEMS ?? 1000);
const intervalMs = 100;
const measureMs = Number(process.env.EDGEFERRY_BENCH_MS ?? 10_000);

/** CPU seconds (user + system) a process has used, from /proc (Linux). */
function processCpuS(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
}

describe('OPC UA connector throughput', () => {
  const d = useDisposer();

  it(`carries ${items} monitored items changing every ${intervalMs} ms without losing changes`, async () => {
    const dir = d.tempDir('edgeferry-opcua-bench-');
    const server = d.add(await startOpcuaFixture({ dir, bulk: items, bulkIntervalMs: intervalMs }));
    const config = opcuaConnectorSchema.parse({
      id: 'bench',
      type: 'opcua',
      endpoint: server.endpoint,
      subscription: { publishingIntervalMs: intervalMs, maxNotificationsPerPublish: 0 },
      tags: Array.from({ length: items }, (_, i) => {
        const name = `B${String(i).padStart(4, '0')}`;
        return {
          name,
          nodeId: `ns=1;s=Fixture.Bulk.${name}`,
          datatype: 'Double',
          samplingIntervalMs: Number(process.env.EDGEFERRY_BENCH_SAMPLING_MS ?? intervalMs),
          queueSize: 2,
        };
      }),
    });
    const connector = d.add(new OpcuaConnector(config, silentLogger, { pkiDir: join(dir, 'client-pki') }));
    let received = 0;
    let batches = 0;
    // B0000's value is the server's tick counter: it tells server-side slowness apart from lost changes.
    let serverTick = 0;
    const losses: ConnectorError[] = [];
    const sink: TagSink = {
      data(samples: readonly TagSample[]) {
        received += samples.length;
        batches++;
        for (const s of samples) if (s.name === 'B0000') serverTick = s.value as number;
      },
      lost(err) {
        losses.push(err);
      },
    };
    const startedAt = Date.now();
    await connector.start(sink);
    const startMs = Date.now() - startedAt;
    await waitFor(() => received >= items, 30_000); // every item's first value
    await delay(2000); // settle

    const r0 = received;
    const b0 = batches;
    const tick0 = serverTick;
    const cpu0 = process.cpuUsage();
    const serverCpu0 = processCpuS(server.pid!);
    const t0 = performance.now();
    await delay(measureMs);
    const elapsedS = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const serverCpuS = processCpuS(server.pid!) - serverCpu0;
    const rate = (received - r0) / elapsedS;
    const serverChangesPerS = ((serverTick - tick0) * items) / elapsedS;
    const clientCpuShare = (cpu.user + cpu.system) / 1e6 / elapsedS;
    const report = {
      items,
      intervalMs,
      offeredPerS: (items * 1000) / intervalMs,
      serverChangesPerS: Math.round(serverChangesPerS),
      deliveredPerS: Math.round(rate),
      samplesPerBatch: Math.round((received - r0) / Math.max(1, batches - b0)),
      connectorCpuShareOfOneCore: Number(clientCpuShare.toFixed(3)),
      serverCpuShareOfOneCore: Number((serverCpuS / elapsedS).toFixed(3)),
      startMs,
    };
    process.stdout.write(`opcua throughput: ${JSON.stringify(report)}\n`);
    expect(losses).toEqual([]);
    // Every change the server made arrives (the server itself may fall behind 10,000/s on a loaded machine).
    expect(rate).toBeGreaterThan(0.9 * serverChangesPerS);
  }, 180_000);
});
