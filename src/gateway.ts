/**
 * The composition root: the only place that constructs and wires the parts. start → reload → stop.
 * Shutdown order (docs/architecture.md#start-and-stop): stop connectors (the edge node publishes NDEATH) → stop
 * accepting and disconnect clients → close the broker (delayed wills of durable sessions wait for the next run) → stop
 * bridges (outboxes stay on disk) → close the store.
 */
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { BridgeConfig, Config, ConsoleConfig, MetricsConfig } from './config/schema.js';
import { planReload, type ListChanges } from './config/reload-plan.js';
import type { Logger } from './util/logger.js';
import { Broker } from './broker/broker.js';
import { BrokerStats } from './broker/broker.js';
import { loadFileAuth } from './broker/auth.js';
import type { AuthHooks, ReservedTopics } from './broker/auth.js';
import { Origins, createMessage } from './protocol/message.js';
import { checkBindable, MqttServer } from './server/listeners.js';
import type { BoundListener } from './server/listeners.js';
import { SysTopics } from './ops/sys-topics.js';
import { fleetStatus, type FleetStatusSources } from './ops/fleet-status.js';
import { MetricsServer, createMetricsRegistry } from './ops/metrics.js';
import type { MetricsAccess } from './ops/metrics.js';
import { PasswordFile } from './broker/password-file.js';
import { httpTls, metricsToken, readConfiguredFile, usersWithoutPassword } from './configured-files.js';
import { asError, ConfigError, errorLogFields } from './util/errors.js';
import { SystemdNotifier } from './ops/systemd.js';
import { createAuditLogger } from './ops/pino-logger.js';
import { openLmdbStore } from './store/lmdb/open.js';
import { deadLetterOutbox, type Store } from './store/types.js';
import { Bridge } from './bridge/bridge.js';
import { createConnectorRegistry } from '../connectors/index.js';
import type { ConnectorConfig } from '../connectors/index.js';
import type { Connector } from '../connectors/contract.js';
import { EdgeNode } from './sparkplug/edge-node.js';
import type { UplinkControl } from './sparkplug/edge-node.js';
import type { Device } from './sparkplug/device.js';
import { ownNamespace } from './sparkplug/topics.js';
import { topicMatches } from './protocol/topics.js';
import { SteadyClock, watchClockSteps } from './util/clock.js';
import { fullGc } from './util/full-gc.js';
import { LoginThrottle } from './util/login-throttle.js';
import { configEditing, plcTools } from './commissioning.js';
import { WebConsole, type ConsoleUsers } from './console/console.js';
import type { ConfigControl } from './console/sources.js';
import type { LogRing } from './ops/pino-logger.js';

/** What the process around the gateway (cli.ts) hands it beyond the configuration. */
export interface GatewayExtras {
  /** Reloading the configuration file as SIGHUP does: the web console's reload action and its last result. */
  readonly config?: ConfigControl;
  /** The recent warn/error and audit lines, for the web console's log view. */
  readonly logRing?: LogRing;
}

export interface Gateway {
  readonly listeners: readonly BoundListener[];
  stop(): Promise<void>;
  /** Applies what it can of `next` now; what waits for a restart is named in the answer (and the log). */
  reload(next: Config): Promise<{ readonly needsRestart: readonly string[] }>;
}

const { version: VERSION } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

export async function startGateway(initial: Config, log: Logger, extras: GatewayExtras = {}): Promise<Gateway> {
  let config = initial;
  const b = config.broker;
  const systemd = new SystemdNotifier(log.child({ mod: 'systemd' }));
  const audit = openAuditLog(log, config.log.auditFile, extras.logRing);
  // Auth files first: a bad password or ACL file stops the start before anything binds.
  const stats = new BrokerStats();
  // The edge node's namespace is the gateway's to publish in (the sparkplug section changes only with a restart).
  const reserved = config.sparkplug && ownNamespace(config.sparkplug.groupId, config.sparkplug.edgeNodeId);
  // One throttle for every password check (MQTT, console, /metrics), kept across reloads.
  const loginThrottle = new LoginThrottle();
  let auth = createAuth(config, audit, stats, reserved, loginThrottle);
  warnUsersWithoutPassword(config, log);
  // Ports next: one another program holds stops the start before the store opens.
  await checkBindable([
    ...config.listeners.map(({ type, host, port }) => ({ what: `${type} listener`, host, port })),
    ...(config.metrics ? [{ what: 'metrics endpoint', host: config.metrics.host, port: config.metrics.port }] : []),
  ]);
  // One steady timeline for everything that stores times or compares with stored ones; the store sets its base.
  const clock = new SteadyClock();
  // The store names itself in its log lines (mod: store, path). Sessions leave the rest to the outboxes.
  const maxSessionBytes = Math.floor(config.storage.maxBytes * config.storage.sessionShare);
  const store: Store = await openLmdbStore({
    path: config.storage.path,
    sync: config.storage.sync,
    maxBytes: config.storage.maxBytes,
    maxSessionBytes,
    verify: config.storage.verifyOnStart,
    clock,
    log,
  });
  const broker = new Broker({
    limits: {
      maxInflight: b.maxInflight,
      maxQueuedMessages: b.maxQueuedMessages,
      maxQueuedBytes: b.maxQueuedBytes,
      maxSessionExpiryS: b.maxSessionExpiryS,
      maxQueuedInMemory: b.maxQueuedInMemory,
      maxQueuedBytesInMemory: b.maxQueuedBytesInMemory,
      queueHighWater: b.queueHighWater,
    },
    store,
    stats,
    log: log.child({ mod: 'broker' }),
    audit,
    retained: { maxMessages: b.maxRetainedMessages, maxBytes: b.maxRetainedBytes },
  });
  const restored = broker.restoreSessions();
  if (restored > 0) log.info({ sessions: restored }, 'persistent sessions restored');

  // Connectors and the Sparkplug edge node come before the bridges: the uplink bridge takes the node's hooks.
  // One registry for the gateway's life: connectors added on reload share links (a Modbus bus) with the others.
  const connectorRegistry = createConnectorRegistry();
  const makeConnector = (c: ConnectorConfig): Connector =>
    connectorRegistry.create(c, {
      log: log.child({ mod: 'connector', connector: c.id }),
      dataDir: initial.storage.path,
    });
  // The uplink's backlog, a node metric: read once the node is born, after the bridges below exist.
  const uplinkBacklog = () => {
    const uplink = bridges.find((bridge) => bridge.name === config.sparkplug?.uplink);
    return { messages: uplink?.stats.backlogMessages ?? 0, online: uplink?.online ?? false };
  };
  const edgeNode = createEdgeNode(config, broker, makeConnector, log, audit, uplinkBacklog);

  const startedAtMs = Date.now();
  const statusSources: FleetStatusSources = {
    gatewayId: config.gateway.id,
    version: VERSION,
    startedAtMs,
    configDigest: () => createHash('sha256').update(JSON.stringify(config)).digest('hex').slice(0, 16),
    bridges: () => new Map(bridges.map((bridge) => [bridge.name, bridge.stats])),
    devices: () => (edgeNode?.deviceList ?? []).map((d) => ({ id: d.id, up: d.stats.state === 'online' })),
  };
  const makeBridge = (bc: BridgeConfig): Bridge =>
    new Bridge({
      config: bc,
      gatewayId: config.gateway.id,
      broker,
      // The same name gives the same outbox: a bridge reconfigured on reload finds its backlog.
      outbox: store.outbox(bc.name, bc.queue),
      deadLetter:
        bc.queue.deadLetter.maxMessages > 0
          ? store.outbox(deadLetterOutbox(bc.name), { ...bc.queue.deadLetter, maxAgeS: 0, overflow: 'drop-oldest' })
          : undefined,
      log: log.child({ mod: 'bridge', bridge: bc.name }),
      hooks: edgeNode && bc.name === config.sparkplug?.uplink ? edgeNode.hooks : undefined,
      maxPacketBytes: config.broker.maxPacketBytes,
      status: (online) => fleetStatus(statusSources, online),
    });
  let bridges = config.bridges.map(makeBridge);
  const uplinkBridge = bridges.find((bridge) => bridge.name === config.sparkplug?.uplink);
  if (edgeNode && uplinkBridge) edgeNode.attachUplink(uplinkControl(uplinkBridge));
  // The local session starts first, so the first upstream prologue already has it to announce.
  await edgeNode?.start();
  for (const bridge of bridges) await bridge.start();
  // Delayed wills of the last run go out only now, so that an overdue one reaches the bridges too.
  broker.wills.start();
  warnOrphanOutboxes(store, config.bridges, log);

  const server = new MqttServer(broker, auth, { ...b }, log.child({ mod: 'server' }), audit);
  fullGc(); // startup's garbage, before the first client (src/util/full-gc.ts)
  let listeners: BoundListener[];
  try {
    listeners = await server.start(config.listeners);
  } catch (err) {
    await edgeNode?.stop();
    await Promise.all(bridges.map((bridge) => bridge.stop()));
    await store.close();
    throw err;
  }
  for (const l of listeners) log.info({ listener: l.type, host: l.host, port: l.port }, 'listening');

  const sys = new SysTopics(
    {
      stats: broker.stats,
      version: VERSION,
      retainedCount: () => broker.retained.count,
      subscriptionCount: () => broker.subscriptionCount.normal + broker.subscriptionCount.shared,
      sessionCount: () => broker.sessions.size,
    },
    (topic, value) => {
      broker
        .publish(createMessage({ topic, payload: Buffer.from(value), retain: true, origin: Origins.sys }))
        .catch((err: unknown) => log.warn({ err, topic }, '$SYS update not stored'));
    },
  );
  sys.start(b.sysIntervalS);

  const bridgeStats = () => new Map(bridges.map((bridge) => [bridge.name, bridge.stats]));
  const readiness = (askedForDevices: boolean) =>
    readinessProblems(
      store,
      bridges,
      server,
      askedForDevices || config.metrics?.readyRequiresDevices ? (edgeNode?.deviceList ?? []) : [],
    );
  let metrics: MetricsServer | undefined;
  let webConsole: WebConsole | undefined;
  if (config.metrics) {
    const registry = createMetricsRegistry({
      broker: broker.stats,
      retained: () => broker.retained,
      subscriptionCount: () => broker.subscriptionCount,
      sessionCount: () => broker.sessions.size,
      bridges: bridgeStats,
      connectors: () =>
        new Map(
          (edgeNode?.deviceList ?? []).map((d) => {
            const st = d.stats;
            return [d.id, { up: st.state === 'online', samples: st.samples, deaths: st.deaths, restarts: st.restarts }];
          }),
        ),
      storeBytes: () => fileSize(join(config.storage.path, 'data.mdb')),
      storeCorruptRecords: () => store.corruptRecords,
      storeCommits: () => store.commits,
      storeSessionBytes: () => store.sessionBytes(),
      storeMaxSessionBytes: maxSessionBytes,
    });
    metrics = new MetricsServer(
      registry,
      { problems: readiness },
      log.child({ mod: 'metrics' }),
      audit,
      metricsAccess(config.metrics, config.auth.passwordFile),
      loginThrottle,
    );
    if (config.console) {
      webConsole = new WebConsole(
        {
          version: VERSION,
          config: extras.config,
          configEditing: extras.config && configEditing(extras.config, config.storage.path),
          plcTools: plcTools(connectorRegistry, config.storage.path, extras.config?.file),
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
          storeBytes: () => fileSize(join(config.storage.path, 'data.mdb')),
          storeMaxBytes: config.storage.maxBytes,
          readiness: () => readiness(false),
          bridges: () =>
            bridges.map((bridge) => ({
              bridge,
              urls: config.bridges.find((bc) => bc.name === bridge.name)?.remote.urls ?? [],
            })),
          edgeNode,
          disconnectClient: (clientId, why) => server.disconnectClient(clientId, why),
          deleteSession: (clientId) => {
            const session = broker.sessions.get(clientId);
            if (session === undefined) return 'unknown';
            if (session.isOnline()) return 'online';
            broker.endSession(session);
            return 'deleted';
          },
          logLines: () => extras.logRing?.entries() ?? [],
        },
        consoleUsers(config.console, config.auth.passwordFile),
        log.child({ mod: 'console' }),
        audit,
        loginThrottle,
      );
      const routes = webConsole;
      metrics.mount((req, res, path) => routes.handle(req, res, path));
      webConsole.start();
    }
    const port = await metrics.start(config.metrics.host, config.metrics.port, httpTls(config.metrics));
    log.info({ host: config.metrics.host, port, console: webConsole !== undefined }, 'metrics endpoint listening');
  }

  const stopClockWatch = watchClockSteps(clock, (stepMs) =>
    log.warn(
      { stepS: Math.round(stepMs / 1000), now: new Date().toISOString() },
      'the system clock stepped; ages, expiry and will delays keep counting real time',
    ),
  );
  log.info({ version: VERSION, listeners: listeners.length, bridges: bridges.length }, 'edgeferry started');
  await systemd.ready(`${listeners.length} listener(s), ${bridges.length} bridge(s)`);
  // The event loop itself drives the pings, so a blocked loop stops them and systemd restarts us.
  systemd.startWatchdog(() => true);

  let stopping: Promise<void> | undefined;
  return {
    listeners,
    stop: () =>
      (stopping ??= (async () => {
        await systemd.stopping();
        stopClockWatch();
        sys.stop();
        // Connectors stop and the edge node publishes its NDEATH while local clients and the uplink still listen.
        await edgeNode?.stop();
        await server.stop();
        broker.close();
        await Promise.all(bridges.map((bridge) => bridge.stop()));
        // Its live streams end first: the listener's close waits for open responses.
        webConsole?.stop();
        await metrics?.stop();
        await store.close();
        systemd.close();
      })()),
    reload: async (next) => {
      const plan = planReload(config, next);
      // Users and ACLs apply at once, for new operations of connected clients too.
      if (plan.reloadAuth) {
        auth = createAuth(next, audit, stats, reserved, loginThrottle);
        server.setAuth(auth);
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
      // Bridges are stopped, started or restarted one by one (by name, so a bridge finds its outbox again); the
      // others, and every client, carry on.
      for (const bc of [...plan.bridges.remove, ...plan.bridges.change]) {
        await bridges.find((bridge) => bridge.name === bc.name)?.stop();
        bridges = bridges.filter((bridge) => bridge.name !== bc.name);
      }
      for (const bc of plan.bridges.remove) log.info({ bridge: bc.name }, 'bridge removed; its outbox stays on disk');
      for (const bc of [...plan.bridges.change, ...plan.bridges.add]) {
        const bridge = makeBridge(bc);
        await bridge.start();
        bridges = [...bridges, bridge];
        log.info({ bridge: bc.name }, plan.bridges.change.includes(bc) ? 'bridge reconfigured' : 'bridge added');
      }
      // Connectors are swapped one by one on the running edge node; the other devices, and its session, carry on.
      const connectors = edgeNode
        ? await applyConnectorChanges(edgeNode, config.connectors, plan.connectors, makeConnector, log)
        : config.connectors;
      if (plan.needsRestart.length > 0)
        log.warn({ sections: plan.needsRestart }, 'configuration changes that need a restart to apply');
      config = { ...plan.inForce, connectors };
      return { needsRestart: plan.needsRestart };
    },
  };
}

/** The connectors of the config and the edge node that publishes them, or undefined without a sparkplug section. */
function createEdgeNode(
  config: Config,
  broker: Broker,
  makeConnector: (c: ConnectorConfig) => Connector,
  log: Logger,
  audit: Logger,
  uplinkBacklog: () => { messages: number; online: boolean },
): EdgeNode | undefined {
  const sp = config.sparkplug;
  if (!sp) return undefined;
  const connectors = config.connectors.map(makeConnector);
  const uplink = sp.uplink === undefined ? undefined : config.bridges.find((bc) => bc.name === sp.uplink);
  if (uplink) {
    const probe = `spBv1.0/${sp.groupId}/NDATA/${sp.edgeNodeId}`;
    if (!uplink.topics.some((t) => t.direction !== 'in' && t.localPrefix === '' && topicMatches(t.filter, probe))) {
      log.warn(
        { bridge: uplink.name },
        'the Sparkplug uplink has no out filter for this edge node: nothing goes upstream',
      );
    }
  }
  return new EdgeNode({
    config: sp,
    broker,
    connectors,
    profiles: new Map(config.connectors.flatMap((c) => (c.profile === undefined ? [] : [[c.id, c.profile] as const]))),
    stateDir: config.storage.path,
    log: log.child({ mod: 'sparkplug' }),
    audit,
    identify: (origin) => broker.identify(origin),
    version: VERSION,
    backlog: sp.uplink === undefined ? undefined : uplinkBacklog,
  });
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
  for (const after of changes.change) {
    // Created before the old one stops: a config the factory refuses leaves the running device alone.
    const connector = create(after);
    if (!connector) continue;
    // The old connector has released its sockets when this resolves, so the new one may take the same device.
    await edgeNode.removeDevice(after.id);
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

/** What the edge node may ask of its uplink bridge. */
function uplinkControl(bridge: Bridge): UplinkControl {
  return {
    pause: (reason) => bridge.pause(reason),
    resume: () => bridge.resume(),
    get online() {
      return bridge.online;
    },
    publishNow: (messages) => bridge.publishNow(messages),
    reconnect: (reason) => bridge.reconnect(reason),
    origin: bridge.origin,
  };
}

/**
 * Password file and ACL (re-read on every reload, so edited files apply), and the `reserved` topics no client
 * publishes in; failed logins and refusals go to the audit log.
 */
function createAuth(
  config: Config,
  audit: Logger,
  stats: BrokerStats,
  reserved: ReservedTopics | undefined,
  throttle: LoginThrottle,
): AuthHooks {
  const key = (path: string) => (path === config.auth.aclFile ? 'auth.aclFile' : 'auth.passwordFile');
  return loadFileAuth(
    config.auth,
    (path) => readConfiguredFile(path, key(path)),
    {
      loginRefused: (c, why) => {
        stats.authFailures++;
        audit.warn({ clientId: c.clientId, username: c.username, remote: c.remoteAddress, why }, 'login refused');
      },
      loginAccepted: (c) =>
        audit.info({ clientId: c.clientId, username: c.username, remote: c.remoteAddress }, 'login'),
      denied: (c, action, topic, why) => {
        stats.aclDenied[action]++;
        audit.warn(
          { clientId: c.clientId, username: c.username, action, topic, why },
          why === undefined ? 'denied by ACL' : 'publish refused',
        );
      },
    },
    reserved,
    throttle,
  );
}

/** The credentials of `metrics.auth`, read from their files now (at start, and again on reload). */
function metricsAccess(metrics: MetricsConfig, passwordFile: string | undefined): MetricsAccess | undefined {
  const { auth } = metrics;
  if (auth === undefined) return undefined;
  let verifyUser: MetricsAccess['verifyUser'];
  let isUser: MetricsAccess['isUser'];
  if (auth.users !== undefined && passwordFile !== undefined) {
    // createAuth has read the same file first and refused it if it has bad lines.
    const { file } = PasswordFile.parse(readConfiguredFile(passwordFile, 'auth.passwordFile'));
    const users = new Set(auth.users);
    // The password is checked first, so an unlisted user costs the same time as a listed one.
    verifyUser = async (user, password) => (await file.verify(user, password)) && users.has(user);
    isUser = (user) => file.has(user);
  }
  let token: string | undefined;
  if (auth.tokenFile !== undefined) token = metricsToken(auth.tokenFile);
  return { verifyUser, isUser, token };
}

/** Console and metrics users missing from the password file cannot log in: said at start (and by --check-config). */
function warnUsersWithoutPassword(config: Config, log: Logger): void {
  if (config.auth.passwordFile === undefined) return;
  const { file } = PasswordFile.parse(readConfiguredFile(config.auth.passwordFile, 'auth.passwordFile'));
  for (const { path, message } of usersWithoutPassword(config, file)) log.warn({ key: path }, message);
}

/** The console's users, with passwords from auth.passwordFile read now (at start, and again on reload). */
function consoleUsers(console: ConsoleConfig, passwordFile: string | undefined): ConsoleUsers {
  // The schema requires the password file with a console section; createAuth has read and checked it first.
  const { file } = PasswordFile.parse(readConfiguredFile(passwordFile ?? '', 'auth.passwordFile'));
  return {
    ...console,
    verifyPassword: (user, password) => file.verify(user, password),
    isUser: (user) => file.has(user),
  };
}

/** The audit log; a `log.auditFile` that cannot be opened for appending is a configuration error naming the key. */
function openAuditLog(log: Logger, auditFile: string | undefined, ring: LogRing | undefined): Logger {
  try {
    return createAuditLogger(log, auditFile, ring);
  } catch (err) {
    throw new ConfigError(
      auditFile ?? 'log.auditFile',
      [{ path: 'log.auditFile', message: `cannot open the file for appending: ${asError(err).message}` }],
      { cause: err },
    );
  }
}

function fileSize(path: string): number | undefined {
  try {
    return statSync(path).size;
  } catch {
    return undefined; // no data file yet: nothing to report
  }
}

/** Listeners, the store, every bridge, and the devices given (those of a /readyz that asks for them). */
async function readinessProblems(
  store: Store,
  bridges: readonly Bridge[],
  server: MqttServer,
  devices: readonly Device[],
): Promise<string[]> {
  const problems: string[] = [];
  if (!server.isListening) problems.push('listeners are not accepting connections');
  const flushed = await Promise.race([
    store.flushed().then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), 2000).unref()),
  ]);
  if (!flushed) problems.push('the store did not flush within 2 s');
  for (const bridge of bridges)
    if (!bridge.stats.connected) problems.push(`bridge ${bridge.name} is ${bridge.stats.state}`);
  for (const device of devices)
    if (!device.online) problems.push(`device ${device.id} is not answering (${device.stats.state})`);
  return problems;
}

/**
 * The outbox of a bridge removed from the configuration keeps its backlog on disk (nothing acknowledged is
 * dropped silently); said once at start, with the way to inspect and delete it.
 */
function warnOrphanOutboxes(store: Store, bridges: readonly BridgeConfig[], log: Logger): void {
  const orphans = store
    .outboxNames()
    .filter((name) => !bridges.some((b) => b.name === name || deadLetterOutbox(b.name) === name));
  if (orphans.length === 0) return;
  log.warn(
    { outboxes: orphans },
    'outboxes of bridges no longer in the configuration stay on disk: inspect them with "edgeferry store list", ' +
      'delete one with "edgeferry store delete-outbox NAME" while edgeferry is stopped',
  );
}
