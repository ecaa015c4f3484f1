/**
 * `gateway:` and `bridges:`: who this gateway is upstream, and the store-and-forward bridges to central brokers
 * (docs/architecture.md#the-bridge).
 */
import { z } from 'zod';
import { isValidTopicFilter, isValidTopicName } from '../../protocol/topics.js';
import { count, filePath, int, positive } from './common.js';
import { cipherString } from './tls.js';

const topicPrefix = z
  .string()
  .refine((prefix) => !/[+#\u0000]/.test(prefix), 'must not contain +, # or NUL')
  .default('');

export const bridgeTopicSchema = z.strictObject({
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
    /**
     * From the dial to the CONNACK (TCP, TLS, CONNECT): an attempt into a dead link (a SYN or handshake that gets no
     * answer) is given up after this, so the next one goes out soon after the link is back.
     */
    connectTimeoutS: int(1, 300).default(10),
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

export const bridgeSchema = z.strictObject({
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
export const gatewaySchema = z.strictObject({
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

export const bridgesSchema = z.array(bridgeSchema).superRefine((bridges, ctx) => {
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

/**
 * The Sparkplug uplink's MQTT session is the edge node's, and that one is clean: Clean Start 1 and Session Expiry 0
 * (3.1.1: clean session 1) [tck-id-principles-persistence-clean-session-50] [tck-id-principles-persistence-clean-session-311],
 * so a command queued while the link was down is never delivered to a node that is not born
 * (docs/architecture.md#sparkplug-session).
 */
export function uplinkSessionProblems(
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
export function withSession<T extends { cleanStart?: boolean; sessionExpiryS?: number }>(
  remote: T,
  uplink: boolean,
): T & { cleanStart: boolean; sessionExpiryS: number } {
  return uplink
    ? { ...remote, cleanStart: true, sessionExpiryS: 0 }
    : { ...remote, cleanStart: remote.cleanStart ?? false, sessionExpiryS: remote.sessionExpiryS ?? 86_400 };
}
