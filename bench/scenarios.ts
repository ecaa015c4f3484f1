/**
 * The benchmark scenarios. Each runs against one freshly started broker and returns plain numbers.
 */
import { readCpuS, readRssKb, type RunningBroker } from './brokers.js';
import type { CollectResult, Endpoint, ErrorReport, IdleResult, PublishMode, PublishResult } from './loadgen.js';
import type { LoadgenWorker } from './worker-pool.js';

export const scenarioNames = [
  'qos0-fanin',
  'qos1-fanin',
  'qos0-fanout',
  'latency-qos0',
  'latency-qos1',
  'qos0-overload',
  'qos1-overload',
  'idle-rss',
] as const;
export type ScenarioName = (typeof scenarioNames)[number];

export function isScenarioName(value: string): value is ScenarioName {
  return (scenarioNames as readonly string[]).includes(value);
}

export interface ScenarioOptions {
  durationMs: number; // throughput scenarios
  latencyDurationMs: number;
  /** Published before `latencyDurationMs` at the same rate, not measured (connection warm-up, JIT, heap growth). */
  latencyWarmupMs: number;
  latencyRatePerS: number;
  idleConnections: number;
  payloadBytes: number;
}

export interface ThroughputMetrics {
  kind: 'throughput';
  deliveredPerS: number;
  sent: number;
  expected: number; // sent x matching subscribers
  delivered: number;
  lost: number;
  lossPct: number;
  brokerCpuPct: number; // of one core, over the whole run (publishing + drain)
  generatorCpuPct: number; // all load generator processes together
  brokerRssAfterKb: number;
  drained: boolean; // publishers drained and (QoS 1) got every PUBACK
  truncated: boolean; // subscribers still receiving when the collect deadline hit
  workerErrors: ErrorReport;
}

export interface LatencyMetrics {
  kind: 'latency';
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  samples: number;
  sent: number;
  delivered: number;
  lost: number;
  achievedRatePerS: number;
  brokerCpuPct: number;
  workerErrors: ErrorReport;
}

export interface RssMetrics {
  kind: 'rss';
  /** RSS growth over all connections, divided by them. */
  kbPerConnection: number;
  /**
   * RSS growth over the second half of the connections, divided by them: without what a process grows by once
   * (its young generation growing to its full size, a Node process's 16-32 MB), which the first half pays.
   */
  kbPerConnectionMarginal: number;
  connected: number;
  failed: number;
  rssBeforeKb: number;
  /** After the first half. */
  rssHalfKb: number;
  rssAfterKb: number;
  firstError: string | null;
  workerErrors: ErrorReport;
}

/**
 * More offered than the broker can deliver: publishers that do not wait for the subscriber (QoS 0 as fast as the
 * broker reads; QoS 1 with 16 in flight each, acknowledged by the broker, not the subscriber).
 */
export interface OverloadMetrics {
  kind: 'overload';
  /** Messages the broker took (QoS 1: acknowledged) per second of publishing. */
  acceptedPerS: number;
  /** Messages delivered to the subscriber per second of publishing, counting only those that arrived by its end. */
  deliveredPerS: number;
  /** Seconds from the end of publishing to the last delivery: what the broker had piled up. */
  drainS: number;
  /** Accepted messages never delivered, per cent. */
  dropPct: number;
  p50Ms: number;
  p99Ms: number;
  /** The broker's largest RSS during the run. */
  rssPeakKb: number;
  brokerCpuPct: number;
  workerErrors: ErrorReport;
}

export type ScenarioMetrics = ThroughputMetrics | LatencyMetrics | RssMetrics | OverloadMetrics;

export interface ScenarioContext {
  broker: RunningBroker;
  workers: LoadgenWorker[];
  options: ScenarioOptions;
  runTag: string; // unique per run: client ids never collide with a previous run's
}

interface Placement {
  worker: LoadgenWorker;
  clients: Endpoint[];
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Deal `count` endpoints over `workers` round robin. */
function place(workers: LoadgenWorker[], count: number, make: (i: number) => Endpoint): Placement[] {
  const placements = workers.map((worker) => ({ worker, clients: [] as Endpoint[] }));
  for (let i = 0; i < count; i++) placements[i % placements.length].clients.push(make(i));
  return placements.filter((p) => p.clients.length > 0);
}

function cpuSum(pids: number[]): number {
  return pids.reduce((sum, pid) => sum + readCpuS(pid), 0);
}

async function closeAll(workers: LoadgenWorker[]): Promise<ErrorReport> {
  const reports = await Promise.all(workers.map((w) => w.call<ErrorReport, 'closeAll'>('closeAll', {})));
  return {
    socketErrors: reports.reduce((sum, r) => sum + r.socketErrors, 0),
    unexpectedCloses: reports.reduce((sum, r) => sum + r.unexpectedCloses, 0),
    firstError: reports.find((r) => r.firstError !== null)?.firstError ?? null,
  };
}

interface FlowSpec {
  qos: 0 | 1;
  publishers: number;
  subscribers: number;
  mode: PublishMode;
  latency: boolean;
  warmupSeq: number;
  pubWorkers: LoadgenWorker[];
  subWorkers: LoadgenWorker[];
}

interface FlowResult {
  pub: PublishResult[];
  sub: CollectResult[];
  subscriberCount: number;
  wallS: number;
  brokerCpuS: number;
  generatorCpuS: number;
  workerErrors: ErrorReport;
  brokerRssAfterKb: number;
}

/** Subscribers first, then publishers, then publish, then wait for the subscribers to drain. */
async function runFlow(ctx: ScenarioContext, spec: FlowSpec): Promise<FlowResult> {
  const { broker, workers, runTag } = ctx;
  try {
    const subs = place(spec.subWorkers, spec.subscribers, (i) => ({ clientId: `${runTag}-s${i}`, topic: 'bench/#' }));
    await Promise.all(
      subs.map((p) =>
        p.worker.call('subscribe', {
          port: broker.port,
          clients: p.clients,
          qos: spec.qos,
          latency: spec.latency,
          warmupSeq: spec.warmupSeq,
          trackSeq: spec.mode.type === 'flood',
        }),
      ),
    );
    const pubs = place(spec.pubWorkers, spec.publishers, (i) => ({
      clientId: `${runTag}-p${i}`,
      topic: `bench/p${i}`,
    }));
    await Promise.all(
      pubs.map((p) =>
        p.worker.call('pubConnect', {
          port: broker.port,
          clients: p.clients,
          qos: spec.qos,
          payloadBytes: ctx.options.payloadBytes,
        }),
      ),
    );
    const workerPids = workers.map((w) => w.pid);
    const cpu0 = readCpuS(broker.pid);
    const gen0 = cpuSum(workerPids);
    const wall0 = process.hrtime.bigint();
    const pub = await Promise.all(pubs.map((p) => p.worker.call<PublishResult, 'pubRun'>('pubRun', spec.mode)));
    const sent = pub.reduce((sum, r) => sum + r.sent, 0);
    const cutoffNs = pub.reduce((max, r) => (BigInt(r.endNs) > max ? BigInt(r.endNs) : max), 0n).toString();
    // Quiet period: a broker that stalls longer than this mid-drain would be counted as losing the rest.
    const deadlineMs = Math.max(10_000, 3 * spec.mode.durationMs);
    const sub = await Promise.all(
      subs.map((p) =>
        p.worker.call<CollectResult, 'collect'>('collect', {
          expected: sent * p.clients.length,
          quietMs: 500,
          deadlineMs,
          cutoffNs,
        }),
      ),
    );
    const wallS = Number(process.hrtime.bigint() - wall0) / 1e9;
    const brokerCpuS = readCpuS(broker.pid) - cpu0;
    const generatorCpuS = cpuSum(workerPids) - gen0;
    const brokerRssAfterKb = readRssKb(broker.pid);
    const subscriberCount = subs.reduce((sum, p) => sum + p.clients.length, 0);
    return {
      pub,
      sub,
      subscriberCount,
      wallS,
      brokerCpuS,
      generatorCpuS,
      workerErrors: await closeAll(workers),
      brokerRssAfterKb,
    };
  } catch (err) {
    await closeAll(workers).catch((closeErr: unknown) => {
      throw new Error(`${String(err)}; closing the load generators failed too: ${String(closeErr)}`, { cause: err });
    });
    throw err;
  }
}

async function throughput(
  ctx: ScenarioContext,
  qos: 0 | 1,
  publishers: number,
  subscribers: number,
): Promise<ThroughputMetrics> {
  const [w0] = ctx.workers;
  const durationMs = ctx.options.durationMs;
  // About 20,000 (fan-in) or 50,000 (fan-out) deliveries outstanding: enough that the broker never waits
  // for the generator, small enough that the drain after the flood is short.
  const backlogMessages = subscribers > 1 ? 1024 : 2048;
  const flow = await runFlow(ctx, {
    qos,
    publishers,
    subscribers,
    mode: qos === 0 ? { type: 'flood', durationMs, backlogMessages } : { type: 'window', durationMs, window: 16 },
    latency: false,
    warmupSeq: 0,
    // Publishers and subscribers share one process: the flood's flow control reads the subscribers'
    // progress without IPC, and on 2 cores the broker gets one core and the generator the other.
    pubWorkers: [w0],
    subWorkers: [w0],
  });
  const sent = flow.pub.reduce((sum, r) => sum + r.sent, 0);
  const delivered = flow.sub.reduce((sum, r) => sum + r.delivered, 0);
  const startNs = flow.pub.reduce(
    (min, r) => (BigInt(r.startNs) < min ? BigInt(r.startNs) : min),
    BigInt(flow.pub[0].startNs),
  );
  const lastNs = flow.sub.reduce((max, r) => (BigInt(r.lastNs) > max ? BigInt(r.lastNs) : max), 0n);
  const spanS = Number(lastNs - startNs) / 1e9;
  const expected = sent * flow.subscriberCount;
  return {
    kind: 'throughput',
    // From the first PUBLISH written to the last one delivered: a broker that buffers and drains late pays
    // for the drain.
    deliveredPerS: spanS > 0 ? delivered / spanS : 0,
    sent,
    expected,
    delivered,
    lost: expected - delivered,
    lossPct: expected > 0 ? (100 * (expected - delivered)) / expected : 0,
    brokerCpuPct: (100 * flow.brokerCpuS) / flow.wallS,
    generatorCpuPct: (100 * flow.generatorCpuS) / flow.wallS,
    brokerRssAfterKb: flow.brokerRssAfterKb,
    drained: flow.pub.every((r) => r.drained),
    truncated: flow.sub.some((r) => r.truncated),
    workerErrors: flow.workerErrors,
  };
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[index];
}

async function latency(ctx: ScenarioContext, qos: 0 | 1): Promise<LatencyMetrics> {
  const [w0, w1] = ctx.workers;
  const { latencyRatePerS, latencyDurationMs, latencyWarmupMs } = ctx.options;
  const flow = await runFlow(ctx, {
    qos,
    publishers: 1,
    subscribers: 1,
    mode: { type: 'rate', durationMs: latencyWarmupMs + latencyDurationMs, ratePerS: latencyRatePerS },
    latency: true,
    warmupSeq: Math.round((latencyRatePerS * latencyWarmupMs) / 1000),
    pubWorkers: [w1],
    subWorkers: [w0],
  });
  const samples = flow.sub.flatMap((r) => r.latenciesMs).sort((a, b) => a - b);
  const sent = flow.pub.reduce((sum, r) => sum + r.sent, 0);
  const delivered = flow.sub.reduce((sum, r) => sum + r.delivered, 0);
  return {
    kind: 'latency',
    p50Ms: percentile(samples, 50),
    p99Ms: percentile(samples, 99),
    maxMs: samples.length > 0 ? samples[samples.length - 1] : Number.NaN,
    samples: samples.length,
    sent,
    delivered,
    lost: sent - delivered,
    achievedRatePerS: sent / (Number(BigInt(flow.pub[0].endNs) - BigInt(flow.pub[0].startNs)) / 1e9),
    brokerCpuPct: (100 * flow.brokerCpuS) / flow.wallS,
    workerErrors: flow.workerErrors,
  };
}

async function overload(ctx: ScenarioContext, qos: 0 | 1): Promise<OverloadMetrics> {
  const [w0, w1] = ctx.workers;
  const durationMs = ctx.options.durationMs;
  let rssPeakKb = readRssKb(ctx.broker.pid);
  const sampler = setInterval(() => {
    try {
      rssPeakKb = Math.max(rssPeakKb, readRssKb(ctx.broker.pid));
    } catch {
      // A broker that died under the load (a zombie has no VmRSS) keeps the peak seen; the run reports its exit.
      clearInterval(sampler);
    }
  }, 100);
  try {
    const flow = await runFlow(ctx, {
      qos,
      publishers: 10,
      subscribers: 1,
      mode:
        qos === 0
          ? { type: 'flood', durationMs, backlogMessages: 0, stamp: true }
          : { type: 'window', durationMs, window: 16, stamp: true },
      latency: true,
      warmupSeq: 0,
      // The subscriber in a process of its own: the publishers' loop must not slow the delivery side down.
      pubWorkers: [w1],
      subWorkers: [w0],
    });
    const publishS = flow.pub.reduce((max, r) => Math.max(max, Number(BigInt(r.endNs) - BigInt(r.startNs)) / 1e9), 0);
    const accepted = flow.pub.reduce((sum, r) => sum + (qos === 0 ? r.sent : r.acked), 0);
    const delivered = flow.sub.reduce((sum, r) => sum + r.delivered, 0);
    const endNs = flow.pub.reduce((max, r) => (BigInt(r.endNs) > max ? BigInt(r.endNs) : max), 0n);
    const lastNs = flow.sub.reduce((max, r) => (BigInt(r.lastNs) > max ? BigInt(r.lastNs) : max), 0n);
    const samples = flow.sub.flatMap((r) => r.latenciesMs).sort((a, b) => a - b);
    return {
      kind: 'overload',
      acceptedPerS: accepted / publishS,
      deliveredPerS: flow.sub.reduce((sum, r) => sum + r.deliveredByCutoff, 0) / publishS,
      drainS: lastNs > endNs ? Number(lastNs - endNs) / 1e9 : 0,
      dropPct: accepted > 0 ? (100 * Math.max(0, accepted - delivered)) / accepted : 0,
      p50Ms: percentile(samples, 50),
      p99Ms: percentile(samples, 99),
      rssPeakKb,
      brokerCpuPct: (100 * flow.brokerCpuS) / flow.wallS,
      workerErrors: flow.workerErrors,
    };
  } finally {
    clearInterval(sampler);
  }
}

/** Resident memory the broker holds per idle connection; RSS is read once it stops moving. */
async function idleRss(ctx: ScenarioContext): Promise<RssMetrics> {
  const { broker, workers, options, runTag } = ctx;
  const settledRss = async (): Promise<number> => {
    let previous = readRssKb(broker.pid);
    for (let i = 0; i < 12; i++) {
      await sleep(250);
      const current = readRssKb(broker.pid);
      if (Math.abs(current - previous) < 64) return current;
      previous = current;
    }
    return previous;
  };
  /** Opens `count` more idle connections, spread over the workers (each keeps its connections open). */
  const connect = async (count: number, phase: string): Promise<IdleResult[]> => {
    const perWorker = Math.ceil(count / workers.length);
    return Promise.all(
      workers.map((worker, i) =>
        worker.call<IdleResult, 'connectIdle'>('connectIdle', {
          port: broker.port,
          prefix: `${runTag}-${phase}${i}`,
          count: Math.min(perWorker, Math.max(0, count - i * perWorker)),
          concurrency: 100,
        }),
      ),
    );
  };
  const rssBeforeKb = await settledRss();
  try {
    const firstHalf = Math.floor(options.idleConnections / 2);
    const first = await connect(firstHalf, 'a');
    const rssHalfKb = await settledRss();
    const second = await connect(options.idleConnections - firstHalf, 'b');
    const rssAfterKb = await settledRss();
    const results = [...first, ...second];
    const connected = results.reduce((sum, r) => sum + r.connected, 0);
    const connectedSecond = second.reduce((sum, r) => sum + r.connected, 0);
    return {
      kind: 'rss',
      kbPerConnection: connected > 0 ? (rssAfterKb - rssBeforeKb) / connected : Number.NaN,
      kbPerConnectionMarginal: connectedSecond > 0 ? (rssAfterKb - rssHalfKb) / connectedSecond : Number.NaN,
      connected,
      failed: results.reduce((sum, r) => sum + r.failed, 0),
      rssBeforeKb,
      rssHalfKb,
      rssAfterKb,
      firstError: results.find((r) => r.firstError !== null)?.firstError ?? null,
      workerErrors: await closeAll(workers),
    };
  } catch (err) {
    await closeAll(workers).catch((closeErr: unknown) => {
      throw new Error(`${String(err)}; closing the load generators failed too: ${String(closeErr)}`, { cause: err });
    });
    throw err;
  }
}

export function runScenario(name: ScenarioName, ctx: ScenarioContext): Promise<ScenarioMetrics> {
  switch (name) {
    case 'qos0-fanin':
      return throughput(ctx, 0, 10, 1);
    case 'qos1-fanin':
      return throughput(ctx, 1, 10, 1);
    case 'qos0-fanout':
      return throughput(ctx, 0, 1, 50);
    case 'latency-qos0':
      return latency(ctx, 0);
    case 'latency-qos1':
      return latency(ctx, 1);
    case 'qos0-overload':
      return overload(ctx, 0);
    case 'qos1-overload':
      return overload(ctx, 1);
    case 'idle-rss':
      return idleRss(ctx);
  }
}

function latencyTitle(o: ScenarioOptions, qos: 0 | 1): string {
  const subscriber = qos === 0 ? '1 subscriber' : '1 QoS 1 subscriber';
  return `Latency QoS ${qos}: 1 publisher -> ${subscriber} at ${o.latencyRatePerS} msg/s, ${o.latencyDurationMs / 1000} s measured after ${o.latencyWarmupMs / 1000} s`;
}

export const scenarioTitles: Record<ScenarioName, (o: ScenarioOptions) => string> = {
  'qos0-fanin': (o) =>
    `QoS 0 fan-in: 10 publishers -> 1 subscriber on bench/#, ${o.payloadBytes} B payloads, ${o.durationMs / 1000} s flood`,
  'qos1-fanin': (o) =>
    `QoS 1 fan-in: 10 publishers (16 in flight each) -> 1 QoS 1 subscriber on bench/#, ${o.payloadBytes} B, ${o.durationMs / 1000} s`,
  'qos0-fanout': (o) =>
    `QoS 0 fan-out: 1 publisher -> 50 subscribers on bench/#, ${o.payloadBytes} B payloads, ${o.durationMs / 1000} s flood`,
  'latency-qos0': (o) => latencyTitle(o, 0),
  'latency-qos1': (o) => latencyTitle(o, 1),
  'qos0-overload': (o) =>
    `QoS 0 overload: 10 publishers as fast as the broker reads -> 1 subscriber, ${o.payloadBytes} B, ${o.durationMs / 1000} s (accepted = written)`,
  'qos1-overload': (o) =>
    `QoS 1 overload: 10 publishers (16 in flight each, not waiting for the subscriber) -> 1 QoS 1 subscriber, ${o.payloadBytes} B, ${o.durationMs / 1000} s`,
  'idle-rss': (o) =>
    `RSS per idle connection: ${o.idleConnections} MQTT 3.1.1 connections, keepalive 0, no subscriptions`,
};
