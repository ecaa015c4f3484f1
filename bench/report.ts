/**
 * Medians per broker, edgeferry/other ratios, the text tables and the JSON summary.
 */
import type { BrokerName } from './brokers.js';
import type { ScenarioMetrics, ScenarioName } from './scenarios.js';

export interface RunRecord {
  rep: number;
  scenario: ScenarioName;
  broker: BrokerName;
  ok: boolean;
  error?: string;
  metrics?: ScenarioMetrics;
  elapsedS: number;
  loadavg1: number; // 1-minute load average when the run started: other work on the machine
  brokerStartS?: number; // spawn until the first CONNACK
}

export type Medians = Record<string, number>;

export interface BrokerSummary {
  runs: number;
  failures: number;
  medians: Medians | null;
  worst: Medians | null; // the worst repetition for loss and latency columns
  errors: string[];
}

export interface ScenarioSummary {
  title: string;
  brokers: Partial<Record<BrokerName, BrokerSummary>>;
  /** `edgeferry/<other>`: ratio of medians, per compared metric. */
  ratios: Record<string, Record<string, number | null>>;
}

export function median(values: number[]): number {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** The metrics that get a median, per scenario kind; `ratio` marks those compared edgeferry/other. */
const columns: Record<ScenarioMetrics['kind'], { key: string; label: string; ratio?: boolean; worst?: 'max' }[]> = {
  throughput: [
    { key: 'deliveredPerS', label: 'delivered/s', ratio: true },
    { key: 'lost', label: 'lost', worst: 'max' },
    { key: 'lossPct', label: 'loss %', worst: 'max' },
    { key: 'sent', label: 'sent' },
    { key: 'brokerCpuPct', label: 'broker CPU %' },
    { key: 'generatorCpuPct', label: 'gen CPU %' },
    { key: 'brokerRssAfterKb', label: 'RSS after kB' },
  ],
  latency: [
    { key: 'p50Ms', label: 'p50 ms', ratio: true, worst: 'max' },
    { key: 'p99Ms', label: 'p99 ms', ratio: true, worst: 'max' },
    { key: 'maxMs', label: 'max ms' },
    { key: 'lost', label: 'lost', worst: 'max' },
    { key: 'achievedRatePerS', label: 'sent/s' },
    { key: 'brokerCpuPct', label: 'broker CPU %' },
  ],
  overload: [
    { key: 'deliveredPerS', label: 'delivered/s', ratio: true },
    { key: 'acceptedPerS', label: 'accepted/s' },
    { key: 'dropPct', label: 'drop %', worst: 'max' },
    { key: 'drainS', label: 'drain s', worst: 'max' },
    { key: 'p50Ms', label: 'p50 ms', ratio: true, worst: 'max' },
    { key: 'p99Ms', label: 'p99 ms', ratio: true, worst: 'max' },
    { key: 'rssPeakKb', label: 'RSS peak kB', worst: 'max' },
    { key: 'brokerCpuPct', label: 'broker CPU %' },
  ],
  rss: [
    { key: 'kbPerConnection', label: 'kB/conn', ratio: true },
    { key: 'kbPerConnectionMarginal', label: 'kB/conn 2nd half', ratio: true },
    { key: 'connected', label: 'connected' },
    { key: 'failed', label: 'failed', worst: 'max' },
    { key: 'rssBeforeKb', label: 'RSS before kB' },
    { key: 'rssAfterKb', label: 'RSS after kB' },
  ],
};

const kindOf: Record<ScenarioName, ScenarioMetrics['kind']> = {
  'qos0-fanin': 'throughput',
  'qos1-fanin': 'throughput',
  'qos0-fanout': 'throughput',
  'latency-qos0': 'latency',
  'latency-qos1': 'latency',
  'qos0-overload': 'overload',
  'qos1-overload': 'overload',
  'idle-rss': 'rss',
};

/** Per ratio column: `mine` / `theirs` (ratio of medians), null where either is missing or not finite. */
function ratiosOf(
  cols: readonly { key: string; ratio?: boolean }[],
  mine: Record<string, number> | null,
  theirs: Record<string, number> | null,
): Record<string, number | null> {
  return Object.fromEntries(
    cols
      .filter((c) => c.ratio)
      .map((c) => {
        const ratio = mine === null || theirs === null || !(theirs[c.key] > 0) ? null : mine[c.key] / theirs[c.key];
        return [c.key, ratio !== null && Number.isFinite(ratio) ? ratio : null];
      }),
  );
}

/** The gateway, on the machine's Node.js and on the release's: each is compared with every other broker. */
const subjects: readonly BrokerName[] = ['edgeferry', 'edgeferry-node24'];

export function summarize(
  records: RunRecord[],
  scenarios: readonly ScenarioName[],
  brokers: readonly BrokerName[],
  titles: Record<ScenarioName, string>,
): Record<string, ScenarioSummary> {
  const out: Record<string, ScenarioSummary> = {};
  for (const scenario of scenarios) {
    const cols = columns[kindOf[scenario]];
    const summary: ScenarioSummary = { title: titles[scenario], brokers: {}, ratios: {} };
    for (const broker of brokers) {
      const runs = records.filter((r) => r.scenario === scenario && r.broker === broker);
      if (runs.length === 0) continue; // not run in this scenario (bare-net in the throughput scenarios)
      const good = runs.filter((r) => r.ok && r.metrics !== undefined);
      const values = (key: string): number[] => good.map((r) => (r.metrics as unknown as Record<string, number>)[key]);
      summary.brokers[broker] = {
        runs: good.length,
        failures: runs.length - good.length,
        medians: good.length === 0 ? null : Object.fromEntries(cols.map((c) => [c.key, median(values(c.key))])),
        worst:
          good.length === 0
            ? null
            : Object.fromEntries(cols.filter((c) => c.worst === 'max').map((c) => [c.key, Math.max(...values(c.key))])),
        errors: [...new Set(runs.filter((r) => !r.ok).map((r) => r.error ?? 'unknown error'))],
      };
    }
    for (const subject of subjects) {
      if (summary.brokers[subject] === undefined) continue;
      const mine = summary.brokers[subject].medians;
      for (const other of brokers) {
        // Each runtime of the gateway against the brokers, and Node 20's against Node 24's once.
        if (
          other === subject ||
          summary.brokers[other] === undefined ||
          (subject !== 'edgeferry' && subjects.includes(other))
        )
          continue;
        const theirs = summary.brokers[other].medians;
        summary.ratios[`${subject}/${other}`] = ratiosOf(cols, mine, theirs);
      }
    }
    out[scenario] = summary;
  }
  return out;
}

export function formatNumber(value: number | undefined | null): string {
  if (value === undefined || value === null || !Number.isFinite(value)) return 'n/a';
  if (Number.isInteger(value)) return value.toLocaleString('en-US');
  const abs = Math.abs(value);
  if (abs >= 1000) return Math.round(value).toLocaleString('en-US');
  if (abs >= 100) return value.toFixed(0);
  if (abs >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

export function formatRatio(ratio: number | null): string {
  if (ratio === null) return 'n/a';
  return `${ratio >= 0.1 ? ratio.toFixed(2) : ratio.toPrecision(2)}x`;
}

export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]): string =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export function renderSummary(summary: Record<string, ScenarioSummary>): string {
  const parts: string[] = [];
  for (const [scenario, s] of Object.entries(summary)) {
    const cols = columns[kindOf[scenario as ScenarioName]];
    const header = [
      'broker',
      ...cols.map((c) => c.label),
      ...cols.filter((c) => c.worst).map((c) => `worst ${c.label}`),
      'runs',
    ];
    const rows: string[][] = [];
    const notes: string[] = [];
    for (const [broker, b] of Object.entries(s.brokers)) {
      rows.push([
        broker,
        ...cols.map((c) => formatNumber(b.medians?.[c.key])),
        ...cols.filter((c) => c.worst).map((c) => formatNumber(b.worst?.[c.key])),
        `${b.runs}/${b.runs + b.failures}`,
      ]);
      for (const err of b.errors) notes.push(`  ${broker}: ${err.split('\n')[0].slice(0, 300)}`);
    }
    const attempts = Math.max(...Object.values(s.brokers).map((b) => b.runs + b.failures));
    parts.push(`\n== ${s.title} (median of ${attempts}) ==`);
    parts.push(table(header, rows));
    const ratioCols = cols.filter((c) => c.ratio);
    const ratioLines = Object.entries(s.ratios).map(
      ([pair, values]) => `${pair}: ` + ratioCols.map((c) => `${c.label} ${formatRatio(values[c.key])}`).join(', '),
    );
    if (ratioLines.length > 0) parts.push(ratioLines.join('   |   '));
    if (notes.length > 0) parts.push(['failed runs:', ...notes].join('\n'));
  }
  return parts.join('\n');
}

/** One progress line per run. */
export function describeRun(record: RunRecord): string {
  const head = `[rep ${record.rep}] ${record.scenario.padEnd(12)} ${record.broker.padEnd(19)}`;
  if (!record.ok || record.metrics === undefined)
    return `${head} FAILED: ${(record.error ?? '').split('\n')[0].slice(0, 200)}`;
  const m = record.metrics;
  const tail = `(${record.elapsedS.toFixed(1)} s, load ${record.loadavg1.toFixed(1)})`;
  const errs =
    'workerErrors' in m && m.workerErrors.socketErrors + m.workerErrors.unexpectedCloses > 0
      ? ` socket errors ${m.workerErrors.socketErrors}, unexpected closes ${m.workerErrors.unexpectedCloses}: ${m.workerErrors.firstError ?? ''}`
      : '';
  switch (m.kind) {
    case 'throughput':
      return `${head} ${formatNumber(m.deliveredPerS)} msg/s delivered, lost ${formatNumber(m.lost)} (${m.lossPct.toFixed(2)}%), broker CPU ${m.brokerCpuPct.toFixed(0)}%, gen CPU ${m.generatorCpuPct.toFixed(0)}%${m.truncated ? ' TRUNCATED' : ''}${m.drained ? '' : ' NOT-DRAINED'} ${tail}${errs}`;
    case 'latency':
      return `${head} p50 ${formatNumber(m.p50Ms)} ms, p99 ${formatNumber(m.p99Ms)} ms, max ${formatNumber(m.maxMs)} ms, lost ${m.lost}, ${m.samples} samples ${tail}${errs}`;
    case 'overload':
      return `${head} ${formatNumber(m.deliveredPerS)} msg/s delivered of ${formatNumber(m.acceptedPerS)} accepted, drop ${m.dropPct.toFixed(1)}%, drain ${m.drainS.toFixed(1)} s, p50 ${formatNumber(m.p50Ms)} ms, p99 ${formatNumber(m.p99Ms)} ms, RSS peak ${formatNumber(m.rssPeakKb)} kB ${tail}${errs}`;
    case 'rss':
      return `${head} ${formatNumber(m.kbPerConnection)} kB/conn, ${formatNumber(m.kbPerConnectionMarginal)} in the 2nd half (${m.connected} connected, ${m.failed} failed, RSS ${m.rssBeforeKb} -> ${m.rssHalfKb} -> ${m.rssAfterKb} kB) ${tail}${m.firstError ? ` first error: ${m.firstError}` : ''}${errs}`;
  }
}

// ---- grouped runs (bench:persistence, bench:bridge) -------------------------------------------------------

/** One measured quantity of a grouped benchmark. */
export interface GroupColumn {
  key: string;
  label: string;
  /** Compared subject/baseline in the ratio lines (higher is better). */
  ratio?: boolean;
  /** Also show the largest value seen over the repetitions. */
  worst?: 'max';
  /** A 0/1 flag: shown as the number of runs where it was 1, e.g. "5/5", instead of a median. */
  flag?: boolean;
}

/** One table: a scenario (or scenario x payload size) of a grouped benchmark. */
export interface GroupSpec {
  key: string;
  title: string;
  columns: readonly GroupColumn[];
}

/** One run of one broker (or gateway) in one group. */
export interface GroupRun {
  group: string;
  broker: string;
  ok: boolean;
  error?: string;
  metrics?: Record<string, number>;
  /** Anomalies worth a look: incomplete ingest, truncated drain, socket problems. */
  notes: string[];
}

export interface GroupBrokerSummary {
  runs: number;
  failures: number;
  medians: Medians | null;
  worst: Medians | null;
  /** For `flag` columns: in how many successful runs the flag was 1. */
  flagged: Medians | null;
  errors: string[];
  notes: string[];
}

export interface GroupSummary {
  title: string;
  brokers: Partial<Record<string, GroupBrokerSummary>>; // a broker that does not run in a group has none
  /** `<subject>/<baseline>`: ratio of medians, per `ratio` column. */
  ratios: Record<string, Record<string, number | null>>;
}

/** Medians (and worst values, flag counts, errors, notes) per group and broker; ratio of medians per pair. */
export function summarizeGroups(
  runs: readonly GroupRun[],
  groups: readonly GroupSpec[],
  brokers: readonly string[],
  ratioPairs: readonly (readonly [subject: string, baseline: string])[],
): Record<string, GroupSummary> {
  const out: Record<string, GroupSummary> = {};
  for (const group of groups) {
    const cols = group.columns;
    const summary: GroupSummary = { title: group.title, brokers: {}, ratios: {} };
    for (const broker of brokers) {
      const mine = runs.filter((r) => r.group === group.key && r.broker === broker);
      // A broker that does not run in this group (`Interleaving.applies`) has no row in it.
      if (mine.length === 0) continue;
      const good = mine.filter((r) => r.ok && r.metrics !== undefined);
      const values = (key: string): number[] => good.map((r) => (r.metrics as Record<string, number>)[key]);
      summary.brokers[broker] = {
        runs: good.length,
        failures: mine.length - good.length,
        medians: good.length === 0 ? null : Object.fromEntries(cols.map((c) => [c.key, median(values(c.key))])),
        worst:
          good.length === 0
            ? null
            : Object.fromEntries(cols.filter((c) => c.worst).map((c) => [c.key, Math.max(...values(c.key))])),
        flagged:
          good.length === 0
            ? null
            : Object.fromEntries(
                cols.filter((c) => c.flag).map((c) => [c.key, values(c.key).filter((v) => v === 1).length]),
              ),
        errors: [...new Set(mine.filter((r) => !r.ok).map((r) => r.error ?? 'unknown error'))],
        notes: [...new Set(mine.flatMap((r) => r.notes))],
      };
    }
    for (const [subject, baseline] of ratioPairs) {
      const mine = summary.brokers[subject]?.medians ?? null;
      const theirs = summary.brokers[baseline]?.medians ?? null;
      summary.ratios[`${subject}/${baseline}`] = ratiosOf(cols, mine, theirs);
    }
    out[group.key] = summary;
  }
  return out;
}

/** One table per group (median of each column, worst columns, runs), its ratio lines and its notes. */
export function renderGroups(
  summary: Partial<Record<string, GroupSummary>>,
  groups: readonly GroupSpec[],
  brokerLabel = 'broker',
): string {
  const parts: string[] = [];
  for (const group of groups) {
    const s = summary[group.key];
    if (s === undefined) continue;
    const cols = group.columns;
    const header = [
      brokerLabel,
      ...cols.map((c) => c.label),
      ...cols.filter((c) => c.worst).map((c) => `worst ${c.label}`),
      'runs',
    ];
    const rows: string[][] = [];
    const notes: string[] = [];
    for (const [broker, b] of Object.entries(s.brokers)) {
      if (b === undefined) continue;
      rows.push([
        broker,
        ...cols.map((c) => (c.flag ? `${b.flagged?.[c.key] ?? 0}/${b.runs}` : formatNumber(b.medians?.[c.key]))),
        ...cols.filter((c) => c.worst).map((c) => formatNumber(b.worst?.[c.key])),
        `${b.runs}/${b.runs + b.failures}`,
      ]);
      for (const err of b.errors) notes.push(`  ${broker} failed: ${err.split('\n')[0].slice(0, 300)}`);
      for (const note of b.notes) notes.push(`  ${broker}: ${note.slice(0, 300)}`);
    }
    const attempts = Math.max(...Object.values(s.brokers).map((b) => (b === undefined ? 0 : b.runs + b.failures)));
    parts.push(`\n== ${s.title} (median of ${attempts}) ==`);
    parts.push(table(header, rows));
    const ratioCols = cols.filter((c) => c.ratio);
    const ratioLines = Object.entries(s.ratios)
      .filter(() => ratioCols.length > 0)
      .map(
        ([pair, values]) => `${pair}: ` + ratioCols.map((c) => `${c.label} ${formatRatio(values[c.key])}`).join(', '),
      );
    if (ratioLines.length > 0) parts.push(ratioLines.join('   |   '));
    if (notes.length > 0) parts.push(['notes:', ...notes].join('\n'));
  }
  return parts.join('\n');
}
