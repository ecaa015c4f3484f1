/**
 * The limits every session of a broker shares (`SessionLimits`, from the `broker` config keys) and what follows
 * from them: the high-water mark of back-pressure and the part of a persistent session's queue kept in memory.
 */
import type { QueueWindow } from '../store/types.js';

export interface SessionLimits {
  readonly maxInflight: number;
  readonly maxQueuedMessages: number; // 0 = unlimited
  readonly maxQueuedBytes: number; // 0 = unlimited
  /**
   * The longest Session Expiry Interval a session gets (`broker.maxSessionExpiryS`; default 0xFFFFFFFF, never): the
   * connect handler caps what clients ask for, the broker what it restores from the store.
   */
  readonly maxSessionExpiryS?: number;
  /**
   * Queued messages a persistent session keeps in memory when its store is durable (default
   * DEFAULT_QUEUED_IN_MEMORY; 0 = no bound by count). Past that, its queue goes on in the store only and is read back in
   * chunks as it drains, so a queue of millions (a historian offline over a weekend) costs disk, not memory,
   * and loading it at start does not either. Reading back costs CPU: that part drains at 50-60 % of the speed.
   */
  readonly maxQueuedInMemory?: number;
  /**
   * Payload bytes of queued messages a persistent session keeps in memory, the same way (default
   * DEFAULT_QUEUED_BYTES_IN_MEMORY; 0 = no bound): with large payloads this bound comes first.
   */
  readonly maxQueuedBytesInMemory?: number;
  /**
   * Queued messages (in memory and in the store) at which an online session holds the publishers that feed it,
   * until it is down to half of that; 0 = never (docs/architecture.md#back-pressure). At most half of
   * `maxQueuedMessages`, so publishers pause before the queue is full.
   */
  readonly queueHighWater?: number;
}

/** The high-water mark of a session's queue (`SessionLimits.queueHighWater`); 0 = publishers are never held. */
export function highWaterOf(limits: SessionLimits): number {
  const configured = limits.queueHighWater ?? 0;
  const max = limits.maxQueuedMessages;
  return max > 0 && configured > 0 ? Math.min(configured, Math.ceil(max / 2)) : configured;
}

export const DEFAULT_QUEUED_IN_MEMORY = 100_000;
export const DEFAULT_QUEUED_BYTES_IN_MEMORY = 64 * 1024 * 1024;

/**
 * The part of a persistent session's queue kept in memory (when the store is durable), from the limits; none
 * when both are 0 (everything in memory). At least `maxInflight` messages, so refills keep up with the window.
 */
export function memoryWindow(limits: SessionLimits): QueueWindow | undefined {
  const messages = limits.maxQueuedInMemory ?? DEFAULT_QUEUED_IN_MEMORY;
  const bytes = limits.maxQueuedBytesInMemory ?? DEFAULT_QUEUED_BYTES_IN_MEMORY;
  if (messages === 0 && bytes === 0) return undefined;
  return {
    messages: messages === 0 ? Infinity : Math.max(messages, limits.maxInflight),
    bytes: bytes === 0 ? Infinity : bytes,
  };
}
