/**
 * The HTTP observability endpoint (its own listener, loopback by default): `/metrics` in Prometheus format,
 * `/healthz` (the process answers) and `/readyz` (listeners up, store writable, uplink states). Values are read
 * from the modules' plain counters at scrape time, so the message path never touches prom-client.
 * Names: `edgeferry_<module>_<thing>_<unit>` (docs/architecture.md#naming); docs/operations.md#metrics-and-health lists them.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type * as Http from 'node:http';
import type * as Https from 'node:https';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import type * as PromClient from 'prom-client';
import type { BrokerStats } from '../broker/stats.js';
import type { BridgeStats } from '../bridge/bridge-report.js';
import type { Logger } from '../util/logger.js';
import { listenerBindError } from '../util/errors.js';
import { httpModule, httpsModule } from '../util/on-first-use.js';
import {
  MAX_DELAY_MS,
  UNCHECKED_WHY,
  UNKNOWN_USER,
  type LoginAttempt,
  type LoginThrottle,
} from '../util/login-throttle.js';

/**
 * prom-client's parts, each from its own file: its index also loads the Pushgateway (node:https with node:tls, zlib),
 * Histogram, Summary and the cluster aggregator, which this endpoint never uses: 4 MB on Node.js 24
 * (docs/operations.md#memory). test/integration/ops-metrics.test.ts checks what these serve.
 */
const requirePart = createRequire(import.meta.url);
const Registry = requirePart('prom-client/lib/registry') as typeof PromClient.Registry;
const Counter = requirePart('prom-client/lib/counter') as typeof PromClient.Counter;
const Gauge = requirePart('prom-client/lib/gauge') as typeof PromClient.Gauge;
const collectDefaultMetrics = requirePart('prom-client/lib/defaultMetrics') as typeof PromClient.collectDefaultMetrics;

/** Per-connector figures the Sparkplug device runtime keeps. */

/** `GET /` on the metrics listener of a gateway without a `console:` section. */
const CONSOLE_OFF_PAGE = `edgeferry: the web console is off.

To turn it on, add a console section to the configuration file and restart edgeferry (it needs
auth.passwordFile; its users log in with their passwords from that file):

  console:
    viewers: [shift]     # may look
    operators: [maint]   # may also act: write a tag, reconnect a bridge, disconnect a client, reload

Every key is described in config/edgeferry.example.yaml. This listener also serves /metrics, /healthz and /readyz.
`;
export interface ConnectorStats {
  readonly up: boolean;
  readonly samples: number;
  /** Times the device was declared lost (DDEATH). */
  readonly deaths: number;
  readonly restarts: number;
}

export interface MetricsSources {
  readonly broker: BrokerStats;
  /** The retained messages: how many, their payload bytes, and how many were not stored for the limits. */
  retained(): { readonly count: number; readonly bytes: number; readonly refused: number };
  subscriptionCount(): { normal: number; shared: number };
  sessionCount(): number;
  bridges(): ReadonlyMap<string, BridgeStats>;
  connectors(): ReadonlyMap<string, ConnectorStats>;
  /** Bytes used by the store's data file, undefined when not known. */
  storeBytes(): number | undefined;
  /** Damaged store records found while running (skipped, never delivered). */
  storeCorruptRecords(): number;
  /** Store transactions committed since it opened. */
  storeCommits(): number;
  /** Bytes of the store the persistent sessions hold, and the most they may (`storage.sessionShare` of `maxBytes`). */
  storeSessionBytes(): number;
  readonly storeMaxSessionBytes: number;
}

export interface Readiness {
  /**
   * What keeps the gateway from being ready, empty when ready. `askedForDevices`: the request said
   * `/readyz?devices=1`, so connectors that do not answer count too (`metrics.readyRequiresDevices` makes that the
   * default).
   */
  problems(askedForDevices: boolean): Promise<string[]>;
}

type Labels = Record<string, string | number>;

type Read = () => [Labels, number][];

/** A counter or gauge whose values are read from the modules' plain counters at scrape time. */
function mirrored(
  kind: 'counter' | 'gauge',
  registry: PromClient.Registry,
  name: string,
  help: string,
  labelNames: string[],
  read: Read,
): void {
  const options = { name, help, labelNames, registers: [registry] };
  if (kind === 'counter') {
    new Counter({
      ...options,
      collect() {
        this.reset();
        for (const [labels, value] of read()) this.inc(labels, value);
      },
    });
  } else {
    new Gauge({
      ...options,
      collect() {
        this.reset();
        for (const [labels, value] of read()) this.set(labels, value);
      },
    });
  }
}

const mirroredCounter = (
  registry: PromClient.Registry,
  name: string,
  help: string,
  labelNames: string[],
  read: Read,
): void => mirrored('counter', registry, name, help, labelNames, read);
const mirroredGauge = (
  registry: PromClient.Registry,
  name: string,
  help: string,
  labelNames: string[],
  read: Read,
): void => mirrored('gauge', registry, name, help, labelNames, read);

export function createMetricsRegistry(s: MetricsSources): PromClient.Registry {
  const r = new Registry();
  // prom-client's names already start with their module (process_cpu_seconds_total, nodejs_eventloop_lag_seconds):
  // `edgeferry_` makes them edgeferry_process_* and edgeferry_nodejs_*, not edgeferry_process_process_*.
  collectDefaultMetrics({ register: r, prefix: 'edgeferry_' });
  const b = s.broker;
  const byQos = (values: number[]): [Labels, number][] => values.map((v, qos) => [{ qos }, v]);
  mirroredGauge(r, 'edgeferry_broker_clients_connected', 'Connected MQTT clients', [], () => [
    [{}, b.clientsConnected],
  ]);
  mirroredGauge(r, 'edgeferry_broker_sessions', 'Sessions, including offline persistent ones', [], () => [
    [{}, s.sessionCount()],
  ]);
  mirroredCounter(r, 'edgeferry_broker_connections_total', 'Accepted MQTT connections', [], () => [
    [{}, b.connectionsTotal],
  ]);
  mirroredCounter(
    r,
    'edgeferry_broker_messages_received_total',
    'PUBLISH messages received from clients',
    ['qos'],
    () => byQos(b.messagesReceived),
  );
  mirroredCounter(r, 'edgeferry_broker_messages_sent_total', 'PUBLISH messages sent to clients', ['qos'], () =>
    byQos(b.messagesSent),
  );
  mirroredCounter(
    r,
    'edgeferry_broker_messages_published_locally_total',
    'Messages published in the process (edge node, bridges inbound)',
    [],
    () => [[{}, b.messagesPublishedLocally]],
  );
  mirroredCounter(r, 'edgeferry_broker_bytes_received_total', 'Bytes received from clients', [], () => [
    [{}, b.bytesReceived],
  ]);
  mirroredCounter(r, 'edgeferry_broker_bytes_sent_total', 'Bytes sent to clients', [], () => [[{}, b.bytesSent]]);
  mirroredCounter(r, 'edgeferry_broker_messages_dropped_total', 'Messages not delivered, by reason', ['reason'], () =>
    Object.entries(b.dropped).map(([reason, v]) => [{ reason }, v]),
  );
  mirroredCounter(
    r,
    'edgeferry_broker_disconnects_total',
    'Connections closed by the broker, by MQTT 5 reason',
    ['reason'],
    () => Object.entries(b.disconnects).map(([reason, v]) => [{ reason }, v]),
  );
  mirroredCounter(r, 'edgeferry_broker_auth_failures_total', 'Refused logins', [], () => [[{}, b.authFailures]]);
  mirroredCounter(
    r,
    'edgeferry_broker_acl_denied_total',
    'Operations denied by the ACL, or refused in the edge node namespace',
    ['action'],
    () => Object.entries(b.aclDenied).map(([action, v]) => [{ action }, v]),
  );
  mirroredGauge(r, 'edgeferry_broker_retained_messages', 'Retained messages', [], () => [[{}, s.retained().count]]);
  mirroredGauge(r, 'edgeferry_broker_retained_bytes', 'Payload bytes of the retained messages', [], () => [
    [{}, s.retained().bytes],
  ]);
  mirroredCounter(
    r,
    'edgeferry_broker_retained_refused_total',
    'Retained messages not stored: beyond broker.maxRetainedMessages or maxRetainedBytes',
    [],
    () => [[{}, s.retained().refused]],
  );
  mirroredGauge(r, 'edgeferry_broker_subscriptions', 'Subscriptions by type', ['type'], () => {
    const c = s.subscriptionCount();
    return [
      [{ type: 'normal' }, c.normal],
      [{ type: 'shared' }, c.shared],
    ];
  });

  const bridges = (pick: (st: BridgeStats) => number): [Labels, number][] =>
    [...s.bridges()].map(([bridge, st]) => [{ bridge }, pick(st)]);
  mirroredGauge(r, 'edgeferry_bridge_connected', '1 when the uplink is online', ['bridge'], () =>
    bridges((st) => (st.connected ? 1 : 0)),
  );
  mirroredGauge(r, 'edgeferry_bridge_backlog_messages', 'Messages in the outbox', ['bridge'], () =>
    bridges((st) => st.backlogMessages),
  );
  mirroredGauge(r, 'edgeferry_bridge_backlog_bytes', 'Bytes in the outbox', ['bridge'], () =>
    bridges((st) => st.backlogBytes),
  );
  mirroredGauge(r, 'edgeferry_bridge_dead_letter_messages', 'Refused messages kept for requeueing', ['bridge'], () =>
    bridges((st) => st.deadLetterMessages),
  );
  mirroredGauge(r, 'edgeferry_bridge_oldest_age_seconds', 'Age of the oldest outbox entry', ['bridge'], () =>
    bridges((st) => st.oldestAgeS),
  );
  mirroredGauge(
    r,
    'edgeferry_bridge_inflight_messages',
    'Messages sent upstream and not yet acknowledged',
    ['bridge'],
    () => bridges((st) => st.inflight),
  );
  mirroredGauge(r, 'edgeferry_bridge_replay_rate_messages_per_second', 'Backlog replay rate', ['bridge'], () =>
    bridges((st) => st.replayRatePerS),
  );
  mirroredGauge(
    r,
    'edgeferry_bridge_drain_eta_seconds',
    'Backlog still to send over the replay rate (NaN: not known yet)',
    ['bridge'],
    () => bridges((st) => st.drainEtaS),
  );
  mirroredGauge(
    r,
    'edgeferry_bridge_live_latency_seconds',
    'Longest journal-to-acknowledgement time of a live message, last second',
    ['bridge'],
    () => bridges((st) => st.liveLatencyS),
  );
  mirroredCounter(
    r,
    'edgeferry_bridge_sent_total',
    'PUBLISH packets sent upstream, re-sends included',
    ['bridge'],
    () => bridges((st) => st.sent),
  );
  mirroredCounter(r, 'edgeferry_bridge_acked_total', 'Outbox entries acknowledged upstream', ['bridge'], () =>
    bridges((st) => st.acked),
  );
  mirroredCounter(r, 'edgeferry_bridge_received_total', 'Messages from upstream published locally', ['bridge'], () =>
    bridges((st) => st.received),
  );
  mirroredCounter(r, 'edgeferry_bridge_reconnects_total', 'Uplink reconnects', ['bridge'], () =>
    bridges((st) => st.reconnects),
  );
  mirroredCounter(
    r,
    'edgeferry_bridge_session_taken_total',
    'Uplink connections the central broker gave to another client with the same client id',
    ['bridge'],
    () => bridges((st) => st.sessionTaken),
  );
  mirroredCounter(r, 'edgeferry_bridge_dropped_total', 'Outbox entries dropped, by reason', ['bridge', 'reason'], () =>
    [...s.bridges()].flatMap(([bridge, st]) =>
      Object.entries(st.dropped).map(([reason, v]): [Labels, number] => [{ bridge, reason }, v]),
    ),
  );

  const connectors = (pick: (st: ConnectorStats) => number): [Labels, number][] =>
    [...s.connectors()].map(([connector, st]) => [{ connector }, pick(st)]);
  mirroredGauge(r, 'edgeferry_connector_up', '1 when the device answers', ['connector'], () =>
    connectors((st) => (st.up ? 1 : 0)),
  );
  mirroredCounter(r, 'edgeferry_connector_samples_total', 'Tag samples read', ['connector'], () =>
    connectors((st) => st.samples),
  );
  mirroredCounter(r, 'edgeferry_connector_deaths_total', 'Times the device was lost (DDEATH)', ['connector'], () =>
    connectors((st) => st.deaths),
  );
  mirroredCounter(r, 'edgeferry_connector_restarts_total', 'Connector restarts after a loss', ['connector'], () =>
    connectors((st) => st.restarts),
  );

  mirroredGauge(r, 'edgeferry_store_size_bytes', 'Bytes used by the LMDB data file', [], () => {
    const bytes = s.storeBytes();
    return bytes === undefined ? [] : [[{}, bytes]];
  });
  mirroredCounter(
    r,
    'edgeferry_store_corrupt_records_total',
    'Damaged store records (bad checksum) skipped, never delivered',
    [],
    () => [[{}, s.storeCorruptRecords()]],
  );
  mirroredGauge(
    r,
    'edgeferry_store_session_bytes',
    'Store pages held by persistent sessions (subscriptions, queues, wills)',
    [],
    () => [[{}, s.storeSessionBytes()]],
  );
  mirroredGauge(
    r,
    'edgeferry_store_session_max_bytes',
    'The most persistent sessions may hold together (storage.sessionShare of storage.maxBytes)',
    [],
    () => [[{}, s.storeMaxSessionBytes]],
  );
  mirroredCounter(
    r,
    'edgeferry_store_commits_total',
    'Store transactions committed (each one flush with storage.sync: full)',
    [],
    () => [[{}, s.storeCommits()]],
  );
  return r;
}

/** Who may read /metrics and /readyz (`metrics.auth`); /healthz answers anyone: it tells only that we run. */
export interface MetricsAccess {
  /** HTTP basic auth: whether `user` may read the metrics and `password` is theirs. */
  readonly verifyUser?: (user: string, password: Buffer) => Promise<boolean>;
  /** Whether a name is a user of the password file (others share one login throttle key per address). */
  readonly isUser?: (user: string) => boolean;
  /** The bearer token (`Authorization: Bearer <token>`). */
  readonly token?: string;
}

const REALM = 'edgeferry metrics';

/**
 * Why a request is refused (for the audit line; never the credentials), the basic auth user name (`<unknown>` for
 * a name that is no user: people type passwords there), and 429 when the login throttle says busy.
 */
interface Refusal {
  readonly why: string;
  readonly user?: string;
  readonly busy?: boolean;
}

/**
 * Checks a request's Authorization header against a `MetricsAccess`: the token compared in constant time, basic
 * auth through the gateway's login throttle (shared with MQTT and the console).
 */
class Gate {
  private readonly tokenDigest: Buffer | undefined;
  /** The 401's WWW-Authenticate header: one challenge per accepted scheme. */
  readonly challenges: string[] = [];

  constructor(
    private readonly access: MetricsAccess,
    private readonly throttle: LoginThrottle,
  ) {
    this.tokenDigest = access.token === undefined ? undefined : sha256(access.token);
    if (access.verifyUser) this.challenges.push(`Basic realm="${REALM}", charset="UTF-8"`);
    if (access.token !== undefined) this.challenges.push(`Bearer realm="${REALM}"`);
  }

  /** Undefined when allowed, else why not. */
  async refusal(header: string | undefined, client: Omit<LoginAttempt, 'user'>): Promise<Refusal | undefined> {
    if (header === undefined) return { why: 'no credentials' };
    const space = header.indexOf(' ');
    const scheme = header.slice(0, space < 0 ? header.length : space).toLowerCase();
    const value = space < 0 ? '' : header.slice(space + 1).trim();
    if (scheme === 'bearer' && this.tokenDigest) {
      // Digests of equal length, so neither the length nor a prefix of the token shows in the timing.
      return timingSafeEqual(sha256(value), this.tokenDigest) ? undefined : { why: 'wrong bearer token' };
    }
    const verifyUser = this.access.verifyUser;
    if (scheme === 'basic' && verifyUser) {
      const decoded = Buffer.from(value, 'base64');
      const colon = decoded.indexOf(':');
      if (colon < 0) return { why: 'malformed basic credentials' };
      const user = decoded.subarray(0, colon).toString('utf8');
      const known = this.access.isUser?.(user) === true;
      const logged = known ? user : UNKNOWN_USER;
      switch (
        await this.throttle.check({ ...client, user: known ? user : undefined }, () =>
          verifyUser(user, decoded.subarray(colon + 1)),
        )
      ) {
        case 'accepted':
          return undefined;
        case 'busy':
          return { why: UNCHECKED_WHY.busy, user: logged, busy: true };
        case 'gone':
          return { why: UNCHECKED_WHY.gone, user: logged };
        default:
          return { why: 'bad user name or password', user: logged };
      }
    }
    // Not echoed: a header without a scheme may be a bare secret.
    return { why: 'authorization scheme not accepted here' };
  }
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

/** More routes on the same listener (the web console): answers a request and says true, or says false. */
export type ExtraRoutes = (req: Http.IncomingMessage, res: Http.ServerResponse, path: string) => Promise<boolean>;

/** PEM certificate and key: the listener speaks HTTPS. */
export interface HttpTls {
  readonly cert: Buffer;
  readonly key: Buffer;
}

export class MetricsServer {
  private server: Http.Server | Https.Server | undefined;
  private gate: Gate | undefined;
  private extra: ExtraRoutes | undefined;

  constructor(
    private readonly registry: PromClient.Registry,
    private readonly readiness: Readiness,
    private readonly log: Logger,
    /** Refused requests are written here. */
    private readonly audit: Logger,
    access: MetricsAccess | undefined,
    /** The gateway's one login throttle: basic auth guesses are slowed as MQTT and console logins are. */
    private readonly throttle: LoginThrottle,
  ) {
    this.setAccess(access);
  }

  /** New credentials (reload: the password file or the token file changed); undefined opens the endpoint. */
  setAccess(access: MetricsAccess | undefined): void {
    this.gate = access === undefined ? undefined : new Gate(access, this.throttle);
  }

  /** Mounts routes with their own access rules, tried before the metrics ones (set before `start`). */
  mount(routes: ExtraRoutes): void {
    this.extra = routes;
  }

  async start(host: string, port: number, tls?: HttpTls): Promise<number> {
    const handler = (req: Http.IncomingMessage, res: Http.ServerResponse): void => {
      this.serve(req, res).catch((err: unknown) => {
        this.log.error({ err, url: req.url }, 'metrics request failed');
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
    };
    const server =
      tls === undefined
        ? httpModule().createServer(handler)
        : httpsModule().createServer({ ...tls, minVersion: 'TLSv1.2' }, handler);
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(listenerBindError('metrics endpoint', host, port, err)));
      server.listen(port, host, () => resolve());
    });
    return (server.address() as AddressInfo).port;
  }

  /** New certificate and key (reload: renewed in place); established connections keep theirs. */
  setTls(tls: HttpTls): void {
    if (this.server instanceof httpsModule().Server) this.server.setSecureContext({ ...tls, minVersion: 'TLSv1.2' });
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
  }

  private async serve(req: Http.IncomingMessage, res: Http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname;
    if (this.extra && (await this.extra(req, res, path))) return;
    // Where the web console would be (it answers these itself when it is on): how to turn it on. Open, like
    // /healthz: it tells nothing about the gateway's state.
    if (path === '/' || path === '/console' || path.startsWith('/console/')) {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(CONSOLE_OFF_PAGE);
      return;
    }
    const gate = this.gate;
    if (gate && path !== '/healthz') {
      const client = { address: req.socket.remoteAddress ?? '', waiting: () => !req.socket.destroyed };
      const refusal = await gate.refusal(req.headers.authorization, client);
      if (refusal !== undefined) {
        this.audit.warn(
          { remote: req.socket.remoteAddress, path, user: refusal.user, why: refusal.why },
          'metrics request refused',
        );
        if (refusal.busy)
          res
            .writeHead(429, { 'retry-after': String(MAX_DELAY_MS / 1000), 'content-type': 'text/plain' })
            .end('too many login attempts: try again later\n');
        else
          res
            .writeHead(401, { 'www-authenticate': gate.challenges, 'content-type': 'text/plain' })
            .end('unauthorized\n');
        return;
      }
    }
    if (path === '/metrics') {
      const body = await this.registry.metrics();
      res.writeHead(200, { 'content-type': this.registry.contentType }).end(body);
    } else if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    } else if (path === '/readyz') {
      const devices = url.searchParams.get('devices');
      const problems = await this.readiness.problems(devices === '1' || devices === 'true');
      res.writeHead(problems.length === 0 ? 200 : 503, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ready: problems.length === 0, problems }) + '\n');
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: try /metrics, /healthz, /readyz\n');
    }
  }
}
