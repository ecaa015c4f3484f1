/** Retained messages in the LMDB store. */
import type { Message } from '../../protocol/message.js';
import { asError, StoreError } from '../../util/errors.js';
import { CorruptValueError, decodePlainValue, encodePlainValue } from '../codec.js';
import type { RetainedStore } from '../types.js';
import type { DamagedRecord, LmdbStoreImpl } from './store.js';

export class LmdbRetainedStore implements RetainedStore {
  private readonly store: LmdbStoreImpl;
  private n: number;

  constructor(store: LmdbStoreImpl) {
    this.store = store;
    this.n = (store.retainedDb.getStats() as { entryCount: number }).entryCount;
  }

  loadAll(): Iterable<Message> {
    const out: Message[] = [];
    const damaged: DamagedRecord[] = [];
    for (const { key, value } of this.store.retainedDb.getRange({ snapshot: false })) {
      try {
        out.push(decodePlainValue(value));
      } catch (err) {
        if (!(err instanceof CorruptValueError)) throw err;
        damaged.push({ db: this.store.retainedDb, key });
      }
    }
    if (damaged.length > 0) {
      this.n -= damaged.length;
      this.store.reportCorrupt('retained messages', { topics: damaged.map((d) => d.key.toString('utf8')) }, damaged.length, damaged);
    }
    return out;
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
        value = encodePlainValue(msg);
      } catch (err) {
        return Promise.reject(new StoreError('EF_STORE_WRITE', `cannot store message: ${asError(err).message}`, { cause: err }));
      }
    }
    return this.store.schedule((b) => {
      const existed = b.retainedExists.get(msg.topic) ?? this.store.retainedDb.doesExist(key);
      if (value === undefined) {
        if (!existed) return;
        this.store.del(b, this.store.retainedDb, key);
        b.retainedCountBefore ??= this.n;
        this.n--;
        b.retainedExists.set(msg.topic, false);
      } else {
        this.store.reserve(b, value.length);
        this.store.put(b, this.store.retainedDb, key, value);
        b.retainedCountBefore ??= this.n;
        if (!existed) this.n++;
        b.retainedExists.set(msg.topic, true);
      }
    });
  }

  get count(): number {
    return this.n;
  }

  setCount(n: number): void {
    this.n = n;
  }
}
