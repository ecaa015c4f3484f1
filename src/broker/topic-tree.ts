/**
 * The subscription index: a trie over topic levels with `+` and `#` children, plus shared-subscription groups
 * hanging off the node of their inner filter. One walk per published topic.
 */
import type { Message, QoS } from '../protocol/message.js';
import type { PublishEncodings } from '../protocol/codec.js';
import type { SubscriptionRecord } from '../store/types.js';
import type { RetainedPace } from './retained-sender.js';

/** Anything that receives messages: a client session or an in-process subscriber. */
export interface Subscriber {
  /** Identity compared with `Message.origin` for no-local. */
  readonly id: string;
  /** Shared groups prefer members that can take a message now. */
  isOnline(): boolean;
  /** ACL read check per delivered message; absent (in-process subscribers) means everything matching may be read. */
  mayRead?(topic: string): boolean;
  /**
   * Why it would refuse `msg` at QoS 1/2 now (a full `reject-new` outbox), or undefined. Routing asks every target
   * first and refuses the message for all when one refuses, so that a refused message is stored nowhere.
   */
  refusal?(msg: Message): Error | undefined;
  /**
   * How the retained messages of a new subscription are paced (broker/retained-sender.ts), or undefined (absent:
   * in-process subscribers) to have them delivered at once.
   */
  retainedPace?(record: SubscriptionRecord): RetainedPace | undefined;
  deliver(
    msg: Message,
    qos: QoS,
    retain: boolean,
    subscriptionIds: readonly number[] | undefined,
    encodings: PublishEncodings | undefined,
    group?: SharedGroup,
  ): void | Promise<unknown>;
  /** Scratch fields to merge overlapping subscriptions within one routing pass without a map. */
  routeMark: number;
  routeSlot: number;
}

export interface Subscription {
  readonly subscriber: Subscriber;
  /** The filter matched against topics (without any `$share/<group>/` prefix). */
  readonly filter: string;
  readonly qos: QoS;
  readonly noLocal: boolean;
  readonly retainAsPublished: boolean;
  readonly retainHandling: 0 | 1 | 2;
  readonly subscriptionId?: number;
  readonly group?: string;
}

/** What a subscription delivers with: a SUBSCRIBE's options (a `SubscriptionRecord` has them). */
export type SubscriptionOptions = Pick<
  Subscription,
  'qos' | 'noLocal' | 'retainAsPublished' | 'retainHandling' | 'subscriptionId'
>;

function subscription(
  subscriber: Subscriber,
  filter: string,
  options: SubscriptionOptions,
  group: string | undefined,
): Subscription {
  return {
    subscriber,
    filter,
    qos: options.qos,
    noLocal: options.noLocal,
    retainAsPublished: options.retainAsPublished,
    retainHandling: options.retainHandling,
    subscriptionId: options.subscriptionId,
    group,
  };
}

/** Whether two subscriptions of one filter deliver alike (QoS, No Local, Retain As Published, Retain Handling, id). */
export function sameOptions(a: SubscriptionOptions, b: SubscriptionOptions): boolean {
  return hasOptions(a, b.qos, b.noLocal, b.retainAsPublished, b.retainHandling, b.subscriptionId);
}

/** `sameOptions` against options not in an object yet: a SUBSCRIBE's filter before its record is made. */
export function hasOptions(
  a: SubscriptionOptions,
  qos: QoS,
  noLocal: boolean,
  retainAsPublished: boolean,
  retainHandling: 0 | 1 | 2,
  subscriptionId: number | undefined,
): boolean {
  return (
    a.qos === qos &&
    a.noLocal === noLocal &&
    a.retainAsPublished === retainAsPublished &&
    a.retainHandling === retainHandling &&
    a.subscriptionId === subscriptionId
  );
}

/** Members of `$share/<name>/<filter>`; each message goes to one of them, round robin. */
export class SharedGroup {
  readonly members: Subscription[] = [];
  private next = 0;

  constructor(
    readonly name: string,
    readonly filter: string,
  ) {}

  /** The next member in turn, preferring online ones; `exclude` skips a member that just went away. */
  pick(exclude?: Subscriber): Subscription | undefined {
    const n = this.members.length;
    let fallback: Subscription | undefined;
    for (let i = 0; i < n; i++) {
      const candidate = this.members[(this.next + i) % n];
      if (candidate.subscriber === exclude) continue;
      if (candidate.subscriber.isOnline()) {
        this.next = (this.next + i + 1) % n;
        return candidate;
      }
      fallback ??= candidate;
    }
    return fallback;
  }
}

class TopicNode {
  readonly children = new Map<string, TopicNode>();
  readonly subscriptions: Subscription[] = [];
  shared: Map<string, SharedGroup> | undefined;

  isEmpty(): boolean {
    return this.children.size === 0 && this.subscriptions.length === 0 && !this.shared?.size;
  }
}

/** What one topic matches: cached, because industrial traffic publishes the same topics over and over. */
export interface TopicMatch {
  readonly subscriptions: readonly Subscription[];
  readonly groups: readonly SharedGroup[];
}

const MATCH_CACHE_MAX_TOPICS = 10_000;

export class TopicTree {
  private readonly root = new TopicNode();
  private normalCount = 0;
  private sharedCount = 0;
  /** Valid until the next subscription change, which clears it. */
  private readonly cache = new Map<string, TopicMatch>();

  get count(): { normal: number; shared: number } {
    return { normal: this.normalCount, shared: this.sharedCount };
  }

  /**
   * Adds or replaces (same subscriber, filter and group) a subscription with `options`. Returns true if it replaced
   * one. The subscription object is made only when it is new or its options changed: a client re-subscribes its
   * whole set at every reconnect, where an object per filter made before the look-up would be garbage at once.
   */
  add(subscriber: Subscriber, filter: string, options: SubscriptionOptions, group?: string): boolean {
    this.invalidate();
    let node = this.root;
    for (let start = 0; ;) {
      const end = filter.indexOf('/', start);
      const level = filter.slice(start, end < 0 ? undefined : end);
      let child = node.children.get(level);
      if (!child) {
        child = new TopicNode();
        node.children.set(level, child);
      }
      node = child;
      if (end < 0) break;
      start = end + 1;
    }
    const list = group === undefined ? node.subscriptions : this.groupOf(node, group, filter).members;
    // A loop, not findIndex: its closure was an allocation per filter of every SUBSCRIBE.
    for (let i = 0; i < list.length; i++) {
      if (list[i].subscriber !== subscriber) continue;
      if (!sameOptions(list[i], options)) list[i] = subscription(subscriber, filter, options, group);
      return true;
    }
    list.push(subscription(subscriber, filter, options, group));
    if (group === undefined) this.normalCount++;
    else this.sharedCount++;
    return false;
  }

  /**
   * Drops the cached matches. Only when there are any: clearing a Map gives it a new table, and the cache, long
   * lived, gets it in the old generation, so a SUBSCRIBE of 1,000 filters cleared it into 200 KB of old garbage.
   */
  private invalidate(): void {
    if (this.cache.size > 0) this.cache.clear();
  }

  remove(subscriber: Subscriber, filter: string, group?: string): boolean {
    this.invalidate();
    const path: TopicNode[] = [this.root];
    const levels = filter.split('/');
    for (const level of levels) {
      const child = path[path.length - 1].children.get(level);
      if (!child) return false;
      path.push(child);
    }
    const node = path[path.length - 1];
    let removed = false;
    if (group === undefined) {
      const i = node.subscriptions.findIndex((s) => s.subscriber === subscriber);
      if (i >= 0) {
        node.subscriptions.splice(i, 1);
        this.normalCount--;
        removed = true;
      }
    } else {
      const g = node.shared?.get(group);
      const i = g ? g.members.findIndex((s) => s.subscriber === subscriber) : -1;
      if (g && i >= 0) {
        g.members.splice(i, 1);
        this.sharedCount--;
        removed = true;
        if (g.members.length === 0) node.shared!.delete(group);
      }
    }
    // Prune empty nodes so the tree does not grow with every topic ever subscribed.
    for (let i = path.length - 1; i > 0 && path[i].isEmpty(); i--) path[i - 1].children.delete(levels[i - 1]);
    return removed;
  }

  /** Every subscription and shared group whose filter matches `topic`. */
  match(topic: string): TopicMatch {
    let found = this.cache.get(topic);
    if (found) return found;
    const subscriptions: Subscription[] = [];
    const groups: SharedGroup[] = [];
    // Wildcards at the first level never match topics beginning with `$` [MQTT-4.7.2-1].
    this.walk(this.root, topic.split('/'), 0, topic.charCodeAt(0) === 36, subscriptions, groups);
    found = { subscriptions, groups };
    if (this.cache.size >= MATCH_CACHE_MAX_TOPICS) this.cache.clear();
    this.cache.set(topic, found);
    return found;
  }

  private walk(
    node: TopicNode,
    levels: string[],
    depth: number,
    isDollar: boolean,
    subscriptions: Subscription[],
    groups: SharedGroup[],
  ): void {
    if (depth === levels.length) {
      collect(node, subscriptions, groups);
      // `a/#` also matches `a` [MQTT-4.7.1-2].
      const hash = node.children.get('#');
      if (hash) collect(hash, subscriptions, groups);
      return;
    }
    if (!(isDollar && depth === 0)) {
      const hash = node.children.get('#');
      if (hash) collect(hash, subscriptions, groups);
      const plus = node.children.get('+');
      if (plus) this.walk(plus, levels, depth + 1, isDollar, subscriptions, groups);
    }
    const exact = node.children.get(levels[depth]);
    if (exact) this.walk(exact, levels, depth + 1, isDollar, subscriptions, groups);
  }

  private groupOf(node: TopicNode, name: string, filter: string): SharedGroup {
    node.shared ??= new Map();
    let group = node.shared.get(name);
    if (!group) {
      group = new SharedGroup(name, filter);
      node.shared.set(name, group);
    }
    return group;
  }
}

function collect(node: TopicNode, subscriptions: Subscription[], groups: SharedGroup[]): void {
  for (const sub of node.subscriptions) subscriptions.push(sub);
  if (node.shared) for (const group of node.shared.values()) groups.push(group);
}
