/**
 * The subscriber behind `Broker.subscribe`: the edge node, bridges and connectors take messages from the broker
 * through a callback, as a client's session would through its socket.
 */
import type { Message, QoS } from '../protocol/message.js';
import type { Subscriber } from './topic-tree.js';

export interface SubscribeOptions {
  qos: QoS;
  /** The subscriber's identity: with `noLocal`, messages whose origin equals it are not delivered. */
  origin: string;
  noLocal?: boolean;
  retainAsPublished?: boolean;
  retainHandling?: 0 | 1 | 2;
  /** Why this subscriber would refuse a QoS 1/2 message now (Subscriber.refusal), or undefined. */
  refusal?: (msg: Message) => Error | undefined;
}

/** An in-process subscriber's callback; a returned promise makes the publisher wait for it (durability). */
export type Deliver = (msg: Message) => void | Promise<void>;

export class InProcessSubscriber implements Subscriber {
  routeMark = 0;
  routeSlot = 0;

  constructor(
    readonly id: string,
    private readonly callback: Deliver,
    readonly refusal: ((msg: Message) => Error | undefined) | undefined,
  ) {}

  isOnline(): boolean {
    return true;
  }

  deliver(msg: Message, qos: QoS, retain: boolean): void | Promise<void> {
    return this.callback(qos === msg.qos && retain === msg.retain ? msg : { ...msg, qos, retain });
  }
}
