/** TLS of the listeners and of the bridges' links: the policy of docs/architecture.md#security-model. */
import { z } from 'zod';
import { tlsModule } from '../../util/on-first-use.js';
import { filePath } from './common.js';

/**
 * TLS 1.2 suites offered by default: forward-secret (ECDHE) AEAD only. TLS 1.3 keeps OpenSSL's suites, which are
 * all of that kind; `TLS_...` names in a `ciphers` string choose among them.
 */
export const DEFAULT_TLS_CIPHERS = [
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

/** An OpenSSL cipher string that selects at least one suite; a typo fails the config, not the first handshake. */
export const cipherString = z
  .string()
  .min(1)
  .refine((ciphers) => {
    try {
      tlsModule().createSecureContext({ ciphers });
      return true;
    } catch {
      return false;
    }
  }, 'not an OpenSSL cipher string that selects any cipher (see `openssl ciphers -v STRING`)')
  .default(DEFAULT_TLS_CIPHERS);

export const tlsSchema = z
  .strictObject({
    certFile: filePath,
    keyFile: filePath,
    caFile: filePath.optional(),
    requireCertificate: z.boolean().default(false),
    useIdentityAsUsername: z.boolean().default(false),
    minVersion: z.enum(['TLSv1.2', 'TLSv1.3']).default('TLSv1.2'),
    ciphers: cipherString,
  })
  .superRefine((tls, ctx) => {
    if (tls.useIdentityAsUsername && !tls.requireCertificate) {
      ctx.addIssue({ code: 'custom', path: ['useIdentityAsUsername'], message: 'needs requireCertificate: true' });
    }
    if (tls.requireCertificate && tls.caFile === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['caFile'],
        message: 'required with requireCertificate: true (the CA of client certificates)',
      });
    }
  });
