/**
 * Sparkplug traffic like a reference site's, for the journal's size (bench/journal-size.ts and its test): 5,000
 * tags on 100 devices of 50, DDATA messages of a whole device's 50 values each (one poll), random walks: 60 %
 * Float, 30 % Int32, 10 % Boolean, every metric with its alias and the poll's timestamp. About 800 bytes a payload.
 * Deterministic (a seeded generator), so sizes repeat from run to run. `bufferTraffic` appends it to an outbox on
 * a simulated clock, one message per batch, as a gateway at the site's rate does, without taking that long.
 */
import type { Message } from '../../src/protocol/message.js';
import { encodePayload, type MetricOut } from '../../src/sparkplug/payload.js';
import type { Outbox } from '../../src/store/types.js';
import { SteadyClock } from '../../src/util/clock.js';

export const REFERENCE_DEVICES = 100;
export const VALUES_PER_MESSAGE = 50;

interface Tag {
  readonly type: 'Float' | 'Int32' | 'Boolean';
  value: number | boolean;
}

export class SparkplugTraffic {
  private seed: number;
  private readonly tags: Tag[] = [];
  /** The edge node's seq, over all its messages. */
  private seq = 0;
  private device = 0;

  constructor(seed = 1) {
    this.seed = seed;
    for (let i = 0; i < REFERENCE_DEVICES * VALUES_PER_MESSAGE; i++) {
      const kind = i % 10;
      this.tags.push(
        kind < 6
          ? { type: 'Float', value: this.random() * 100 }
          : kind < 9
            ? { type: 'Int32', value: Math.floor(this.random() * 1000) }
            : { type: 'Boolean', value: this.random() < 0.5 },
      );
    }
  }

  /** The next device's DDATA, polled at `timestampMs`: every tag of it moved one step. */
  next(timestampMs: number): Message {
    const device = this.device;
    this.device = (device + 1) % REFERENCE_DEVICES;
    const metrics: MetricOut[] = [];
    for (let k = 0; k < VALUES_PER_MESSAGE; k++) {
      const alias = device * VALUES_PER_MESSAGE + k;
      const tag = this.tags[alias];
      if (tag.type === 'Float') tag.value = Math.fround((tag.value as number) + this.random() - 0.5);
      else if (tag.type === 'Int32') tag.value = (tag.value as number) + Math.round((this.random() - 0.5) * 4);
      else if (this.random() < 0.1) tag.value = !(tag.value as boolean);
      metrics.push({ alias, timestamp: timestampMs, valueType: tag.type, value: tag.value });
    }
    const seq = this.seq;
    this.seq = (seq + 1) % 256;
    return {
      topic: `spBv1.0/plant/DDATA/edge-1/device-${String(device).padStart(3, '0')}`,
      payload: encodePayload({ timestamp: timestampMs, seq, metrics }),
      qos: 1,
      retain: false,
      origin: 'sparkplug',
    };
  }

  /** A linear congruential generator: the same walk every run. */
  private random(): number {
    this.seed = (Math.imul(this.seed, 1103515245) + 12345) >>> 0;
    return this.seed / 2 ** 32;
  }
}

/** A store clock the caller moves (`atMs`). */
export class SimulatedClock extends SteadyClock {
  atMs = Date.now();
  override nowMs(): number {
    return this.atMs;
  }
}

/** Appends `messages` of `traffic` to `outbox`, `rate` a second by `clock`, each awaited (a batch each). */
export async function bufferTraffic(
  outbox: Outbox,
  clock: SimulatedClock,
  traffic: SparkplugTraffic,
  messages: number,
  rate: number,
): Promise<void> {
  for (let i = 0; i < messages; i++) {
    clock.atMs += 1000 / rate;
    await outbox.append(traffic.next(clock.atMs));
  }
}
