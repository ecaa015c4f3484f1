/**
 * The primary host application gate (Sparkplug 3.0 §5 "Primary Host Application STATE"): whether the host named
 * by `sparkplug.primaryHostId` is online, from its `spBv1.0/STATE/<id>` messages (JSON {online, timestamp}).
 *
 * A STATE is judged by its timestamp, the host's birth time: an online older than the host's last death, or
 * older than the online already seen, is a stale retained message; an offline at least as new as the online
 * is the host's death (its Will reuses the birth timestamp), an older one ended an earlier life. Only changes
 * are reported, to `online()` and `offline()`.
 *
 * Over an uplink, what the node knows of the host holds for one connection: `unknown()` on every new one, until a
 * STATE on it (the retained one after SUBSCRIBE, or a live one) says online [tck-id-message-flow-edge-node-birth-publish-phid-wait].
 * The timestamps seen stay, so a stale retained online still cannot start a session.
 */
import type { Message } from '../protocol/message.js';
import type { Logger } from '../util/logger.js';

export interface PrimaryHostEvents {
  online(): void;
  offline(): void;
}

export class PrimaryHost {
  private isOnline = false;
  private onlineTs = -Infinity;
  private offlineTs = -Infinity;

  constructor(
    readonly hostId: string,
    private readonly events: PrimaryHostEvents,
    private readonly log: Logger,
  ) {}

  get online(): boolean {
    return this.isOnline;
  }

  /** A new uplink connection: the host is not online until a STATE on it says so. Reports nothing. */
  unknown(): void {
    this.isOnline = false;
  }

  /** A STATE message of this host. */
  onState(msg: Message): void {
    let state: { online?: unknown; timestamp?: unknown };
    try {
      state = JSON.parse(msg.payload.toString('utf8')) as typeof state;
    } catch {
      this.log.warn({ topic: msg.topic, who: msg.origin }, 'STATE payload is not JSON; ignored');
      return;
    }
    if (typeof state.online !== 'boolean' || typeof state.timestamp !== 'number') {
      this.log.warn({ topic: msg.topic, who: msg.origin }, 'STATE payload lacks online/timestamp; ignored');
      return;
    }
    const ts = state.timestamp;
    if (state.online) {
      // A retained online older than the host's last death is stale.
      if (ts <= this.offlineTs || ts < this.onlineTs) {
        this.log.debug({ timestamp: ts }, 'older online STATE ignored');
        return;
      }
      this.onlineTs = ts;
      if (this.isOnline) return;
      this.isOnline = true;
      this.log.info({ primaryHostId: this.hostId, timestamp: ts }, 'primary host online');
      this.events.online();
      return;
    }
    // The host's Will reuses its birth timestamp: an offline STATE as new as the online one is its death.
    if (ts < this.onlineTs) {
      this.log.debug({ timestamp: ts }, 'older offline STATE ignored');
      return;
    }
    this.offlineTs = ts;
    if (!this.isOnline) return;
    this.isOnline = false;
    this.log.warn({ primaryHostId: this.hostId, timestamp: ts }, 'primary host offline; session ended');
    this.events.offline();
  }
}
