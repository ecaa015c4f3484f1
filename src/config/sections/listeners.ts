/** `listeners:`: the MQTT ports (tcp, tls, ws, wss), each with its TLS and its anonymous-client rule. */
import { z } from 'zod';
import { int, isWildcard, positive } from './common.js';
import { tlsSchema } from './tls.js';

export const listenerSchema = z
  .strictObject({
    type: z.enum(['tcp', 'tls', 'ws', 'wss']).default('tcp'),
    host: z.string().min(1).default('127.0.0.1'),
    port: int(0, 65535),
    path: z.string().regex(/^\//, 'must start with /').optional(),
    tls: tlsSchema.optional(),
    allowAnonymous: z.boolean().optional(),
    maxConnections: positive.optional(),
    // Connections that have not completed CONNECT: a budget of their own, so idle sockets cannot lock others out.
    maxPendingConnections: positive.default(1000),
    maxPendingPerAddress: positive.default(100),
    /** ws/wss: the web origins whose pages may connect (the browser's `Origin` header), e.g. https://hmi.example:8443. */
    allowedOrigins: z
      .array(
        z.string().regex(/^https?:\/\/[^/\s]+$/, 'an origin is scheme://host[:port], e.g. https://hmi.example:8443'),
      )
      .optional(),
  })
  .superRefine((listener, ctx) => {
    const isSecure = listener.type === 'tls' || listener.type === 'wss';
    if (isSecure && listener.tls === undefined) {
      ctx.addIssue({ code: 'custom', path: ['tls'], message: `required for a ${listener.type} listener` });
    }
    if (!isSecure && listener.tls !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['tls'],
        message: `not allowed on a ${listener.type} listener (use type tls or wss)`,
      });
    }
    if (listener.path !== undefined && (listener.type === 'tcp' || listener.type === 'tls')) {
      ctx.addIssue({ code: 'custom', path: ['path'], message: 'only ws and wss listeners have a path' });
    }
    if (listener.allowedOrigins !== undefined && (listener.type === 'tcp' || listener.type === 'tls')) {
      ctx.addIssue({
        code: 'custom',
        path: ['allowedOrigins'],
        message: 'only ws and wss listeners have browser clients',
      });
    }
  })
  .transform(({ path, ...listener }) => ({ ...listener, path: path ?? '/mqtt' }));

export const listenersSchema = z.array(listenerSchema).superRefine((listeners, ctx) => {
  listeners.forEach((listener, i) => {
    if (listener.port === 0) return; // ephemeral ports never clash
    const clash = listeners.findIndex(
      (other, j) =>
        j < i &&
        other.port === listener.port &&
        (other.host === listener.host || isWildcard(other.host) || isWildcard(listener.host)),
    );
    if (clash >= 0) {
      ctx.addIssue({
        code: 'custom',
        path: [i, 'port'],
        message: `port ${listener.port} is already used by listeners.${clash}`,
      });
    }
  });
});
