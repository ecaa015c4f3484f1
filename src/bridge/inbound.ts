/**
 * What a bridge brings down from its central broker (docs/architecture.md#inbound): the in-filters subscribed
 * upstream and their messages published locally with the bridge's origin, which its out subscriptions exclude
 * (no-local), so nothing bridged in is bridged back out; and the `watch` hook's topic, whose messages go to the hook.
 */
import type { Broker } from '../broker/broker.js';
import { createMessage, type QoS } from '../protocol/message.js';
import { asError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import type { BridgeReport } from './bridge-report.js';
import type { TopicMap } from './topic-map.js';
import type { InboundPublish } from './uplink.js';

/** A topic upstream whose messages go to `received` instead of the local broker (`UplinkHooks.watch`). */
export interface InboundWatch {
  readonly topic: string;
  received(msg: InboundPublish): void;
}

export interface InboundOptions {
  readonly topics: TopicMap;
  readonly broker: Broker;
  /** The bridge's origin (`bridge:<name>`). */
  readonly origin: string;
  readonly report: BridgeReport;
  readonly log: Logger;
  /**
   * Subscribed with no-local on MQTT 5; on 3.1.1 our own messages on the watched topic come back too, and the hook
   * tells them apart.
   */
  readonly watch: InboundWatch | undefined;
}

export class Inbound {
  /** The remote filters to subscribe to, with their QoS: the in-rules', then the watch's. */
  readonly subscriptions: readonly { filter: string; qos: QoS }[];
  /** The watch's topic upstream (with the out rule's prefix), when subscribed. */
  private readonly watchTopic: string | undefined;

  constructor(private readonly options: InboundOptions) {
    const { topics, watch } = options;
    const watchRule = watch === undefined ? undefined : topics.matchOut(watch.topic);
    this.watchTopic = watch !== undefined && watchRule ? topics.toRemote(watchRule, watch.topic) : undefined;
    this.subscriptions = [
      ...topics.inRules.map((r) => ({ filter: r.remoteFilter, qos: r.qos ?? 1 })),
      ...(this.watchTopic === undefined ? [] : [{ filter: this.watchTopic, qos: 0 as const }]),
    ];
  }

  /** Publishes `msg` locally; settles once it is durable there, or refused (counted, warned once per episode). */
  async publish(msg: InboundPublish): Promise<void> {
    const { topics, report } = this.options;
    if (msg.topic === this.watchTopic) return this.options.watch?.received(msg);
    const rule = topics.matchIn(msg.topic);
    if (!rule) {
      this.options.log.debug({ topic: msg.topic }, 'inbound message matches no in-filter; ignored');
      return;
    }
    const local = createMessage({
      topic: topics.toLocal(rule, msg.topic),
      payload: msg.payload,
      qos: msg.qos,
      retain: msg.retain,
      properties: msg.properties,
      origin: this.options.origin,
    });
    try {
      await this.options.broker.publish(local);
      report.counts.received++;
      report.episodeOver('inbound');
    } catch (err) {
      report.counts.receivedFailed++;
      report.warnOnce(
        'inbound',
        { err: asError(err), topic: local.topic },
        'inbound message refused by the local broker',
      );
    }
  }
}
