/**
 * The `sparkplug:` config section (a pure schema file: `config/schema.ts` composes it into the whole config).
 *
 *   sparkplug: { groupId: plant1, edgeNodeId: line4-gw, uplink: central, primaryHostId: scada-1 }
 */
import { z } from 'zod';
import { isValidSparkplugId } from './topics.js';

export const sparkplugIdSchema = z
  .string()
  .refine(isValidSparkplugId, 'must be a non-empty Sparkplug id without +, /, # (or NUL)');

export const sparkplugSchema = z.strictObject({
  groupId: sparkplugIdSchema,
  edgeNodeId: sparkplugIdSchema,
  /** Name of the bridge whose uplink carries the Sparkplug session upstream (its Will is our NDEATH). */
  uplink: z.string().min(1).optional(),
  /** With a primary host application, births wait for its `spBv1.0/STATE/<id>` to be online. */
  primaryHostId: sparkplugIdSchema.optional(),
  /** NCMD rebirth requests closer together than this are answered once. */
  rebirthDebounceMs: z.number().int().nonnegative().default(2000),
  /** Backoff between restarts of a lost device (decorrelated jitter between these bounds). */
  deviceReconnect: z
    .strictObject({
      minDelayMs: z.number().int().positive().default(1000),
      maxDelayMs: z.number().int().positive().default(30_000),
    })
    .superRefine((r, ctx) => {
      if (r.maxDelayMs < r.minDelayMs) ctx.addIssue({ code: 'custom', path: ['maxDelayMs'], message: 'must be >= minDelayMs' });
    })
    .prefault({}),
  /** On a graceful stop, how long to wait for the NDEATH to leave through a connected uplink. */
  deathTimeoutMs: z.number().int().nonnegative().default(2000),
});

export type SparkplugConfig = z.output<typeof sparkplugSchema>;
