/**
 * What a reload (SIGHUP) changes, decided from the configuration in force and the file's new one without touching
 * anything: `gateway/reload.ts` applies the plan (docs/architecture.md#configuration). Bridges and connectors
 * change one by one, by name and id; sections that the running parts were built from wait for a restart.
 */
import { isDeepStrictEqual } from 'node:util';
import type { BridgeConfig, Config, ConnectorConfigEntry } from './schema.js';

/** The entries of a list keyed by name or id that a reload starts, restarts with their new config, and stops. */
export interface ListChanges<T> {
  readonly add: readonly T[];
  /** The new configs of entries whose config changed. */
  readonly change: readonly T[];
  /** The old configs of entries no longer in the file. */
  readonly remove: readonly T[];
}

export interface ReloadPlan {
  /** The password and ACL files are read again: always when they are set, since editing them is the point. */
  readonly reloadAuth: boolean;
  /** The Sparkplug uplink is never among them: it carries the edge node's session. */
  readonly bridges: ListChanges<BridgeConfig>;
  /** Applied to the running edge node; empty when there is none. */
  readonly connectors: ListChanges<ConnectorConfigEntry>;
  /** What differs but applies only after a restart, as the log names it (`listeners`, `log.auditFile`, ...). */
  readonly needsRestart: readonly string[];
  /** The configuration in force once the plan is applied: the new one, except what waits for a restart. */
  readonly inForce: Config;
}

/**
 * Sections the running parts were built from (listeners, broker limits, store, node identity, metrics server,
 * the gateway id in every bridge's message ids).
 */
const RESTART_SECTIONS = ['listeners', 'broker', 'storage', 'sparkplug', 'metrics', 'gateway'] as const;
/** The log level applies at once; where the log and the audit log go is decided at start. */
const RESTART_LOG_KEYS = ['format', 'auditFile'] as const;

export function planReload(old: Config, next: Config): ReloadPlan {
  const needsRestart: string[] = RESTART_SECTIONS.filter((key) => !isDeepStrictEqual(old[key], next[key]));
  for (const key of RESTART_LOG_KEYS) if (old.log[key] !== next.log[key]) needsRestart.push(`log.${key}`);

  // The console's users apply at once; the console itself comes and goes with the metrics listener's start.
  const consoleToggled = (old.console === undefined) !== (next.console === undefined);
  if (consoleToggled) needsRestart.push('console');
  const uplink = old.sparkplug?.uplink;
  const uplinkBefore = old.bridges.find((b) => b.name === uplink);
  const uplinkAfter = next.bridges.find((b) => b.name === uplink);
  const uplinkChanged = uplink !== undefined && !isDeepStrictEqual(uplinkBefore, uplinkAfter);
  if (uplinkChanged) needsRestart.push(`bridges (${uplink}, the Sparkplug uplink)`);
  const bridges = diffByKey(
    old.bridges.filter((b) => b.name !== uplink),
    next.bridges.filter((b) => b.name !== uplink),
    (b) => b.name,
  );

  // The edge node exists for the life of the process when the configuration it started with had one.
  const connectorsLive = old.sparkplug !== undefined && next.sparkplug !== undefined;
  if (!connectorsLive && !isDeepStrictEqual(old.connectors, next.connectors)) needsRestart.push('connectors');
  const connectors = connectorsLive
    ? diffByKey(old.connectors, next.connectors, (c) => c.id)
    : { add: [], change: [], remove: [] };

  const waits = (key: (typeof RESTART_SECTIONS)[number]) => needsRestart.includes(key);
  const inForce: Config = {
    ...next,
    listeners: waits('listeners') ? old.listeners : next.listeners,
    broker: waits('broker') ? old.broker : next.broker,
    storage: waits('storage') ? old.storage : next.storage,
    sparkplug: waits('sparkplug') ? old.sparkplug : next.sparkplug,
    metrics: waits('metrics') ? old.metrics : next.metrics,
    console: consoleToggled ? old.console : next.console,
    gateway: waits('gateway') ? old.gateway : next.gateway,
    log: { ...next.log, format: old.log.format, auditFile: old.log.auditFile },
    bridges:
      uplinkChanged && uplinkBefore !== undefined ? keepEntry(next.bridges, uplinkBefore, (b) => b.name) : next.bridges,
    connectors: connectorsLive ? next.connectors : old.connectors,
  };
  return {
    reloadAuth:
      !isDeepStrictEqual(old.auth, next.auth) ||
      next.auth.passwordFile !== undefined ||
      next.auth.aclFile !== undefined,
    bridges,
    connectors,
    needsRestart,
    inForce,
  };
}

function diffByKey<T>(old: readonly T[], next: readonly T[], key: (entry: T) => string): ListChanges<T> {
  const before = new Map(old.map((entry) => [key(entry), entry]));
  const after = new Set(next.map(key));
  return {
    add: next.filter((entry) => !before.has(key(entry))),
    change: next.filter((entry) => before.has(key(entry)) && !isDeepStrictEqual(before.get(key(entry)), entry)),
    remove: old.filter((entry) => !after.has(key(entry))),
  };
}

/** `list` with `kept` in place of its entry of the same key (or added, when the file dropped it). */
function keepEntry<T>(list: readonly T[], kept: T, key: (entry: T) => string): T[] {
  const i = list.findIndex((entry) => key(entry) === key(kept));
  return i < 0 ? [...list, kept] : list.map((entry, j) => (j === i ? kept : entry));
}
