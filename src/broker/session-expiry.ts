/**
 * The expiry timers of disconnected sessions: a session nobody resumes within its expiry interval ends
 * [MQTT-3.1.2-23]. A session that never expires gets no timer.
 */
import { NEVER_EXPIRES, type Session } from './session.js';

export class SessionExpiry {
  private readonly timers = new Map<string, NodeJS.Timeout>();

  constructor(private readonly end: (session: Session) => void) {}

  schedule(session: Session, afterS: number): void {
    if (afterS === NEVER_EXPIRES) return;
    const timer = setTimeout(() => this.end(session), Math.min(afterS * 1000, 2 ** 31 - 1));
    timer.unref();
    this.timers.set(session.id, timer);
  }

  cancel(clientId: string): void {
    const timer = this.timers.get(clientId);
    if (timer) {
      clearTimeout(timer);
      this.timers.delete(clientId);
    }
  }

  close(): void {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }
}
