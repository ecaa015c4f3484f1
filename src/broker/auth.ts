/**
 * Authentication and authorization hooks (validate → authorize → act). The defaults here allow what a local,
 * anonymous-on-loopback broker allows; the password file and ACL implementations plug in behind this interface.
 */
import type { QoS } from '../protocol/message.js';
import { Reason } from '../protocol/reason-codes.js';

export interface ConnectInfo {
  readonly clientId: string;
  readonly username?: string;
  readonly password?: Buffer;
  readonly remoteAddress: string;
  /** Whether the listener the client came in on accepts clients without credentials. */
  readonly allowAnonymous: boolean;
}

export interface ClientInfo {
  readonly clientId: string;
  readonly username?: string;
}

export interface AuthHooks {
  /** Resolves undefined to accept, or the CONNACK reason code to refuse with. */
  authenticate(c: ConnectInfo): Promise<number | undefined>;
  /** Undefined to allow a publish (or a will), or the reason code to refuse it with. */
  authorizePublish(c: ClientInfo, topic: string): number | undefined;
  /** The QoS to grant (SUBACK semantics), or a reason code >= 0x80 to refuse this one filter. */
  authorizeSubscribe(c: ClientInfo, filter: string, qos: QoS): QoS | number;
}

/**
 * Without credentials configured: clients on listeners that allow anonymous access are accepted, others are
 * refused (as Mosquitto 2 does with `allow_anonymous false` and no password file). Clients may never publish
 * into `$SYS` (the broker's own tree) [RELIABILITY #27].
 */
export const defaultAuth: AuthHooks = {
  async authenticate(c) {
    return c.allowAnonymous ? undefined : Reason.NotAuthorized;
  },
  authorizePublish(_c, topic) {
    return topic.startsWith('$SYS') ? Reason.NotAuthorized : undefined;
  },
  authorizeSubscribe(_c, _filter, qos) {
    return qos;
  },
};
