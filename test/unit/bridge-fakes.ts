/**
 * In-memory stand-ins for the bridge unit tests: an Outbox with the contract's limits and drop counting, and a
 * Store good enough for a real Broker with in-process subscribers only. Commits resolve on the next event turn,
 * like batched LMDB commits.
 */
import type { Message } from '../../src/protocol/message.js';
import type {
  DropReason,
  Outbox,
  OutboxDepth,
  OutboxEntry,
  OutboxLimits,
  RetainedStore,
  Store,
} from '../../src/store/types.js';
import { StoreError } from '../../src/util/errors.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { Broker } from '../../src/broker/broker.js';
import { silentLogger, type Logger } from '../../src/util/logger.js';
import type { BridgeConfig } from '../../src/config/schema.js';

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class MemoryOutbox implements Outbox {
  readonly entries = new Map<number, OutboxEntry>();
  private nextSeq = 1;
  private bytes = 0;
  private readonly dropped: Record<DropReason, number> = { queue_full: 0, expired: 0, rejected_upstream: 0 };
  /** Every seq ever removed through remove(), in call order (for asserting ack-driven removal). */
  readonly removed: number[] = [];

  constructor(
    readonly name: string,
    private readonly limits: OutboxLimits,
  ) {}

  async append(msg: Message): Promise<void> {
    const bytes = msg.payload.length + Buffer.byteLength(msg.topic) + 16;
    while (this.entries.size >= this.limits.maxMessages || this.bytes + bytes > this.limits.maxBytes) {
      if (this.limits.overflow === 'reject-new' || this.entries.size === 0) {
        this.dropped.queue_full++;
        throw new StoreError('EF_STORE_FULL', `outbox ${this.name} is full`);
      }
      const [seq, head] = this.entries.entries().next().value as [number, OutboxEntry];
      this.entries.delete(seq);
      this.bytes -= head.bytes;
      this.dropped.queue_full++;
    }
    const seq = this.nextSeq++;
    this.entries.set(seq, { seq, msg, appendedAtMs: Date.now(), bytes });
    this.bytes += bytes;
    await turn();
  }

  peek(limit: number, afterSeq?: number): readonly OutboxEntry[] {
    const out: OutboxEntry[] = [];
    for (const e of this.entries.values()) {
      if (afterSeq !== undefined && e.seq <= afterSeq) continue;
      out.push(e);
      if (out.length >= limit) break;
    }
    return out;
  }

  async remove(seqs: readonly number[]): Promise<void> {
    for (const seq of seqs) {
      const e = this.entries.get(seq);
      this.removed.push(seq);
      if (!e) continue;
      this.entries.delete(seq);
      this.bytes -= e.bytes;
    }
    await turn();
  }

  async expire(nowMs: number = Date.now()): Promise<number> {
    if (this.limits.maxAgeS <= 0) return 0;
    let n = 0;
    for (const e of this.entries.values()) {
      if (nowMs - e.appendedAtMs < this.limits.maxAgeS * 1000) break;
      this.entries.delete(e.seq);
      this.bytes -= e.bytes;
      n++;
    }
    this.dropped.expired += n;
    return n;
  }

  countDropped(reason: DropReason, n: number): void {
    this.dropped[reason] += n;
  }

  get depth(): OutboxDepth {
    const first = this.entries.values().next().value as OutboxEntry | undefined;
    return { messages: this.entries.size, bytes: this.bytes, oldestAppendedAtMs: first?.appendedAtMs, dropped: { ...this.dropped } };
  }
}

class MemoryRetained implements RetainedStore {
  readonly byTopic = new Map<string, Message>();
  loadAll(): Iterable<Message> {
    return this.byTopic.values();
  }
  async set(msg: Message): Promise<void> {
    if (msg.payload.length === 0) this.byTopic.delete(msg.topic);
    else this.byTopic.set(msg.topic, msg);
  }
  get count(): number {
    return this.byTopic.size;
  }
}

/**
 * The project's memory store for sessions, with an inspectable retained store and `MemoryOutbox` outboxes
 * (which record removals for assertions).
 */
export function memoryStore(): Store & { retained: MemoryRetained } {
  const base = createMemoryStore();
  const outboxes = new Map<string, MemoryOutbox>();
  return {
    retained: new MemoryRetained(),
    sessions: base.sessions,
    outbox(name: string, limits: OutboxLimits): Outbox {
      let o = outboxes.get(name);
      if (!o) outboxes.set(name, (o = new MemoryOutbox(name, limits)));
      return o;
    },
    flushed: async () => undefined,
    close: () => base.close(),
  };
}

export function testBroker(log: Logger = silentLogger): { broker: Broker; store: ReturnType<typeof memoryStore> } {
  const store = memoryStore();
  const broker = new Broker({ limits: { maxInflight: 20, maxQueuedMessages: 1000, maxQueuedBytes: 0 }, store, log });
  return { broker, store };
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
    replay: { messagesPerS: 0, bytesPerS: 0 },
    queue: { maxBytes: 1 << 30, maxMessages: 10_000_000, maxAgeS: 0, overflow: 'drop-oldest' },
    reconnect: { minDelayMs: 100, maxDelayMs: 500 },
    ...rest,
    remote: {
      urls,
      clientId: 'edgeferry-test',
      protocolVersion: 5,
      keepaliveS: 60,
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
