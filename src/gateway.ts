/**
 * The composition root: the only place that constructs and wires the parts. start → reload → stop.
 * Shutdown order (docs/architecture.md#start-and-stop): stop connectors (the edge node publishes NDEATH) → stop
 * accepting and disconnect clients → close the broker (delayed wills of durable sessions wait for the next run) → stop
 * bridges (outboxes stay on disk) → close the store.
 */
import { createHash } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { BridgeConfig, Config } from './config/schema.js';
import type { Logger } from './util/logger.js';
import { Broker } from './broker/broker.js';
import { BrokerStats } from './broker/stats.js';
import { Origins, createMessage } from './protocol/message.js';
import { checkBindable, MqttServer } from './server/listeners.js';
import type { BoundListener } from './server/listeners.js';
import { SysTopics } from './ops/sys-topics.js';
import { fleetStatus, type FleetStatusSources } from './ops/fleet-status.js';
import type { MetricsServer } from './ops/metrics.js';
import { httpTls } from './configured-files.js';
import { asError, ConfigError } from './util/errors.js';
import { SystemdNotifier } from './ops/systemd.js';
import { createAuditLogger } from './ops/pino-logger.js';
import { openLmdbStore } from './store/lmdb/open.js';
import { deadLetterOutbox, type Store } from './store/types.js';
import { Bridge } from './bridge/bridge.js';
import type { ConnectorConfig } from '../connectors/index.js';
import type { Connector } from '../connectors/contract.js';
import type { EdgeNode, UplinkControl } from './sparkplug/edge-node.js';
import type { Device } from './sparkplug/device.js';
import { ownNamespace } from './sparkplug/topics.js';
import { topicMatches } from './protocol/topics.js';
import { SteadyClock, watchClockSteps } from './util/clock.js';
import { fullGc } from './util/full-gc.js';
import { LoginThrottle } from './util/login-throttle.js';
import type { WebConsole } from './console/console.js';
import type { ConfigControl } from './console/sources.js';
import type { LogRing } from './ops/pino-logger.js';
import { consoleUsers, createAuth, metricsAccess, warnUsersWithoutPassword } from './gateway/access.js';
import { reloadGateway, type InForce } from './gateway/reload.js';

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
  const b = initial.broker;
  const systemd = new SystemdNotifier(log.child({ mod: 'systemd' }));
  const audit = openAuditLog(log, initial.log.auditFile, extras.logRing);
  // Auth files first: a bad password or ACL file stops the start before anything binds.
  const stats = new BrokerStats();
  // The edge node's namespace is the gateway's to publish in (the sparkplug section changes only with a restart).
  const reserved = initial.sparkplug && ownNamespace(initial.sparkplug.groupId, initial.sparkplug.edgeNodeId);
  // One throttle for every password check (MQTT, console, /metrics), kept across reloads.
  const loginThrottle = new LoginThrottle();
  const makeAuth = (config: Config) => createAuth(config, audit, stats, reserved, loginThrottle);
  const auth = makeAuth(initial);
  warnUsersWithoutPassword(initial, log);
  // Ports next: one another program holds stops the start before the store opens.
  await checkBindable([
    ...initial.listeners.map(({ type, host, port }) => ({ what: `${type} listener`, host, port })),
    ...(initial.metrics ? [{ what: 'metrics endpoint', host: initial.metrics.host, port: initial.metrics.port }] : []),
  ]);
  // One steady timeline for everything that stores times or compares with stored ones; the store sets its base.
  const clock = new SteadyClock();
  // The store names itself in its log lines (mod: store, path). Sessions leave the rest to the outboxes.
  const maxSessionBytes = Math.floor(initial.storage.maxBytes * initial.storage.sessionShare);
  const store: Store = await openLmdbStore({
    path: initial.storage.path,
    sync: initial.storage.sync,
    maxBytes: initial.storage.maxBytes,
    maxSessionBytes,
    verify: initial.storage.verifyOnStart,
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

  // The configuration in force and the running bridges: a reload replaces both, the closures below read them here.
  const now: InForce = { config: initial, bridges: [] };
  // Connectors and the Sparkplug edge node come before the bridges: the uplink bridge takes the node's hooks.
  // One registry for the gateway's life: connectors added on reload share links (a Modbus bus) with the others.
  // The connectors' code loads only for a sparkplug section or the console's PLC tools (docs/operations.md#memory).
  const connectorRegistry =
    initial.sparkplug || initial.console
      ? (await import('../connectors/index.js')).createConnectorRegistry()
      : undefined;
  const makeConnector = (c: ConnectorConfig): Connector => {
    // Connectors need a sparkplug section (the schema's rule), which changes only with a restart.
    if (connectorRegistry === undefined) throw new Error(`connector ${c.id} without a sparkplug section`);
    return connectorRegistry.create(c, {
      log: log.child({ mod: 'connector', connector: c.id }),
      dataDir: initial.storage.path,
    });
  };
  // The uplink's backlog, a node metric: read once the node is born, after the bridges below exist.
  const uplinkBacklog = () => {
    const uplink = now.bridges.find((bridge) => bridge.name === now.config.sparkplug?.uplink);
    return { messages: uplink?.stats.backlogMessages ?? 0, online: uplink?.online ?? false };
  };
  const edgeNode = await createEdgeNode(initial, broker, makeConnector, log, audit, uplinkBacklog);

  const startedAtMs = Date.now();
  const statusSources: FleetStatusSources = {
    gatewayId: initial.gateway.id,
    version: VERSION,
    startedAtMs,
    configDigest: () => createHash('sha256').update(JSON.stringify(now.config)).digest('hex').slice(0, 16),
    bridges: () => new Map(now.bridges.map((bridge) => [bridge.name, bridge.stats])),
    devices: () => (edgeNode?.deviceList ?? []).map((d) => ({ id: d.id, up: d.stats.state === 'online' })),
  };
  const makeBridge = (bc: BridgeConfig): Bridge =>
    new Bridge({
      config: bc,
      gatewayId: now.config.gateway.id,
      broker,
      // The same name gives the same outbox: a bridge reconfigured on reload finds its backlog.
      outbox: store.outbox(bc.name, bc.queue),
      deadLetter:
        bc.queue.deadLetter.maxMessages > 0
          ? store.outbox(deadLetterOutbox(bc.name), { ...bc.queue.deadLetter, maxAgeS: 0, overflow: 'drop-oldest' })
          : undefined,
      log: log.child({ mod: 'bridge', bridge: bc.name }),
      hooks: edgeNode && bc.name === now.config.sparkplug?.uplink ? edgeNode.hooks : undefined,
      maxPacketBytes: now.config.broker.maxPacketBytes,
      status: (online) => fleetStatus(statusSources, online),
    });
  now.bridges = initial.bridges.map(makeBridge);
  const uplinkBridge = now.bridges.find((bridge) => bridge.name === initial.sparkplug?.uplink);
  if (edgeNode && uplinkBridge) edgeNode.attachUplink(uplinkControl(uplinkBridge));
  // The local session starts first, so the first upstream prologue already has it to announce.
  await edgeNode?.start();
  for (const bridge of now.bridges) await bridge.start();
  // Delayed wills of the last run go out only now, so that an overdue one reaches the bridges too.
  broker.wills.start();
  warnOrphanOutboxes(store, initial.bridges, log);

  const server = new MqttServer(broker, auth, { ...b }, log.child({ mod: 'server' }), audit);
  fullGc(); // startup's garbage, before the first client (src/util/full-gc.ts)
  let listeners: BoundListener[];
  try {
    listeners = await server.start(initial.listeners);
  } catch (err) {
    await edgeNode?.stop();
    await Promise.all(now.bridges.map((bridge) => bridge.stop()));
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

  const storeBytes = () => fileSize(join(now.config.storage.path, 'data.mdb'));
  const readiness = (askedForDevices: boolean) =>
    readinessProblems(
      store,
      now.bridges,
      server,
      askedForDevices || now.config.metrics?.readyRequiresDevices ? (edgeNode?.deviceList ?? []) : [],
    );
  let metrics: MetricsServer | undefined;
  let webConsole: WebConsole | undefined;
  if (initial.metrics) {
    // The endpoint's code (prom-client, HTTP) and the console's load only when configured (docs/operations.md#memory).
    const { MetricsServer, createMetricsRegistry } = await import('./ops/metrics.js');
    const registry = createMetricsRegistry({
      broker: broker.stats,
      retained: () => broker.retained,
      subscriptionCount: () => broker.subscriptionCount,
      sessionCount: () => broker.sessions.size,
      bridges: () => new Map(now.bridges.map((bridge) => [bridge.name, bridge.stats])),
      connectors: () =>
        new Map(
          (edgeNode?.deviceList ?? []).map((d) => {
            const st = d.stats;
            return [d.id, { up: st.state === 'online', samples: st.samples, deaths: st.deaths, restarts: st.restarts }];
          }),
        ),
      storeBytes,
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
      metricsAccess(initial.metrics, initial.auth.passwordFile),
      loginThrottle,
    );
    if (initial.console && connectorRegistry) {
      const [{ WebConsole }, { consoleSources }, { configEditing, plcTools }] = await Promise.all([
        import('./console/console.js'),
        import('./gateway/console-sources.js'),
        import('./commissioning.js'),
      ]);
      const sources = consoleSources({
        version: VERSION,
        config: extras.config,
        configEditing: extras.config && configEditing(extras.config, initial.storage.path),
        plcTools: plcTools(connectorRegistry, initial.storage.path, extras.config?.file),
        logRing: extras.logRing,
        broker,
        server,
        edgeNode,
        now,
        storeBytes,
        readiness: () => readiness(false),
      });
      const routes = new WebConsole(
        sources,
        consoleUsers(initial.console, initial.auth.passwordFile),
        log.child({ mod: 'console' }),
        audit,
        loginThrottle,
      );
      metrics.mount((req, res, path) => routes.handle(req, res, path));
      routes.start();
      webConsole = routes;
    }
    const port = await metrics.start(initial.metrics.host, initial.metrics.port, httpTls(initial.metrics));
    log.info({ host: initial.metrics.host, port, console: webConsole !== undefined }, 'metrics endpoint listening');
  }

  const stopClockWatch = watchClockSteps(clock, (stepMs) =>
    log.warn(
      { stepS: Math.round(stepMs / 1000), now: new Date().toISOString() },
      'the system clock stepped; ages, expiry and will delays keep counting real time',
    ),
  );
  log.info({ version: VERSION, listeners: listeners.length, bridges: now.bridges.length }, 'edgeferry started');
  await systemd.ready(`${listeners.length} listener(s), ${now.bridges.length} bridge(s)`);
  // The event loop itself drives the pings, so a blocked loop stops them and systemd restarts us.
  systemd.startWatchdog(() => true);

  const reloadTargets = { server, metrics, webConsole, edgeNode, makeAuth, makeBridge, makeConnector, log, audit };
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
        await Promise.all(now.bridges.map((bridge) => bridge.stop()));
        // Its live streams end first: the listener's close waits for open responses.
        webConsole?.stop();
        await metrics?.stop();
        await store.close();
        systemd.close();
      })()),
    reload: (next) => reloadGateway(now, reloadTargets, next),
  };
}

/** The connectors of the config and the edge node that publishes them, or undefined without a sparkplug section. */
async function createEdgeNode(
  config: Config,
  broker: Broker,
  makeConnector: (c: ConnectorConfig) => Connector,
  log: Logger,
  audit: Logger,
  uplinkBacklog: () => { messages: number; online: boolean },
): Promise<EdgeNode | undefined> {
  const sp = config.sparkplug;
  if (!sp) return undefined;
  const { EdgeNode } = await import('./sparkplug/edge-node.js');
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
