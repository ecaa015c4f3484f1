/** Outbox limit rules and errors shared by the memory and LMDB stores, so both refuse in the same way. */
import { StoreError } from '../util/errors.js';
import type { DropReason, OutboxLimits } from './types.js';

/** A limit of 0 (or less, or Infinity) means "no limit", like `maxAgeS`. */
export function isLimited(limit: number): boolean {
  return limit > 0 && Number.isFinite(limit);
}

export function emptyDropped(): Record<DropReason, number> {
  return { queue_full: 0, expired: 0, rejected_upstream: 0, dead_letter_deleted: 0 };
}

export function queueFullError(name: string, limits: OutboxLimits, bytes: number): StoreError {
  return new StoreError(
    'EF_STORE_FULL',
    `outbox "${name}" is full (maxMessages ${limits.maxMessages}, maxBytes ${limits.maxBytes}); ` +
      `a ${bytes}-byte message was refused (overflow: ${limits.overflow})`,
  );
}

export function entryTooLargeError(name: string, limits: OutboxLimits, bytes: number): StoreError {
  return new StoreError(
    'EF_STORE_FULL',
    `a ${bytes}-byte message can never fit outbox "${name}" (maxBytes ${limits.maxBytes})`,
  );
}

/**
 * Whether an outbox holding `messages` and `held` bytes (counting appends not applied yet) refuses an entry of
 * `bytes` now: never with `drop-oldest` (it makes room), but for an entry larger than `maxBytes`.
 */
export function appendRefusal(
  name: string,
  limits: OutboxLimits,
  messages: number,
  held: number,
  bytes: number,
): StoreError | undefined {
  const { maxBytes, maxMessages, overflow } = limits;
  if (isLimited(maxBytes) && bytes > maxBytes) return entryTooLargeError(name, limits, bytes);
  if (overflow !== 'reject-new') return undefined;
  const full =
    (isLimited(maxMessages) && messages + 1 > maxMessages) || (isLimited(maxBytes) && held + bytes > maxBytes);
  return full ? queueFullError(name, limits, bytes) : undefined;
}

export function outboxInUseError(name: string): StoreError {
  return new StoreError(
    'EF_STORE_WRITE',
    `outbox "${name}" is in use by a bridge of this process; stop edgeferry first`,
  );
}

export function closedError(): StoreError {
  return new StoreError('EF_STORE_WRITE', 'the store is closed');
}
