/**
 * What the web console reads and acts on: the gateway's own objects, handed over by the composition root
 * (src/gateway/console-sources.ts). The console keeps no copy of their state; every view is read from them when
 * it is built.
 */
import type { BrokerStats } from '../broker/stats.js';
import type { Bridge } from '../bridge/bridge.js';
import type { ClientView } from '../server/listeners.js';
import type { EdgeNode } from '../sparkplug/edge-node.js';
import type { ConfigEditing, PlcTools } from './config-api.js';

/** The result of a configuration reload (SIGHUP or the console's action). */
export type ReloadOutcome =
  | {
      readonly ok: true;
      readonly atMs: number;
      /** Changed sections that apply only after a restart (`listeners`, `log.auditFile`, ...), empty when none. */
      readonly needsRestart: readonly string[];
    }
  | {
      readonly ok: false;
      readonly atMs: number;
      readonly error: string;
      readonly problems?: readonly { path: string; message: string }[];
    };

/** Reloading the configuration file the way SIGHUP does (cli.ts owns it). */
export interface ConfigControl {
  readonly file: string;
  readonly last: ReloadOutcome | undefined;
  reload(): Promise<ReloadOutcome>;
}

/** An offline persistent session, as listed by the console. */
export interface OfflineSession {
  readonly clientId: string;
  readonly owner: string | undefined;
  readonly queued: number;
  readonly subscriptions: number;
  readonly expiryIntervalS: number;
}

export interface ConsoleSources {
  readonly version: string;
  readonly config: ConfigControl | undefined;
  /** Changes to the configuration file from the console (engineers); undefined without a file. */
  readonly configEditing: ConfigEditing | undefined;
  /** Commissioning reads of PLCs (engineers). */
  readonly plcTools: PlcTools;
  readonly broker: BrokerStats;
  clients(): ClientView[];
  offlineSessions(): OfflineSession[];
  /** Bytes of the store's data file (undefined before it exists) and the configured ceiling. */
  storeBytes(): number | undefined;
  readonly storeMaxBytes: number;
  /** What keeps /readyz from saying ready, empty when ready. */
  readiness(): Promise<string[]>;
  /** The running bridges with their configured urls (the list changes on reload). */
  bridges(): readonly { readonly bridge: Bridge; readonly urls: readonly string[] }[];
  readonly edgeNode: EdgeNode | undefined;
  disconnectClient(clientId: string, why: string): boolean;
  /** Ends an offline persistent session (its queue and subscriptions go); what happened. */
  deleteSession(clientId: string): 'deleted' | 'online' | 'unknown';
  /** The last warn/error and audit lines, oldest first. */
  logLines(): Record<string, unknown>[];
}
