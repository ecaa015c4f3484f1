/** `metrics:` and `console:`: the HTTP endpoint (/metrics, /healthz, /readyz) and the web console it serves. */
import { z } from 'zod';
import { filePath, int, isLoopback } from './common.js';

export const metricsAuthSchema = z
  .strictObject({
    /** HTTP basic auth: these users, with their password in auth.passwordFile. */
    users: z.array(z.string().min(1)).min(1).optional(),
    /** A bearer token (`Authorization: Bearer <token>`): the file's content, without its trailing newline. */
    tokenFile: filePath.optional(),
  })
  .refine(
    (auth) => auth.users !== undefined || auth.tokenFile !== undefined,
    'set users (basic auth), tokenFile (bearer token), or both',
  );

export const metricsSchema = z
  .strictObject({
    /** The HTTP endpoint for /metrics, /healthz and /readyz; loopback unless you mean otherwise. */
    host: z.string().min(1).default('127.0.0.1'),
    port: int(0, 65_535).default(9883),
    /** Who may read /metrics and /readyz (/healthz stays open); without it, anyone who reaches the port. */
    auth: metricsAuthSchema.optional(),
    /** HTTPS instead of HTTP (the web console off loopback needs it): this certificate and key, re-read on reload. */
    tls: z.strictObject({ certFile: filePath, keyFile: filePath }).optional(),
    allowUnauthenticated: z.boolean().default(false),
    /** /readyz is 503 while a connector's device does not answer (a dead PLC); without it only with ?devices=1. */
    readyRequiresDevices: z.boolean().default(false),
  })
  .superRefine((metrics, ctx) => {
    // /metrics shows bridge names, topology and traffic: off loopback it needs credentials, or an explicit choice.
    if (!isLoopback(metrics.host) && metrics.auth === undefined && !metrics.allowUnauthenticated) {
      ctx.addIssue({
        code: 'custom',
        path: ['auth'],
        message: `${metrics.host} is not a loopback address: set metrics.auth (users or tokenFile), or allowUnauthenticated: true`,
      });
    }
  });

/** The web console on the metrics listener (docs/console.md): users of auth.passwordFile, read-only unless operators. */
export const consoleSchema = z.strictObject({
  /** May look at every view and call the read-only /api endpoints. */
  viewers: z.array(z.string().min(1)).default([]),
  /** May also act (write a tag, rebirth, reconnect a bridge, disconnect a client, delete a session, reload). */
  operators: z.array(z.string().min(1)).default([]),
  /** May also change the configuration from the console (docs/console.md#configuration): devices, tags, bridges. */
  engineers: z.array(z.string().min(1)).default([]),
  /** A login lasts this long without activity. */
  sessionTtlS: int(60, 7 * 86_400).default(28_800),
  /** Off loopback without metrics.tls, passwords and cookies would cross the network in clear: only if you say so. */
  allowInsecureRemote: z.boolean().default(false),
});

/** The console needs the metrics listener and the password file; off loopback it needs an explicit choice. */
export function consoleProblems(
  config: {
    console?: z.output<typeof consoleSchema>;
    metrics?: z.output<typeof metricsSchema>;
    auth: { passwordFile?: string };
  },
  ctx: z.RefinementCtx,
): void {
  const con = config.console;
  if (con === undefined) return;
  const problem = (path: (string | number)[], message: string) =>
    ctx.addIssue({ code: 'custom', path: ['console', ...path], message });
  if (config.metrics === undefined) problem([], 'the console is served by the metrics listener: add a metrics section');
  if (config.auth.passwordFile === undefined)
    problem([], 'console users log in with passwords from auth.passwordFile: set it');
  if (con.viewers.length + con.operators.length + con.engineers.length === 0)
    problem(['viewers'], 'name at least one user in viewers, operators or engineers');
  const host = config.metrics?.host;
  if (host !== undefined && !isLoopback(host) && config.metrics?.tls === undefined && !con.allowInsecureRemote) {
    problem(
      ['allowInsecureRemote'],
      `metrics.host ${host} is not a loopback address and the listener has no TLS: logins would cross the network in clear; ` +
        'set metrics.tls (certFile, keyFile), keep it on loopback, or set allowInsecureRemote: true',
    );
  }
}
