/**
 * Opens one OPC UA client + session, with the checks an operator needs spelled out: the server certificate
 * is verified against edgeferry's own trust list before any secure channel is opened (so an untrusted
 * server fails with its thumbprint and the folder to move it to), the requested security mode and policy
 * must be on offer, and a rejected user or certificate says so. Used by the connector, `browse` and `trust`.
 *
 * Never retries: node-opcua's own reconnection is disabled (`maxRetry: 0`); the runtime owns backoff.
 */
import { createHash, X509Certificate } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClientSession, EndpointDescription, OPCUAClient, UserIdentityInfo } from 'node-opcua-client';
import { ConnectorError, asError, systemErrorReason } from '../../src/util/errors.js';
import type { Logger } from '../../src/util/logger.js';
import { loadOpcua, type OpcuaCertificateManager, type OpcuaLib } from './opcua-lib.js';
import type { OpcuaSecurityMode, OpcuaSecurityPolicy, OpcuaUserConfig } from './schema.js';

/** Every OPC UA client of edgeferry presents itself under this name (its certificate carries the URI). */
export const applicationName = 'edgeferry';

export interface SessionOptions {
  readonly endpoint: string;
  readonly securityMode: OpcuaSecurityMode;
  readonly securityPolicy: OpcuaSecurityPolicy;
  readonly user: OpcuaUserConfig;
  readonly pkiDir: string;
  readonly connectTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly sessionTimeoutMs: number;
  /** Used in ConnectorErrors and as the session name. */
  readonly connectorId: string;
}

export interface OpenedSession {
  readonly lib: OpcuaLib;
  readonly client: OPCUAClient;
  readonly session: ClientSession;
  readonly certificateManager: OpcuaCertificateManager;
  /**
   * Closes the session (unless `closeSession: false`, for a link known dead) and the channel, each step at
   * most `timeoutMs` (a dead link must not hang a stop).
   */
  close(timeoutMs: number, options?: { closeSession?: boolean }): Promise<void>;
}

/**
 * The server's certificate is not on edgeferry's trust list (or fails verification). The operator must act:
 * the message names the thumbprint and the folders. Retryable: once the certificate is trusted, the
 * runtime's next attempt succeeds without a restart.
 */
export class UntrustedServerError extends ConnectorError {
  readonly thumbprint: string;
  readonly subject: string;
  readonly status: string;
  readonly rejectedDir: string;
  readonly trustedDir: string;
  constructor(
    options: Pick<SessionOptions, 'endpoint' | 'pkiDir' | 'connectorId'>,
    leaf: Buffer,
    status: string,
    description: string,
  ) {
    const thumbprint = certificateThumbprint(leaf);
    const rejectedDir = join(options.pkiDir, 'rejected');
    const trustedDir = join(options.pkiDir, 'trusted', 'certs');
    const message =
      status === 'BadCertificateUntrusted'
        ? `the server certificate of ${options.endpoint} is not trusted: thumbprint ${thumbprint} (${certificateSubject(leaf)}). ` +
          `It was saved in ${rejectedDir}/; after checking the thumbprint, move it to ${trustedDir}/ ` +
          `or run \`edgeferry opcua trust ${options.endpoint}\``
        : `the server certificate of ${options.endpoint} (thumbprint ${thumbprint}, ${certificateSubject(leaf)}) fails verification: ` +
          `${status} (${description}); issuer certificates and CRLs go in ${join(options.pkiDir, 'issuers')}/`;
    super('EF_CONNECTOR_UNREACHABLE', options.connectorId, message, { retryable: true });
    this.thumbprint = thumbprint;
    this.subject = certificateSubject(leaf);
    this.status = status;
    this.rejectedDir = rejectedDir;
    this.trustedDir = trustedDir;
  }
}

/** `1A2B…` SHA-1 of the DER certificate: the thumbprint OPC UA tools display. */
export function certificateThumbprint(der: Buffer): string {
  return createHash('sha1').update(der).digest('hex');
}

export function certificateSubject(der: Buffer): string {
  try {
    return new X509Certificate(der).subject.replace(/\n/g, ', ');
  } catch (err) {
    return `(unparsable certificate: ${asError(err).message})`;
  }
}

/** The first certificate of a DER chain (OPC UA servers may send their certificate followed by CAs). */
export function leafCertificate(chain: Buffer): Buffer {
  // DER SEQUENCE header: 0x30, then a short or long length.
  if (chain.length < 2 || chain[0] !== 0x30) return chain;
  const first = chain[1] as number;
  if (first < 0x80) return chain.subarray(0, 2 + first);
  const lengthBytes = first & 0x7f;
  let length = 0;
  for (let i = 0; i < lengthBytes; i++) length = length * 256 + (chain[2 + i] as number);
  return chain.subarray(0, 2 + lengthBytes + length);
}

export async function openSession(options: SessionOptions, log: Logger): Promise<OpenedSession> {
  const lib = await loadOpcua(log);
  const certificateManager = await openCertificateManager(lib, options.pkiDir);
  let client: OPCUAClient | undefined;
  try {
    const serverCertificate =
      options.securityMode === 'None' ? undefined : await checkServer(lib, certificateManager, options, log);
    client = createClient(lib, certificateManager, options, serverCertificate);
    const connecting = client;
    await withDeadline(connecting.connect(options.endpoint), options.connectTimeoutMs, () =>
      unreachable(options, `no answer within ${options.connectTimeoutMs} ms`),
    ).catch((err: unknown) => {
      throw classifyConnectError(err, options, connecting, certificateManager);
    });
    const identity = await userIdentity(lib, options.user);
    const session = await withDeadline(connecting.createSession(identity), options.requestTimeoutMs * 2, () =>
      unreachable(options, `no session within ${options.requestTimeoutMs * 2} ms`),
    ).catch((err: unknown) => {
      throw classifySessionError(err, options);
    });
    return {
      lib,
      client: connecting,
      session,
      certificateManager,
      close: (timeoutMs, closeOptions) =>
        closeAll(
          connecting,
          closeOptions?.closeSession === false ? undefined : session,
          certificateManager,
          timeoutMs,
          log,
        ),
    };
  } catch (err) {
    await closeAll(client, undefined, certificateManager, 2000, log);
    throw err;
  }
}

export async function openCertificateManager(lib: OpcuaLib, pkiDir: string): Promise<OpcuaCertificateManager> {
  mkdirSync(pkiDir, { recursive: true });
  // A fresh manager per connect re-reads the folders, so a certificate the operator moved to trusted/ counts at
  // the next attempt without watchers (and without their file handles).
  const manager = new lib.OPCUACertificateManager({
    rootFolder: pkiDir,
    automaticallyAcceptUnknownCertificate: false,
    disableFileWatchers: true,
  });
  await manager.initialize();
  return manager;
}

/**
 * Lists the server's endpoints over an unsecured discovery channel (allowed by OPC UA for GetEndpoints even
 * where sessions need security).
 */
export async function discoverEndpoints(
  lib: OpcuaLib,
  certificateManager: OpcuaCertificateManager,
  options: Pick<SessionOptions, 'endpoint' | 'connectTimeoutMs' | 'requestTimeoutMs' | 'connectorId'>,
  log: Logger,
): Promise<EndpointDescription[]> {
  const { ua } = lib;
  const discovery = ua.OPCUAClient.create({
    applicationName,
    clientName: `${options.connectorId}-discovery`,
    clientCertificateManager: certificateManager,
    securityMode: ua.MessageSecurityMode.None,
    securityPolicy: ua.SecurityPolicy.None,
    endpointMustExist: false,
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    defaultTransactionTimeout: options.requestTimeoutMs,
  });
  try {
    await withDeadline(discovery.connect(options.endpoint), options.connectTimeoutMs, () =>
      unreachable(options, `no answer within ${options.connectTimeoutMs} ms`),
    ).catch((err: unknown) => {
      throw err instanceof ConnectorError ? err : unreachable(options, systemErrorReason(err) ?? asError(err).message);
    });
    return await withDeadline(discovery.getEndpoints(), options.requestTimeoutMs, () =>
      unreachable(options, `GetEndpoints got no answer within ${options.requestTimeoutMs} ms`),
    );
  } finally {
    await withDeadline(discovery.disconnect(), 2000, () => new Error('discovery disconnect timed out')).catch(
      (err: unknown) => {
        // The endpoints are in hand; a discovery channel that closes badly changes nothing.
        log.debug({ err: asError(err) }, 'opcua discovery disconnect failed');
      },
    );
  }
}

async function checkServer(
  lib: OpcuaLib,
  certificateManager: OpcuaCertificateManager,
  options: SessionOptions,
  log: Logger,
): Promise<Buffer> {
  const { ua } = lib;
  const endpoints = await discoverEndpoints(lib, certificateManager, options, log);
  const wantMode = ua.MessageSecurityMode[options.securityMode];
  const wantPolicy = (ua.SecurityPolicy as Record<string, string>)[options.securityPolicy];
  const match = endpoints.find((e) => e.securityMode === wantMode && e.securityPolicyUri === wantPolicy);
  if (match === undefined) {
    const offers = endpoints
      .map(
        (e) =>
          `${ua.MessageSecurityMode[e.securityMode]}/${(e.securityPolicyUri ?? '').split('#')[1] ?? e.securityPolicyUri}`,
      )
      .join(', ');
    throw new ConnectorError(
      'EF_CONNECTOR_UNREACHABLE',
      options.connectorId,
      `${options.endpoint} offers no ${options.securityMode}/${options.securityPolicy} endpoint (it offers: ${offers || 'none'})`,
      { retryable: false },
    );
  }
  const certificate = match.serverCertificate as Buffer | null; // typed as always there; a server may send none
  if (!certificate || certificate.length === 0) {
    throw unreachable(options, 'the server sent no certificate for its secured endpoint', false);
  }
  if (
    options.user.type === 'username' &&
    !(match.userIdentityTokens ?? []).some((t) => t.tokenType === ua.UserTokenType.UserName)
  ) {
    throw new ConnectorError(
      'EF_CONNECTOR_UNREACHABLE',
      options.connectorId,
      `${options.endpoint} (${options.securityMode}/${options.securityPolicy}) does not accept username/password users`,
      { retryable: false },
    );
  }
  const status = await certificateManager.checkCertificate(certificate);
  if (!status.isGood()) {
    const leaf = leafCertificate(certificate);
    throw new UntrustedServerError(options, leaf, status.name, status.description);
  }
  return certificate;
}

function createClient(
  lib: OpcuaLib,
  certificateManager: OpcuaCertificateManager,
  options: SessionOptions,
  serverCertificate: Buffer | undefined,
): OPCUAClient {
  const { ua } = lib;
  return ua.OPCUAClient.create({
    applicationName,
    clientName: options.connectorId,
    clientCertificateManager: certificateManager,
    securityMode: ua.MessageSecurityMode[options.securityMode],
    securityPolicy: (ua.SecurityPolicy as Record<string, string>)[options.securityPolicy],
    // Checked against our trust list above; handing it over skips node-opcua's own fetch.
    serverCertificate,
    endpointMustExist: false,
    // The runtime owns retries and backoff (docs/architecture.md#connectors-never-retry): no reconnection inside node-opcua.
    connectionStrategy: { maxRetry: 0, initialDelay: 100, maxDelay: 200 },
    requestedSessionTimeout: options.sessionTimeoutMs,
    defaultTransactionTimeout: options.requestTimeoutMs,
    // The subscription's keep-alive is the liveness check; no extra Read polling.
    keepSessionAlive: false,
  });
}

async function userIdentity(lib: OpcuaLib, user: OpcuaUserConfig): Promise<UserIdentityInfo> {
  const { ua } = lib;
  switch (user.type) {
    case 'anonymous':
      return { type: ua.UserTokenType.Anonymous };
    case 'username': {
      const password = user.password ?? readFileSync(user.passwordFile as string, 'utf8').replace(/\r?\n$/, '');
      return { type: ua.UserTokenType.UserName, userName: user.username, password };
    }
    case 'certificate': {
      const raw = readFileSync(user.certFile);
      const der = raw.subarray(0, 10).toString('latin1').startsWith('-----') ? new X509Certificate(raw).raw : raw;
      return {
        type: ua.UserTokenType.Certificate,
        certificateData: der,
        privateKey: readFileSync(user.keyFile, 'utf8'),
      };
    }
  }
}

/** The reason already says what the underlying error said: no cause, whose message the log would repeat. */
function unreachable(
  options: Pick<SessionOptions, 'endpoint' | 'connectorId'>,
  reason: string,
  retryable = true,
): ConnectorError {
  return new ConnectorError(
    'EF_CONNECTOR_UNREACHABLE',
    options.connectorId,
    `cannot reach ${options.endpoint}: ${reason}`,
    { retryable },
  );
}

function classifyConnectError(
  err: unknown,
  options: SessionOptions,
  client: OPCUAClient,
  certificateManager: OpcuaCertificateManager,
): ConnectorError {
  if (err instanceof ConnectorError) return err;
  const message = asError(err).message;
  if (options.securityMode !== 'None' && /BadSecurityChecksFailed|BadCertificate|BadNonce|certificate/i.test(message)) {
    const own = client.getCertificate() as Buffer | undefined; // undefined before the client has one
    const thumbprint = own ? certificateThumbprint(own) : 'unknown';
    const ownFile = join(certificateManager.rootDir, 'own', 'certs', 'client_certificate.pem');
    return new ConnectorError(
      'EF_CONNECTOR_UNREACHABLE',
      options.connectorId,
      `${options.endpoint} rejected the secure channel (${message}); the server probably does not trust edgeferry's ` +
        `application certificate (thumbprint ${thumbprint}, ${ownFile}): trust it on the server`,
      { retryable: true },
    );
  }
  return unreachable(options, systemErrorReason(err) ?? message);
}

/** Status codes with which a server refuses a user: a retry with the same credentials cannot help. */
const userRejections =
  /BadUserAccessDenied|BadIdentityToken(Invalid|Rejected)|BadUserSignatureInvalid|BadCertificateUse|BadUserNotAuthorized/;

function classifySessionError(err: unknown, options: SessionOptions): ConnectorError {
  if (err instanceof ConnectorError) return err;
  const message = asError(err).message;
  const match = userRejections.exec(message);
  if (match !== null) {
    const who =
      options.user.type === 'username' ? `user "${options.user.username}"` : `the ${options.user.type} user identity`;
    return new ConnectorError(
      'EF_CONNECTOR_UNREACHABLE',
      options.connectorId,
      `${options.endpoint} rejected ${who} (${match[0]}): check the username and password (or certificate) in the connector config`,
      { retryable: false },
    );
  }
  return unreachable(options, `session refused: ${message}`);
}

async function closeAll(
  client: OPCUAClient | undefined,
  session: ClientSession | undefined,
  certificateManager: OpcuaCertificateManager,
  timeoutMs: number,
  log: Logger,
): Promise<void> {
  const step = async (what: string, work: () => Promise<unknown>): Promise<void> => {
    try {
      await withDeadline(work(), timeoutMs, () => new Error(`${what} timed out after ${timeoutMs} ms`));
    } catch (err) {
      // Closing is best effort: the link may already be gone, and the socket is destroyed either way.
      log.debug({ err: asError(err) }, `opcua ${what} failed`);
    }
  };
  if (session !== undefined) await step('close session', () => session.close(true));
  if (client !== undefined) await step('disconnect', () => client.disconnect());
  await step('dispose certificate manager', () => certificateManager.dispose());
}

/** Resolves or rejects with `work`, or rejects with `onTimeout()` after `ms`; the timer never outlives it. */
export function withDeadline<T>(work: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
