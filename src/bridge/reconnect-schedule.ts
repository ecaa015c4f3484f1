/**
 * When an uplink tries again, and what ended its last connection (docs/architecture.md#reconnect).
 *
 * - A central broker that cannot be reached (refused, reset, no CONNACK) is tried again quickly: decorrelated
 *   jitter between `reconnect.minDelayMs` and `reconnect.maxDelayMs` (defaults 250 ms and 2 s), so a gateway is back
 *   within about 2 s of the broker's return, and a fleet's gateways, each on its own random schedule, arrive
 *   spread over those 2 s rather than in the same instant.
 * - A broker that answers but will not keep us (CONNACK refused: credentials, ACL, busy; or our session taken by
 *   another client) is tried again slowly, 5 s growing to 60 s: retrying fast would not fix it, would load the
 *   broker's authentication and would keep taking the session back from the other client.
 * - A connection the broker closes right after CONNACK, again and again, is our session taken over by another
 *   client with the same client id (MQTT 3.1.1 has no DISCONNECT from the server to say so; MQTT 5 says 0x8E).
 */
import { Reason } from '../protocol/reason-codes.js';
import { Backoff } from '../util/backoff.js';
import { UplinkError } from '../util/errors.js';

/** The slow schedule after a refusal or a taken session. */
const REFUSED_MIN_MS = 5_000;
const REFUSED_MAX_MS = 60_000;
/**
 * A connection the broker closes (a FIN, no DISCONNECT) within this time of its CONNACK is "closed right after
 * CONNACK": a twin on the slow schedule takes the session back within 5-60 s, so its victim's connections last that long.
 */
const QUICK_CLOSE_MS = 60_000;
/** So many such closes in a row are read as a session taken over. */
const QUICK_CLOSES = 3;
/** A connection online this long ends a refusal or session-taken episode. */
export const STABLE_ONLINE_MS = 60_000;

export interface ConnectionEnd {
  readonly error: Error;
  /** The broker closed a connection that was online (not our keepalive, ack timeout, protocol check or stop). */
  readonly closedByBroker: boolean;
  /** How long it was online; undefined when it never was. */
  readonly onlineMs: number | undefined;
}

/** Whether `error` says the central broker took our session away (DISCONNECT 0x8E, or inferred). */
export function isSessionTaken(error: Error): boolean {
  return error instanceof UplinkError && error.code === 'EF_UPLINK_SESSION_TAKEN';
}

/** What a DISCONNECT from the central broker ended: 0x8E is our session given to another client with our id. */
export function disconnectError(url: string, reasonCode: number, clientId: string): UplinkError {
  if (reasonCode !== Reason.SessionTakenOver)
    return new UplinkError('EF_UPLINK_CONNECT', `central broker sent DISCONNECT 0x${reasonCode.toString(16)}`);
  return new UplinkError(
    'EF_UPLINK_SESSION_TAKEN',
    `${url}: the central broker gave our session to another client (DISCONNECT 0x8e): another client uses the client id "${clientId}"`,
  );
}

export class ReconnectSchedule {
  private readonly quick: Backoff;
  private readonly slow: Backoff;
  private quickCloses = 0;
  private attempts = 0;

  constructor(reconnect: { minDelayMs: number; maxDelayMs: number }, random: () => number = Math.random) {
    this.quick = new Backoff(reconnect.minDelayMs, reconnect.maxDelayMs, random);
    this.slow = new Backoff(
      Math.max(REFUSED_MIN_MS, reconnect.minDelayMs),
      Math.max(REFUSED_MAX_MS, reconnect.maxDelayMs),
      random,
    );
  }

  /** Counts an attempt; returns its number since the last CONNACK (1 = the first). */
  nextAttempt(): number {
    return ++this.attempts;
  }

  /** A CONNACK accepted the connection. */
  online(): void {
    this.attempts = 0;
    this.quick.reset();
  }

  /** A connection ended (or an attempt failed): the error to report and the delay until the next attempt. */
  ended(end: ConnectionEnd): { error: Error; delayMs: number } {
    let error = end.error;
    if (end.onlineMs !== undefined) {
      if (end.onlineMs >= STABLE_ONLINE_MS) this.slow.reset();
      this.quickCloses = end.closedByBroker && end.onlineMs < QUICK_CLOSE_MS ? this.quickCloses + 1 : 0;
      if (this.quickCloses >= QUICK_CLOSES && !isSessionTaken(error)) {
        error = new UplinkError(
          'EF_UPLINK_SESSION_TAKEN',
          `the central broker closed the connection right after CONNACK ${this.quickCloses} times in a row: likely another client with the same client id`,
          { cause: end.error },
        );
      }
    }
    const refused = isSessionTaken(error) || (error instanceof UplinkError && error.code === 'EF_UPLINK_REJECTED');
    return { error, delayMs: refused ? this.slow.next() : this.quick.next() };
  }
}
