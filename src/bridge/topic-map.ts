/**
 * A bridge's `topics` list as routing rules, with Mosquitto's `topic` line semantics for prefixes: the local
 * side matches `localPrefix + filter`, the remote side `remotePrefix + filter`, and a topic crossing the bridge
 * swaps one prefix for the other.
 */
import type { BridgeTopicConfig } from '../config/schema.js';
import type { QoS } from '../protocol/message.js';
import { topicMatches } from '../protocol/topics.js';

export interface TopicRule {
  /** Position in the configured list: the first matching rule wins when filters overlap. */
  readonly index: number;
  readonly localFilter: string;
  readonly remoteFilter: string;
  readonly localPrefix: string;
  readonly remotePrefix: string;
  /** Configured QoS; undefined means the message's own QoS going out and 1 coming in. */
  readonly qos: QoS | undefined;
}

export class TopicMap {
  /** Rules with direction `out` or `both`, in configured order. */
  readonly outRules: readonly TopicRule[];
  /** Rules with direction `in` or `both`, in configured order. */
  readonly inRules: readonly TopicRule[];

  constructor(topics: readonly BridgeTopicConfig[]) {
    const out: TopicRule[] = [];
    const inbound: TopicRule[] = [];
    topics.forEach((t, index) => {
      const localPrefix = t.localPrefix;
      const remotePrefix = t.remotePrefix;
      const rule: TopicRule = {
        index,
        localFilter: localPrefix + t.filter,
        remoteFilter: remotePrefix + t.filter,
        localPrefix,
        remotePrefix,
        qos: t.qos,
      };
      const direction = t.direction;
      if (direction === 'out' || direction === 'both') out.push(rule);
      if (direction === 'in' || direction === 'both') inbound.push(rule);
    });
    this.outRules = out;
    this.inRules = inbound;
  }

  /** The first out rule matching a local topic, so overlapping filters send a message up once. */
  matchOut(localTopic: string): TopicRule | undefined {
    return this.outRules.find((r) => topicMatches(r.localFilter, localTopic) && localTopic.startsWith(r.localPrefix));
  }

  /** The first in rule matching a remote topic. */
  matchIn(remoteTopic: string): TopicRule | undefined {
    return this.inRules.find(
      (r) => topicMatches(r.remoteFilter, remoteTopic) && remoteTopic.startsWith(r.remotePrefix),
    );
  }

  /** The remote topic for a local one matched by `rule`. */
  toRemote(rule: TopicRule, localTopic: string): string {
    return rule.remotePrefix + localTopic.slice(rule.localPrefix.length);
  }

  /** The local topic for a remote one matched by `rule`. */
  toLocal(rule: TopicRule, remoteTopic: string): string {
    return rule.localPrefix + remoteTopic.slice(rule.remotePrefix.length);
  }
}
