import { describe, expect, it } from 'vitest';
import { WriteFlusher } from '../../src/server/write-flusher.js';
import type { TurnWork } from '../../src/server/write-flusher.js';

/** A connection as the flusher sees it: it records when it was flushed and when it read on. */
function target(log: string[], name: string): TurnWork {
  return {
    flush: () => void log.push(`flush ${name}`),
    continueReading: () => void log.push(`read ${name}`),
    flushListed: false,
  };
}

const endOfTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('WriteFlusher', () => {
  it('writes a quiet turn’s first read out at once, without waiting for the end of the poll phase', async () => {
    const flusher = new WriteFlusher();
    const log: string[] = [];
    flusher.schedule(target(log, 'subscriber'));
    flusher.readDone();
    expect(log).toEqual(['flush subscriber']);
    await endOfTurn();
    // Flushed once, not again at the turn's end.
    expect(log).toEqual(['flush subscriber']);
  });

  it('batches the writes of a turn after a turn of several reads until the turn ends, then lets yielded readers on', async () => {
    const flusher = new WriteFlusher();
    const log: string[] = [];
    // A busy turn: three connections read.
    for (let i = 0; i < 3; i++) flusher.readDone();
    await endOfTurn();
    const subscriber = target(log, 'subscriber');
    flusher.schedule(subscriber);
    flusher.readDone();
    flusher.scheduleRead(target(log, 'publisher'));
    flusher.schedule(subscriber);
    flusher.readDone();
    expect(log).toEqual([]);
    await endOfTurn();
    // One write for the turn, before the publisher that yielded reads on (delivery first).
    expect(log).toEqual(['flush subscriber', 'read publisher']);
  });

  it('writes at once again once the gateway is quiet: a turn with one read', async () => {
    const flusher = new WriteFlusher();
    const log: string[] = [];
    for (let i = 0; i < 3; i++) flusher.readDone();
    await endOfTurn();
    flusher.readDone();
    await endOfTurn();
    flusher.schedule(target(log, 'subscriber'));
    flusher.readDone();
    expect(log).toEqual(['flush subscriber']);
  });
});
