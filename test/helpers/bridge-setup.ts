/**
 * Set-up for the bridge unit tests: the real broker on the memory store (the same Store contract as LMDB, which
 * the contract suite checks), a bridge config with the schema's defaults, and a recording logger.
 */
import type { Store } from '../../src/store/types.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { Broker } from '../../src/broker/broker.js';
import { silentLogger, type Logger } from '../../src/util/logger.js';
import type { BridgeConfig } from '../../src/config/schema.js';

/** The real broker on the memory store, as the bridge sees it in the gateway (which uses LMDB). */
export function testBroker(log: Logger = silentLogger): { broker: Broker; store: Store } {
  const store = createMemoryStore();
  const broker = new Broker({ limits: { maxInflight: 20, maxQueuedMessages: 1000, maxQueuedBytes: 0 }, store, log });
  return { broker, store };
}

/** The retained payload of `topic` in the store, as text. */
export function retainedPayload(store: Store, topic: string): string | undefined {
  return store.retained.get(topic)?.payload.toString();
}

/** A full BridgeConfig (the schema's defaults) with `patch` applied on top. */
export function bridgeConfig(
  urls: string[],
  patch: Partial<Omit<BridgeConfig, 'remote'>> & { remote?: Partial<BridgeConfig['remote']> } = {},
): BridgeConfig {
  const { remote, ...rest } = patch;
  return {
    name: 'central',
    topics: [{ filter: 'plant/#', direction: 'out', localPrefix: '', remotePrefix: '' }],
    inflight: 100,
    ackTimeoutS: 30,
    replay: { messagesPerS: 0, bytesPerS: 0, share: 0.5 },
    messageId: { enabled: true, property: 'edgeferry-id' },
    queue: {
      maxBytes: 1 << 30,
      maxMessages: 10_000_000,
      maxAgeS: 0,
      overflow: 'drop-oldest',
      deadLetter: { maxMessages: 0, maxBytes: 1 },
    },
    reconnect: { minDelayMs: 100, maxDelayMs: 500 },
    status: { enabled: true, topic: 'edgeferry/test/status' },
    ...rest,
    remote: {
      urls,
      clientId: 'edgeferry-test',
      protocolVersion: 5,
      keepaliveS: 60,
      connectTimeoutS: 10,
      cleanStart: false,
      sessionExpiryS: 3600,
      ...remote,
    },
  } as BridgeConfig;
}

/** A Logger that records warn/error/info lines, for "warned once per episode" assertions. */
export function recordingLogger(): Logger & { lines: { level: string; msg: string; obj?: object }[] } {
  const lines: { level: string; msg: string; obj?: object }[] = [];
  const make = (level: string) => (objOrMsg: object | string, msg?: string) => {
    if (typeof objOrMsg === 'string') lines.push({ level, msg: objOrMsg });
    else lines.push({ level, msg: msg ?? '', obj: objOrMsg });
  };
  const logger = {
    lines,
    fatal: make('fatal'),
    error: make('error'),
    warn: make('warn'),
    info: make('info'),
    debug: make('debug'),
    trace: () => undefined,
    child: () => logger,
    isLevelEnabled: () => true,
  };
  return logger as Logger & { lines: typeof lines };
}
