/** What every connection shares: the broker, auth hooks, limits, the write flusher and the client registry. */
import type { Broker } from '../broker/broker.js';
import type { AuthHooks } from '../broker/auth.js';
import type { Logger } from '../util/logger.js';
import type { Connection } from './connection.js';
import type { PendingConnections } from './pending.js';

export interface ServerLimits {
  readonly maxConnections: number;
  readonly maxPacketBytes: number;
  readonly maxKeepaliveS: number;
  readonly connectTimeoutMs: number;
  readonly receiveMaximum: number;
  readonly maxTopicLevels: number;
  readonly topicAliasMaximum: number;
  readonly maxSessionExpiryS: number;
  readonly maxWriteBufferBytes: number;
  readonly slowClientTimeoutMs: number;
  readonly retainAvailable: boolean;
  readonly maxUserProperties: number;
  /** Subscriptions one session may hold: each one that matches a topic is work on every message to it. */
  readonly maxSubscriptionsPerClient: number;
}

/** What a connection needs to know of its listener; one object per listener, shared by its connections. */
export interface ListenerPolicy {
  readonly allowAnonymous: boolean;
  readonly identityIsUsername: boolean;
  /** Open connections of this listener (for its own maxConnections). */
  connections: number;
  /** Those that have not completed CONNECT yet (maxPendingConnections, maxPendingPerAddress). */
  readonly pending: PendingConnections<Connection>;
}

export interface ServerContext {
  readonly broker: Broker;
  /** Swapped on reload; read at each use so a new ACL applies to connected clients' next operations. */
  auth: AuthHooks;
  readonly limits: ServerLimits;
  readonly log: Logger;
  readonly flusher: WriteFlusher;
  /** Every open connection, connected or not yet. */
  readonly connections: Set<Connection>;
  /** Connected clients by client id, for session take-over. */
  readonly clients: Map<string, Connection>;
}

/**
 * Batches socket writes: connections queue encoded packets during an event-loop turn and every connection with
 * pending bytes is written once, in one syscall, when the turn's I/O is done.
 */
export class WriteFlusher {
  private readonly dirty = new Set<{ flush(): void }>();
  private scheduled = false;

  schedule(target: { flush(): void }): void {
    this.dirty.add(target);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.run);
    }
  }

  private readonly run = (): void => {
    this.scheduled = false;
    for (const target of this.dirty) target.flush();
    this.dirty.clear();
  };
}
