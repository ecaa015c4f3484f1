/**
 * The retained-message index: a tree of topic levels holding what matching and delivery decide on (topic, QoS,
 * origin, expiry, size), written through to the store, which keeps the payloads and serves each delivery
 * (docs/architecture.md#retained-messages). Matching a filter walks only the levels it can match.
 */
import type { Message } from '../protocol/message.js';
import type { RetainedMeta, RetainedStore } from '../store/types.js';
import { retainedMeta } from '../store/types.js';
import type { Logger } from '../util/logger.js';

export interface RetainedLimits {
  /** Retained messages at most (`broker.maxRetainedMessages`). */
  readonly maxMessages: number;
  /** Payload bytes of all retained messages at most (`broker.maxRetainedBytes`). */
  readonly maxBytes: number;
}

/** A walk reports progress (yields `undefined`) after this many levels visited without a match: see `matching`. */
export const LEVELS_PER_STEP = 64;

/** One topic level; `entry` when a retained message has exactly this topic. */
class Level {
  children: Map<string, Level> | undefined;
  entry: RetainedMeta | undefined;
  constructor(
    readonly parent: Level | undefined,
    readonly name: string,
  ) {}
}

const NO_PAYLOAD = Buffer.alloc(0);

export class RetainedIndex {
  private readonly root = new Level(undefined, '');
  private n = 0;
  private payloadBytes = 0;
  /** Messages whose write to the store has not settled yet: the store still holds the previous value. */
  private readonly unsettled = new Map<string, Message>();
  /** Retained messages not stored for the limits (`edgeferry_retained_refused_total`). */
  refused = 0;
  /**
   * Refusing for the limits: logged once per episode, which ends when the retained messages are back below 90 % of
   * both limits (not at the next replacement, or a gateway at its limit would log at every `$SYS` update).
   */
  private refusing = false;

  constructor(
    private readonly store: RetainedStore,
    private readonly limits: RetainedLimits,
    private readonly log: Logger,
  ) {
    for (const meta of store.loadIndex()) this.apply(meta.topic, meta);
  }

  get count(): number {
    return this.n;
  }

  /** Payload bytes of every retained message. */
  get bytes(): number {
    return this.payloadBytes;
  }

  /**
   * Stores, replaces or (empty payload) deletes the retained message of `msg.topic` [MQTT-3.3.1-5/6/10/11]. A message
   * beyond `broker.maxRetainedMessages`/`maxRetainedBytes` is not stored (nor the one it replaces deleted): it is
   * counted, and nothing is returned to wait for. The promise settles once the store has it.
   */
  set(msg: Message): Promise<void> | undefined {
    const before = this.find(msg.topic);
    if (this.overLimit(msg, before)) {
      this.refuse(msg);
      return undefined;
    }
    const after = msg.payload.length === 0 ? undefined : retainedMeta(msg);
    this.apply(msg.topic, after);
    if (this.refusing && this.n < this.limits.maxMessages * 0.9 && this.payloadBytes < this.limits.maxBytes * 0.9)
      this.refusing = false;
    if (after !== undefined) this.unsettled.set(msg.topic, msg);
    else this.unsettled.delete(msg.topic);
    const stored = this.store.set(msg);
    // Refused by the store (full disk): its publisher hears so, and the index goes back to what the store holds,
    // unless a later message for the topic replaced it meanwhile. Registered before the publisher's handler.
    stored.then(
      () => {
        // Stored: read from the store from now on (a message is cached when delivered, not when written).
        if (this.unsettled.get(msg.topic) === msg) this.unsettled.delete(msg.topic);
      },
      () => {
        if (this.find(msg.topic) !== after) return;
        if (this.unsettled.get(msg.topic) === msg) this.unsettled.delete(msg.topic);
        this.apply(msg.topic, before);
      },
    );
    return stored;
  }

  /** Why storing `msg` would be refused now (a store at `storage.maxBytes`), or undefined. */
  refusal(msg: Message): Error | undefined {
    return this.store.refusal(msg);
  }

  /**
   * Whether `msg` would take the retained messages past their limits: a new topic past the count, or more payload
   * bytes than the limit (a replacement counts the difference). A deletion never is.
   */
  overLimit(msg: Message, before = this.find(msg.topic)): boolean {
    if (msg.payload.length === 0) return false;
    if (before === undefined && this.n >= this.limits.maxMessages) return true;
    return this.payloadBytes - (before?.bytes ?? 0) + msg.payload.length > this.limits.maxBytes;
  }

  /** Counts (and once per episode logs) a retained message not stored for the limits. */
  refuse(msg: Message): void {
    this.refused++;
    if (this.refusing) return;
    this.refusing = true;
    const { maxMessages, maxBytes } = this.limits;
    this.log.warn(
      {
        topic: msg.topic,
        retained: this.n,
        bytes: this.payloadBytes,
        maxRetainedMessages: maxMessages,
        maxRetainedBytes: maxBytes,
      },
      'retained messages at broker.maxRetainedMessages or maxRetainedBytes: new ones are delivered but not retained until some are deleted',
    );
  }

  /**
   * The retained messages matching `filter`, walked lazily: the walk follows only the levels the filter can match,
   * and a `+` or `#` walk reports progress by yielding `undefined` every LEVELS_PER_STEP levels visited, so that a
   * caller can bound its work per turn. Expired messages are deleted as the walk meets them. Messages stored while
   * a walk is under way may or may not be met by it. `$`-topics are not matched by a wildcard first level [MQTT-4.7.2-1].
   */
  *matching(filter: string): Generator<RetainedMeta | undefined, void, undefined> {
    const levels = filter.split('/');
    const now = performance.now();
    const stack: { level: Level; depth: number }[] = [{ level: this.root, depth: 0 }];
    let visited = 0;
    while (stack.length > 0) {
      const { level, depth } = stack.pop()!;
      if (++visited % LEVELS_PER_STEP === 0) yield undefined;
      if (depth === levels.length) {
        const entry = level.entry;
        if (entry !== undefined && this.live(entry, now)) yield entry;
        continue;
      }
      const word = levels[depth];
      if (word === '#') {
        // `a/#` matches `a` too [MQTT-4.7.1-2]; then every level below.
        if (level !== this.root && level.entry !== undefined && this.live(level.entry, now)) yield level.entry;
        yield* this.below(level, level === this.root, now);
        continue;
      }
      const children = level.children;
      if (children === undefined) continue;
      if (word === '+') {
        for (const child of children.values()) {
          if (level === this.root && child.name.startsWith('$')) continue;
          stack.push({ level: child, depth: depth + 1 });
        }
      } else {
        const child = children.get(word);
        if (child !== undefined) stack.push({ level: child, depth: depth + 1 });
      }
    }
  }

  /** Every retained message below `level` (`#`), depth first. */
  private *below(level: Level, skipDollar: boolean, now: number): Generator<RetainedMeta | undefined, void, undefined> {
    const pending: Iterator<Level>[] = [];
    if (level.children !== undefined) pending.push(level.children.values());
    let visited = 0;
    while (pending.length > 0) {
      const next = pending[pending.length - 1].next();
      if (next.done === true) {
        pending.pop();
        continue;
      }
      const child = next.value;
      if (skipDollar && pending.length === 1 && child.name.startsWith('$')) continue;
      if (++visited % LEVELS_PER_STEP === 0) yield undefined;
      if (child.entry !== undefined && this.live(child.entry, now)) yield child.entry;
      if (child.children !== undefined) pending.push(child.children.values());
    }
  }

  /** Whether a live retained message is at exactly `topic` (a filter without wildcards matches only that). */
  holds(topic: string): boolean {
    const entry = this.find(topic);
    return entry !== undefined && this.live(entry, performance.now());
  }

  /**
   * The whole message of an index entry, as it is now: from the messages being stored, or the store (a copy from
   * LMDB's memory map). Undefined when it is gone meanwhile or damaged (then dropped from the index). Nothing read is
   * kept: a cache of delivered messages saved 1-4 µs per delivery of a set read again and again, but what it kept
   * survived scavenges, and V8 then allocated the messages' objects in the old generation, so every scavenge while a
   * `#` over 100,000 was delivered took 4-12 ms instead of half a millisecond (docs/architecture.md#retained-messages).
   */
  message(entry: RetainedMeta): Message | undefined {
    const topic = entry.topic;
    const unsettled = this.unsettled.get(topic);
    if (unsettled !== undefined) return unsettled;
    const msg = this.store.get(topic);
    if (msg === undefined && this.find(topic) === entry) this.apply(topic, undefined);
    return msg;
  }

  /** False for an expired entry, which goes from the index and the store. */
  private live(entry: RetainedMeta, now: number): boolean {
    if (entry.expiresAt === undefined || entry.expiresAt > now) return true;
    this.apply(entry.topic, undefined);
    this.unsettled.delete(entry.topic);
    const deletion: Message = {
      topic: entry.topic,
      payload: NO_PAYLOAD,
      qos: 0,
      retain: true,
      properties: undefined,
      origin: entry.origin,
      expiresAt: undefined,
    };
    this.store
      .set(deletion)
      .catch((err: unknown) =>
        this.log.debug({ err, topic: entry.topic }, 'expired retained message not deleted from the store'),
      );
    return false;
  }

  private find(topic: string): RetainedMeta | undefined {
    let level: Level | undefined = this.root;
    // Level by level without a split: `holds` runs for every exact filter of a SUBSCRIBE.
    for (let start = 0; ;) {
      const end = topic.indexOf('/', start);
      level = level.children?.get(topic.slice(start, end < 0 ? undefined : end));
      if (level === undefined) return undefined;
      if (end < 0) return level.entry;
      start = end + 1;
    }
  }

  /** Puts (or with undefined, removes) the entry of `topic`, keeping count and bytes; removes levels left empty. */
  private apply(topic: string, entry: RetainedMeta | undefined): void {
    let level = this.root;
    const words = topic.split('/');
    for (const word of words) {
      let child = level.children?.get(word);
      if (child === undefined) {
        if (entry === undefined) return;
        child = new Level(level, word);
        (level.children ??= new Map()).set(word, child);
      }
      level = child;
    }
    const old = level.entry;
    if (old !== undefined) {
      this.n--;
      this.payloadBytes -= old.bytes;
    }
    level.entry = entry;
    if (entry !== undefined) {
      this.n++;
      this.payloadBytes += entry.bytes;
      return;
    }
    // Prune the empty levels up the branch.
    while (
      level.parent !== undefined &&
      level.entry === undefined &&
      (level.children === undefined || level.children.size === 0)
    ) {
      level.parent.children!.delete(level.name);
      level = level.parent;
    }
  }
}
