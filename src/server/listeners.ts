/**
 * The MQTT server: TCP, TLS, WebSocket and secure WebSocket listeners feeding `Connection`s, plus the one timer
 * that checks keep-alive, connect timeouts and slow readers for every connection.
 */
import net from 'node:net';
import type * as Tls from 'node:tls';
import type * as Http from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type * as Ws from 'ws';
import type { Broker } from '../broker/broker.js';
import type { AuthHooks } from '../broker/auth.js';
import { Reason } from '../protocol/reason-codes.js';
import { asError, EdgeferryError, listenerBindError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { Connection, type ConnectionContext, type ListenerPolicy } from './connection.js';
import { PendingConnections } from './pending.js';
import { WriteFlusher } from './write-flusher.js';
import type { ServerLimits } from './context.js';
import { SocketTransport, webSocketTransport } from './transport.js';
import type { Transport } from './transport.js';
import { httpModule, httpsModule, onFirstUse, tlsModule } from '../util/on-first-use.js';

/** TLS, HTTP and ws only when a listener of that kind is configured (docs/operations.md#memory). */
const loadWs = onFirstUse<typeof Ws>('ws');

export interface ListenerSpec {
  readonly type: 'tcp' | 'tls' | 'ws' | 'wss';
  readonly host: string;
  readonly port: number;
  readonly path?: string;
  readonly allowAnonymous: boolean;
  readonly maxConnections?: number;
  readonly maxPendingConnections: number;
  readonly maxPendingPerAddress: number;
  readonly allowedOrigins?: readonly string[];
  readonly tls?: {
    readonly certFile: string;
    readonly keyFile: string;
    readonly caFile?: string;
    readonly requireCertificate: boolean;
    readonly useIdentityAsUsername: boolean;
    readonly minVersion: string;
    readonly ciphers: string;
  };
}

export interface BoundListener {
  readonly type: ListenerSpec['type'];
  readonly host: string;
  readonly port: number;
}

interface Running {
  readonly spec: ListenerSpec;
  readonly server: net.Server;
  readonly wss?: Ws.WebSocketServer;
}

const TIMER_INTERVAL_MS = 500;
/** Refusals that a flood repeats (a full budget, a foreign origin) are logged at most this often per listener. */
const REFUSAL_LOG_INTERVAL_MS = 60_000;

/** A connected client as the web console lists it. */
export interface ClientView {
  readonly clientId: string;
  readonly username: string | undefined;
  readonly remote: string;
  readonly protocolVersion: number;
  /** `type:port` of the listener it came in on. */
  readonly listener: string;
  readonly subscriptions: number;
  readonly queued: number;
  readonly inflight: number;
  /** Wall-clock ms when the connection opened. */
  readonly connectedSinceMs: number;
}

export class MqttServer {
  private readonly ctx: ConnectionContext;
  private readonly running: Running[] = [];
  /** `type:port` of each listener, by the policy its connections share. */
  private readonly listenerLabels = new Map<ListenerPolicy, string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    broker: Broker,
    auth: AuthHooks,
    limits: ServerLimits,
    log: Logger,
    /** Rejected client certificates are written here too. */
    private readonly audit: Logger,
  ) {
    this.ctx = { broker, auth, limits, log, flusher: new WriteFlusher(), clients: new Map() };
    this.setAuth(auth);
  }

  /**
   * Applies authentication and ACL rules (at start, and on reload without dropping connections): the next
   * operation of every client and every delivery to every session, connected or not, answers to them.
   */
  setAuth(auth: AuthHooks): void {
    this.ctx.auth = auth;
    this.ctx.broker.setReadCheck(auth.authorizeRead?.bind(auth));
  }

  /**
   * Re-reads the certificate, key and CA files of the TLS and wss listeners (reload): new handshakes use them,
   * established connections keep theirs. Every file is read and checked before any listener changes, so a bad
   * file throws and leaves all listeners as they were.
   */
  reloadTls(): number {
    const updates = this.running
      .filter((r) => r.spec.tls !== undefined)
      .map((r) => {
        const options = loadTls(r.spec);
        return { server: r.server as Tls.Server, options };
      });
    for (const { server, options } of updates) server.setSecureContext(options);
    return updates.length;
  }

  get isListening(): boolean {
    return this.running.length > 0 && this.running.every((r) => r.server.listening);
  }

  /** Open connections, connected or not yet. */
  get connectionCount(): number {
    let count = 0;
    this.listenerLabels.forEach((_, policy) => (count += policy.connections));
    return count;
  }

  /**
   * Every open connection: the connected clients and each listener's connections without CONNECT yet. Callbacks,
   * not a generator: the timer walks every connection twice a second, and a generator makes an iterator result
   * per connection and walk, garbage that grows with the idle connections (docs/architecture.md, "What a
   * connection costs"). `fn` may close the connection it is given.
   */
  private forEachOpenConnection(fn: (conn: Connection) => void): void {
    this.ctx.clients.forEach(fn);
    this.listenerLabels.forEach((_, policy) => policy.pending.forEach(fn));
  }

  /** The connected clients (CONNECT done), for the web console. */
  clients(): ClientView[] {
    const wallMinusMono = Date.now() - performance.now();
    return [...this.ctx.clients.values()].map((conn) => ({
      clientId: conn.clientId,
      username: conn.username,
      remote: conn.remoteAddress,
      protocolVersion: conn.version,
      listener: this.listenerLabels.get(conn.listener) ?? '',
      subscriptions: conn.session?.subscriptions.size ?? 0,
      queued: conn.session?.queuedCount ?? 0,
      inflight: conn.session?.inflightCount ?? 0,
      connectedSinceMs: Math.round(wallMinusMono + conn.openedAtMs),
    }));
  }

  /** Closes a client's connection with DISCONNECT 0x98 (administrative action); false when it is not connected. */
  disconnectClient(clientId: string, why: string): boolean {
    const conn = this.ctx.clients.get(clientId);
    if (conn === undefined) return false;
    conn.close(Reason.AdministrativeAction, why);
    return true;
  }

  /** Binds every listener; rejects (and closes those already bound) if one cannot bind. */
  async start(specs: readonly ListenerSpec[]): Promise<BoundListener[]> {
    try {
      for (const spec of specs) this.running.push(await this.listen(spec));
    } catch (err) {
      await this.stop();
      throw err;
    }
    this.timer = setInterval(() => {
      const now = performance.now();
      this.forEachOpenConnection((conn) => conn.checkTimers(now));
    }, TIMER_INTERVAL_MS);
    this.timer.unref();
    return this.running.map((r) => {
      const address = r.server.address() as AddressInfo;
      return { type: r.spec.type, host: address.address, port: address.port };
    });
  }

  /** Stops accepting, then closes every connection; MQTT 5 clients get DISCONNECT 0x8B (server shutting down). */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    const closed = this.running.splice(0).map(
      (r) =>
        new Promise<void>((resolve) => {
          r.wss?.close();
          r.server.close(() => resolve());
        }),
    );
    const open: Connection[] = [];
    this.forEachOpenConnection((conn) => open.push(conn));
    for (const conn of open) conn.close(Reason.ServerShuttingDown, 'server shutting down');
    await Promise.all(closed);
  }

  private async listen(spec: ListenerSpec): Promise<Running> {
    const pending = new PendingConnections<Connection>(spec.maxPendingConnections, spec.maxPendingPerAddress);
    const policy: ListenerPolicy = {
      allowAnonymous: spec.allowAnonymous,
      identityIsUsername: spec.tls?.useIdentityAsUsername ?? false,
      connections: 0,
      pending,
    };
    const running: Running = { spec, server: undefined as unknown as net.Server };
    const stats = this.ctx.broker.stats;
    const budgetLogDue = throttle(REFUSAL_LOG_INTERVAL_MS);
    const budgetFull = (why: string, remote: string): void => {
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- absent until the first such disconnect
      stats.disconnects.server_busy = (stats.disconnects.server_busy ?? 0) + 1;
      if (budgetLogDue())
        this.ctx.log.warn({ listener: spec.type, port: spec.port, remote, pending: pending.size }, why);
    };
    const accept = (transport: Transport, closeSocket: () => void): void => {
      const remote = transport.remoteAddress;
      // One address cannot take the whole budget [docs/reliability.md rule 35], nor lock itself out with idle
      // sockets: every local program shares 127.0.0.1, so that address's oldest one makes room.
      const oldestHere = pending.fromAddress(remote) >= pending.maxPerAddress ? pending.oldest(remote) : undefined;
      if (oldestHere !== undefined) {
        budgetFull('too many connections without CONNECT from one address: closing its oldest to make room', remote);
        oldestHere.close(undefined, 'no CONNECT yet, closed to make room for a new connection from the same address');
      }
      const max = Math.min(this.ctx.limits.maxConnections, spec.maxConnections ?? Infinity);
      const isFull = this.connectionCount >= max || policy.connections >= (spec.maxConnections ?? Infinity);
      if (isFull || pending.size >= pending.max) {
        // A socket that has not logged in never locks out one that may: the oldest of them makes room.
        const oldest = pending.oldest();
        if (oldest === undefined) {
          budgetFull('connection limit reached: refusing new connections', remote);
          closeSocket();
          return;
        }
        budgetFull('too many connections without CONNECT: closing the oldest to make room', remote);
        oldest.close(undefined, 'no CONNECT yet, closed to make room for a new connection');
      }
      new Connection(transport, this.ctx, policy);
    };
    // A TLS handshake or WebSocket upgrade is bounded by the connect timeout too, as is the CONNECT after it.
    const connectTimeoutMs = this.ctx.limits.connectTimeoutMs;
    const tlsOptions = spec.tls ? { ...loadTls(spec), handshakeTimeout: connectTimeoutMs } : undefined;
    /** mTLS: a client certificate that did not verify closes its connection here, logged with OpenSSL's reason. */
    const isVerified = (socket: Tls.TLSSocket): boolean => {
      if (!spec.tls?.requireCertificate || socket.authorized) return true;
      const facts = {
        listener: spec.type,
        port: spec.port,
        remote: socket.remoteAddress,
        ...certificateRejection(socket),
      };
      this.ctx.log.info(facts, 'client certificate rejected');
      this.audit.warn(facts, 'client certificate rejected');
      socket.destroy();
      return false;
    };
    let server: net.Server;
    if (spec.type === 'tcp' || spec.type === 'tls') {
      const onSocket = (socket: net.Socket): void => {
        if (spec.type === 'tls' && !isVerified(socket as Tls.TLSSocket)) return;
        accept(new SocketTransport(socket), () => socket.destroy());
      };
      server = spec.type === 'tcp' ? net.createServer(onSocket) : tlsModule().createServer(tlsOptions!, onSocket);
      if (spec.type === 'tls') {
        // With a listener here Node leaves the socket open (a handshake timeout, for one): close it.
        server.on('tlsClientError', (err, socket: Tls.TLSSocket) => {
          this.ctx.log.debug({ err }, 'TLS handshake failed');
          socket.destroy();
        });
      }
    } else {
      // Node checks these timeouts every connectionsCheckingInterval (30 s by default).
      const upgradeTimeouts = {
        headersTimeout: connectTimeoutMs,
        requestTimeout: connectTimeoutMs,
        connectionsCheckingInterval: TIMER_INTERVAL_MS,
      };
      const httpServer =
        spec.type === 'ws'
          ? httpModule().createServer(upgradeTimeouts)
          : httpsModule().createServer({ ...tlsOptions!, ...upgradeTimeouts });
      // Before the HTTP request is read: an unverified client never reaches the WebSocket upgrade.
      if (spec.type === 'wss') httpServer.on('secureConnection', (socket: Tls.TLSSocket) => void isVerified(socket));
      server = httpServer;
      httpServer.on('request', (_req, res: Http.ServerResponse) => {
        res.writeHead(426, { 'content-type': 'text/plain' }).end('MQTT over WebSocket only\n');
      });
      const isOriginAllowed = originPolicy(spec);
      const originLogDue = throttle(REFUSAL_LOG_INTERVAL_MS);
      const wss = new (loadWs().WebSocketServer)({
        server: httpServer,
        path: spec.path ?? '/mqtt',
        verifyClient: (
          info: { origin?: string; req: Http.IncomingMessage },
          done: (ok: boolean, code?: number, message?: string) => void,
        ) => {
          if (isOriginAllowed(info.origin)) return done(true);
          if (originLogDue()) {
            this.ctx.log.info(
              { listener: spec.type, port: spec.port, origin: info.origin, remote: info.req.socket.remoteAddress },
              'WebSocket upgrade refused: a browser page from an origin not in allowedOrigins',
            );
          }
          done(false, 403, 'Origin not allowed');
        },
        maxPayload: this.ctx.limits.maxPacketBytes + 5,
        handleProtocols: (protocols) =>
          protocols.has('mqtt') ? 'mqtt' : protocols.has('mqttv3.1') ? 'mqttv3.1' : false,
      });
      wss.on('connection', (ws, req) =>
        accept(webSocketTransport(ws, req.socket.remoteAddress ?? 'unknown', req.socket), () => ws.terminate()),
      );
      Object.assign(running, { wss });
    }
    Object.assign(running, { server });
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(listenerBindError(`${spec.type} listener`, spec.host, spec.port, err)));
      server.listen(spec.port, spec.host, () => resolve());
    });
    this.listenerLabels.set(policy, `${spec.type}:${(server.address() as AddressInfo).port}`);
    server.on('error', (err) => this.ctx.log.error({ err, listener: spec.type, port: spec.port }, 'listener error'));
    return running;
  }
}

/**
 * Binds each address for a moment and lets it go: a port another program holds is found before the store opens
 * (which may take long: recovery, `storage.verifyOnStart`), and the start fails with that one error and nothing
 * to undo. The real bind may still lose a race for the port; it fails with the same error.
 */
export async function checkBindable(addresses: readonly { what: string; host: string; port: number }[]): Promise<void> {
  for (const { what, host, port } of addresses) {
    if (port === 0) continue; // any free port: nothing to find taken
    const probe = net.createServer();
    await new Promise<void>((resolve, reject) => {
      probe.once('error', (err) => reject(listenerBindError(what, host, port, err)));
      probe.listen(port, host, () => probe.close(() => resolve()));
    });
  }
}

/**
 * Which browser pages may open a WebSocket: requests without an `Origin` header come from programs, not pages, and
 * are always let through. A listed origin is always allowed. An unlisted one is refused where the browser itself
 * would bring the credentials (anonymous access, client certificates) or where a list is set; on a listener that
 * needs a password, a page must present one like any client, so without a list any origin may try.
 */
function originPolicy(spec: ListenerSpec): (origin: string | undefined) => boolean {
  const allowed = new Set(spec.allowedOrigins?.map((o) => o.toLowerCase()));
  const checks = spec.allowedOrigins !== undefined || spec.allowAnonymous || spec.tls?.requireCertificate === true;
  return (origin) => origin === undefined || !checks || allowed.has(origin.toLowerCase());
}

/** OpenSSL's verify results for client certificates, in the words an operator looks for. */
const CERTIFICATE_REASONS: Readonly<Record<string, string>> = {
  CERT_HAS_EXPIRED: 'expired',
  CERT_NOT_YET_VALID: 'not yet valid',
  CERT_REVOKED: 'revoked',
  UNABLE_TO_GET_ISSUER_CERT: 'unknown CA',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'unknown CA',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'unknown CA',
  SELF_SIGNED_CERT_IN_CHAIN: 'unknown CA',
  DEPTH_ZERO_SELF_SIGNED_CERT: 'self-signed',
  CERT_SIGNATURE_FAILURE: 'bad signature',
  INVALID_PURPOSE: 'not for client authentication',
};

/** Why a client certificate was not accepted, and whose it claims to be (for the log: nothing here is verified). */
function certificateRejection(socket: Tls.TLSSocket): Record<string, string | undefined> {
  // Node's types are too narrow: null once the socket is destroyed, {} without a certificate, fields may be absent.
  const peer = socket.getPeerCertificate() as Partial<Tls.PeerCertificate> | null;
  if (peer === null || Object.keys(peer).length === 0) return { reason: 'no certificate' };
  const code = String(socket.authorizationError);
  const cn = peer.subject?.CN;
  const issuer = peer.issuer?.CN;
  return {
    reason: CERTIFICATE_REASONS[code] ?? code,
    code,
    subject: typeof cn === 'string' ? cn : undefined,
    issuer: typeof issuer === 'string' ? issuer : undefined,
    notAfter: peer.valid_to,
    fingerprint: peer.fingerprint256,
  };
}

/** True at most once per interval: for log lines that a flood would otherwise repeat. */
function throttle(intervalMs: number): () => boolean {
  let lastMs = -Infinity;
  return () => {
    const now = performance.now();
    if (now - lastMs < intervalMs) return false;
    lastMs = now;
    return true;
  };
}

/**
 * The TLS options of a tls or wss listener, its files read and checked now (a key that does not match the
 * certificate, a bad PEM): files that do not work are EF_CONFIG_INVALID naming the listener, at start and reload.
 */
export function loadTls(spec: ListenerSpec): Tls.TlsOptions {
  const t = spec.tls!;
  try {
    const options: Tls.TlsOptions = {
      cert: readFileSync(t.certFile),
      key: readFileSync(t.keyFile),
      ca: t.caFile ? readFileSync(t.caFile) : undefined,
      requestCert: t.requireCertificate,
      // The certificate is checked once the handshake is done (`isVerified`), so that the log can say why it failed.
      rejectUnauthorized: false,
      minVersion: t.minVersion as Tls.SecureVersion,
      ciphers: t.ciphers,
      // The server's order of preference, so a client offering a weak suite first still gets a strong one.
      honorCipherOrder: true,
    };
    tlsModule().createSecureContext(options);
    return options;
  } catch (err) {
    throw new EdgeferryError(
      'EF_CONFIG_INVALID',
      `${spec.type} listener ${spec.host}:${spec.port}: its TLS files are not usable: ${asError(err).message}`,
      { cause: err },
    );
  }
}
