/**
 * Packet identifiers of one uplink connection. Ids 1..OUTBOX_PACKET_IDS belong to outbox entries, derived from
 * their seq (`outboxPacketId`), so a flow resumes under the same id after a reconnect or a restart and the broker
 * recognises a QoS 2 message it already has [MQTT-4.3.3-10]. The ids above are for everything else (SUBSCRIBE,
 * publishes outside the outbox).
 */

export const OUTBOX_PACKET_IDS = 65_000;

export function outboxPacketId(seq: number): number {
  return ((seq - 1) % OUTBOX_PACKET_IDS) + 1;
}

export class PacketIds {
  private next = OUTBOX_PACKET_IDS + 1;
  /** 1 per packet id in use: a fixed table, as ids come and go with every message. */
  private readonly inUse = new Uint8Array(65_536);

  /** `wanted` if it is free (an outbox entry's own id), else what `allocate` gives. */
  allocateAs(wanted: number | undefined): number | null {
    if (wanted !== undefined && this.inUse[wanted] === 0) return this.use(wanted);
    return this.allocate();
  }

  /** From the ids above OUTBOX_PACKET_IDS, and only when those are all taken from the rest. */
  allocate(): number | null {
    for (let i = OUTBOX_PACKET_IDS; i < 65_535; i++) {
      const id = this.next;
      this.next = id === 65_535 ? OUTBOX_PACKET_IDS + 1 : id + 1;
      if (this.inUse[id] === 0) return this.use(id);
    }
    for (let id = 1; id <= OUTBOX_PACKET_IDS; id++) if (this.inUse[id] === 0) return this.use(id);
    return null;
  }

  release(id: number): void {
    this.inUse[id] = 0;
  }

  private use(id: number): number {
    this.inUse[id] = 1;
    return id;
  }
}
