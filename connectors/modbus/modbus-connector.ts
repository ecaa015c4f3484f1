/**
 * One Modbus unit as one Sparkplug device. Polls its tags in coalesced blocks through the shared poll loop,
 * decodes them by datatype and byte order, and reports samples; a unit that stops answering is reported lost
 * (the runtime restarts it with backoff: connectors never retry beyond the per-request `retries`).
 *
 * Modbus exceptions 2/3 (illegal address/value) on a block split it until the refused tag is found; that tag
 * is reported bad (quality BAD) and named in the log, its neighbours keep their values, and the next plan
 * reads around it. Other exceptions make that block's tags bad for the cycle.
 */
import type { Connector, ReadBack, TagDefinition, TagSample, TagSink, TagValue } from '../contract.js';
import { ConnectorError, ValueRefusedError } from '../contract.js';
import type { Logger } from '../../src/util/logger.js';
import { PolledDevice } from '../polled-device.js';
import type { PollStats } from '../polling.js';
import { tagProperties } from '../tag-properties.js';
import type { Block, PlannedTag } from './blocks.js';
import { planBlocks, splitBlock } from './blocks.js';
import { ADDRESS_EXCEPTIONS, LinkError, linkKey, ModbusException } from './modbus-link.js';
import type { LinkPool, LinkTarget, ModbusLink } from './modbus-link.js';
import { decodeRegisters, EncodeError, encodeCoil, encodeRegisters, sparkplugDatatype } from './registers.js';
import type { ModbusConnectorConfig, ModbusTable, ModbusTagConfig } from './schema.js';
import { describeSpan, overlappingTags, widthOf } from './schema.js';

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
  private readonly device: PolledDevice;

  private blocks: Block[] = [];
  /** Per table, addresses a block must not cross (learnt from exceptions). */
  private readonly cuts = new Map<ModbusTable, Set<number>>();
  /** Tags refused on their own, by index: read alone, reported bad. */
  private readonly bad = new Set<number>();
  private replanNeeded = false;
  private link: ModbusLink | undefined;
  private offClose: (() => void) | undefined;
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
      properties: tagProperties(tag),
    }));
    this.planned = config.tags.map((tag, index) => ({
      index,
      table: tag.table,
      address: tag.address - config.addressBase,
      width: widthOf(tag),
    }));
    this.byName = new Map(config.tags.map((tag, i) => [tag.name, { tag, planned: this.planned[i] }]));
    for (const [i, j] of overlappingTags(config.tags)) {
      const [a, b] = [config.tags[i], config.tags[j]];
      log.warn(
        { tags: [a.name, b.name], at: [describeSpan(a), describeSpan(b)] },
        'tags overlap: both read the shared registers, each its own way',
      );
    }
    this.blocks = this.plan();
    this.device = new PolledDevice(config.id, config.pollIntervalMs, log, {
      readAll: () => this.readAll(),
      beforeDeliver: () => this.replanIfNeeded(),
      where: () => this.where(),
    });
  }

  get stats(): ModbusConnectorStats {
    return { poll: this.device.stats, blocks: this.blocks.length, badTags: this.bad.size, requests: this.requests };
  }

  readLatencyMs(p: number): number {
    return this.device.durationQuantileMs(p);
  }

  async start(sink: TagSink): Promise<void> {
    this.device.begin(sink);
    const link = this.pool.acquire(this.target());
    this.link = link;
    try {
      await link.open(this.config.timeoutMs);
    } catch (err) {
      await this.releaseLink();
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `${this.where()}: ${errorMessage(err)}`);
    }
    this.offClose = link.onClose((err) => this.device.lost(err));
    const failed = await this.device.open();
    if (failed) {
      await this.releaseLink();
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `${this.where()}: ${failed.message}`);
    }
  }

  async write(name: string, value: TagValue): Promise<ReadBack | undefined> {
    const entry = this.byName.get(name);
    const refuse = (why: string, retryable = false): ConnectorError =>
      new ConnectorError('EF_CONNECTOR_WRITE', this.id, `write ${name}: ${why}`, { retryable });
    if (!entry) throw refuse('no such tag');
    const { tag, planned } = entry;
    if (!tag.writable) throw refuse('the tag is read-only');
    let image: boolean | number[];
    try {
      image = tag.table === 'coil' ? encodeCoil(value) : encodeRegisters(tag, value);
    } catch (err) {
      if (err instanceof EncodeError) throw new ValueRefusedError(this.id, name, err.message);
      throw err;
    }
    const link = this.link;
    if (!this.device.isActive || !link) throw refuse('the device is not connected', true);
    const { unitId, timeoutMs, writeMultiple } = this.config;
    try {
      this.requests++;
      if (typeof image === 'boolean') await link.writeCoil(unitId, planned.address, image, writeMultiple, timeoutMs);
      else await link.writeRegisters(unitId, planned.address, image, writeMultiple, timeoutMs);
    } catch (err) {
      if (err instanceof ModbusException) throw refuse(`${this.where()} refused: ${err.message}`);
      throw refuse(`${this.where()}: ${errorMessage(err)}`, true);
    }
    this.device.wrote(name);
    return this.readBack(link, planned, image);
  }

  async stop(): Promise<void> {
    await this.device.stop();
    await this.releaseLink();
  }

  private target(): LinkTarget {
    const c = this.config;
    return c.transport === 'tcp'
      ? { transport: 'tcp', host: c.host, port: c.port }
      : {
          transport: 'rtu',
          path: c.path,
          baudRate: c.baudRate,
          parity: c.parity,
          dataBits: c.dataBits,
          stopBits: c.stopBits,
        };
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

  private replanIfNeeded(): void {
    if (!this.replanNeeded) return;
    this.replanNeeded = false;
    this.blocks = this.plan();
    this.log.debug({ blocks: this.blocks.length, badTags: this.bad.size }, 'read plan changed');
  }

  /** One pass over every block: the samples, or the error that makes the unit count as lost. */
  private async readAll(): Promise<TagSample[] | Error> {
    const samples: TagSample[] = [];
    for (const block of this.blocks) {
      if (!this.device.isActive) return new LinkError('stopped');
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
      samples.push({
        name: this.config.tags[t.index].name,
        value: this.decode(t, result, t.address - block.address),
        timestamp: now,
        quality: 'good',
      });
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
      if (!this.device.isActive) return new LinkError('stopped');
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

  /** The tag's value from `data`, where its first register (bit) is at `offset`. */
  private decode(t: PlannedTag, data: ReadResult, offset: number): TagValue {
    const tag = this.config.tags[t.index];
    if (tag.table === 'coil' || tag.table === 'discrete') return Boolean(data[offset]);
    return decodeRegisters(tag, data as readonly number[], offset);
  }

  private badSample(t: PlannedTag, now: number): TagSample {
    const tag = this.config.tags[t.index];
    // The value of a bad sample is never published (it goes out as null with quality BAD).
    return { name: tag.name, value: 0, timestamp: now, quality: 'bad' };
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

  /** The written tag read back (one request), compared with what was written by its raw image. */
  private async readBack(
    link: ModbusLink,
    t: PlannedTag,
    written: boolean | readonly number[],
  ): Promise<ReadBack | undefined> {
    const { unitId, timeoutMs } = this.config;
    let data: ReadResult;
    try {
      this.requests++;
      data = await link.read(unitId, t.table, t.address, t.width, timeoutMs);
    } catch (err) {
      this.log.warn(
        { tag: this.config.tags[t.index].name, reason: errorMessage(err) },
        'written tag could not be read back',
      );
      return undefined;
    }
    const timestamp = Date.now();
    const matches =
      typeof written === 'boolean' ? Boolean(data[0]) === written : written.every((reg, i) => reg === data[i]);
    return { value: this.decode(t, data, 0), timestamp, matches };
  }

  /** `unit 1 at tcp://10.0.0.21:502`: which device an error is about. */
  private where(): string {
    return `unit ${this.config.unitId} at ${linkKey(this.target())}`;
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
