/**
 * A twin of this edge node on the central broker (docs/architecture.md#fleet): an NBIRTH for our group and edge
 * node id that we did not send, from a second gateway with a copied configuration, whose data Sparkplug hosts would
 * mix with ours. The uplink bridge subscribes to our NBIRTH topic: on MQTT 5 with no-local, so none of ours comes
 * back; on 3.1.1 ours come back too, and `isOurs` knows them by their bytes (a twin's differ at least in the
 * timestamp). (A twin with the same gateway.id also takes our session: `EF_UPLINK_SESSION_TAKEN`.)
 */
import type { Logger } from '../util/logger.js';

/** Logged at most this often while the twin keeps publishing. */
const LOG_EVERY_MS = 600_000;

export class TwinWatch {
  /** NBIRTHs seen from another node with our ids. */
  births = 0;
  private lastLogMs = -Infinity;

  constructor(
    readonly topic: string,
    /** Whether an NBIRTH payload is one this node sent upstream (the echo of it, on a 3.1.1 uplink). */
    private readonly isOurs: (payload: Buffer) => boolean,
    private readonly log: Logger,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** An NBIRTH on our topic arrived (the bridge's `watch` hook). */
  received(msg: { readonly payload: Buffer }): void {
    if (this.isOurs(msg.payload)) return;
    this.births++;
    const nowMs = this.now();
    if (nowMs - this.lastLogMs < LOG_EVERY_MS) return;
    this.lastLogMs = nowMs;
    this.log.error(
      { topic: this.topic, births: this.births },
      "another edge node publishes our NBIRTH on the central broker: a second gateway with the same sparkplug.groupId and edgeNodeId (a copied configuration?); hosts will mix the two nodes' data",
    );
  }
}
