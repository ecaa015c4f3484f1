/**
 * The web console's view of the running gateway (`ConsoleSources`): read from the parts when a view is built,
 * never copied, so a reload's swapped bridges show at once (docs/architecture.md#console).
 */
import type { Broker } from '../broker/broker.js';
import type { MqttServer } from '../server/listeners.js';
import type { EdgeNode } from '../sparkplug/edge-node.js';
import type { ConfigEditing, PlcTools } from '../console/config-api.js';
import type { ConfigControl, ConsoleSources } from '../console/sources.js';
import type { LogRing } from '../ops/pino-logger.js';
import type { InForce } from './reload.js';

/** The gateway's parts the console reads and acts on. */
export interface ConsoleParts {
  readonly version: string;
  readonly config: ConfigControl | undefined;
  readonly configEditing: ConfigEditing | undefined;
  readonly plcTools: PlcTools;
  readonly logRing: LogRing | undefined;
  readonly broker: Broker;
  readonly server: MqttServer;
  readonly edgeNode: EdgeNode | undefined;
  readonly now: InForce;
  readonly storeBytes: () => number | undefined;
  readonly readiness: () => Promise<string[]>;
}

export function consoleSources(parts: ConsoleParts): ConsoleSources {
  const { broker, server, now } = parts;
  return {
    version: parts.version,
    config: parts.config,
    configEditing: parts.configEditing,
    plcTools: parts.plcTools,
    broker: broker.stats,
    clients: () => server.clients(),
    offlineSessions: () =>
      [...broker.sessions.values()]
        .filter((session) => !session.isOnline())
        .map((session) => ({
          clientId: session.id,
          owner: session.owner ?? undefined,
          queued: session.queuedCount,
          subscriptions: session.subscriptions.size,
          expiryIntervalS: session.expiryIntervalS,
        })),
    storeBytes: parts.storeBytes,
    storeMaxBytes: now.config.storage.maxBytes,
    readiness: parts.readiness,
    bridges: () =>
      now.bridges.map((bridge) => ({
        bridge,
        urls: now.config.bridges.find((bc) => bc.name === bridge.name)?.remote.urls ?? [],
      })),
    edgeNode: parts.edgeNode,
    disconnectClient: (clientId, why) => server.disconnectClient(clientId, why),
    deleteSession: (clientId) => {
      const session = broker.sessions.get(clientId);
      if (session === undefined) return 'unknown';
      if (session.isOnline()) return 'online';
      broker.endSession(session);
      return 'deleted';
    },
    logLines: () => parts.logRing?.entries() ?? [],
  };
}
