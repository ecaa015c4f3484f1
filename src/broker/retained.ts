/** The retained-message index, kept in memory and written through to the store. */
import type { Message } from '../protocol/message.js';
import { isExpired } from '../protocol/message.js';
import { topicMatches } from '../protocol/topics.js';
import type { RetainedStore } from '../store/types.js';

export class RetainedIndex {
  private readonly byTopic = new Map<string, Message>();

  constructor(private readonly store: RetainedStore) {
    for (const msg of store.loadAll()) this.byTopic.set(msg.topic, msg);
  }

  get count(): number {
    return this.byTopic.size;
  }

  /** Stores, replaces or (empty payload) deletes the retained message of `msg.topic` [MQTT-3.3.1-5/6/10/11]. */
  set(msg: Message): Promise<void> {
    const before = this.byTopic.get(msg.topic);
    const after = msg.payload.length === 0 ? undefined : msg;
    this.apply(msg.topic, after);
    const stored = this.store.set(msg);
    // Refused by the store (full disk): its publisher hears so, and the index goes back to what the store holds,
    // unless a later message for the topic replaced it meanwhile. Registered before the publisher's handler.
    stored.then(undefined, () => {
      if (this.byTopic.get(msg.topic) === after) this.apply(msg.topic, before);
    });
    return stored;
  }

  /** Why storing `msg` would be refused now (a store at `storage.maxBytes`), or undefined. */
  refusal(msg: Message): Error | undefined {
    return this.store.refusal(msg);
  }

  private apply(topic: string, msg: Message | undefined): void {
    if (msg === undefined) this.byTopic.delete(topic);
    else this.byTopic.set(topic, msg);
  }

  /** Retained messages matching `filter`, dropping any that expired meanwhile. */
  *matching(filter: string): Iterable<Message> {
    const now = performance.now();
    for (const msg of this.byTopic.values()) {
      if (!topicMatches(filter, msg.topic)) continue;
      if (isExpired(msg, now)) {
        this.byTopic.delete(msg.topic);
        continue;
      }
      yield msg;
    }
  }
}
