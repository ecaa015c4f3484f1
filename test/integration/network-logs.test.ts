/**
 * Expected network trouble is one log line with its cause in words, never a stack (docs/architecture.md#errors-and-logs):
 * the real gateway process with a bridge and a Modbus device both pointed at ports nobody listens on, in JSON and
 * in the pretty format a terminal gets. Run `npm run build` first.
 */
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch, logLines, startGateway } from '../helpers/gateway.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

/** A bridge to `uplinkPort` and a Modbus unit at `devicePort`, neither of which anybody listens on. */
function unreachable(uplinkPort: number, devicePort: number, format: 'json' | 'pretty') {
  return {
    log: { level: 'warn', format },
    sparkplug: { groupId: 'plant1', edgeNodeId: 'line4-gw', deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 } },
    connectors: [
      {
        id: 'press-1',
        type: 'modbus',
        transport: 'tcp',
        host: '127.0.0.1',
        port: devicePort,
        unitId: 1,
        addressBase: 0,
        pollIntervalMs: 100,
        timeoutMs: 1500,
        retries: 0,
        tags: [{ name: 'count', table: 'holding', address: 2, datatype: 'uint32' }],
      },
    ],
    ...bridgePatch(`mqtt://127.0.0.1:${uplinkPort}`),
  };
}

describe('expected network events in the log', () => {
  it('are one JSON line each with the cause in words and its details as fields, without a stack', async () => {
    const [uplinkPort, devicePort] = [await freePort(), await freePort()];
    const gw = d.add(await startGateway(unreachable(uplinkPort, devicePort, 'json')));
    const find = (prefix: string) => logLines(gw).find((l) => typeof l.msg === 'string' && l.msg.startsWith(prefix));
    const uplink = await waitFor(() => find('uplink offline; buffering'), 10_000);
    const device = await waitFor(() => find('device unreachable; retrying'), 10_000);

    expect(uplink).toMatchObject({
      msg: `uplink offline; buffering (mqtt://127.0.0.1:${uplinkPort}: connection refused)`,
      code: 'EF_UPLINK_CONNECT',
      reason: `mqtt://127.0.0.1:${uplinkPort}: connection refused`,
      errno: 'ECONNREFUSED',
      syscall: 'connect',
      address: '127.0.0.1',
      port: uplinkPort,
    });
    expect(device).toMatchObject({
      msg: `device unreachable; retrying (unit 1 at tcp://127.0.0.1:${devicePort}: connect: connection refused)`,
      code: 'EF_CONNECTOR_UNREACHABLE',
      reason: `unit 1 at tcp://127.0.0.1:${devicePort}: connect: connection refused`,
    });
    for (const line of [uplink, device]) {
      expect(line).not.toHaveProperty('err');
      expect(JSON.stringify(line)).not.toContain('stack');
    }
  });

  it('are one line each on a terminal (pino-pretty)', async () => {
    const [uplinkPort, devicePort] = [await freePort(), await freePort()];
    const gw = d.add(await startGateway(unreachable(uplinkPort, devicePort, 'pretty')));
    await waitFor(
      () => gw.output().includes('device unreachable; retrying') && gw.output().includes('uplink offline; buffering'),
      10_000,
    );
    const lines = gw.output().split('\n');
    for (const what of ['uplink offline; buffering (', 'device unreachable; retrying (']) {
      const at = lines.findIndex((l) => l.includes(what));
      expect(lines[at]).toMatch(/^\[.*\] WARN \(\d+\): .*connection refused\) \{.*"code":"EF_/);
      // The next line is the next event (or the end), not a field or a stack frame of this one.
      expect(lines[at + 1] ?? '').not.toMatch(/^\s/);
    }
    expect(gw.output()).not.toContain('    at ');
  });
});
