/**
 * A write to a tag's node, read back: the value is converted to the node's built-in type (refused before any I/O
 * when it does not fit), written, and the node's Value read again and compared at the node's precision.
 */
import type { ReadBack, TagValue } from '../contract.js';
import { ValueRefusedError } from '../contract.js';
import { ConnectorError, asError } from '../../src/util/errors.js';
import type { Logger } from '../../src/util/logger.js';
import { withDeadline, type OpenedSession } from './open-session.js';
import type { ResolvedTag } from './resolve-tags.js';
import { sameValue, tagValueToVariant, variantToTagValue, WriteTypeError } from './variants.js';

/** Status names of a write that may succeed when tried again (the link or the server's load, not the value). */
const RETRYABLE_STATUS =
  /BadTimeout|BadCommunication|BadConnection|BadServerNotConnected|BadSession|BadSecureChannel|BadTooManyOperations|BadResourceUnavailable/;

/** The connector's open session and what a write needs beside it. */
export interface WriteSession {
  readonly connectorId: string;
  readonly opened: OpenedSession;
  readonly requestTimeoutMs: number;
  readonly log: Logger;
}

/** A write refused or failed; `retryable` when trying again later may succeed. */
export function writeRefused(connectorId: string, tag: string, reason: string, retryable = false): ConnectorError {
  return new ConnectorError('EF_CONNECTOR_WRITE', connectorId, `write ${tag} refused: ${reason}`, { retryable });
}

/** Writes `value` to the tag's node and reads it back; a value that does not fit is refused before any I/O. */
export async function writeTag(
  on: WriteSession,
  resolved: ResolvedTag,
  value: TagValue,
): Promise<ReadBack | undefined> {
  const { connectorId, opened, requestTimeoutMs, log } = on;
  const tag = resolved.config.name;
  const refuse = (reason: string, retryable = false) => writeRefused(connectorId, tag, reason, retryable);
  let variant;
  try {
    variant = tagValueToVariant(value, resolved.builtIn, resolved.isArray);
  } catch (err) {
    if (err instanceof WriteTypeError) throw new ValueRefusedError(connectorId, tag, err.message);
    throw err;
  }
  let status;
  try {
    status = await answerWithin(
      opened.session.write({
        nodeId: resolved.nodeId,
        attributeId: opened.lib.ua.AttributeIds.Value,
        value: { value: variant as never },
      }),
      requestTimeoutMs,
    );
  } catch (err) {
    throw refuse(`the write request failed: ${asError(err).message}`, true);
  }
  if (!status.isGood()) {
    throw refuse(`the server answered ${status.name} (${status.description})`, RETRYABLE_STATUS.test(status.name));
  }
  log.debug({ tag, nodeId: resolved.nodeId.toString() }, 'opcua write done');
  return readBack(on, resolved, value);
}

/** The written node's Value read back, compared with what was written (at the node's precision). */
async function readBack(on: WriteSession, resolved: ResolvedTag, written: TagValue): Promise<ReadBack | undefined> {
  const { opened, requestTimeoutMs, log } = on;
  const name = resolved.config.name;
  try {
    const dataValue = await answerWithin(
      opened.session.read({ nodeId: resolved.nodeId, attributeId: opened.lib.ua.AttributeIds.Value }),
      requestTimeoutMs,
    );
    if (!dataValue.statusCode.isGood()) throw new Error(`the server answered ${dataValue.statusCode.name}`);
    const value = variantToTagValue(dataValue.value, resolved.definition.datatype);
    if (value === undefined) throw new Error('the server returned no value');
    return { value, timestamp: Date.now(), matches: sameValue(written, value, resolved.builtIn) };
  } catch (err) {
    log.warn({ tag: name, reason: asError(err).message }, 'written tag could not be read back');
    return undefined;
  }
}

function answerWithin<T>(request: Promise<T>, ms: number): Promise<T> {
  return withDeadline(request, ms, () => new Error(`no answer within ${ms} ms`));
}
