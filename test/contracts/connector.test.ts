/**
 * The connector contract (connectors/contract.ts), one suite run against every connector type with its real device:
 * Modbus TCP against pymodbus, OPC UA against a node-opcua server, S7 against snap7's S7 server. What `sparkplug/device.ts` relies on: start
 * delivers samples of every tag, a lost device is reported (never retried by the connector), a second start after
 * the device returns works, a write is read back from the device, a value that does not fit the tag is refused
 * before any I/O, and stop is idempotent and ends the samples (docs/architecture.md#connectors).
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ValueRefusedError, type Connector, type TagSample, type TagSink } from '../../connectors/contract.js';
import { createConnectorRegistry } from '../../connectors/index.js';
import { modbusConnectorSchema } from '../../connectors/modbus/schema.js';
import { opcuaConnectorSchema } from '../../connectors/opcua/schema.js';
import { s7ConnectorSchema } from '../../connectors/s7/schema.js';
import { ConnectorError } from '../../src/util/errors.js';
import { silentLogger } from '../../src/util/logger.js';
import { startOpcuaFixture } from '../fixtures/opcua-fixture.js';
import { startS7Fixture } from '../fixtures/s7-fixture.js';
import { startModbusSim } from '../helpers/modbus-sim.js';
import { removeDir, tempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';

/** One device, as the suite needs it: a writable Int16 tag `mode` holding 1, and ways to lose and bring it back. */
interface Rig {
  connector(): Connector;
  /** The device stops answering or goes away. */
  lose(): Promise<void>;
  /** The device is back. */
  restore(): Promise<void>;
  /** Whether the device saw a write since `markWrites()`, where the rig can tell (undefined where it cannot). */
  wroteSinceMark(): Promise<boolean | undefined>;
  markWrites(): Promise<void>;
  dispose(): Promise<void>;
}

const rigs: { name: string; start: () => Promise<Rig> }[] = [
  {
    name: 'modbus (TCP, pymodbus)',
    async start() {
      const sim = await startModbusSim();
      await sim.set(1, 'hr', 0, [1]);
      const registry = createConnectorRegistry();
      const dataDir = tempDir('edgeferry-contract-modbus-');
      return {
        connector: () =>
          registry.create(
            modbusConnectorSchema.parse({
              id: 'press',
              type: 'modbus',
              transport: 'tcp',
              host: '127.0.0.1',
              port: sim.port,
              addressBase: 0,
              pollIntervalMs: 100,
              timeoutMs: 300,
              retries: 0,
              tags: [{ name: 'mode', table: 'holding', address: 0, datatype: 'int16', writable: true }],
            }),
            { log: silentLogger, dataDir },
          ),
        lose: () => sim.mute(1),
        restore: () => sim.unmute(1),
        markWrites: () => sim.resetRequests(),
        wroteSinceMark: async () => (await sim.requests()).some((r) => r.op === 'write'),
        dispose: async () => {
          await sim.dispose();
          removeDir(dataDir);
        },
      };
    },
  },
  {
    name: 'opcua (node-opcua server)',
    async start() {
      const dir = tempDir('edgeferry-contract-opcua-');
      const server = await startOpcuaFixture({ dir });
      const registry = createConnectorRegistry();
      let marked = 0;
      return {
        connector: () =>
          registry.create(
            opcuaConnectorSchema.parse({
              id: 'press',
              type: 'opcua',
              endpoint: server.endpoint,
              tags: [{ name: 'mode', nodeId: 'ns=1;s=Fixture.Writable.Mode', datatype: 'Int16', writable: true }],
            }),
            { log: silentLogger, dataDir: join(dir, 'gateway-data') },
          ),
        lose: () => server.kill(),
        restore: () => server.restart(),
        markWrites: async () => {
          marked = server.events.length;
        },
        // The fixture reports writes of its clamping node only; for others the value read afterwards tells.
        wroteSinceMark: async () => (server.events.length > marked ? true : undefined),
        dispose: async () => {
          await server.stop();
          removeDir(dir);
        },
      };
    },
  },
  {
    name: 's7 (snap7 server)',
    async start() {
      const plc = await startS7Fixture();
      await plc.register('DB', 1, 4);
      await plc.set('DB', 1, 0, Buffer.from([0, 1]));
      const registry = createConnectorRegistry();
      const dataDir = tempDir('edgeferry-contract-s7-');
      let marked: Buffer = Buffer.alloc(0);
      const memory = () => plc.get('DB', 1, 0, 4);
      return {
        connector: () =>
          registry.create(
            s7ConnectorSchema.parse({
              id: 'press',
              type: 's7',
              host: '127.0.0.1',
              port: plc.port,
              pollIntervalMs: 100,
              timeoutMs: 300,
              retries: 0,
              tags: [{ name: 'mode', address: 'DB1,INT0', writable: true }],
            }),
            { log: silentLogger, dataDir },
          ),
        lose: () => plc.stop(),
        restore: () => plc.start(),
        markWrites: async () => {
          marked = await memory();
        },
        // Every value the suite writes after a mark differs from the one held: a write changes the memory.
        wroteSinceMark: async () => !(await memory()).equals(marked),
        dispose: async () => {
          await plc.dispose();
          removeDir(dataDir);
        },
      };
    },
  },
];

class Sink implements TagSink {
  readonly samples: TagSample[] = [];
  readonly losses: ConnectorError[] = [];
  data(samples: readonly TagSample[]): void {
    this.samples.push(...samples);
  }
  lost(err: ConnectorError): void {
    this.losses.push(err);
  }
  latest(): TagSample | undefined {
    return this.samples.at(-1);
  }
}

describe.each(rigs)('connector contract: $name', { timeout: 120_000 }, ({ start }) => {
  let rig: Rig;
  beforeAll(async () => {
    rig = await start();
  }, 180_000);
  afterAll(async () => {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
    await rig?.dispose();
  });

  /** Runs `fn` with a started connector once its first sample is in; stops it afterwards, whatever happens. */
  async function withStarted(fn: (c: Connector, sink: Sink) => Promise<void>): Promise<void> {
    const c = rig.connector();
    const sink = new Sink();
    await c.start(sink);
    try {
      await waitFor(() => sink.samples.length > 0, 10_000);
      await fn(c, sink);
    } finally {
      await c.stop();
    }
  }

  const failure = (p: Promise<unknown>): Promise<unknown> =>
    p.then(
      () => undefined,
      (e: unknown) => e,
    );

  it('start delivers good samples of every tag, with the device value and a timestamp', async () => {
    await withStarted(async (c, sink) => {
      expect(c.id).toBe('press');
      expect(c.tags).toEqual([expect.objectContaining({ name: 'mode', datatype: 'Int16', writable: true })]);
      expect(sink.latest()).toMatchObject({ name: 'mode', value: 1, quality: 'good' });
      expect(Math.abs(sink.latest()!.timestamp - Date.now())).toBeLessThan(60_000);
    });
  });

  it('writes a value and reads it back from the device; the next samples carry it', async () => {
    await withStarted(async (c, sink) => {
      expect(await c.write('mode', 7)).toMatchObject({ value: 7, matches: true });
      await waitFor(() => sink.latest()?.value === 7, 10_000);
      await c.write('mode', 1);
      await waitFor(() => sink.latest()?.value === 1, 10_000);
    });
  });

  it('refuses a value that does not fit the tag before any I/O, and the device keeps its value', async () => {
    await withStarted(async (c, sink) => {
      await rig.markWrites();
      for (const value of [70_000, -40_000, 1.5, Number.NaN, 'seven']) {
        expect(await failure(c.write('mode', value)), String(value)).toBeInstanceOf(ValueRefusedError);
      }
      expect(await rig.wroteSinceMark()).not.toBe(true);
      expect(sink.latest()?.value).toBe(1);
      // An unknown tag is an error of its own, not a refusal of the value.
      const unknown = await failure(c.write('nope', 1));
      expect(unknown).toBeInstanceOf(ConnectorError);
      expect(unknown).not.toBeInstanceOf(ValueRefusedError);
    });
  });

  it('reports a lost device once and does not retry on its own; a start after it returns delivers again', async () => {
    await withStarted(async (c, sink) => {
      await rig.lose();
      let restored = false;
      try {
        await waitFor(() => sink.losses.length > 0, 30_000);
        expect(sink.losses[0]).toBeInstanceOf(ConnectorError);
        expect(sink.losses[0].connectorId).toBe('press');
        await c.stop();
        const afterStop = sink.samples.length;
        expect(sink.losses).toHaveLength(1);
        await rig.restore();
        restored = true;
        const again = new Sink();
        await c.start(again);
        await waitFor(() => again.samples.length > 0, 30_000);
        expect(again.latest()).toMatchObject({ name: 'mode', quality: 'good' });
        expect(sink.samples.length).toBe(afterStop); // the first sink hears nothing after stop
      } finally {
        if (!restored) await rig.restore(); // for the tests after this one
      }
    });
  });

  it('stops idempotently: no samples after stop, a second stop resolves', async () => {
    const c = rig.connector();
    const sink = new Sink();
    await c.start(sink);
    await waitFor(() => sink.samples.length > 0, 10_000);
    await c.stop();
    const count = sink.samples.length;
    await c.stop();
    // A start after it delivers to a new sink: the same device, read as the stopped one would be. Once that one has
    // samples, the first sink would have heard something too, were the connector still running.
    const again = new Sink();
    await c.start(again);
    await waitFor(() => again.samples.length > 0, 10_000);
    await c.stop();
    expect(sink.samples.length).toBe(count);
    expect(sink.losses).toEqual([]);
  });
});
