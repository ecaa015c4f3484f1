/** Retained messages in the LMDB store. */
import type { Message } from '../../protocol/message.js';
import { asError, StoreError } from '../../util/errors.js';
import { CorruptValueError, decodePlainValue, encodePlainValue } from '../codec.js';
import { retainedMeta, type RetainedMeta, type RetainedStore } from '../types.js';
import type { Batch, BatchMember, DamagedRecord, StoreWriter } from './store-writer.js';

export class LmdbRetainedStore implements RetainedStore, BatchMember {
  private readonly store: StoreWriter;
  private n: number;
  // Per batch (see BatchMember).
  /** The count before the batch changed it, restored if it fails. */
  private countBefore: number | undefined;
  /** Whether a retained topic exists after the writes so far in this batch. */
  private existsInBatch = new Map<string, boolean>();

  constructor(store: StoreWriter) {
    this.store = store;
    this.n = (store.retainedDb.getStats() as { entryCount: number }).entryCount;
  }

  /**
   * The index of every retained message, checked: payloads are read through the memory map for their checksum but
   * not copied, so a restart costs memory for topics, not payloads (docs/architecture.md#retained-messages).
   */
  loadIndex(): Iterable<RetainedMeta> {
    const db = this.store.retainedDb;
    const out: RetainedMeta[] = [];
    const damaged: DamagedRecord[] = [];
    for (const key of db.getKeys({ snapshot: false })) {
      // The fast read returns the map's (or a reused) buffer: nothing of it is kept past this line's decode.
      const value = db.getBinaryFast(key);
      if (value === undefined) continue;
      try {
        out.push(retainedMeta(decodePlainValue(value, this.store.clock)));
      } catch (err) {
        if (!(err instanceof CorruptValueError)) throw err;
        damaged.push({ db, key });
      }
    }
    this.reportDamaged(damaged);
    return out;
  }

  /** Reads one retained message (a copy); a damaged one is reported, deleted, and not returned. */
  get(topic: string): Message | undefined {
    const key = Buffer.from(topic, 'utf8');
    const value = this.store.retainedDb.get(key);
    if (value === undefined) return undefined;
    try {
      return decodePlainValue(value, this.store.clock);
    } catch (err) {
      if (!(err instanceof CorruptValueError)) throw err;
      this.reportDamaged([{ db: this.store.retainedDb, key }]);
      return undefined;
    }
  }

  private reportDamaged(damaged: DamagedRecord[]): void {
    if (damaged.length === 0) return;
    this.n -= damaged.length;
    this.store.reportCorrupt(
      'retained messages',
      { topics: damaged.map((d) => d.key.toString('utf8')) },
      damaged.length,
      damaged,
    );
  }

  set(msg: Message): Promise<void> {
    const key = Buffer.from(msg.topic, 'utf8');
    if (key.length > this.store.maxKeyBytes) {
      return Promise.reject(
        new StoreError('EF_STORE_WRITE', `retained topic of ${key.length} bytes exceeds the store's key limit`),
      );
    }
    let value: Buffer | undefined;
    if (msg.payload.length > 0) {
      try {
        value = encodePlainValue(msg, this.store.clock);
      } catch (err) {
        return Promise.reject(
          new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }),
        );
      }
    }
    const write = (b: Batch): void => {
      const existed = this.existsInBatch.get(msg.topic) ?? this.store.retainedDb.doesExist(key);
      if (value === undefined) {
        if (!existed) return;
        this.store.del(b, this.store.retainedDb, key);
        this.changed(b);
        this.n--;
        this.existsInBatch.set(msg.topic, false);
      } else {
        this.store.reserve(b, value.length);
        this.store.put(b, this.store.retainedDb, key, value);
        this.changed(b);
        if (!existed) this.n++;
        this.existsInBatch.set(msg.topic, true);
      }
    };
    return value === undefined ? this.store.schedule(write) : this.store.admit(value.length, write);
  }

  /** A deletion is never refused; a new retained message is while the store is at `storage.maxBytes`. */
  refusal(msg: Message): StoreError | undefined {
    return msg.payload.length === 0 ? undefined : this.store.quotaRefusal();
  }

  /** Joins the batch, keeping the count its rollback restores. */
  private changed(b: Batch): void {
    if (b.join(this)) this.countBefore = this.n;
  }

  /** Nothing is held back until the end of a batch: every write went in as it ran. */
  finishBatch(): void {}

  committed(): void {
    this.forgetBatch();
  }

  rollback(): void {
    if (this.countBefore !== undefined) this.n = this.countBefore;
    this.forgetBatch();
  }

  private forgetBatch(): void {
    this.countBefore = undefined;
    // A new table, not a cleared one (see LmdbSessionStore.forgetBatch).
    if (this.existsInBatch.size > 0) this.existsInBatch = new Map();
  }

  get count(): number {
    return this.n;
  }
}
