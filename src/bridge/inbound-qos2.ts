/**
 * Inbound QoS 2 from the central broker: a message is published locally, durably, when its PUBLISH arrives, and
 * only then is PUBREC sent (delivery on receipt, "Method B" of MQTT 3.1.1 Figure 4.3). A crash before PUBREC at
 * worst publishes it twice (the broker sends it again); a PUBREL for an id this process does not know (after a
 * restart) is answered with PUBCOMP: the message is in. The ids awaiting PUBREL outlive a connection, so a
 * PUBLISH sent again on a resumed session is not published twice [MQTT-4.3.3-9].
 */
export class InboundQoS2 {
  /** Packet id to the local delivery of its message; settled once the message is published locally. */
  private readonly awaitingRelease = new Map<number, Promise<void>>();

  /**
   * A QoS 2 PUBLISH under `packetId`: delivers it unless that id already awaits PUBREL (a re-send). PUBREC goes
   * once the returned promise settles, also for a re-send that arrives while the first delivery is under way.
   */
  receive(packetId: number, deliver: () => Promise<void>): Promise<void> {
    let delivered = this.awaitingRelease.get(packetId);
    if (delivered === undefined) {
      delivered = deliver();
      this.awaitingRelease.set(packetId, delivered);
    }
    return delivered;
  }

  /** PUBREL: the flow is complete, the id free for a new message. */
  release(packetId: number): void {
    this.awaitingRelease.delete(packetId);
  }

  /** The broker forgot our session (CONNACK without session present): no flow of the old one goes on. */
  clear(): void {
    this.awaitingRelease.clear();
  }
}
