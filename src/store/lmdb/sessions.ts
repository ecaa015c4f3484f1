/** Persistent sessions in the LMDB store: records, subscriptions, queued messages, flight state, wills. */
import type { Database } from 'lmdb';
import type { Message } from '../../protocol/message.js';
import { asError, StoreError } from '../../util/errors.js';
import {
  CorruptValueError,
  decodeJsonValue,
  decodeStampedValue,
  encodeJsonValue,
  encodeStampedValue,
  decodeQueuedValue,
  encodePlainValue,
  encodeQueuedValue,
  FLIGHT_HEADER_BYTES,
  keyOwner,
  keySeq,
  nameKey,
  ownerPrefix,
  PLAIN_HEADER_BYTES,
  prefixEnd,
  MARK,
  seqKey,
} from '../codec.js';
import { QueueSplit } from '../queue-window.js';
import { closedError } from '../outbox-limits.js';
import {
  fitsWindow,
  type FlightState,
  type PendingWill,
  type QueuedRecord,
  type QueueRead,
  type QueueWindow,
  type SessionFields,
  type SessionRecord,
  type SessionStore,
  type SubscriptionRecord,
} from '../types.js';
import { DelayedFlush, type Batch, type BatchMember, type DamagedRecord, type StoreWriter } from './store-writer.js';

/** MQTT 5's Session Expiry Interval that never ends. */
const NEVER_EXPIRES = 0xffffffff;

export class LmdbSessionStore implements SessionStore, BatchMember {
  /** The last queued message's seq, one sequence for every session; persisted in `meta` as `sessionSeq`. */
  private lastSeq: number;
  private readonly store: StoreWriter;
  private readonly prefixes = new Map<string, Buffer>();
  private ackKeys: Buffer[] = [];
  /** The deletes of acked messages go at the end of the batch that flushes them, after any flight state in it. */
  private readonly ackFlush: DelayedFlush;
  /**
   * No key in the queue database is greater than this (deletes leave it as it is: still a bound), so a message
   * queued under a greater key is appended (see `StoreWriter.put`): the queue of the session whose client id sorts
   * last, usually the only one, then fills its pages instead of leaving them half full.
   */
  private queueEnd: Buffer | undefined;

  // Per batch (see BatchMember).
  /** `lastSeq` and `queueEnd` before the batch's first enqueue, restored if it fails. */
  private seqBefore: number | undefined;
  private queueEndBefore: Buffer | undefined;
  /** The collected acks are deleted in this batch. */
  private flushingAcks = false;
  /** Client ids whose session was dropped in this batch (the committed keys are still readable). */
  private droppedInBatch = new Set<string>();
  /** Keys written for a client in this batch, so a `drop` later in the same batch removes them too. */
  private writtenInBatch = new Map<string, { db: Database<unknown, Buffer | string>; key: Buffer }[]>();

  constructor(store: StoreWriter) {
    this.store = store;
    this.ackFlush = new DelayedFlush(store, (b) => {
      b.join(this);
      this.flushingAcks = true;
    });
    this.lastSeq = store.readMeta<number>('sessionSeq') ?? 0;
    for (const key of store.queueDb.getKeys({ reverse: true, limit: 1, snapshot: false })) this.queueEnd = key;
  }

  loadAll(window?: QueueWindow): Iterable<SessionRecord> {
    const { sessionDb, subscriptionDb, queueDb, releaseDb, willDb } = this.store;
    const byId = new Map<
      string,
      {
        fields: SessionFields;
        subscriptions: SubscriptionRecord[];
        queue: QueueSplit;
        awaitingRelease: number[];
        will?: PendingWill;
      }
    >();
    const get = (clientId: string) => {
      let s = byId.get(clientId);
      if (s === undefined) {
        s = { fields: { expiryIntervalS: 0 }, subscriptions: [], queue: new QueueSplit(window), awaitingRelease: [] };
        byId.set(clientId, s);
      }
      return s;
    };
    // Kept, not deleted: without its record the session would expire at the next start, and its queue with it.
    const damagedSessions = new Damaged(this.store, 'session records', false);
    for (const { key, value } of sessionDb.getRange({ snapshot: false })) {
      // A damaged record loses its expiry, not the session: it stays (never expiring) with its queue until its
      // client comes back and sets a new one.
      const fields = damagedSessions.check(sessionDb, key, value, decodeJsonValue<SessionFields>) ?? {
        expiryIntervalS: NEVER_EXPIRES,
      };
      get(key.toString('utf8')).fields = fields;
    }
    damagedSessions.report();
    const damagedSubscriptions = new Damaged(this.store, 'subscriptions');
    for (const { key, value } of subscriptionDb.getRange({ snapshot: false })) {
      const sub = damagedSubscriptions.check(subscriptionDb, key, value, decodeJsonValue<SubscriptionRecord>);
      if (sub !== undefined) get(keyOwner(key)).subscriptions.push(sub);
    }
    damagedSubscriptions.report();
    for (const key of releaseDb.getKeys({ snapshot: false })) get(keyOwner(key)).awaitingRelease.push(keySeq(key));
    const damaged = new Damaged(this.store, 'queued messages');
    for (const { key, value } of queueDb.getRange({ snapshot: false })) {
      // A message of the tail is decoded only for its payload size: nothing of it stays in memory.
      const decoded = damaged.check(queueDb, key, value, (v) => decodeQueuedValue(v, this.store.clock));
      if (decoded === undefined) continue;
      const record = { seq: keySeq(key), ...decoded };
      const { queue } = get(keyOwner(key));
      if (queue.keeps(record.msg.payload.length, record.flight !== undefined)) queue.queue.push(record);
    }
    damaged.report();
    const damagedWills = new Damaged(this.store, 'delayed wills');
    for (const { key, value } of willDb.getRange({ snapshot: false })) {
      const will = damagedWills.check(willDb, key, value, (v) => decodeStampedValue(v, this.store.clock));
      if (will !== undefined) get(key.toString('utf8')).will = { msg: will.msg, dueAtMs: will.stampMs };
    }
    damagedWills.report();
    const out: SessionRecord[] = [];
    for (const [clientId, s] of byId) {
      out.push({
        clientId,
        expiryIntervalS: s.fields.expiryIntervalS,
        ...(s.fields.disconnectedAtMs === undefined ? {} : { disconnectedAtMs: s.fields.disconnectedAtMs }),
        ...(s.fields.owner === undefined ? {} : { owner: s.fields.owner }),
        subscriptions: s.subscriptions,
        queue: s.queue.queue,
        ...(s.queue.tail.count > 0 ? { queueTail: s.queue.tail } : {}),
        awaitingRelease: s.awaitingRelease,
        ...(s.will === undefined ? {} : { will: s.will }),
      });
    }
    return out;
  }

  readQueue(clientId: string, afterSeq: number, window: QueueWindow): QueueRead {
    const out: QueuedRecord[] = [];
    const prefix = this.prefixOf(clientId);
    const limit = Number.isFinite(window.messages) ? window.messages : undefined;
    const { queueDb } = this.store;
    const range = queueDb.getRange({
      start: seqKey(prefix, afterSeq + 1),
      end: prefixEnd(prefix),
      limit,
      snapshot: false,
    });
    const damaged = new Damaged(this.store, 'queued messages');
    let bytes = 0;
    let lastSeq: number | undefined;
    for (const { key, value } of range) {
      const decoded = damaged.check(queueDb, key, value, (v) => decodeQueuedValue(v, this.store.clock));
      if (decoded === undefined) {
        lastSeq = keySeq(key);
        continue;
      }
      const record = { seq: keySeq(key), ...decoded };
      const size = record.msg.payload.length;
      if (!fitsWindow(window, out.length, bytes, size)) break;
      out.push(record);
      lastSeq = record.seq;
      bytes += size;
    }
    damaged.report();
    return { records: out, skipped: damaged.count, lastSeq };
  }

  putSession(clientId: string, fields: SessionFields): Promise<void> {
    const value: { -readonly [K in keyof SessionFields]: SessionFields[K] } = {
      expiryIntervalS: fields.expiryIntervalS,
    };
    if (fields.disconnectedAtMs !== undefined) value.disconnectedAtMs = fields.disconnectedAtMs;
    if (fields.owner !== undefined) value.owner = fields.owner;
    return this.keyed(
      clientId,
      (b, key) => this.store.put(b, this.store.sessionDb, key, encodeJsonValue(value)),
      Buffer.from(clientId, 'utf8'),
    );
  }

  drop(clientId: string): Promise<void> {
    this.prefixes.delete(clientId);
    return this.keyed(
      clientId,
      (b, key) => {
        const { sessionDb, subscriptionDb, queueDb, releaseDb, willDb } = this.store;
        b.join(this);
        this.droppedInBatch.add(clientId);
        this.store.del(b, sessionDb, key);
        this.store.del(b, willDb, key);
        const prefix = ownerPrefix(clientId);
        const end = prefixEnd(prefix);
        for (const db of [subscriptionDb, queueDb, releaseDb] as Database<unknown, Buffer>[]) {
          const keys = [...db.getKeys({ start: prefix, end, snapshot: false })];
          for (const k of keys) this.store.del(b, db, k);
        }
        // Written earlier in this same batch, so not in the committed keys above.
        for (const written of this.writtenInBatch.get(clientId) ?? []) this.store.del(b, written.db, written.key);
        this.writtenInBatch.delete(clientId);
      },
      Buffer.from(clientId, 'utf8'),
    );
  }

  putSubscription(clientId: string, sub: SubscriptionRecord): Promise<void> {
    const value = encodeJsonValue(sub);
    return this.keyed(
      clientId,
      (b, key) => {
        this.store.put(b, this.store.subscriptionDb, key, value);
        this.remember(b, clientId, this.store.subscriptionDb, key);
      },
      () => nameKey(ownerPrefix(clientId), sub.filter),
    );
  }

  deleteSubscription(clientId: string, filter: string): Promise<void> {
    return this.keyed(
      clientId,
      (b, key) => this.store.del(b, this.store.subscriptionDb, key),
      () => nameKey(ownerPrefix(clientId), filter),
    );
  }

  enqueue(clientId: string, msg: Message): Promise<number> {
    let value: Buffer;
    let prefix: Buffer;
    try {
      value = encodePlainValue(msg, this.store.clock);
      prefix = this.prefixOf(clientId);
    } catch (err) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }),
      );
    }
    if (prefix.length + 8 > this.store.maxKeyBytes) return Promise.reject(keyTooLong(clientId));
    return this.store.admitQueued(value.length, (b) => {
      this.store.reserve(b, value.length);
      const seq = this.lastSeq + 1;
      const key = seqKey(prefix, seq);
      if (this.seqBefore === undefined) {
        this.seqBefore = this.lastSeq;
        this.queueEndBefore = this.queueEnd;
      }
      const append = this.queueEnd === undefined || Buffer.compare(key, this.queueEnd) > 0;
      if (append) this.queueEnd = key;
      this.store.put(b, this.store.queueDb, key, value, append);
      this.remember(b, clientId, this.store.queueDb, key);
      this.lastSeq = seq;
      return seq;
    });
  }

  refusal(): StoreError | undefined {
    return this.store.quotaRefusal();
  }

  sessionsFull(): boolean {
    return this.store.sessionsFull();
  }

  putAwaitingRelease(clientId: string, packetId: number): Promise<void> {
    return this.keyed(
      clientId,
      (b, key) => {
        this.store.put(b, this.store.releaseDb, key, MARK);
        this.remember(b, clientId, this.store.releaseDb, key);
      },
      () => seqKey(ownerPrefix(clientId), packetId),
    );
  }

  deleteAwaitingRelease(clientId: string, packetId: number): Promise<void> {
    return this.keyed(
      clientId,
      (b, key) => this.store.del(b, this.store.releaseDb, key),
      () => seqKey(ownerPrefix(clientId), packetId),
    );
  }

  putWill(clientId: string, will: PendingWill): Promise<void> {
    let value: Buffer;
    try {
      value = encodeStampedValue(will.msg, will.dueAtMs, this.store.clock);
    } catch (err) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `cannot store will: ${asError(err).message}`, { cause: err }),
      );
    }
    return this.keyed(
      clientId,
      (b, key) => {
        this.store.reserve(b, value.length);
        this.store.put(b, this.store.willDb, key, value);
        this.remember(b, clientId, this.store.willDb, key);
      },
      Buffer.from(clientId, 'utf8'),
      value.length,
    );
  }

  deleteWill(clientId: string): Promise<void> {
    return this.keyed(clientId, (b, key) => this.store.del(b, this.store.willDb, key), Buffer.from(clientId, 'utf8'));
  }

  markInFlight(clientId: string, seq: number, msg: Message, flight: FlightState): Promise<void> {
    let value: Buffer;
    let key: Buffer;
    try {
      value = encodeQueuedValue(msg, this.store.clock, flight);
      key = seqKey(this.prefixOf(clientId), seq);
    } catch (err) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }),
      );
    }
    return this.store.schedule((b) => {
      // Only while still queued. Called once the enqueue is durable, so a missing key was acknowledged or dropped
      // in an earlier batch; a drop in this batch is not visible yet. Acks of this batch run after it (finishBatch).
      if (this.droppedInBatch.has(clientId) || !this.store.queueDb.doesExist(key)) return;
      this.store.reserve(b, FLIGHT_HEADER_BYTES - PLAIN_HEADER_BYTES);
      this.store.put(b, this.store.queueDb, key, value);
    });
  }

  ack(clientId: string, seq: number): Promise<void> {
    if (this.store.isClosing) return Promise.reject(closedError());
    let key: Buffer;
    try {
      key = seqKey(this.prefixOf(clientId), seq);
    } catch (err) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `invalid client id: ${asError(err).message}`, { cause: err }),
      );
    }
    this.ackKeys.push(key);
    return this.ackFlush.wait();
  }

  /** Close: collected acks go now, so a graceful stop delivers nothing twice. */
  flushAcks(): void {
    this.ackFlush.now();
  }

  /** End of building a batch: the deletes of the collected acks, when the batch flushes them, and the seq. */
  finishBatch(b: Batch): void {
    if (this.flushingAcks) {
      for (const k of this.ackKeys) this.store.del(b, this.store.queueDb, k);
      this.ackKeys = [];
    }
    if (this.seqBefore !== undefined) this.store.putMeta(b, 'sessionSeq', this.lastSeq);
  }

  committed(): void {
    this.forgetBatch();
  }

  rollback(): void {
    if (this.seqBefore !== undefined) {
      this.lastSeq = this.seqBefore;
      this.queueEnd = this.queueEndBefore;
    }
    this.forgetBatch();
  }

  private forgetBatch(): void {
    this.seqBefore = undefined;
    this.flushingAcks = false;
    // New tables, not cleared ones: a cleared table points to its successor, a chain that would keep every batch's
    // keys alive through scavenges (docs/architecture.md#hot-path, "Garbage and the latency tail").
    if (this.droppedInBatch.size > 0) this.droppedInBatch = new Set();
    if (this.writtenInBatch.size > 0) this.writtenInBatch = new Map();
  }

  /** The key prefix of a client id, kept while the session lives: every queued message and ack needs it. */
  private prefixOf(clientId: string): Buffer {
    let prefix = this.prefixes.get(clientId);
    if (prefix === undefined) this.prefixes.set(clientId, (prefix = ownerPrefix(clientId)));
    return prefix;
  }

  private remember(b: Batch, clientId: string, db: Database<unknown, Buffer | string>, key: Buffer): void {
    b.join(this);
    let keys = this.writtenInBatch.get(clientId);
    if (keys === undefined) this.writtenInBatch.set(clientId, (keys = []));
    keys.push({ db, key });
  }

  /**
   * Builds the key up front (invalid ids and over-long keys reject at once), then schedules `run`; with
   * `newBytes`, a new value of that size that `storage.maxBytes` must admit first.
   */
  private keyed(
    clientId: string,
    run: (b: Batch, key: Buffer) => void,
    key: Buffer | (() => Buffer),
    newBytes?: number,
  ): Promise<void> {
    let k: Buffer;
    try {
      k = typeof key === 'function' ? key() : key;
    } catch (err) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `invalid client id: ${asError(err).message}`, { cause: err }),
      );
    }
    if (k.length > this.store.maxKeyBytes) return Promise.reject(keyTooLong(clientId));
    return newBytes === undefined
      ? this.store.schedule((b) => run(b, k))
      : this.store.admit(newBytes, (b) => run(b, k));
  }
}

/** The damaged records one read of a session database met: skipped, then reported together (see reportCorrupt). */
class Damaged {
  private readonly records: DamagedRecord[] = [];

  constructor(
    private readonly store: StoreWriter,
    private readonly what: string,
    /** Whether the damaged records are deleted once reported. */
    private readonly deletes = true,
  ) {}

  get count(): number {
    return this.records.length;
  }

  /** `decode(value)`, or undefined when the record is damaged (remembered for the report). */
  check<T>(db: DamagedRecord['db'], key: Buffer, value: Buffer, decode: (value: Buffer) => T): T | undefined {
    try {
      return decode(value);
    } catch (err) {
      if (!(err instanceof CorruptValueError)) throw err;
      this.records.push({ db, key });
      return undefined;
    }
  }

  report(): void {
    if (this.records.length === 0) return;
    const keys = this.records.map((r) => r.key);
    const owners = [...new Set(keys.map(keyOwner))];
    const seqs = this.what === 'queued messages' ? keys.map((k) => keySeq(k)) : undefined;
    this.store.reportCorrupt(
      this.what,
      seqs === undefined
        ? { clientIds: owners }
        : { clientIds: owners, seqFrom: Math.min(...seqs), seqTo: Math.max(...seqs) },
      this.records.length,
      this.deletes ? this.records : [],
    );
  }
}

function keyTooLong(clientId: string): StoreError {
  return new StoreError(
    'EF_STORE_WRITE',
    `client id (${Buffer.byteLength(clientId)} bytes) plus topic filter exceed the store's key limit`,
  );
}
