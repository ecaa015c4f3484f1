/**
 * What every polling connector does around its own reads (docs/architecture.md#connectors): the shared poll loop,
 * the first pass as the reachability probe of `start()`, a lost device reported once and only once `start()`
 * resolved (before, `start()` rejects instead), and the samples of a tag written while a cycle was reading left
 * out of that cycle (the write's read-back is newer). The connector brings the reads; this owns the lifecycle.
 */
import type { Logger } from '../src/util/logger.js';
import { ConnectorError } from './contract.js';
import type { TagSample, TagSink } from './contract.js';
import { PollLoop } from './polling.js';
import type { PollStats } from './polling.js';

export interface PolledReads {
  /** One pass over the device: its samples, or the error that makes it count as lost. */
  readAll(): Promise<TagSample[] | Error>;
  /** Before each delivery: the connector's chance to change its read plan for the next pass. */
  beforeDeliver(): void;
  /** `unit 1 at tcp://10.0.0.21:502`: which device an error is about. */
  where(): string;
}

export class PolledDevice {
  private readonly loop: PollLoop;
  private sink: TagSink | undefined;
  private active = false;
  /** Set once start() resolved: only then is a failure reported through sink.lost (before, start rejects). */
  private started = false;
  private lostReported = false;
  /** A poll cycle is reading; tags written meanwhile are left out of its samples (their read-back is newer). */
  private polling = false;
  private readonly writtenDuringCycle = new Set<string>();

  constructor(
    private readonly id: string,
    private readonly intervalMs: number,
    private readonly log: Logger,
    private readonly reads: PolledReads,
  ) {
    this.loop = new PollLoop(
      intervalMs,
      () => this.cycle(),
      (err) => this.log.error({ err }, 'poll cycle failed'),
    );
  }

  /** Between open() and stop() (or the loss): reads may run. */
  get isActive(): boolean {
    return this.active;
  }

  get stats(): PollStats {
    return this.loop.stats;
  }

  durationQuantileMs(p: number): number {
    return this.loop.durationQuantileMs(p);
  }

  /** The start of `start()`, before the connector connects; refuses a second start. */
  begin(sink: TagSink): void {
    if (this.active)
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, 'already started', { retryable: false });
    this.sink = sink;
    this.lostReported = false;
  }

  /**
   * Connected: reads the device once (start() resolves only once it answered), delivers that and starts polling.
   * Resolves with the error of that first pass instead, when it failed (the connector disconnects and rejects).
   */
  async open(): Promise<Error | undefined> {
    this.active = true;
    const outcome = await this.reads.readAll();
    if (outcome instanceof Error) {
      this.active = false;
      return outcome;
    }
    this.started = true;
    this.deliver(outcome);
    this.loop.start(this.intervalMs);
    return undefined;
  }

  /** The device is lost (a failed pass, a closed connection): reported once, polling ends. */
  lost(err: Error): void {
    this.active = false;
    if (!this.started || this.lostReported || !this.sink) return;
    this.lostReported = true;
    this.log.debug({ err }, 'device lost');
    this.sink.lost(new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `${this.reads.where()}: ${err.message}`));
  }

  /** A tag was written: a cycle under way may have read it before the write, so its sample is left out. */
  wrote(tag: string): void {
    if (this.polling) this.writtenDuringCycle.add(tag);
  }

  /** Idempotent; waits for a cycle in progress. */
  async stop(): Promise<void> {
    this.active = false;
    this.started = false;
    await this.loop.stop();
  }

  private async cycle(): Promise<void> {
    if (!this.active) return;
    let outcome: TagSample[] | Error;
    this.polling = true;
    try {
      outcome = await this.reads.readAll();
    } finally {
      this.polling = false;
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may have run during the read
    if (!this.active) return;
    if (outcome instanceof Error) {
      this.lost(outcome);
      return;
    }
    this.deliver(outcome);
  }

  private deliver(samples: readonly TagSample[]): void {
    this.reads.beforeDeliver();
    if (this.writtenDuringCycle.size > 0) {
      const written = this.writtenDuringCycle;
      samples = samples.filter((sample) => !written.has(sample.name));
      written.clear();
    }
    if (samples.length > 0) this.sink?.data(samples);
  }
}
