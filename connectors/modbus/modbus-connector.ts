/**
 * One Modbus unit as one Sparkplug device. Polls its tags in coalesced blocks through the shared poll loop,
 * decodes them by datatype and byte order, and reports samples; a unit that stops answering is reported lost
 * (the runtime restarts it with backoff: connectors never retry beyond the per-request `retries`).
 *
 * Modbus exceptions 2/3 (illegal address/value) on a block split it until the refused tag is found; that tag
 * is reported bad (quality BAD) and named in the log, its neighbours keep their values, and the next plan
 * reads around it. Other exceptions make that block's tags bad for the cycle.
 */
import type { Connector, TagDefinition, TagSample, TagSink, TagValue } from '../contract.js';
import { ConnectorError } from '../contract.js';
import type { Logger } from '../../src/util/logger.js';
import { PollLoop } from '../polling.js';
import type { PollStats } from '../polling.js';
import type { Block, PlannedTag } from './blocks.js';
import { planBlocks, splitBlock } from './blocks.js';
import { ADDRESS_EXCEPTIONS, LinkError, ModbusException } from './modbus-link.js';
import type { LinkPool, LinkTarget, ModbusLink } from './modbus-link.js';
import { decodeRegisters, EncodeError, encodeCoil, encodeRegisters, sparkplugDatatype } from './registers.js';
import type { ModbusConnectorConfig, ModbusTable, ModbusTagConfig } from './schema.js';
import { widthOf } from './schema.js';

type ReadResult = readonly number[] | readonly boolean[];

export interface ModbusConnectorStats {
  readonly poll: PollStats;
  /** Blocks in the current plan = read requests per cycle. */
  readonly blocks: number;
  readonly badTags: number;
  readonly requests: number;
}

export class ModbusConnector implements Connector {
  readonly id: string;
  readonly tags: readonly TagDefinition[];
  private readonly config: ModbusConnectorConfig;
  private readonly log: Logger;
  private readonly pool: LinkPool;
  private readonly planned: readonly PlannedTag[];
  private readonly byName: ReadonlyMap<string, { tag: ModbusTagConfig; planned: PlannedTag }>;
  private readonly loop: PollLoop;

  private blocks: Block[] = [];
  /** Per table, addresses a block must not cross (learnt from exceptions). */
  private readonly cuts = new Map<ModbusTable, Set<number>>();
  /** Tags refused on their own, by index: read alone, reported bad. */
  private readonly bad = new Set<number>();
  private replanNeeded = false;
  private link: ModbusLink | undefined;
  private offClose: (() => void) | undefined;
  private sink: TagSink | undefined;
  private active = false;
  /** Set once start() resolved: only then is a failure reported through sink.lost (before, start rejects). */
  private started = false;
  private lostReported = false;
  private requests = 0;

  constructor(config: ModbusConnectorConfig, log: Logger, pool: LinkPool) {
    this.config = config;
    this.id = config.id;
    this.log = log;
    this.pool = pool;
    this.tags = config.tags.map((tag) => ({
      name: tag.name,
      datatype: sparkplugDatatype(tag),
      writable: tag.writable,
      deadband: tag.deadband,
      description: tag.description,
    }));
    this.planned = config.tags.map((tag, index) => ({
      index,
      table: tag.table,
      address: tag.address - config.addressBase,
      width: widthOf(tag),
    }));
    this.byName = new Map(config.tags.map((tag, i) => [tag.name, { tag, planned: this.planned[i] }]));
    this.blocks = this.plan();
    this.loop = new PollLoop(config.pollIntervalMs, () => this.cycle(), (err) => this.log.error({ err }, 'poll cycle failed'));
  }

  get stats(): ModbusConnectorStats {
    return { poll: this.loop.stats, blocks: this.blocks.length, badTags: this.bad.size, requests: this.requests };
  }

  /** p-quantile of recent poll-cycle durations (ms), for the benchmark. */
  cycleQuantileMs(p: number): number {
    return this.loop.durationQuantileMs(p);
  }

  async start(sink: TagSink): Promise<void> {
    if (this.active) throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, 'already started', { retryable: false });
    this.sink = sink;
    this.lostReported = false;
    const link = this.pool.acquire(this.target());
    this.link = link;
    try {
      await link.open(this.config.timeoutMs);
    } catch (err) {
      await this.releaseLink();
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `unit ${this.config.unitId}: ${errorMessage(err)}`, { cause: err });
    }
    this.offClose = link.onClose((err) => this.reportLost(err));
    this.active = true;
    // The first cycle is the reachability probe: start() resolves only once the unit answered.
    const outcome = await this.readAll();
    if (outcome instanceof Error) {
      this.active = false;
      await this.releaseLink();
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `unit ${this.config.unitId}: ${outcome.message}`, { cause: outcome });
    }
    this.started = true;
    this.deliver(outcome);
    this.loop.start(this.config.pollIntervalMs);
  }

  async write(name: string, value: TagValue): Promise<void> {
    const entry = this.byName.get(name);
    const refuse = (why: string, retryable = false, cause?: unknown): ConnectorError =>
      new ConnectorError('EF_CONNECTOR_WRITE', this.id, `write ${name}: ${why}`, { retryable, cause });
    if (!entry) throw refuse('no such tag');
    const { tag, planned } = entry;
    if (!tag.writable) throw refuse('the tag is read-only');
    const link = this.link;
    if (!this.active || !link) throw refuse('the device is not connected', true);
    const multiple = this.config.writeMultiple;
    try {
      if (tag.table === 'coil') {
        await link.writeCoil(this.config.unitId, planned.address, encodeCoil(value), multiple, this.config.timeoutMs);
      } else {
        await link.writeRegisters(this.config.unitId, planned.address, encodeRegisters(tag, value), multiple, this.config.timeoutMs);
      }
      this.requests++;
    } catch (err) {
      if (err instanceof EncodeError) throw refuse(err.message);
      if (err instanceof ModbusException) throw refuse(`the device refused: ${err.message}`, false, err);
      throw refuse(errorMessage(err), true, err);
    }
    // The next poll verifies the write; run it now so the new value shows up at once.
    this.loop.trigger();
  }

  async stop(): Promise<void> {
    this.active = false;
    this.started = false;
    await this.loop.stop();
    await this.releaseLink();
  }

  private target(): LinkTarget {
    const c = this.config;
    return c.transport === 'tcp'
      ? { transport: 'tcp', host: c.host, port: c.port }
      : { transport: 'rtu', path: c.path, baudRate: c.baudRate, parity: c.parity, dataBits: c.dataBits, stopBits: c.stopBits };
  }

  private async releaseLink(): Promise<void> {
    this.offClose?.();
    this.offClose = undefined;
    const link = this.link;
    this.link = undefined;
    if (link) await this.pool.release(link);
  }

  private plan(): Block[] {
    const c = this.config;
    const limits = {
      maxRegisters: c.maxRegistersPerRead,
      maxBits: c.maxBitsPerRead,
      maxGapRegisters: c.maxGapRegisters,
      maxGapBits: c.maxGapBits,
    };
    return planBlocks(this.planned, limits, this.cuts);
  }

  private async cycle(): Promise<void> {
    if (!this.active) return;
    const outcome = await this.readAll();
    if (!this.active) return;
    if (outcome instanceof Error) {
      this.reportLost(outcome);
      return;
    }
    this.deliver(outcome);
  }

  private deliver(samples: TagSample[]): void {
    if (this.replanNeeded) {
      this.replanNeeded = false;
      this.blocks = this.plan();
      this.log.debug({ blocks: this.blocks.length, badTags: this.bad.size }, 'read plan changed');
    }
    if (samples.length > 0) this.sink?.data(samples);
  }

  /** One pass over every block: the samples, or the error that makes the unit count as lost. */
  private async readAll(): Promise<TagSample[] | Error> {
    const samples: TagSample[] = [];
    for (const block of this.blocks) {
      if (!this.active) return new LinkError('stopped');
      const err = await this.readBlock(block, samples);
      if (err) return err;
    }
    return samples;
  }

  /** Reads one block (splitting it on address exceptions); undefined, or the error that loses the unit. */
  private async readBlock(block: Block, samples: TagSample[]): Promise<Error | undefined> {
    const result = await this.request(block);
    const now = Date.now();
    if (result instanceof ModbusException) {
      if (ADDRESS_EXCEPTIONS.has(result.code)) return this.split(block, result, samples);
      // Device trouble (busy, failure): these values are unknown this cycle, the unit is still there.
      for (const t of block.tags) samples.push(this.badSample(t, now));
      this.log.debug({ err: result, table: block.table, address: block.address }, 'block refused');
      return undefined;
    }
    if (result instanceof Error) return result;
    for (const t of block.tags) {
      if (this.bad.delete(t.index)) {
        this.log.info({ tag: this.config.tags[t.index].name }, 'tag readable again');
        this.uncut(t);
      }
      samples.push({ name: this.config.tags[t.index].name, value: this.decode(t, block, result), timestamp: now, good: true });
    }
    return undefined;
  }

  private async split(block: Block, err: ModbusException, samples: TagSample[]): Promise<Error | undefined> {
    const halves = splitBlock(block);
    const now = Date.now();
    if (!halves) {
      for (const t of block.tags) {
        samples.push(this.badSample(t, now));
        if (this.bad.has(t.index)) continue;
        this.bad.add(t.index);
        this.cutAround(t);
        const tag = this.config.tags[t.index];
        this.log.warn(
          { tag: tag.name, table: tag.table, address: tag.address, exception: err.code, reason: err.message },
          'device refuses tag; reported with bad quality',
        );
      }
      return undefined;
    }
    const [left, right] = halves;
    const badBefore = this.bad.size;
    const leftErr = await this.readBlock(left, samples);
    if (leftErr) return leftErr;
    const rightErr = await this.readBlock(right, samples);
    if (rightErr) return rightErr;
    // Both halves read fine (no bad tag explains the refusal): the gap between them is unreadable.
    if (this.bad.size === badBefore) this.addCut(block.table, right.address);
    this.replanNeeded = true;
    return undefined;
  }

  /** One read with `retries` repeats on timeouts; a Modbus exception, a link error, or the data. */
  private async request(block: Block): Promise<ReadResult | ModbusException | Error> {
    const link = this.link;
    if (!link) return new LinkError('not connected');
    let last: Error | undefined;
    for (let attempt = 0; attempt <= this.config.retries; attempt++) {
      if (!this.active) return new LinkError('stopped');
      try {
        this.requests++;
        return await link.read(this.config.unitId, block.table, block.address, block.count, this.config.timeoutMs);
      } catch (err) {
        if (err instanceof ModbusException) return err;
        last = err instanceof Error ? err : new Error(String(err));
        if (!link.isOpen) break; // a closed link will not answer a repeat either
      }
    }
    return last ?? new LinkError('stopped');
  }

  private decode(t: PlannedTag, block: Block, data: ReadResult): TagValue {
    const tag = this.config.tags[t.index];
    const offset = t.address - block.address;
    if (tag.table === 'coil' || tag.table === 'discrete') return Boolean(data[offset]);
    return decodeRegisters(tag, data as readonly number[], offset);
  }

  private badSample(t: PlannedTag, now: number): TagSample {
    const tag = this.config.tags[t.index];
    // The value of a bad sample is never published (it goes out as null with quality BAD).
    return { name: tag.name, value: 0, timestamp: now, good: false };
  }

  private addCut(table: ModbusTable, address: number): void {
    let set = this.cuts.get(table);
    if (!set) {
      set = new Set();
      this.cuts.set(table, set);
    }
    set.add(address);
  }

  private cutAround(t: PlannedTag): void {
    this.addCut(t.table, t.address);
    this.addCut(t.table, t.address + t.width);
    this.replanNeeded = true;
  }

  private uncut(t: PlannedTag): void {
    const set = this.cuts.get(t.table);
    set?.delete(t.address);
    set?.delete(t.address + t.width);
    this.replanNeeded = true;
  }

  private reportLost(err: Error): void {
    if (!this.started || this.lostReported || !this.sink) {
      this.active = false;
      return;
    }
    this.lostReported = true;
    this.active = false;
    this.log.debug({ err }, 'unit lost');
    this.sink.lost(new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `unit ${this.config.unitId}: ${err.message}`, { cause: err }));
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
