/**
 * The OPC UA trust list under the data directory, and the logic of `edgeferry opcua trust <endpoint>`.
 *
 * Layout (node-opcua's PKI folder, shared by all OPC UA connectors of a gateway: `<data>/opcua/pki`):
 *   own/certs/client_certificate.pem   edgeferry's self-signed application certificate (made on first connect)
 *   trusted/certs/                     server certificates edgeferry trusts
 *   rejected/                          server certificates seen but not trusted; moving one to trusted/certs/ trusts it
 *   issuers/certs, issuers/crl         CA certificates and revocation lists for CA-signed servers
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';
import { ConnectorError, asError } from '../../src/util/errors.js';
import { silentLogger, type Logger } from '../../src/util/logger.js';
import { loadOpcua } from './opcua-lib.js';
import {
  certificateSubject,
  certificateThumbprint,
  discoverEndpoints,
  leafCertificate,
  openCertificateManager,
} from './open-session.js';

/** The PKI folder under a data directory: shared by every OPC UA connector of the gateway. */
export function opcuaPkiDir(dataDir: string): string {
  return join(dataDir, 'opcua', 'pki');
}

export interface CertificateInfo {
  /** SHA-1 of the DER certificate, lowercase hex (the form in node-opcua's file names). */
  readonly thumbprint: string;
  readonly subject: string;
  readonly notAfter: string;
  /** Where the certificate file is (trusted/certs or rejected). */
  readonly file: string;
}

export interface TrustResult extends CertificateInfo {
  /** It was trusted already; nothing changed. */
  readonly alreadyTrusted: boolean;
}

export interface TrustOptions {
  readonly pkiDir: string;
  /**
   * Trust only a certificate with this thumbprint (hex, any case, colons allowed), as read off the server's
   * own display: guards against trusting whoever answers on the network.
   */
  readonly expectedThumbprint?: string;
  readonly connectTimeoutMs?: number;
  readonly requestTimeoutMs?: number;
  readonly log?: Logger;
}

/**
 * Fetches the certificates `endpoint` presents (GetEndpoints over an unsecured discovery channel) and adds
 * them to the trust list, removing them from rejected/. Resolves with what was trusted.
 */
export async function trustServer(endpoint: string, options: TrustOptions): Promise<TrustResult[]> {
  const log = options.log ?? silentLogger;
  const lib = await loadOpcua(log);
  const manager = await openCertificateManager(lib, options.pkiDir);
  try {
    const endpoints = await discoverEndpoints(
      lib,
      manager,
      {
        endpoint,
        connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
        requestTimeoutMs: options.requestTimeoutMs ?? 10_000,
        connectorId: 'opcua-trust',
      },
      log,
    );
    const leaves = new Map<string, Buffer>();
    for (const e of endpoints) {
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- typed as always there; a server may send none
      if (e.serverCertificate && e.serverCertificate.length > 0) {
        const leaf = leafCertificate(e.serverCertificate);
        leaves.set(certificateThumbprint(leaf), leaf);
      }
    }
    if (leaves.size === 0) {
      throw new ConnectorError(
        'EF_CONNECTOR_UNREACHABLE',
        'opcua-trust',
        `${endpoint} presents no certificate (it offers only unsecured endpoints)`,
        { retryable: false },
      );
    }
    const expected = options.expectedThumbprint?.replace(/[:\s]/g, '').toLowerCase();
    if (expected !== undefined && !leaves.has(expected)) {
      throw new ConnectorError(
        'EF_CONNECTOR_UNREACHABLE',
        'opcua-trust',
        `${endpoint} presents ${[...leaves.keys()].join(', ')}, not the expected thumbprint ${expected}; nothing was trusted`,
        { retryable: false },
      );
    }
    const results: TrustResult[] = [];
    for (const [thumbprint, der] of leaves) {
      if (expected !== undefined && thumbprint !== expected) continue;
      const alreadyTrusted = (await manager.isCertificateTrusted(der)) === 'Good';
      if (!alreadyTrusted) await manager.trustCertificate(der);
      const file =
        findCertificateFile(join(options.pkiDir, 'trusted', 'certs'), thumbprint) ??
        join(options.pkiDir, 'trusted', 'certs');
      results.push({ ...describeCertificate(der, file), alreadyTrusted });
      log.info({ endpoint, thumbprint, file, alreadyTrusted }, 'opcua server certificate trusted');
    }
    return results;
  } finally {
    await manager.dispose().catch((err: unknown) => {
      // The trust list on disk is already written; a watcher that fails to close changes nothing.
      log.debug({ err: asError(err) }, 'opcua certificate manager dispose failed');
    });
  }
}

/** Certificates in trusted/certs and rejected/, read straight from the folders (no node-opcua needed). */
export function listCertificates(pkiDir: string): { trusted: CertificateInfo[]; rejected: CertificateInfo[] } {
  return {
    trusted: readFolder(join(pkiDir, 'trusted', 'certs')),
    rejected: readFolder(join(pkiDir, 'rejected')),
  };
}

function readFolder(dir: string): CertificateInfo[] {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out: CertificateInfo[] = [];
  for (const name of names.filter((n) => /\.(pem|der|crt)$/i.test(n)).sort()) {
    const file = join(dir, name);
    const raw = readFileSync(file);
    const der = raw.subarray(0, 10).toString('latin1').startsWith('-----') ? new X509Certificate(raw).raw : raw;
    out.push(describeCertificate(der, file));
  }
  return out;
}

function describeCertificate(der: Buffer, file: string): CertificateInfo {
  let notAfter: string;
  try {
    notAfter = new Date(new X509Certificate(der).validTo).toISOString();
  } catch {
    // Unparsable validity: certificateSubject() already says the certificate is unparsable.
    notAfter = 'unknown';
  }
  return { thumbprint: certificateThumbprint(der), subject: certificateSubject(der), notAfter, file };
}

function findCertificateFile(dir: string, thumbprint: string): string | undefined {
  try {
    const name = readdirSync(dir).find((n) => n.toLowerCase().includes(thumbprint));
    return name === undefined ? undefined : join(dir, name);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** Human-readable lines for the CLI. */
export function formatTrustResults(endpoint: string, results: readonly TrustResult[]): string {
  return results
    .map(
      (r) =>
        `${r.alreadyTrusted ? 'already trusted' : 'trusted'}: ${endpoint}\n  thumbprint ${r.thumbprint}\n  subject    ${r.subject}\n  valid to   ${r.notAfter}\n  file       ${r.file}`,
    )
    .join('\n');
}
