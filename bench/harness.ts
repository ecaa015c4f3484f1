/**
 * The frame that `persistence.ts` and `bridge.ts` share: their common command-line options, the interleaved
 * repetitions (subject order rotating each repetition), the JSON results file, and cleanup (every child
 * process killed, the scratch directory removed) on exit, SIGINT, SIGTERM and fatal errors.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitOnSignals, machineInfo, mosquittoVersion } from './brokers.js';
import { errorText } from './qos1-load.js';

/** The repository root (this file runs from dist/bench). */
export const rootDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

// ---- command-line options ---------------------------------------------------------------------------------

export function positiveInt(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name} must be a positive integer, got ${value}`);
  return n;
}

/** A comma-separated list whose items must all be in `valid`. */
export function choiceList<T extends string>(value: string, valid: readonly T[], what: string): T[] {
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  const bad = items.filter((s) => !(valid as readonly string[]).includes(s));
  if (bad.length > 0) throw new Error(`unknown ${what}: ${bad.join(', ')}`);
  return items as T[];
}

/** The `parseArgs` options both benches take (each adds its own). */
export const loadOptionSpecs = {
  scenarios: { type: 'string' },
  reps: { type: 'string' },
  messages: { type: 'string' },
  publishers: { type: 'string' },
  window: { type: 'string' },
  'payload-bytes': { type: 'string' },
  quick: { type: 'boolean', default: false },
  out: { type: 'string' },
  'cpu-prof': { type: 'string' },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

/** The usage lines of `loadOptionSpecs` but --scenarios; `extra` lines go after --window. */
export function loadUsage(defaults: { reps: number; out: string; repsPer?: string }, extra: string[]): string {
  return [
    `  --reps N              repetitions per ${defaults.repsPer ?? 'broker and scenario'} (median reported), default ${defaults.reps}`,
    '  --messages N          QoS 1 messages per run (M), default 50000',
    '  --publishers N        publisher connections, default 10',
    '  --window N            unacknowledged PUBLISHes per publisher, default 16',
    ...extra,
    '  --quick               1 repetition of 5,000 messages: a smoke test, not a measurement',
    `  --out FILE            JSON summary, default ${defaults.out}`,
    '  --cpu-prof DIR        run edgeferry with node --cpu-prof, writing its profiles into DIR',
    '  -h, --help',
  ].join('\n');
}

export interface LoadOptions {
  reps: number;
  messages: number;
  publishers: number;
  window: number;
  quick: boolean;
  out: string;
  cpuProfDir: string | undefined;
}

interface LoadValues {
  reps?: string;
  messages?: string;
  publishers?: string;
  window?: string;
  quick?: boolean;
  out?: string;
  'cpu-prof'?: string;
}

/** `--quick` means 1 repetition of 5,000 messages unless given otherwise. */
export function loadOptions(values: LoadValues, defaults: { reps: number; out: string }): LoadOptions {
  const quick = values.quick === true;
  const opts: LoadOptions = {
    reps: positiveInt(values.reps, quick ? 1 : defaults.reps, 'reps'),
    messages: positiveInt(values.messages, quick ? 5_000 : 50_000, 'messages'),
    publishers: positiveInt(values.publishers, 10, 'publishers'),
    window: positiveInt(values.window, 16, 'window'),
    quick,
    out: path.resolve(values.out ?? path.join(rootDir, defaults.out)),
    cpuProfDir: values['cpu-prof'] === undefined ? undefined : path.resolve(values['cpu-prof']),
  };
  if (opts.window > 65_535) throw new Error('--window must be at most 65535 (packet ids)');
  if (opts.publishers > 65_535) throw new Error('--publishers must be at most 65535');
  return opts;
}

/** Runs `parse`; null from it (`--help`) prints the usage and exits 0, a bad option prints it and exits 2. */
export function parseOrExit<T>(usage: string, parse: () => T | null): T {
  let opts: T | null;
  try {
    opts = parse();
  } catch (err) {
    process.stderr.write(`${errorText(err)}\n\n${usage}\n`);
    process.exit(2);
  }
  if (opts === null) {
    process.stdout.write(usage + '\n');
    process.exit(0);
  }
  return opts;
}

// ---- runs -----------------------------------------------------------------------------------------------

/** One run as it goes into the progress line and the JSON (`label` holds what it ran: scenario, broker, ...). */
export type RunRecord<L> = L & {
  rep: number;
  ok: boolean;
  error?: string;
  metrics?: Record<string, number>;
  /** Anomalies worth a look: incomplete ingest, truncated drain, socket problems. */
  notes: string[];
  elapsedS: number;
  /** The 1-minute load average when the run started: other work on the machine. */
  loadavg1: number;
};

export interface Interleaving<C, S extends string, L> {
  reps: number;
  /** The brokers or gateways; their order rotates each repetition. */
  subjects: readonly S[];
  /** What each subject runs in every repetition, in this order (scenarios, or scenario x payload size). */
  cells: readonly C[];
  label(cell: C, subject: S): L;
  /** Prefix of the run tags (client id prefixes), made unique with the pid and a run counter. */
  tagPrefix: string;
  run(cell: C, subject: S, runTag: string, notes: string[]): Promise<Record<string, number>>;
  describe(record: RunRecord<L>): string;
  /** Whether `subject` runs in `cell` at all; every pair does when absent. */
  applies?(cell: C, subject: S): boolean;
}

/**
 * For every repetition, every cell, every subject (the order rotating each repetition, so a slow phase of the
 * shared machine hits every subject alike): one run, and its progress line. A failed run is recorded, not fatal.
 */
export async function runInterleaved<C, S extends string, L>(o: Interleaving<C, S, L>): Promise<RunRecord<L>[]> {
  const records: RunRecord<L>[] = [];
  let runIndex = 0;
  for (let rep = 1; rep <= o.reps; rep++) {
    const order = o.subjects.map((_, i) => o.subjects[(i + rep - 1) % o.subjects.length]);
    for (const cell of o.cells) {
      for (const subject of order) {
        if (o.applies !== undefined && !o.applies(cell, subject)) continue;
        const started = Date.now();
        const record = {
          rep,
          ...o.label(cell, subject),
          ok: false,
          notes: [],
          elapsedS: 0,
          loadavg1: os.loadavg()[0],
        } as RunRecord<L>;
        try {
          record.metrics = await o.run(cell, subject, `${o.tagPrefix}${process.pid}-${runIndex++}`, record.notes);
          record.ok = true;
        } catch (err) {
          record.error = errorText(err);
        }
        record.elapsedS = (Date.now() - started) / 1000;
        records.push(record);
        process.stdout.write(o.describe(record) + '\n');
      }
    }
  }
  return records;
}

// ---- process frame --------------------------------------------------------------------------------------

/** A scratch directory for the runs; `cleanup` kills every child process and removes it (also on SIGINT/SIGTERM). */
export function scratchDir(
  prefix: string,
  killAll: () => void,
  interruptMessage: string,
): { tmpDir: string; cleanup: () => void } {
  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const cleanup = (): void => {
    killAll();
    fs.rmSync(tmpDir, { recursive: true, force: true });
  };
  exitOnSignals(cleanup, interruptMessage);
  return { tmpDir, cleanup };
}

/** Writes the JSON results file (run metadata, machine, options, summary, every run) and says where it is. */
export function writeResults(out: string, startedAt: Date, options: object, summary: object, runs: object[]): void {
  const finishedAt = new Date();
  const json = {
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    elapsedS: (finishedAt.getTime() - startedAt.getTime()) / 1000,
    machine: { ...machineInfo(), mosquitto: mosquittoVersion(), loadavgAtEnd: os.loadavg() },
    options,
    summary,
    runs,
  };
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify(json, null, 2) + '\n');
  process.stdout.write(`\nJSON summary: ${path.relative(process.cwd(), out)}; took ${json.elapsedS.toFixed(0)} s\n`);
}

/** Runs the bench's main; a fatal error kills every child process and exits 1. */
export function runMain(name: string, main: () => Promise<void>, killAll: () => void): void {
  main().catch((err: unknown) => {
    process.stderr.write(`${name} failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    killAll();
    process.exit(1);
  });
}

export const loadAverageText = (): string =>
  os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
