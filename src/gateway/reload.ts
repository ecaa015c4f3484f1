/**
 * The reload procedure (SIGHUP and the console's reload action): applies a `planReload` plan to the running parts
 * one by one, so that what did not change, and every client, carries on (docs/architecture.md#configuration).
 */
import type { BridgeConfig, Config } from '../config/schema.js';
import { planReload, type ListChanges } from '../config/reload-plan.js';
import type { Logger } from '../util/logger.js';
import type { AuthHooks } from '../broker/auth.js';
import type { MqttServer } from '../server/listeners.js';
import type { MetricsServer } from '../ops/metrics.js';
import type { WebConsole } from '../console/console.js';
import type { Bridge } from '../bridge/bridge.js';
import type { EdgeNode } from '../sparkplug/edge-node.js';
import type { ConnectorConfig } from '../../connectors/index.js';
import type { Connector } from '../../connectors/contract.js';
import { httpTls } from '../configured-files.js';
import { errorLogFields } from '../util/errors.js';
import { consoleUsers, metricsAccess } from './access.js';

/**
 * What a reload replaces: the configuration in force and the running bridges. The gateway's other parts read
 * them through this object when they run, so they see each bridge as soon as it is swapped.
 */
export interface InForce {
  config: Config;
  bridges: readonly Bridge[];
}

/** The running parts a reload reaches, and how the gateway makes new ones. */
export interface ReloadTargets {
  readonly server: MqttServer;
  readonly metrics: MetricsServer | undefined;
  readonly webConsole: WebConsole | undefined;
  readonly edgeNode: EdgeNode | undefined;
  readonly makeAuth: (config: Config) => AuthHooks;
  readonly makeBridge: (bc: BridgeConfig) => Bridge;
  readonly makeConnector: (c: ConnectorConfig) => Connector;
  readonly log: Logger;
  readonly audit: Logger;
}

/** Applies what it can of `next` now and updates `now`; what waits for a restart is named in the answer. */
export async function reloadGateway(
  now: InForce,
  parts: ReloadTargets,
  next: Config,
): Promise<{ readonly needsRestart: readonly string[] }> {
  const { server, metrics, webConsole, edgeNode, log, audit } = parts;
  const config = now.config;
  const plan = planReload(config, next);
  // Users and ACLs apply at once, for new operations of connected clients too.
  if (plan.reloadAuth) {
    server.setAuth(parts.makeAuth(next));
    audit.info(
      { passwordFile: next.auth.passwordFile, aclFile: next.auth.aclFile },
      'authentication and ACL rules reloaded',
    );
  }
  // The metrics section itself needs a restart; its users' passwords and its token follow their files.
  if (metrics && config.metrics) {
    try {
      metrics.setAccess(metricsAccess(config.metrics, next.auth.passwordFile));
      const tls = httpTls(config.metrics);
      if (tls) metrics.setTls(tls);
    } catch (err) {
      log.error(errorLogFields(err), 'metrics credentials not reloaded, the endpoint keeps the current ones');
    }
  }
  // The console's user lists and passwords apply at once; logins of users no longer listed end.
  const nextConsole = plan.inForce.console;
  if (webConsole && nextConsole) {
    try {
      webConsole.setUsers(consoleUsers(nextConsole, next.auth.passwordFile));
    } catch (err) {
      log.error(errorLogFields(err), 'console users not reloaded, the console keeps the current ones');
    }
  }
  // Certificates are re-read even when the config is unchanged: renewing one replaces the files in place.
  try {
    if (server.reloadTls() > 0) log.info('TLS certificates reloaded');
  } catch (err) {
    log.error(errorLogFields(err), 'TLS files not reloaded, the listeners keep their current certificates');
  }
  await applyBridgeChanges(now, plan.bridges, parts.makeBridge, log);
  // Connectors are swapped one by one on the running edge node; the other devices, and its session, carry on.
  const connectors = edgeNode
    ? await applyConnectorChanges(edgeNode, config.connectors, plan.connectors, parts.makeConnector, log)
    : config.connectors;
  if (plan.needsRestart.length > 0)
    log.warn({ sections: plan.needsRestart }, 'configuration changes that need a restart to apply');
  now.config = { ...plan.inForce, connectors };
  return { needsRestart: plan.needsRestart };
}

/**
 * Bridges are stopped, started or restarted one by one (by name, so a bridge finds its outbox again); the others,
 * and every client, carry on.
 */
async function applyBridgeChanges(
  now: InForce,
  changes: ListChanges<BridgeConfig>,
  makeBridge: (bc: BridgeConfig) => Bridge,
  log: Logger,
): Promise<void> {
  for (const bc of [...changes.remove, ...changes.change]) {
    await now.bridges.find((bridge) => bridge.name === bc.name)?.stop();
    now.bridges = now.bridges.filter((bridge) => bridge.name !== bc.name);
  }
  for (const bc of changes.remove) log.info({ bridge: bc.name }, 'bridge removed; its outbox stays on disk');
  for (const bc of [...changes.change, ...changes.add]) {
    const bridge = makeBridge(bc);
    await bridge.start();
    now.bridges = [...now.bridges, bridge];
    log.info({ bridge: bc.name }, changes.change.includes(bc) ? 'bridge reconfigured' : 'bridge added');
  }
}

/**
 * Applies a reload plan's connector changes to the running edge node, by id: a removed connector stops (DDEATH);
 * an added one starts (DBIRTH when it first answers); a changed one is stopped (DDEATH) and started again with its
 * new config (a new DBIRTH with its new metric list); the others keep running untouched. Returns the configs now
 * running. A connector that cannot be created is logged and left as it was (the old one keeps running, a new one
 * stays absent), so the next reload tries again.
 */
async function applyConnectorChanges(
  edgeNode: EdgeNode,
  running: readonly ConnectorConfig[],
  changes: ListChanges<ConnectorConfig>,
  makeConnector: (c: ConnectorConfig) => Connector,
  log: Logger,
): Promise<ConnectorConfig[]> {
  let now = [...running];
  const create = (c: ConnectorConfig): Connector | undefined => {
    try {
      return makeConnector(c);
    } catch (err) {
      log.error(
        { ...errorLogFields(err), connector: c.id },
        'connector config not applied: the connector could not be created',
      );
      return undefined;
    }
  };
  for (const before of changes.remove) {
    await edgeNode.removeDevice(before.id);
    now = now.filter((c) => c.id !== before.id);
    log.info({ connector: before.id, type: before.type }, 'connector removed');
  }
  // Created before the old ones stop: a config the factory refuses leaves the running device alone.
  const replacements = changes.change.flatMap((after) => {
    const connector = create(after);
    return connector ? [{ after, connector }] : [];
  });
  // Every old one goes before a new one comes: the devices of a changed profile all change, and none of them may
  // still hold the old Template definition when the first new one has the node define it again.
  // The old connectors have released their sockets when this resolves, so the new ones may take the same devices.
  for (const { after } of replacements) await edgeNode.removeDevice(after.id);
  for (const { after, connector } of replacements) {
    edgeNode.addDevice(connector, after.profile);
    now = now.map((c) => (c.id === after.id ? after : c));
    log.info({ connector: after.id, type: after.type }, 'connector reconfigured');
  }
  for (const after of changes.add) {
    const connector = create(after);
    if (!connector) continue;
    edgeNode.addDevice(connector, after.profile);
    now.push(after);
    log.info({ connector: after.id, type: after.type }, 'connector added');
  }
  return now;
}
