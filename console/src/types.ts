/** The shapes of the /api/ answers (src/console/views.ts builds them). */

export interface ReloadOutcome {
  ok: boolean;
  atMs: number;
  error?: string;
  problems?: { path: string; message: string }[];
  /** Of a reload that succeeded: changed sections that apply only after a restart. */
  needsRestart?: string[];
}

export interface Overview {
  version: string;
  uptimeS: number;
  configFile?: string;
  lastReload?: ReloadOutcome;
  clients: number;
  msgInPerS: number;
  msgOutPerS: number;
  storeBytes?: number;
  storeMaxBytes: number;
  loopLagMs: number;
  /** Configured devices, and those that do not answer. */
  devices: number;
  devicesDown: { id: string; since: number; lastError?: string }[];
  ready: boolean;
  problems: string[];
}

export interface BridgeView {
  name: string;
  urls: string[];
  state: string;
  error?: string;
  retryInMs?: number;
  pausedReason?: string;
  backlogMessages: number;
  backlogBytes: number;
  oldestAgeS: number;
  inflight: number;
  sendRatePerS: number;
  replayRatePerS: number;
  drainS?: number;
  deadLetters: number;
  dropped: Record<string, number>;
  reconnects: number;
  sent: number;
  acked: number;
}

export interface SparkplugView {
  groupId: string;
  edgeNodeId: string;
  bdSeq: number;
  localBorn: boolean;
  uplinkBorn: boolean;
  primaryHostOnline?: boolean;
  devicesOnline: number;
  births: number;
  rebirths: number;
  writesOk: number;
  writesFailed: number;
  commandsRefused: number;
  lastCommand?: { kind: string; at: number; topic: string; who: string; user?: string; remote?: string };
}

export interface TagView {
  name: string;
  datatype: string;
  writable: boolean;
  description?: string;
  unit?: string;
  value: unknown;
  /** 'good', 'uncertain' (a value the device doubts) or 'bad'. */
  quality: string;
  /** The value is from before the device was lost (shown until the tag is read again). */
  stale: boolean;
  timestamp?: number;
}

export interface DeviceView {
  id: string;
  online: boolean;
  state: string;
  since: number;
  lastError?: string;
  samples: number;
  deaths: number;
  restarts: number;
  /** Poll cycle duration p50/p99 (ms); absent for connectors that are pushed values (OPC UA). */
  readP50Ms?: number;
  readP99Ms?: number;
  tags: TagView[];
}

export interface Live {
  at: number;
  overview: Overview;
  bridges: BridgeView[];
  sparkplug: SparkplugView | null;
  devices: DeviceView[];
}

export interface ClientsView {
  connected: {
    clientId: string;
    username?: string;
    remote: string;
    protocolVersion: number;
    listener: string;
    subscriptions: number;
    queued: number;
    inflight: number;
    connectedSinceMs: number;
  }[];
  offline: { clientId: string; owner?: string; queued: number; subscriptions: number; expiryIntervalS: number }[];
}

export interface History {
  t: number[];
  msgInPerS: number[];
  msgOutPerS: number[];
  backlog: Record<string, number[]>;
}
