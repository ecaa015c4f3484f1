/**
 * One S7 CPU as one Sparkplug device (docs/configuration.md#s7-connectors). Reads its tags with the fewest Read Var
 * requests the negotiated PDU size allows (plan.ts) through the shared poll loop, decodes them (values.ts) and
 * reports samples; a CPU that stops answering or refuses service is reported lost (the runtime restarts it with
 * backoff: connectors never retry beyond the per-request `retries`).
 *
 * An item the CPU refuses (its return code: no such DB, address out of range, access denied) makes only its tags
 * bad: when it read several tags, they are read alone from the next cycle, so the refused tag is found, named in
 * the log and reported with quality BAD while its neighbours keep their values; once it reads again it rejoins.
 */
import type { Connector, ReadBack, TagDefinition, TagSample, TagSink, TagValue } from '../contract.js';
import { ConnectorError, ValueRefusedError } from '../contract.js';
import type { Logger } from '../../src/util/logger.js';
import { PolledDevice } from '../polled-device.js';
import type { PollStats } from '../polling.js';
import { tagProperties } from '../tag-properties.js';
import type { S7Address } from './address.js';
import { byteLength, describeAddress, parseAddress } from './address.js';
import type { Piece, PlannedTag, ReadRequest } from './plan.js';
import { planReads } from './plan.js';
import { LinkError, S7Link } from './s7-link.js';
import type { LinkStats, S7Target } from './s7-link.js';
import { describeItemCode, ITEM_OK, rackSlotTsap, S7Error, writeLimit } from './s7comm.js';
import type { ItemResult } from './s7comm.js';
import type { S7ConnectorConfig } from './schema.js';
import { decodeValue, EncodeError, encodeValue, sparkplugDatatype } from './values.js';

export interface S7ConnectorStats {
  readonly poll: PollStats;
  /** Read Var requests per cycle in the current plan. */
  readonly requestsPerCycle: number;
  readonly badTags: number;
  /** Requests sent, ever: reads and writes. */
  readonly requests: number;
}

export class S7Connector implements Connector {
  readonly id: string;
  readonly tags: readonly TagDefinition[];
  private readonly config: S7ConnectorConfig;
  private readonly log: Logger;
  private readonly target: S7Target;
  private readonly addresses: readonly S7Address[];
  private readonly planned: readonly PlannedTag[];
  private readonly byName: ReadonlyMap<string, number>;
  private readonly device: PolledDevice;
  private readonly counters: LinkStats = { requests: 0 };

  private plan: ReadRequest[] = [];
  /** Tags read alone: refused in an item with others (until they read again), or refused on their own (bad). */
  private readonly isolated = new Set<number>();
  private readonly bad = new Set<number>();
  private replanNeeded = false;
  private link: S7Link | undefined;

  constructor(config: S7ConnectorConfig, log: Logger) {
    this.config = config;
    this.id = config.id;
    this.log = log;
    const { rack, slot } = rackSlotDefaults(config);
    this.target = {
      host: config.host,
      port: config.port,
      localTsap: config.localTsap ?? 0x0100,
      remoteTsap: config.remoteTsap ?? rackSlotTsap(rack, slot),
      pduSize: config.pduSize,
    };
    this.addresses = config.tags.map((tag) => parseAddress(tag.address, tag.datatype));
    this.tags = config.tags.map((tag, i) => ({
      name: tag.name,
      datatype: sparkplugDatatype(this.addresses[i]),
      writable: tag.writable,
      deadband: tag.deadband,
      properties: tagProperties(tag),
    }));
    this.planned = this.addresses.map((a, index) => ({
      index,
      area: a.area,
      db: a.db,
      start: a.byte,
      end: a.byte + byteLength(a),
    }));
    this.byName = new Map(config.tags.map((tag, i) => [tag.name, i]));
    this.device = new PolledDevice(config.id, config.pollIntervalMs, log, {
      readAll: () => this.readAll(),
      beforeDeliver: () => this.replanIfNeeded(),
      where: () => this.where(),
    });
  }

  get stats(): S7ConnectorStats {
    return {
      poll: this.device.stats,
      requestsPerCycle: this.plan.length,
      badTags: this.bad.size,
      requests: this.counters.requests,
    };
  }

  readLatencyMs(p: number): number {
    return this.device.durationQuantileMs(p);
  }

  async start(sink: TagSink): Promise<void> {
    this.device.begin(sink);
    const link = new S7Link(this.target, this.counters);
    try {
      await link.open(this.config.timeoutMs);
    } catch (err) {
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `${this.where()}: ${errorMessage(err)}`);
    }
    this.link = link;
    link.onClose((err) => this.device.lost(err));
    this.plan = this.makePlan(link);
    this.log.debug({ pduSize: link.pduSize, requests: this.plan.length }, 'connected');
    const failed = await this.device.open();
    if (failed) {
      this.closeLink();
      throw new ConnectorError('EF_CONNECTOR_UNREACHABLE', this.id, `${this.where()}: ${failed.message}`);
    }
  }

  async write(name: string, value: TagValue): Promise<ReadBack | undefined> {
    const index = this.byName.get(name);
    const refuse = (why: string, retryable = false): ConnectorError =>
      new ConnectorError('EF_CONNECTOR_WRITE', this.id, `write ${name}: ${why}`, { retryable });
    if (index === undefined) throw refuse('no such tag');
    if (!this.config.tags[index].writable) throw refuse('the tag is read-only');
    const address = this.addresses[index];
    let image: Buffer | boolean;
    try {
      image = encodeValue(address, value);
    } catch (err) {
      if (err instanceof EncodeError) throw new ValueRefusedError(this.id, name, err.message);
      throw err;
    }
    const link = this.link;
    if (!this.device.isActive || !link) throw refuse('the device is not connected', true);
    // A scalar STRING is written from its length byte on: the declared maximum in the CPU stays as it is.
    const skip = typeof image !== 'boolean' && address.type === 'STRING' && !address.array ? 1 : 0;
    const data = typeof image === 'boolean' ? image : image.subarray(skip, skip === 1 ? 2 + image[1] : image.length);
    if (typeof data !== 'boolean' && data.length > writeLimit(link.pduSize)) {
      throw refuse(`${data.length} bytes do not fit one write with the PDU size the CPU granted (${link.pduSize})`);
    }
    const item = { area: address.area, db: address.db, start: address.byte + skip };
    try {
      const code = await link.write(
        item,
        typeof data === 'boolean' ? { bit: address.bit, state: data } : data,
        this.config.timeoutMs,
      );
      if (code !== ITEM_OK)
        throw refuse(`${this.where()} refused ${describeAddress(address)}: ${describeItemCode(code)}`);
    } catch (err) {
      if (err instanceof ConnectorError) throw err;
      if (err instanceof S7Error) throw refuse(`${this.where()} refused: ${err.message}`);
      throw refuse(`${this.where()}: ${errorMessage(err)}`, true);
    }
    this.device.wrote(name);
    return this.readBack(link, index, data, skip);
  }

  async stop(): Promise<void> {
    await this.device.stop();
    this.closeLink();
  }

  private closeLink(): void {
    this.link?.close();
    this.link = undefined;
  }

  private makePlan(link: S7Link): ReadRequest[] {
    const { maxItemsPerRead, maxGapBytes } = this.config;
    const limits = { pduSize: link.pduSize, maxItems: maxItemsPerRead, maxGapBytes };
    return planReads(this.planned, limits, this.isolated);
  }

  private replanIfNeeded(): void {
    if (!this.replanNeeded || !this.link) return;
    this.replanNeeded = false;
    this.plan = this.makePlan(this.link);
    this.log.debug({ requests: this.plan.length, badTags: this.bad.size }, 'read plan changed');
  }

  /** One pass over the plan: the samples, or the error that makes the CPU count as lost. */
  private async readAll(): Promise<TagSample[] | Error> {
    const samples: TagSample[] = [];
    /** Tags read in parts: their bytes, assembled; undefined once a part failed. */
    const parts = new Map<number, Buffer | undefined>();
    for (const request of this.plan) {
      const results = await this.request(request);
      if (results instanceof Error) return results;
      const now = Date.now();
      request.forEach((piece, i) => this.take(piece, results[i], now, samples, parts));
    }
    const now = Date.now();
    for (const [index, bytes] of parts) {
      samples.push(bytes ? this.goodSample(index, bytes, 0, now) : this.badSample(index, now));
    }
    return samples;
  }

  /** The samples of one item's result. */
  private take(
    piece: Piece,
    result: ItemResult,
    now: number,
    samples: TagSample[],
    parts: Map<number, Buffer | undefined>,
  ): void {
    if ('part' in piece) {
      const { index } = piece.part;
      if (!parts.has(index)) parts.set(index, Buffer.alloc(piece.part.end - piece.part.start));
      const bytes = parts.get(index);
      if (!result.ok) {
        this.refused([index], result.code);
        parts.set(index, undefined);
      } else bytes?.set(result.data, piece.offset);
      return;
    }
    if (!result.ok) {
      this.refused(
        piece.tags.map((t) => t.index),
        result.code,
      );
      for (const t of piece.tags) samples.push(this.badSample(t.index, now));
      return;
    }
    for (const t of piece.tags) samples.push(this.goodSample(t.index, result.data, t.start - piece.item.start, now));
  }

  /** Tags of a refused item: read alone from the next cycle; one refused alone is bad (logged once). */
  private refused(indexes: readonly number[], code: number): void {
    if (indexes.length > 1) {
      for (const index of indexes) this.isolated.add(index);
      this.replanNeeded = true;
      this.log.debug({ tags: indexes.length, code }, 'item refused; its tags are read alone');
      return;
    }
    const [index] = indexes;
    if (this.bad.has(index)) return;
    this.bad.add(index);
    this.isolated.add(index);
    const tag = this.config.tags[index];
    this.log.warn(
      { tag: tag.name, address: tag.address, reason: describeItemCode(code) },
      'device refuses tag; reported with bad quality',
    );
  }

  private goodSample(index: number, data: Buffer, at: number, now: number): TagSample {
    if (this.isolated.has(index)) {
      // Read fine on its own: it may join its neighbours again.
      this.isolated.delete(index);
      this.replanNeeded = true;
      if (this.bad.delete(index)) this.log.info({ tag: this.config.tags[index].name }, 'tag readable again');
    }
    const tag = this.config.tags[index];
    return { name: tag.name, value: decodeValue(this.addresses[index], data, at), timestamp: now, quality: 'good' };
  }

  private badSample(index: number, now: number): TagSample {
    // The value of a bad sample is never published (it goes out as null with quality BAD).
    return { name: this.config.tags[index].name, value: 0, timestamp: now, quality: 'bad' };
  }

  /** One Read Var with `retries` repeats on timeouts; the item results, or the error that loses the CPU. */
  private async request(request: ReadRequest): Promise<ItemResult[] | Error> {
    const link = this.link;
    if (!link) return new LinkError('not connected');
    const items = request.map((piece) => piece.item);
    let last: Error | undefined;
    for (let attempt = 0; attempt <= this.config.retries; attempt++) {
      if (!this.device.isActive) return new LinkError('stopped');
      try {
        return await link.read(items, this.config.timeoutMs);
      } catch (err) {
        last = err instanceof Error ? err : new Error(String(err));
        if (err instanceof S7Error || !link.isOpen) break; // a refusal or a closed link will not change on a repeat
      }
    }
    return last ?? new LinkError('stopped');
  }

  /** The written tag read back (one request), compared with what was written. */
  private async readBack(
    link: S7Link,
    index: number,
    written: Buffer | boolean,
    skip: number,
  ): Promise<ReadBack | undefined> {
    const address = this.addresses[index];
    const item = { area: address.area, db: address.db, start: address.byte, length: byteLength(address) };
    let data: Buffer;
    try {
      const [result] = await link.read([item], this.config.timeoutMs);
      if (!result.ok) throw new Error(describeItemCode(result.code));
      data = result.data;
    } catch (err) {
      this.log.warn(
        { tag: this.config.tags[index].name, reason: errorMessage(err) },
        'written tag could not be read back',
      );
      return undefined;
    }
    const timestamp = Date.now();
    const matches =
      typeof written === 'boolean'
        ? ((data[0] >> address.bit) & 1) === (written ? 1 : 0)
        : data.subarray(skip, skip + written.length).equals(written);
    return { value: decodeValue(address, data, 0), timestamp, matches };
  }

  /** `CPU at 10.0.0.31:102 (rack 0, slot 1)`: which device an error is about. */
  private where(): string {
    const c = this.config;
    const { rack, slot } = rackSlotDefaults(c);
    const via =
      c.remoteTsap !== undefined
        ? `TSAP 0x${c.localTsap?.toString(16).padStart(4, '0')}/0x${c.remoteTsap.toString(16).padStart(4, '0')}`
        : `rack ${rack}, slot ${slot}`;
    return `CPU at ${c.host}:${c.port} (${via})`;
  }
}

/** Rack 0, slot 1 unless set: where the CPU of an S7-1200/1500 sits. */
function rackSlotDefaults(c: S7ConnectorConfig): { rack: number; slot: number } {
  return { rack: c.rack ?? 0, slot: c.slot ?? 1 };
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
