/**
 * Times during which the store refuses new messages (EF_STORE_FULL), because of `storage.maxBytes` or a full disk,
 * or refuses new messages of persistent sessions because they hold their share (`storage.sessionShare`): each is
 * logged when it begins and, with the number refused, when it ends, never per message (docs/architecture.md#durability).
 */
import type { Logger } from '../../util/logger.js';

/** While the disk is full, new messages are refused at once, and one batch this often tries whether there is room. */
export const DISK_FULL_RETRY_MS = 1000;

/** What the log says when an episode begins (warn) and ends (info). */
const LINES = {
  disk: {
    begins: 'store full (the disk is full): new messages are refused until there is room',
    ends: 'store accepts messages again (the disk has room)',
  },
  maxBytes: {
    begins: 'store full (storage.maxBytes): new messages are refused until space is freed',
    ends: 'store below storage.maxBytes again',
  },
  sessions: {
    begins:
      'persistent sessions hold their share of the store (storage.sessionShare): they queue nothing more until theirs drain; other messages are stored as before',
    ends: 'persistent sessions below their share of the store again: they queue again',
  },
} as const;

export interface FullEpisode {
  readonly cause: keyof typeof LINES;
  readonly sinceMs: number;
  refused: number;
  /** A full disk: when a batch may try again (see DISK_FULL_RETRY_MS). */
  retryAtMs: number;
  /** A full disk: a batch deleted records since the last try, so LMDB has pages of its own to reuse. */
  pagesFreed?: boolean;
}

/** The running episodes: one of the whole store (`maxBytes` or `disk`) and one of the sessions' share, which may overlap. */
export class FullEpisodes {
  store: FullEpisode | undefined;
  sessions: FullEpisode | undefined;

  constructor(private readonly log: Logger) {}

  /** Starts an episode (logged once), or returns the one running for the same cause. */
  begin(cause: FullEpisode['cause'], detail: Record<string, unknown>): FullEpisode {
    const slot = cause === 'sessions' ? 'sessions' : 'store';
    const running = this[slot];
    if (running?.cause === cause) return running;
    const nowMs = performance.now();
    const episode = (this[slot] = {
      cause,
      sinceMs: nowMs,
      refused: running?.refused ?? 0,
      retryAtMs: nowMs + DISK_FULL_RETRY_MS,
    });
    this.log.warn(detail, LINES[cause].begins);
    return episode;
  }

  /** Room again: the episode of `slot`, if any, is over. */
  end(slot: 'store' | 'sessions'): void {
    const episode = this[slot];
    if (episode === undefined) return;
    this[slot] = undefined;
    this.log.info(
      { refused: episode.refused, durationS: Math.round((performance.now() - episode.sinceMs) / 100) / 10 },
      LINES[episode.cause].ends,
    );
  }
}
