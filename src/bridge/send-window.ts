/**
 * A bridge's send window on the current connection (docs/architecture.md#send-window): the outbox entries in
 * flight, the outbox readers (one in order, two for a live-first drain), the sent QoS 0 entries waiting for a ping
 * that confirms them (docs/architecture.md#qos-0-confirmation), and the QoS 1/2 entries to send again or release
 * after a reconnect. The bridge decides what an entry becomes upstream and what its outcome means; this class
 * keeps track of what is out.
 */
import type { PropertyTail } from '../protocol/codec.js';
import type { Message, QoS } from '../protocol/message.js';
import type { Outbox, OutboxEntry } from '../store/types.js';
import { outboxPacketId } from './packet-ids.js';
import type { PublishFlow, PublishResult } from './uplink-connection.js';
import type { Uplink } from './uplink.js';
import { IdTable } from '../util/id-table.js';

/** What an in-flight entry reports to its bridge. */
export interface FlightOwner {
  onResult(flight: Inflight, result: PublishResult): void;
  /** QoS 2: records that the broker received the entry (PUBREC) before the PUBREL goes. */
  markReleased(seq: number): Promise<void>;
  /** A sent QoS 0 entry provably reached the broker. */
  onConfirmed(flight: Inflight): void;
}

/**
 * An outbox entry sent on the current connection and not yet acknowledged or confirmed; for QoS 1/2 it is also
 * the flow's sender that the uplink reports to (one object per message, no closures).
 */
export class Inflight implements PublishFlow {
  /** Set once written: the uplink's send index of its PUBLISH or PUBREL. */
  sendIndex = 0;

  constructor(
    private readonly owner: FlightOwner,
    readonly seq: number,
    readonly qos: QoS,
    /** The entry's message as journaled (before any hook rewrote it): what a refusal keeps as a dead letter. */
    readonly msg: Message | undefined,
    /** Journaled before this connection came up (a live-first drain caps these at its share of the window). */
    readonly backlog: boolean,
    /** When the entry was journaled (steady clock): the live latency. */
    readonly appendedAtMs: number,
    /** A PUBREL that frees the packet id of an entry dropped unsent (see releaseAbandoned): nothing to count. */
    readonly abandoned = false,
  ) {}

  result(result: PublishResult): void {
    this.owner.onResult(this, result);
  }

  /** PUBREL only once the receipt is durable: from then on, also after a crash, the entry is only released. */
  received(): Promise<void> {
    return this.owner.markReleased(this.seq);
  }
}

/** How long unconfirmed QoS 0 entries may wait for a confirming ping when the window is not full. */
const QOS0_CONFIRM_DELAY_MS = 250;
/** Peek at most this many entries per outbox read. */
const PEEK_BATCH = 256;

/**
 * One read position in the outbox on the current connection: the entries after its cursor and below `end`, read
 * ahead in chunks, so that there is one LMDB read per chunk rather than one per acknowledgement.
 */
export class OutboxReader {
  /** Last seq handled; undefined: start at the head. */
  private cursor: number | undefined;
  private ahead: readonly OutboxEntry[] = [];
  private aheadHead = 0;
  /** The outbox's dropped total when `ahead` was read. */
  private aheadDropped = 0;
  /** Seqs from here on are not this reader's. */
  private end = Infinity;
  /** Every entry below `end` was handled. */
  private finished = true;

  constructor(private readonly outbox: Outbox) {}

  /** Reads the entries after `after` (undefined: from the head) and below `end`. */
  start(after: number | undefined, end = Infinity): void {
    this.cursor = after;
    this.end = end;
    this.ahead = [];
    this.aheadHead = 0;
    this.finished = (after ?? 0) + 1 >= end; // seqs start at 1
  }

  /** Reads nothing more until the next `start`. */
  stop(): void {
    this.start(undefined, 0);
  }

  get done(): boolean {
    return this.finished;
  }

  /**
   * The next entry, undefined when there is none (yet). Read again when the outbox dropped entries (`dropped`,
   * its total: limits, expiry), which are the oldest, i.e. the ones read ahead.
   */
  next(dropped: number): OutboxEntry | undefined {
    if (this.finished) return undefined;
    if (this.aheadHead >= this.ahead.length || dropped !== this.aheadDropped) {
      this.ahead = this.outbox.peek(PEEK_BATCH, this.cursor);
      this.aheadHead = 0;
      this.aheadDropped = dropped;
    }
    const entry = this.ahead[this.aheadHead] as OutboxEntry | undefined;
    if (entry === undefined || entry.seq < this.end) return entry;
    this.finished = true;
    return undefined;
  }

  /** The entry was handled (sent, skipped or dropped): the cursor moves past it. */
  advance(entry: OutboxEntry): void {
    this.cursor = entry.seq;
    this.aheadHead++;
    if (entry.seq + 1 >= this.end) this.finished = true;
  }
}

export class SendWindow {
  /** Sent and not yet acknowledged/confirmed, by seq, in send order. */
  private readonly inflight = new IdTable<Inflight>();
  private qosInflight = 0;
  /** Unconfirmed QoS 0 sends in send order; `q0Head` is the first live one. */
  private q0: Inflight[] = [];
  private q0Head = 0;
  /** Backlog entries in flight (live-first drain), and those of them at QoS 1/2. */
  private backlogInflight = 0;
  private backlogQosInflight = 0;
  /**
   * The oldest QoS 0 backlog entry sent that no ping covers yet, and how many were sent since (it included): a
   * backlog asks for its confirmation once half its share waits for one (see `requestConfirmation`).
   */
  private unpingedBacklogQ0: Inflight | undefined;
  private unpingedBacklogQ0Count = 0;
  /** Live-first: half the backlog's share of the window (see `unpinged`); 0 in order. */
  private backlogPingEvery = 0;
  /** In order: the whole outbox. Live-first: what was journaled after the connection came up. */
  readonly live: OutboxReader;
  /** Live-first: what was journaled before the connection came up; done at once in order. */
  readonly backlog: OutboxReader;
  /**
   * QoS 1/2 entries unacknowledged when a connection dropped, seq to QoS: re-sent with DUP on a resumed session.
   * One that leaves the outbox unsent meanwhile (limits, expiry) is released instead (see releaseAbandoned).
   */
  private readonly resending = new Map<number, QoS>();
  private confirmTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly outbox: Outbox,
    private readonly uplink: Uplink,
    private readonly owner: FlightOwner,
    /** At most this many entries unacknowledged (`inflight`). */
    private readonly limit: number,
  ) {
    this.live = new OutboxReader(outbox);
    this.backlog = new OutboxReader(outbox);
  }

  /** Entries in flight. */
  get size(): number {
    return this.inflight.size;
  }

  get full(): boolean {
    return this.inflight.size >= this.limit;
  }

  /** Whether another QoS 1/2 publish would exceed the broker's Receive Maximum. */
  qosFull(receiveMaximum: number): boolean {
    return this.qosInflight >= receiveMaximum;
  }

  /**
   * Whether the backlog has its `share` of the window in flight. The broker's Receive Maximum bounds QoS 1/2 only
   * [MQTT-3.3.4-9] (`backlogQosFull`): a QoS 0 backlog (Sparkplug data) may use its share of the whole window.
   */
  backlogFull(share: number): boolean {
    return this.backlogInflight >= shareOf(share, this.limit);
  }

  /** Whether the backlog has its `share` of the broker's Receive Maximum in QoS 1/2 flows. */
  backlogQosFull(share: number, receiveMaximum: number): boolean {
    return this.backlogQosInflight >= shareOf(share, Math.min(this.limit, receiveMaximum));
  }

  has(seq: number): boolean {
    return this.inflight.has(seq);
  }

  /** A new connection: without the session the broker kept, nothing goes again as a re-send. */
  connected(sessionPresent: boolean): void {
    if (!sessionPresent) this.resending.clear();
  }

  /** The connection dropped: unacknowledged QoS 1/2 may have reached the broker, so they go again with DUP. */
  disconnected(): void {
    this.inflight.forEach((rec) => {
      if (rec.qos > 0) this.resending.set(rec.seq, rec.qos);
    });
  }

  /**
   * Forgets this connection's window (not the entries to send again) and reads the outbox from its head again:
   * in order with one reader; live-first with two, split at the outbox's tail now (docs/architecture.md#live-first).
   */
  reset(liveFirst = false, backlogShare = 0): void {
    this.backlogPingEvery = liveFirst ? Math.max(1, Math.floor(shareOf(backlogShare, this.limit) / 2)) : 0;
    this.inflight.clear();
    this.qosInflight = 0;
    this.backlogInflight = 0;
    this.backlogQosInflight = 0;
    this.unpingedBacklogQ0 = undefined;
    this.unpingedBacklogQ0Count = 0;
    this.q0 = [];
    this.q0Head = 0;
    if (liveFirst) {
      const tail = this.outbox.tailSeq;
      this.backlog.start(undefined, tail + 1);
      this.live.start(tail);
    } else {
      this.backlog.stop();
      this.live.start(undefined);
    }
    clearTimeout(this.confirmTimer);
    this.confirmTimer = undefined;
  }

  /**
   * Publishes `msg` (the entry as it goes upstream) under the entry's packet id, with DUP if it may have reached
   * the broker on an earlier connection, and `stamp`'s properties for the entry's seq (MQTT 5). QoS 1/2 records
   * keep the journaled message: a refusal (PUBACK/PUBREC >= 0x80) keeps it as a dead letter. QoS 0 ones wait for
   * a confirming ping and need none.
   */
  send(entry: OutboxEntry, msg: Message, stamp: PropertyTail | undefined, backlog: boolean): void {
    const dup = this.resending.delete(entry.seq);
    const rec = new Inflight(
      this.owner,
      entry.seq,
      msg.qos,
      msg.qos > 0 ? entry.msg : undefined,
      backlog,
      entry.appendedAtMs,
    );
    if (backlog) this.backlogInflight++;
    if (backlog && msg.qos > 0) this.backlogQosInflight++;
    rec.sendIndex =
      msg.qos === 0
        ? this.uplink.publish(msg, undefined, false, undefined, stamp, entry.seq)
        : this.uplink.publish(msg, outboxPacketId(entry.seq), dup, rec, stamp, entry.seq);
    this.inflight.set(entry.seq, rec);
    if (msg.qos > 0) this.qosInflight++;
    else {
      this.q0.push(rec);
      // In order, a replay is the whole window and waits for it to fill (`full`): no ping per half share.
      if (backlog && this.backlogPingEvery > 0) this.unpinged(rec);
    }
  }

  /** A QoS 2 entry the broker received before (PUBREC): PUBREL under its packet id, never PUBLISH again. */
  release(seq: number, abandoned = false): void {
    this.resending.delete(seq);
    // Received on an earlier connection, so an entry of the backlog.
    const rec = new Inflight(this.owner, seq, 2, undefined, true, 0, abandoned);
    rec.sendIndex = this.uplink.release(outboxPacketId(seq), rec);
    this.inflight.set(seq, rec);
    this.qosInflight++;
    this.backlogInflight++;
    this.backlogQosInflight++;
  }

  /** Whether an entry to send again is waiting (see releaseAbandoned). */
  get resendPending(): boolean {
    return this.resending.size > 0;
  }

  /**
   * Entries below `nextSeq` still waiting to be re-sent left the outbox unsent (dropped by its limits or expiry
   * while the link was down). The broker may hold a QoS 2 one under its packet id, awaiting PUBREL: without one,
   * that id would stay taken until an entry 65,000 seqs later reuses it, and a broker that does not compare
   * content would discard that entry as a duplicate (EMQX answers 0x91). A PUBREL completes such a flow or, for
   * an id the broker does not know, draws PUBCOMP 0x92; either way the id is free again [MQTT-4.3.3-10].
   * QoS 1 holds nothing at the broker. Entries to send again were journaled before this connection, so the
   * reader of the older entries tells what is still to come. Returns false when the window is full.
   */
  releaseAbandoned(dropped: number, receiveMaximum: number): boolean {
    const oldest = this.backlog.done ? this.live : this.backlog;
    const nextSeq = oldest.next(dropped)?.seq ?? Infinity;
    for (const [seq, qos] of this.resending) {
      if (seq >= nextSeq) continue;
      if (qos === 2) {
        if (this.full || this.qosFull(receiveMaximum)) return false;
        this.release(seq, true);
      }
      this.resending.delete(seq);
    }
    return true;
  }

  /** The uplink's outcome for `rec`: false when it no longer counts (a flow of an earlier connection). */
  settle(rec: Inflight): boolean {
    if (this.inflight.get(rec.seq) !== rec) return false;
    this.inflight.delete(rec.seq);
    this.qosInflight--;
    if (rec.backlog) {
      this.backlogInflight--;
      this.backlogQosInflight--;
    }
    return true;
  }

  /** Every publish written before send index `upTo` reached the broker: releases the QoS 0 entries among them. */
  confirm(upTo: number): boolean {
    let released = false;
    while (this.q0Head < this.q0.length && this.q0[this.q0Head].sendIndex < upTo) {
      const rec = this.q0[this.q0Head++];
      if (this.inflight.get(rec.seq) === rec) {
        this.inflight.delete(rec.seq);
        if (rec.backlog) this.backlogInflight--;
        this.owner.onConfirmed(rec);
        released = true;
      }
    }
    if (this.q0Head > 1024 && this.q0Head * 2 > this.q0.length) {
      this.q0 = this.q0.slice(this.q0Head);
      this.q0Head = 0;
    }
    return released;
  }

  /**
   * A QoS 0 backlog entry went out: once half the backlog's share waits for a confirmation, a ping asks for it at
   * once, so that the drain keeps the other half on the link meanwhile (one ping per full share left the link idle
   * for each round trip: 59 % of 10 Mbit/s used with deflate).
   */
  private unpinged(rec: Inflight): void {
    const first = this.unpingedBacklogQ0;
    if (first === undefined || this.uplink.pingCovers(first.sendIndex)) {
      this.unpingedBacklogQ0 = rec;
      this.unpingedBacklogQ0Count = 1;
    } else this.unpingedBacklogQ0Count++;
    if (this.unpingedBacklogQ0Count >= this.backlogPingEvery) this.uplink.ping();
  }

  /**
   * QoS 0 entries wait for a PINGRESP that proves the broker read them; makes sure one is coming: at once when
   * the window is full (nothing else can move), or when a live-first drain's backlog (`backlogShare`:
   * `replay.share`) is at its share with entries no ping covers (else it would move a share per
   * QOS0_CONFIRM_DELAY_MS); otherwise within QOS0_CONFIRM_DELAY_MS, so one ping covers many live messages.
   */
  requestConfirmation(backlogShare: number | undefined): void {
    const last = this.q0.length > this.q0Head ? this.q0[this.q0.length - 1] : undefined;
    if (!last || this.uplink.pingCovers(last.sendIndex)) return;
    const first = this.unpingedBacklogQ0;
    const backlogAsks =
      backlogShare !== undefined &&
      first !== undefined &&
      !this.uplink.pingCovers(first.sendIndex) &&
      this.backlogFull(backlogShare);
    if (this.full || backlogAsks) {
      this.uplink.ping();
      return;
    }
    if (this.confirmTimer) return;
    this.confirmTimer = setTimeout(() => {
      this.confirmTimer = undefined;
      const tail = this.q0.length > this.q0Head ? this.q0[this.q0.length - 1] : undefined;
      if (tail && !this.uplink.pingCovers(tail.sendIndex)) this.uplink.ping();
    }, QOS0_CONFIRM_DELAY_MS);
    this.confirmTimer.unref();
  }
}

/** `share` of `n`, at least 1. */
function shareOf(share: number, n: number): number {
  return Math.max(1, Math.floor(share * n));
}
