/** `broker:`, `storage:`, `auth:` and `log:`: the local broker's limits, its store, its users and its logs. */
import { z } from 'zod';
import { count, filePath, int, positive } from './common.js';

export const brokerSchema = z.strictObject({
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

export const storageSchema = z.strictObject({
  path: filePath.default('./data'),
  sync: z.enum(['full', 'relaxed']).default('full'),
  maxBytes: positive.default(2_147_483_648),
  /** The share of maxBytes persistent sessions may hold together; the rest stays for bridge outboxes and retained messages. */
  sessionShare: z.number().gt(0).max(1).default(0.25),
  /** The integrity walk of the data directory at start, in a child process: quick (structure), full (and checksums), off. */
  verifyOnStart: z.enum(['quick', 'full', 'off']).default('quick'),
});

export const authSchema = z.strictObject({
  /** A `mosquitto_passwd` file; `edgeferry passwd FILE USER` manages it. */
  passwordFile: filePath.optional(),
  /** A Mosquitto ACL file; without one, every authenticated client may publish and subscribe (not to $SYS). */
  aclFile: filePath.optional(),
});

export const logSchema = z.strictObject({
  level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace']).default('info'),
  format: z.enum(['json', 'pretty', 'auto']).default('auto'),
  /** The audit log (logins, refusals, ACL denials, reloads, PLC writes) as JSON lines in this file; default: the main log. */
  auditFile: filePath.optional(),
});
