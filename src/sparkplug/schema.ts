/**
 * The `sparkplug:` config section (a pure schema file: `config/schema.ts` composes it into the whole config).
 *
 *   sparkplug: { groupId: plant1, edgeNodeId: line4-gw, uplink: central, primaryHostId: scada-1 }
 */
import { z } from 'zod';
import { topicMatches } from '../protocol/topics.js';
import { deviceTopic, isValidSparkplugId, nodeTopic, stateTopic } from './topics.js';

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
      if (r.maxDelayMs < r.minDelayMs)
        ctx.addIssue({ code: 'custom', path: ['maxDelayMs'], message: 'must be >= minDelayMs' });
    })
    .prefault({}),
  /** On a graceful stop, how long to wait for the NDEATH to leave through a connected uplink. */
  deathTimeoutMs: z.number().int().nonnegative().default(2000),
  /** Every tag's value also as retained JSON on a plain topic, for local consumers that do not speak Sparkplug. */
  plain: z
    .strictObject({
      /** `{device}` and `{tag}` are replaced by the device id and the tag name (a `/` in it makes levels). */
      topic: z.string().superRefine((topic, ctx) => {
        const problem = plainTemplateProblem(topic);
        if (problem) ctx.addIssue({ code: 'custom', message: problem });
      }),
      qos: z.union([z.literal(0), z.literal(1), z.literal(2)]).default(1),
      /** `<topic>/set` writes the tag like a DCMD; the ACL decides who may publish there. */
      writes: z.boolean().default(false),
    })
    .optional(),
  /**
   * Device profiles as Sparkplug Templates: a definition per profile in the NBIRTH, each device built from one a
   * Template instance. Off by default: not every host application handles Templates.
   */
  templates: z.boolean().default(false),
  /**
   * Payloads to the uplink compressed the Eclipse Tahu way (src/sparkplug/compression.ts), for slow links: every
   * birth and data message, not the NDEATH. Off by default: only host applications that follow Tahu read it.
   */
  compression: z.enum(['none', 'deflate', 'gzip']).default('none'),
});

export type SparkplugConfig = z.output<typeof sparkplugSchema>;
export type PlainTopicsConfig = NonNullable<SparkplugConfig['plain']>;

/** What is wrong with a plain topic template, or undefined: each tag needs a topic of its own, and a valid one. */
function plainTemplateProblem(topic: string): string | undefined {
  const placeholders = topic.match(/\{[^}]*\}/g) ?? [];
  const unknown = placeholders.find((p) => p !== '{device}' && p !== '{tag}');
  if (unknown !== undefined) return `unknown placeholder ${unknown}: use {device} and {tag}`;
  if (
    placeholders.filter((p) => p === '{device}').length !== 1 ||
    placeholders.filter((p) => p === '{tag}').length !== 1
  ) {
    return 'must contain {device} and {tag} once each, so that every tag has a topic of its own';
  }
  if (/[+#\0]/.test(topic)) return 'must not contain the wildcards + and # (or NUL): it names topics to publish';
  if (topic.startsWith('$')) return 'must not start with $ (topics of the broker itself)';
  return undefined;
}

/** A bridge topic rule, as far as `missingUplinkFilters` needs it (structurally a `BridgeTopicConfig`). */
interface TopicRule {
  readonly filter: string;
  readonly direction: 'in' | 'out' | 'both';
  readonly localPrefix?: string;
}

/** A filter the uplink bridge lacks, and the `sparkplug` key that needs it. */
export interface MissingUplinkFilter {
  readonly key: 'uplink' | 'primaryHostId';
  readonly filter: string;
}

/**
 * The in filters the Sparkplug uplink bridge must have, and lacks: NCMD of the node, DCMD of every device, the
 * primary host's STATE. Without them the node would never hear a host's commands, or wait for a STATE that
 * never comes, and say nothing; the config check refuses it instead, naming the filter to add.
 */
export function missingUplinkFilters(
  sparkplug: Pick<SparkplugConfig, 'groupId' | 'edgeNodeId' | 'primaryHostId'>,
  topics: readonly TopicRule[],
  deviceIds: readonly string[],
): MissingUplinkFilter[] {
  const { groupId, edgeNodeId, primaryHostId } = sparkplug;
  // Where a rule brings a remote topic down, locally: localPrefix + filter.
  const comesDown = (localTopic: string) =>
    topics.some((t) => t.direction !== 'out' && topicMatches((t.localPrefix ?? '') + t.filter, localTopic));
  const missing: MissingUplinkFilter[] = [];
  if (!comesDown(nodeTopic(groupId, 'NCMD', edgeNodeId)))
    missing.push({ key: 'uplink', filter: nodeTopic(groupId, 'NCMD', edgeNodeId) });
  if (deviceIds.some((id) => !comesDown(deviceTopic(groupId, 'DCMD', edgeNodeId, id)))) {
    missing.push({ key: 'uplink', filter: deviceTopic(groupId, 'DCMD', edgeNodeId, '#') });
  }
  if (primaryHostId !== undefined && !comesDown(stateTopic(primaryHostId)))
    missing.push({ key: 'primaryHostId', filter: stateTopic(primaryHostId) });
  return missing;
}
