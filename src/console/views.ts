/**
 * The console's views as plain JSON-ready objects, built from the gateway's objects (`ConsoleSources`) when
 * asked: the `/api/...` answers and the live stream's ticks are these same objects. Rates and charts come from
 * the `Sampler`, which reads the counters every SAMPLE_MS and keeps an hour of history.
 */
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import type { TagValue } from '../../connectors/contract.js';
import type { ConsoleSources } from './sources.js';

export const SAMPLE_MS = 2000;
/** The loop-delay timer's period: its samples include it, so it is taken off the mean. */
const LAG_RESOLUTION_MS = 20;
/** An hour of samples. */
const HISTORY = 3600_000 / SAMPLE_MS;

/** A value as JSON carries it: 64-bit integers as strings (no precision lost), bytes as hex. */
export function jsonValue(value: TagValue | null | undefined): unknown {
  if (value === null || value === undefined) return null;
  if (typeof value === 'bigint') return value.toString();
  if (Buffer.isBuffer(value)) return value.toString('hex');
  if (Array.isArray(value)) return value.map((v) => (typeof v === 'bigint' ? v.toString() : v));
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  return value;
}

/** An hour of one series, oldest first (a fixed ring; `values()` copies it out in order). */
class Series {
  private readonly ring = new Float64Array(HISTORY);
  private count = 0;
  private next = 0;

  push(value: number): void {
    this.ring[this.next] = value;
    this.next = (this.next + 1) % HISTORY;
    if (this.count < HISTORY) this.count++;
  }

  values(): number[] {
    const start = (this.next - this.count + HISTORY) % HISTORY;
    const out = new Array<number>(this.count);
    for (let i = 0; i < this.count; i++) out[i] = this.ring[(start + i) % HISTORY];
    return out;
  }
}

function sum(values: readonly number[]): number {
  let total = 0;
  for (const v of values) total += v;
  return total;
}

/** Reads the counters every SAMPLE_MS: message rates, loop lag, readiness, and an hour of chart history. */
export class Sampler {
  private timer: NodeJS.Timeout | undefined;
  private readonly lag: IntervalHistogram = monitorEventLoopDelay({ resolution: LAG_RESOLUTION_MS });
  private last = { atMs: 0, received: 0, sent: 0 };
  readonly rates = { inPerS: 0, outPerS: 0, loopLagMs: 0 };
  ready = { ready: true, problems: [] as string[] };
  private readonly times = new Series();
  private readonly msgIn = new Series();
  private readonly msgOut = new Series();
  private readonly backlogs = new Map<string, Series>();

  constructor(private readonly sources: ConsoleSources) {}

  start(): void {
    this.lag.enable();
    this.sample();
    this.timer = setInterval(() => this.sample(), SAMPLE_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.lag.disable();
  }

  /** The chart data: times (epoch s) with msg/s in and out, and each bridge's backlog. */
  history(): { t: number[]; msgInPerS: number[]; msgOutPerS: number[]; backlog: Record<string, number[]> } {
    const backlog: Record<string, number[]> = {};
    for (const [name, series] of this.backlogs) backlog[name] = series.values();
    return { t: this.times.values(), msgInPerS: this.msgIn.values(), msgOutPerS: this.msgOut.values(), backlog };
  }

  private sample(): void {
    const now = Date.now();
    // Every message the broker routes, the gateway's own included: in from clients and in-process publishers (the
    // edge node, bridges' inbound), out to clients and up the bridges (a removed bridge's count goes: clamped below).
    const b = this.sources.broker;
    const received = sum(b.messagesReceived) + b.messagesPublishedLocally;
    let sent = sum(b.messagesSent);
    for (const { bridge } of this.sources.bridges()) sent += bridge.stats.sent;
    if (this.last.atMs > 0) {
      const s = (now - this.last.atMs) / 1000;
      this.rates.inPerS = Math.max(0, (received - this.last.received) / s);
      this.rates.outPerS = Math.max(0, (sent - this.last.sent) / s);
    }
    this.last = { atMs: now, received, sent };
    this.rates.loopLagMs = Number.isNaN(this.lag.mean) ? 0 : Math.max(0, this.lag.mean / 1e6 - LAG_RESOLUTION_MS);
    this.lag.reset();
    this.times.push(Math.round(now / 1000));
    this.msgIn.push(this.rates.inPerS);
    this.msgOut.push(this.rates.outPerS);
    const names = new Set<string>();
    for (const { bridge } of this.sources.bridges()) {
      names.add(bridge.name);
      let series = this.backlogs.get(bridge.name);
      if (series === undefined) {
        // A bridge added on reload: zeros before it existed keep its series aligned with the times.
        series = new Series();
        for (let i = 1; i < this.times.values().length; i++) series.push(0);
        this.backlogs.set(bridge.name, series);
      }
      series.push(bridge.stats.backlogMessages);
    }
    for (const name of this.backlogs.keys()) if (!names.has(name)) this.backlogs.delete(name);
    this.sources.readiness().then(
      (problems) => (this.ready = { ready: problems.length === 0, problems }),
      (err: unknown) => (this.ready = { ready: false, problems: [`readiness check failed: ${String(err)}`] }),
    );
  }
}

export function overview(s: ConsoleSources, sampler: Sampler) {
  const deviceList = s.edgeNode?.deviceList ?? [];
  const down = deviceList.filter((d) => !d.condition.online);
  return {
    version: s.version,
    uptimeS: Math.round(process.uptime()),
    configFile: s.config?.file,
    lastReload: s.config?.last,
    clients: s.broker.clientsConnected,
    msgInPerS: sampler.rates.inPerS,
    msgOutPerS: sampler.rates.outPerS,
    storeBytes: s.storeBytes(),
    storeMaxBytes: s.storeMaxBytes,
    loopLagMs: sampler.rates.loopLagMs,
    devices: deviceList.length,
    devicesDown: down.map((d) => ({ id: d.id, since: d.condition.sinceMs, lastError: d.condition.lastError })),
    ...sampler.ready,
  };
}

export function bridges(s: ConsoleSources) {
  return s.bridges().map(({ bridge, urls }) => {
    const st = bridge.stats;
    const status = bridge.status;
    // The drain estimate: backlog over the net rate it leaves at (sent minus what keeps arriving is not known
    // here, so the replay rate alone: a lower bound while new messages still come in).
    const drainS = st.backlogMessages > 0 && st.replayRatePerS > 0 ? st.backlogMessages / st.replayRatePerS : undefined;
    return {
      name: bridge.name,
      urls,
      state: st.state,
      error: status.type === 'offline' ? status.error : undefined,
      retryInMs: status.type === 'offline' ? status.retryInMs : undefined,
      pausedReason: status.type === 'paused' ? status.reason : undefined,
      backlogMessages: st.backlogMessages,
      backlogBytes: st.backlogBytes,
      oldestAgeS: st.oldestAgeS,
      inflight: st.inflight,
      sendRatePerS: st.sendRatePerS,
      replayRatePerS: st.replayRatePerS,
      drainS,
      deadLetters: st.deadLetterMessages,
      dropped: st.dropped,
      reconnects: st.reconnects,
      sent: st.sent,
      acked: st.acked,
    };
  });
}

export function sparkplug(s: ConsoleSources) {
  const node = s.edgeNode;
  if (node === undefined) return null;
  const { lastCommand, ...session } = node.session;
  return {
    ...session,
    ...node.stats,
    lastCommand: lastCommand && {
      kind: lastCommand.kind,
      at: lastCommand.atMs,
      topic: lastCommand.topic,
      ...lastCommand.sender,
    },
  };
}

export function devices(s: ConsoleSources) {
  return (s.edgeNode?.deviceList ?? []).map((d) => {
    const st = d.stats;
    const condition = d.condition;
    return {
      id: d.id,
      online: condition.online,
      state: st.state,
      since: condition.sinceMs,
      lastError: condition.lastError,
      samples: st.samples,
      deaths: st.deaths,
      restarts: st.restarts,
      readP50Ms: d.connector.readLatencyMs?.(0.5),
      readP99Ms: d.connector.readLatencyMs?.(0.99),
      tags: [...d.definitions.values()].map((def) => {
        const last = d.reading(def.name);
        return {
          name: def.name,
          datatype: def.datatype,
          writable: def.writable,
          description: def.properties.description,
          unit: def.properties.engUnit,
          value: jsonValue(last?.reading.value),
          quality: last?.reading.quality ?? 'bad',
          stale: last?.stale ?? false,
          timestamp: last?.reading.timestamp,
        };
      }),
    };
  });
}

export function clients(s: ConsoleSources) {
  return { connected: s.clients(), offline: s.offlineSessions() };
}
