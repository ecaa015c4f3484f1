/**
 * The gateway's status report for the central site (docs/architecture.md#fleet-status), published by each
 * bridge's `StatusPublisher`: who it is (id, version, uptime, configuration digest), each bridge's backlog,
 * its devices up and down, and the last error.
 */
import type { BridgeStats } from '../bridge/bridge-report.js';
import type { StatusSnapshot } from '../bridge/status.js';

export interface FleetStatusSources {
  readonly gatewayId: string;
  readonly version: string;
  readonly startedAtMs: number;
  /** A digest of the configuration in force (changes on a reload that changes it). */
  configDigest(): string;
  bridges(): ReadonlyMap<string, BridgeStats>;
  devices(): readonly { readonly id: string; readonly up: boolean }[];
}

export function fleetStatus(s: FleetStatusSources, online: boolean): StatusSnapshot {
  const nowMs = Date.now();
  const bridges = [...s.bridges()].map(([name, st]) => ({
    name,
    connected: online && st.connected,
    backlog: { messages: st.backlogMessages, bytes: st.backlogBytes, oldestAgeS: Math.round(st.oldestAgeS) },
    deadLetters: st.deadLetterMessages,
    lastError: st.lastError ?? null,
  }));
  const devices = s.devices();
  const down = devices.filter((d) => !d.up).map((d) => d.id);
  const lastError = bridges.reduce<BridgeStats['lastError'] | null>(
    (last, b) => (b.lastError && (!last || b.lastError.at > last.at) ? b.lastError : last),
    null,
  );
  const report = {
    gateway: s.gatewayId,
    state: online ? 'online' : 'offline',
    version: s.version,
    startedAt: new Date(s.startedAtMs).toISOString(),
    uptimeS: Math.round((nowMs - s.startedAtMs) / 1000),
    configDigest: s.configDigest(),
    time: new Date(nowMs).toISOString(),
    bridges,
    devices: { up: devices.length - down.length, down },
    lastError,
  };
  // What an operator acts on: connections, whether a backlog waits, devices down, a new error.
  const changeKey = JSON.stringify([
    online,
    bridges.map((b) => [b.connected, b.backlog.messages > 0]),
    down,
    s.configDigest(),
    lastError?.at,
  ]);
  return { report, changeKey };
}
