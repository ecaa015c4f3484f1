/**
 * The measuring half of the polling connector benchmarks (modbus-bench.ts, s7-bench.ts): their connectors behind
 * the real edge node and broker in this process, with a local subscriber counting DDATA bytes; after a warm-up,
 * one window of `seconds`, measured the same way for every connector type. Each bench brings its devices and
 * connectors and adds its own counters (requests sent) through `counters`, read at both ends of the window.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Connector } from '../connectors/contract.js';
import type { PollStats } from '../connectors/polling.js';
import { Broker } from '../src/broker/broker.js';
import { EdgeNode } from '../src/sparkplug/edge-node.js';
import { sparkplugSchema } from '../src/sparkplug/schema.js';
import { createMemoryStore } from '../src/store/memory.js';
import { silentLogger } from '../src/util/logger.js';

export interface PolledConnector extends Connector {
  readLatencyMs(p: number): number;
  readonly stats: { readonly poll: PollStats };
}

export interface Window<T> {
  readonly wallS: number;
  /** `counters()` at the start and at the end of the window. */
  readonly start: T;
  readonly end: T;
  /** Tag samples read per second, over every device. */
  readonly tagsPerS: number;
  /** The figures every polling bench reports. */
  readonly common: Record<string, number>;
}

/** A data directory for the connectors and the edge node, removed by `measure`. */
export const benchStateDir = (): string => mkdtempSync(join(tmpdir(), 'edgeferry-bench-'));

export async function measure<T>(
  stateDir: string,
  connectors: readonly PolledConnector[],
  options: { warmupS: number; seconds: number; counters: () => T | Promise<T> },
): Promise<Window<T>> {
  const store = createMemoryStore();
  const broker = new Broker({
    limits: { maxInflight: 20, maxQueuedMessages: 1000, maxQueuedBytes: 0 },
    store,
    log: silentLogger,
  });
  const node = new EdgeNode({
    config: sparkplugSchema.parse({ groupId: 'bench', edgeNodeId: 'gw' }),
    broker,
    connectors: [...connectors],
    stateDir,
    log: silentLogger,
  });
  // A local subscriber, as a local host application would be (no decoding: it only counts bytes).
  let ddataBytes = 0;
  broker.subscribe('spBv1.0/bench/DDATA/#', { qos: 0, origin: 'bench-host' }, (msg) => {
    ddataBytes += msg.payload.length;
  });
  await node.start();
  await new Promise((r) => setTimeout(r, options.warmupS * 1000));

  const samples = () => node.deviceList.reduce((n, d) => n + d.stats.samples, 0);
  const changes = () => node.deviceList.reduce((n, d) => n + d.stats.changes, 0);
  const before = {
    wallMs: performance.now(),
    cpu: process.cpuUsage(),
    samples: samples(),
    changes: changes(),
    ddata: node.stats.dataMessages,
    bytes: ddataBytes,
    counters: await options.counters(),
  };
  await new Promise((r) => setTimeout(r, options.seconds * 1000));
  const wallS = (performance.now() - before.wallMs) / 1000;
  const cpu = process.cpuUsage(before.cpu);
  const end = await options.counters();
  const tagsPerS = (samples() - before.samples) / wallS;
  const latency = (p: number) => Number(Math.max(...connectors.map((c) => c.readLatencyMs(p))).toFixed(2));
  const common = {
    seconds: Number(wallS.toFixed(2)),
    tagsPerS: Math.round(tagsPerS),
    ddataPerS: Math.round((node.stats.dataMessages - before.ddata) / wallS),
    metricsPublishedPerS: Math.round((changes() - before.changes) / wallS),
    ddataBytesPerS: Math.round((ddataBytes - before.bytes) / wallS),
    pollCycleP50Ms: latency(0.5),
    pollCycleP99Ms: latency(0.99),
    pollOverruns: connectors.reduce((n, c) => n + c.stats.poll.overruns, 0),
    cpuSharePercentOfOneCore: Number((((cpu.user + cpu.system) / 1000 / (wallS * 1000)) * 100).toFixed(1)),
    loadAverage1m: loadavg()[0],
  };
  await node.stop();
  broker.close();
  await store.close();
  rmSync(stateDir, { recursive: true, force: true });
  return { wallS, start: before.counters, end, tagsPerS, common };
}
