/**
 * What the operator reads about one bridge's uplink going down and coming back (docs/architecture.md#reconnect):
 * a warning when it goes down, with the time of the next attempt, then one line a minute while it stays down, and
 * one line when it is back. A refused CONNACK or a session taken by another client is one error per episode, not
 * a line per attempt: a gateway flapping with a twin would otherwise log "lost" and "online" every few seconds.
 */
import { errorLogFields, UplinkError } from '../util/errors.js';
import type { Logger } from '../util/logger.js';
import { isSessionTaken, STABLE_ONLINE_MS } from './reconnect-schedule.js';

/** While down, the next attempt is logged this often. */
const DOWN_REPORT_EVERY_MS = 60_000;

type Episode = 'refused' | 'taken';

export class OutageLog {
  /** Connections the central broker gave to another client with our client id. */
  sessionTaken = 0;
  private down = false;
  private lastReportMs = 0;
  private attempt = 0;
  private episode: Episode | undefined;
  /** When the current connection came online; undefined while offline. */
  private onlineAtMs: number | undefined;

  constructor(
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  attempting(attempt: number): void {
    this.attempt = attempt;
  }

  /** The connection is gone, or an attempt failed; the next attempt is in `retryInMs`. */
  offline(error: Error, retryInMs: number, backlog: number, wasOnline: boolean): void {
    const nowMs = this.now();
    this.onlineAtMs = undefined;
    const nextAttemptAt = new Date(nowMs + retryInMs).toISOString();
    // The cause in words, in the message and as fields; a stack only if the cause is a bug (docs/architecture.md#errors-and-logs).
    const cause = errorLogFields(error);
    const because = ` (${cause.reason})`;
    const fields = { ...cause, retryInMs, nextAttemptAt, attempt: this.attempt + 1, backlog };
    const wasDown = this.down;
    this.down = true;
    if (isSessionTaken(error)) {
      this.sessionTaken++;
      this.startEpisode(
        'taken',
        fields,
        "central broker gave the uplink's session to another client with the same client id (a second gateway with the same gateway.id, or a copied remote.clientId?); buffering" +
          because,
      );
    } else if (error instanceof UplinkError && error.code === 'EF_UPLINK_REJECTED') {
      this.startEpisode('refused', fields, `central broker refused the uplink; buffering${because}`);
    } else if (this.episode === undefined && !wasDown) {
      this.log.warn(fields, `${wasOnline ? 'uplink lost' : 'uplink offline'}; buffering${because}`);
    } else if (nowMs - this.lastReportMs < DOWN_REPORT_EVERY_MS) {
      return void this.log.debug(fields, `uplink attempt failed${because}`);
    } else {
      this.log.warn(
        fields,
        `uplink down; next attempt at ${nextAttemptAt} (attempt ${fields.attempt}; ${cause.reason})`,
      );
    }
    this.lastReportMs = nowMs;
  }

  /** A CONNACK accepted the uplink. */
  online(fields: object): void {
    const reconnected = this.down;
    this.down = false;
    this.onlineAtMs = this.now();
    if (this.episode === 'refused') this.episode = undefined;
    // Within a session-taken episode every reconnect would be a line; the end of the episode is one (`tick`).
    if (this.episode === 'taken') return void this.log.debug({ ...fields, reconnected }, 'uplink online');
    this.log.info({ ...fields, reconnected }, 'uplink online');
  }

  /** Called about once a second: a session kept long enough ends a session-taken episode. */
  tick(): void {
    if (this.episode !== 'taken' || this.onlineAtMs === undefined || this.now() - this.onlineAtMs < STABLE_ONLINE_MS)
      return;
    this.episode = undefined;
    this.log.info(
      { onlineS: STABLE_ONLINE_MS / 1000 },
      'uplink online and has kept its session; the other client with the same client id is gone',
    );
  }

  private startEpisode(episode: Episode, fields: { reason: string }, msg: string): void {
    if (this.episode !== episode) this.log.error(fields, msg);
    else this.log.debug(fields, `uplink attempt failed (${fields.reason})`);
    this.episode = episode;
  }
}
