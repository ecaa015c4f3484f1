/**
 * The console's live data over Server-Sent Events: one stream per browser, and one payload per tick built once
 * for all of them (TICK_MS, 2 updates/s), so ten open browsers cost one JSON build, not ten. The timer runs only
 * while a stream is open. A browser that does not read its stream is skipped rather than buffered for.
 */
import type http from 'node:http';

export const TICK_MS = 500;
/**
 * Streams per user at most; more of that user's are refused with 503 (each costs a socket and a write per tick).
 * Per user, so one user's browsers never keep another's out.
 */
const MAX_STREAMS_PER_USER = 20;
/** A stream with this much unsent is not written to until it drains. */
const MAX_UNSENT_BYTES = 1 << 20;

export class LiveStreams {
  /** Each stream with its user and the check that its login still holds: one that ended or expired ends the stream. */
  private readonly streams = new Map<http.ServerResponse, { readonly user: string; readonly holds: () => boolean }>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly build: () => unknown) {}

  get size(): number {
    return this.streams.size;
  }

  /** Answers `user`'s `EventSource` request: the current state at once, then a tick every TICK_MS while `holds()`. */
  open(res: http.ServerResponse, user: string, holds: () => boolean): void {
    let own = 0;
    for (const stream of this.streams.values()) if (stream.user === user) own++;
    if (own >= MAX_STREAMS_PER_USER) {
      res
        .writeHead(503, { 'content-type': 'text/plain' })
        .end(`${user} has ${MAX_STREAMS_PER_USER} live streams open already\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', 'x-accel-buffering': 'no' });
    res.write(`retry: 2000\n${this.event()}`);
    this.streams.set(res, { user, holds });
    res.on('close', () => {
      this.streams.delete(res);
      if (this.streams.size === 0) this.stopTimer();
    });
    this.timer ??= setInterval(() => this.tick(), TICK_MS);
  }

  /** Ends every stream (the listener is stopping, or the user logged out everywhere). */
  close(): void {
    for (const res of this.streams.keys()) res.end();
    this.streams.clear();
    this.stopTimer();
  }

  private tick(): void {
    const event = this.event();
    for (const [res, { holds }] of this.streams) {
      if (!holds())
        res.end(); // the browser reconnects, gets 401 and shows the login form
      else if (res.writableLength < MAX_UNSENT_BYTES) res.write(event);
    }
  }

  private event(): string {
    return `data: ${JSON.stringify(this.build())}\n\n`;
  }

  private stopTimer(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
