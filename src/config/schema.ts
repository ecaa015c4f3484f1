/**
 * The configuration schema: the one place that names config keys, their defaults and their limits. Types
 * are inferred from it. `load.ts` validates the YAML file against it; `json-schema.ts` publishes it for editors.
 * Cross-field rules sit on the smallest object they concern, so that a problem in one bridge does not hide
 * a problem in the listeners (zod skips an object's refinements while its own fields have issues).
 */
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { createSecureContext } from 'node:tls';
import { z } from 'zod';
import { isValidTopicFilter, isValidTopicName } from '../protocol/topics.js';
import { modbusConnectorSchema, modbusProfileSchema } from '../../connectors/modbus/schema.js';
import { opcuaConnectorSchema, opcuaProfileSchema } from '../../connectors/opcua/schema.js';
import { s7ConnectorSchema, s7ProfileSchema } from '../../connectors/s7/schema.js';
import { missingUplinkFilters, sparkplugSchema } from '../sparkplug/schema.js';

const int = (min: number, max: number) => z.number().int().min(min).max(max);
const count = z.number().int().nonnegative();
const positive = z.number().int().positive();
const filePath = z.string().min(1);

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
const cipherString = z
  .string()
  .min(1)
  .refine((ciphers) => {
    try {
      createSecureContext({ ciphers });
      return true;
    } catch {
      return false;
    }
  }, 'not an OpenSSL cipher string that selects any cipher (see `openssl ciphers -v STRING`)')
  .default(DEFAULT_TLS_CIPHERS);

const tlsSchema = z
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

const listenerSchema = z
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

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::';
}

const listenersSchema = z.array(listenerSchema).superRefine((listeners, ctx) => {
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

const brokerSchema = z.strictObject({
  maxConnections: positive.default(10_000),
  maxPacketBytes: int(1, 268_435_455).default(1_048_576),
  maxKeepaliveS: int(1, 65_535).default(65_535),
  connectTimeoutMs: positive.default(10_000),
  receiveMaximum: int(1, 65_535).default(1024),
  maxInflight: int(1, 65_535).default(20),
  maxQueuedMessages: count.default(1000),
  /** Per session, payload bytes: an offline session of large messages stops at this, whatever maxQueuedMessages says. */
  maxQueuedBytes: count.default(16_777_216),
  maxQueuedInMemory: count.default(100_000),
  maxQueuedBytesInMemory: count.default(67_108_864),
  /** Back-pressure: an online session with this many queued messages holds its publishers (at most maxQueuedMessages / 2). */
  queueHighWater: count.default(500),
  maxTopicLevels: positive.default(128),
  topicAliasMaximum: int(0, 65_535).default(100),
  /** Caps MQTT 5 session expiry (announced in CONNACK) and is the expiry of 3.1.1 clean-session-0 sessions; 4294967295 = never. */
  maxSessionExpiryS: int(0, 4_294_967_295).default(604_800),
  maxWriteBufferBytes: positive.default(4_194_304),
  slowClientTimeoutMs: positive.default(60_000),
  sysIntervalS: count.default(10),
  retainAvailable: z.boolean().default(true),
  maxUserProperties: count.default(64),
  maxSubscriptionsPerClient: positive.default(1000),
  /** Retained messages at most; beyond, a retained publish is refused (MQTT 5 QoS 1/2: 0x97) or not retained. */
  maxRetainedMessages: positive.default(100_000),
  /** Payload bytes of all retained messages at most (they live in the store; an index and a cache in memory). */
  maxRetainedBytes: positive.default(268_435_456),
});

const storageSchema = z.strictObject({
  path: filePath.default('./data'),
  sync: z.enum(['full', 'relaxed']).default('full'),
  maxBytes: positive.default(2_147_483_648),
  /** The share of maxBytes persistent sessions may hold together; the rest stays for bridge outboxes and retained messages. */
  sessionShare: z.number().gt(0).max(1).default(0.25),
  /** The integrity walk of the data directory at start, in a child process: quick (structure), full (and checksums), off. */
  verifyOnStart: z.enum(['quick', 'full', 'off']).default('quick'),
});

const authSchema = z.strictObject({
  /** A `mosquitto_passwd` file; `edgeferry passwd FILE USER` manages it. */
  passwordFile: filePath.optional(),
  /** A Mosquitto ACL file; without one, every authenticated client may publish and subscribe (not to $SYS). */
  aclFile: filePath.optional(),
});

const metricsAuthSchema = z
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

const metricsSchema = z
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
const consoleSchema = z.strictObject({
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

const logSchema = z.strictObject({
  level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
  format: z.enum(['json', 'pretty', 'auto']).default('auto'),
  /** The audit log (logins, refusals, ACL denials, reloads, PLC writes) as JSON lines in this file; default: the main log. */
  auditFile: filePath.optional(),
});

const topicPrefix = z
  .string()
  .refine((prefix) => !/[+#\u0000]/.test(prefix), 'must not contain +, # or NUL')
  .default('');

const bridgeTopicSchema = z.strictObject({
  filter: z
    .string()
    .refine(isValidTopicFilter, 'not a valid MQTT topic filter (# only as the last level; + and # fill a whole level)'),
  direction: z.enum(['out', 'in', 'both']).default('out'),
  /** Unset: the message's own QoS going out, 1 coming in. */
  qos: z.literal([0, 1, 2]).optional(),
  localPrefix: topicPrefix,
  remotePrefix: topicPrefix,
});

const remoteTlsSchema = z
  .strictObject({
    caFile: filePath.optional(),
    certFile: filePath.optional(),
    keyFile: filePath.optional(),
    servername: z.string().min(1).optional(),
    rejectUnauthorized: z.boolean().default(true),
    ciphers: cipherString,
  })
  .superRefine((tls, ctx) => {
    if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
      const missing = tls.certFile === undefined ? 'certFile' : 'keyFile';
      ctx.addIssue({ code: 'custom', path: [missing], message: 'certFile and keyFile go together' });
    }
  });

const isSecureUrl = (url: string) => url.startsWith('mqtts:') || url.startsWith('wss:');

function hasNoCredentials(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.username === '' && parsed.password === '';
  } catch {
    return true; // not a URL at all: z.url() reports that
  }
}

const remoteSchema = z
  .strictObject({
    urls: z
      .array(
        z
          .url({
            protocol: /^(mqtt|mqtts|ws|wss)$/,
            hostname: /./,
            error: 'must be an mqtt://, mqtts://, ws:// or wss:// URL with a host',
          })
          // A URL is logged with every connection attempt: a password in it would end up in the logs.
          .refine(
            hasNoCredentials,
            'must not carry credentials (user:password@): set remote.username, and remote.password or remote.passwordFile',
          ),
      )
      .min(1),
    clientId: z.string().min(1).optional(),
    username: z.string().optional(),
    password: z.string().optional(),
    passwordFile: filePath.optional(),
    protocolVersion: z.literal([4, 5]).default(5),
    keepaliveS: int(0, 65_535).default(60),
    // Absent: a persistent session (false, 86,400 s), except for the Sparkplug uplink, whose session is always clean
    // (resolved with the sparkplug section, below).
    cleanStart: z.boolean().optional(),
    sessionExpiryS: int(0, 4_294_967_295).optional(),
    tls: remoteTlsSchema.optional(),
  })
  .superRefine((remote, ctx) => {
    if (remote.password !== undefined && remote.passwordFile !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['passwordFile'], message: 'set password or passwordFile, not both' });
    }
    const hasPassword = remote.password !== undefined || remote.passwordFile !== undefined;
    if (remote.protocolVersion === 4 && hasPassword && remote.username === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['username'],
        message: 'MQTT 3.1.1 sends a password only with a username [MQTT-3.1.2-22]',
      });
    }
    if (remote.tls !== undefined && !remote.urls.some(isSecureUrl)) {
      ctx.addIssue({ code: 'custom', path: ['tls'], message: 'no url uses mqtts:// or wss://' });
    }
  });

const bridgeSchema = z.strictObject({
  name: z.string().regex(/^[a-z0-9_-]+$/, 'use lowercase letters, digits, - and _'),
  remote: remoteSchema,
  topics: z.array(bridgeTopicSchema).min(1),
  inflight: int(1, 65_535).default(100),
  ackTimeoutS: positive.default(30),
  replay: z
    .strictObject({
      // 0: no rate cap, the in-flight window paces replay by the central broker's acknowledgements
      // (docs/architecture.md#replay-pacing); a cap is for a thin link.
      messagesPerS: count.default(0),
      bytesPerS: count.default(0),
      // Absent: live-first for the Sparkplug uplink, in-order for other bridges (resolved by the bridge).
      order: z.enum(['in-order', 'live-first']).optional(),
      share: z.number().gt(0).max(1).default(0.5),
    })
    .prefault({}),
  // The MQTT 5 user property `<property>: <gateway.id>:<outbox seq>` on every message sent from the outbox.
  messageId: z
    .strictObject({ enabled: z.boolean().default(true), property: z.string().min(1).max(256).default('edgeferry-id') })
    .prefault({}),
  queue: z
    .strictObject({
      maxBytes: positive.default(1_073_741_824),
      maxMessages: positive.default(10_000_000),
      maxAgeS: count.default(0),
      overflow: z.enum(['drop-oldest', 'reject-new']).default('drop-oldest'),
      // Messages the central broker refused (PUBACK/PUBREC >= 0x80, too large) are kept here, oldest dropped
      // first, until requeued with `edgeferry store requeue`; maxMessages 0 drops them (counted) instead.
      deadLetter: z
        .strictObject({ maxMessages: count.default(10_000), maxBytes: positive.default(16_777_216) })
        .prefault({}),
    })
    .prefault({}),
  // The gateway's retained JSON status on the central broker (docs/architecture.md#fleet-status); the topic
  // defaults to edgeferry/<gateway.id>/status.
  status: z
    .strictObject({
      enabled: z.boolean().default(true),
      topic: z
        .string()
        .refine((t) => t.length > 0 && isValidTopicName(t, Infinity), 'must be a topic name (no + or #)')
        .optional(),
    })
    .prefault({}),
  reconnect: z
    // Quick and jittered: back within about maxDelayMs of the broker's return, a fleet spread over it
    // (docs/architecture.md#reconnect).
    .strictObject({ minDelayMs: positive.default(250), maxDelayMs: positive.default(2000) })
    .superRefine((reconnect, ctx) => {
      if (reconnect.maxDelayMs < reconnect.minDelayMs) {
        ctx.addIssue({ code: 'custom', path: ['maxDelayMs'], message: 'must be >= minDelayMs' });
      }
    })
    .prefault({}),
});

/**
 * Who this gateway is upstream: the bridges' default client ids (`<id>-<bridge name>`), message ids and status
 * topics (docs/architecture.md#fleet); absent: the host name.
 */
const gatewaySchema = z.strictObject({
  id: z
    .string()
    .regex(
      /^[^\s:+#]{1,128}$/,
      '1 to 128 characters, no spaces, ":" (it is the part before ":" in message ids), "+" or "#" (it is part of topics)',
    )
    .optional(),
});

/** Outboxes one store holds: each is a bit in the journal's entry masks (docs/architecture.md#one-journal). */
const MAX_OUTBOXES = 32;

const bridgesSchema = z.array(bridgeSchema).superRefine((bridges, ctx) => {
  bridges.forEach((bridge, i) => {
    const first = bridges.findIndex((other) => other.name === bridge.name);
    if (first < i)
      ctx.addIssue({
        code: 'custom',
        path: [i, 'name'],
        message: `"${bridge.name}" is already the name of bridges.${first}`,
      });
  });
  const outboxes = bridges.reduce((n, bridge) => n + (bridge.queue.deadLetter.maxMessages > 0 ? 2 : 1), 0);
  if (outboxes > MAX_OUTBOXES) {
    ctx.addIssue({
      code: 'custom',
      path: [],
      message: `${bridges.length} bridges need ${outboxes} outboxes (one each, and one more for its dead letters unless queue.deadLetter.maxMessages is 0); the store holds at most ${MAX_OUTBOXES}`,
    });
  }
});

/** Every connector type, discriminated by `type`; each connector's own schema lives in connectors/<type>/schema.ts. */
const connectorSchema = z.discriminatedUnion('type', [modbusConnectorSchema, opcuaConnectorSchema, s7ConnectorSchema]);

const connectorsSchema = z.array(connectorSchema).superRefine((connectors, ctx) => {
  connectors.forEach((connector, i) => {
    // The connector id is the Sparkplug device id: unique within the edge node.
    const first = connectors.findIndex((other) => other.id === connector.id);
    if (first < i)
      ctx.addIssue({
        code: 'custom',
        path: [i, 'id'],
        message: `"${connector.id}" is already the id of connectors.${first}`,
      });
    // Modbus RTU units on one serial port share it, so they must agree on how it is set up.
    if (connector.type === 'modbus' && connector.transport === 'rtu') {
      const bus = connectors.findIndex(
        (other) => other.type === 'modbus' && other.transport === 'rtu' && other.path === connector.path,
      );
      const other = connectors[bus];
      if (bus < i && other.type === 'modbus' && other.transport === 'rtu') {
        const keys = ['baudRate', 'parity', 'dataBits', 'stopBits'] as const;
        const differs = keys.filter((k) => other[k] !== connector[k]);
        if (differs.length > 0) {
          ctx.addIssue({
            code: 'custom',
            path: [i, differs[0]],
            message: `connectors.${bus} uses ${connector.path} with other settings (${differs.join(', ')})`,
          });
        }
      }
    }
  });
});

/**
 * Device profiles by name: what many identical devices share (tag list, poll settings), written once. A connector
 * names one with `profile:` and sets only what differs (id, host, unitId, nodeIdPrefix); src/config/profiles.ts
 * expands it before validation, so every device is checked whole.
 */
const profilesSchema = z.record(
  z.string().regex(/^[^\s.]+$/, 'must be a name without spaces or dots'),
  z.discriminatedUnion('type', [modbusProfileSchema, opcuaProfileSchema, s7ProfileSchema]),
);

export const configSchema = z
  .strictObject({
    listeners: listenersSchema.prefault([{ port: 1883 }]),
    broker: brokerSchema.prefault({}),
    storage: storageSchema.prefault({}),
    log: logSchema.prefault({}),
    auth: authSchema.prefault({}),
    /** Absent: no metrics endpoint. */
    metrics: metricsSchema.optional(),
    /** Absent: no web console. Served by the metrics listener. */
    console: consoleSchema.optional(),
    gateway: gatewaySchema.prefault({}),
    bridges: bridgesSchema.default([]),
    /** The gateway as a Sparkplug B edge node (optional; required by connectors). */
    sparkplug: sparkplugSchema.optional(),
    profiles: profilesSchema.default({}),
    connectors: connectorsSchema.default([]),
  })
  .superRefine((config, ctx) => {
    // Cross-section references: checked once each section is valid on its own.
    config.listeners.forEach((listener, i) => {
      // Secure by default: a port others can reach needs credentials, or an explicit allowAnonymous: true.
      if (!(listener.allowAnonymous ?? isLoopback(listener.host)) && config.auth.passwordFile === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['listeners', i, 'allowAnonymous'],
          message: `${listener.host} is not a loopback address: set auth.passwordFile, or allowAnonymous: true to accept anyone`,
        });
      }
    });
    if (config.metrics?.auth?.users !== undefined && config.auth.passwordFile === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['metrics', 'auth', 'users'],
        message: 'basic auth checks passwords in auth.passwordFile: set it',
      });
    }
    consoleProblems(config, ctx);
    const uplink = config.sparkplug?.uplink;
    const uplinkIndex = config.bridges.findIndex((bridge) => bridge.name === uplink);
    if (uplink !== undefined && uplinkIndex < 0) {
      ctx.addIssue({ code: 'custom', path: ['sparkplug', 'uplink'], message: `no bridge is named "${uplink}"` });
    }
    if (uplinkIndex >= 0) uplinkSessionProblems(config.bridges[uplinkIndex].remote, uplinkIndex, ctx);
    if (config.sparkplug !== undefined && uplinkIndex >= 0) {
      const ids = config.connectors.map((c) => c.id);
      for (const { key, filter } of missingUplinkFilters(config.sparkplug, config.bridges[uplinkIndex].topics, ids)) {
        ctx.addIssue({
          code: 'custom',
          path: ['sparkplug', key],
          message: `the uplink bridge "${uplink}" has no in filter for ${filter}: add { filter: "${filter}", direction: in } to bridges[${uplinkIndex}].topics`,
        });
      }
    }
    if (config.sparkplug?.plain !== undefined) {
      // Each tag name becomes part of a topic to publish.
      config.connectors.forEach((connector, i) =>
        connector.tags.forEach((tag, j) => {
          if (/[+#\0]/.test(tag.name)) {
            ctx.addIssue({
              code: 'custom',
              path: ['connectors', i, 'tags', j, 'name'],
              message: 'sparkplug.plain makes it part of a topic: no +, # (or NUL)',
            });
          }
        }),
      );
    }
    if (config.sparkplug?.plain?.writes && config.auth.aclFile === undefined) {
      // Without an ACL every local client could write to the PLC.
      ctx.addIssue({
        code: 'custom',
        path: ['sparkplug', 'plain', 'writes'],
        message: 'writes are authorized by the ACL: set auth.aclFile',
      });
    }
    if (config.connectors.length > 0 && config.sparkplug === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['connectors'],
        message: 'connectors publish through the Sparkplug edge node: add a sparkplug section',
      });
    }
  })
  .transform((config) => {
    const gatewayId = config.gateway.id ?? hostname();
    return {
      ...config,
      gateway: { ...config.gateway, id: gatewayId },
      // Unique per gateway by default: a fleet of gateways with the same bridge name must not take each other's
      // session on the central broker (docs/architecture.md#fleet).
      bridges: config.bridges.map((bridge) => ({
        ...bridge,
        remote: withSession(
          { ...bridge.remote, clientId: bridge.remote.clientId ?? `${gatewayId}-${bridge.name}` },
          bridge.name === config.sparkplug?.uplink,
        ),
        status: { ...bridge.status, topic: bridge.status.topic ?? `edgeferry/${gatewayId}/status` },
      })),
      // Like Mosquitto 2: anonymous clients are welcome only where nobody else can reach the port, and not at all
      // once a password file is set, unless a listener says otherwise.
      listeners: config.listeners.map((listener) => ({
        ...listener,
        allowAnonymous:
          listener.allowAnonymous ?? (isLoopback(listener.host) && config.auth.passwordFile === undefined),
      })),
    };
  });

/**
 * The Sparkplug uplink's MQTT session is the edge node's, and that one is clean: Clean Start 1 and Session Expiry 0
 * (3.1.1: clean session 1) [tck-id-principles-persistence-clean-session-50] [tck-id-principles-persistence-clean-session-311],
 * so a command queued while the link was down is never delivered to a node that is not born
 * (docs/architecture.md#sparkplug-session).
 */
function uplinkSessionProblems(
  remote: { cleanStart?: boolean; sessionExpiryS?: number },
  index: number,
  ctx: z.RefinementCtx,
): void {
  const problem = (key: string, message: string) =>
    ctx.addIssue({ code: 'custom', path: ['bridges', index, 'remote', key], message });
  const why =
    'the Sparkplug uplink (sparkplug.uplink) keeps no session: commands queued while the link was down must never reach the PLC';
  if (remote.cleanStart === false) problem('cleanStart', `must be true (or absent): ${why}`);
  if (remote.sessionExpiryS !== undefined && remote.sessionExpiryS !== 0)
    problem('sessionExpiryS', `must be 0 (or absent): ${why}`);
}

/** A bridge's session settings: clean for the Sparkplug uplink, else persistent unless the config says otherwise. */
function withSession<T extends { cleanStart?: boolean; sessionExpiryS?: number }>(
  remote: T,
  uplink: boolean,
): T & { cleanStart: boolean; sessionExpiryS: number } {
  return uplink
    ? { ...remote, cleanStart: true, sessionExpiryS: 0 }
    : { ...remote, cleanStart: remote.cleanStart ?? false, sessionExpiryS: remote.sessionExpiryS ?? 86_400 };
}

/** The console needs the metrics listener and the password file; off loopback it needs an explicit choice. */
function consoleProblems(
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

export type Config = z.output<typeof configSchema>;
export type ListenerConfig = z.output<typeof listenerSchema>;
export type TlsConfig = z.output<typeof tlsSchema>;
export type BrokerConfig = z.output<typeof brokerSchema>;
export type StorageConfig = z.output<typeof storageSchema>;
export type LogConfig = z.output<typeof logSchema>;
export type AuthConfig = z.output<typeof authSchema>;
export type MetricsConfig = z.output<typeof metricsSchema>;
export type ConsoleConfig = z.output<typeof consoleSchema>;
export type MetricsAuthConfig = z.output<typeof metricsAuthSchema>;
export type BridgeConfig = Config['bridges'][number];
export type BridgeTopicConfig = z.output<typeof bridgeTopicSchema>;
export type ConnectorConfigEntry = z.output<typeof connectorSchema>;
