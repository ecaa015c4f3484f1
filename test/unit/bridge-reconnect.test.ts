/**
 * The uplink's reconnect schedule and what the operator reads while it is down (docs/architecture.md#reconnect).
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { OutageLog } from '../../src/bridge/outage-log.js';
import { disconnectError, ReconnectSchedule } from '../../src/bridge/reconnect-schedule.js';
import { UplinkError } from '../../src/util/errors.js';
import { recordingLogger } from '../helpers/bridge-setup.js';

const defaults = parseConfig(
  'bridges: [{ name: c, remote: { urls: ["mqtt://central.example"] }, topics: [{ filter: "a/#" }] }]\n',
  'gw.yaml',
  '/tmp',
).bridges[0].reconnect;
const unreachable = {
  error: new UplinkError('EF_UPLINK_CONNECT', 'refused'),
  closedByBroker: false,
  onlineMs: undefined,
};

/** A deterministic spread of random numbers over [0, 1). */
function sequenceRandom(): () => number {
  let i = 0;
  return () => (i++ * 0.618_033_988_75) % 1;
}

describe('reconnect schedule', () => {
  it('with the defaults, an unreachable broker is tried again at least every 2 s however long it is down, with jitter', () => {
    const schedule = new ReconnectSchedule(defaults, sequenceRandom());
    const delays = Array.from({ length: 500 }, () => schedule.ended(unreachable).delayMs);
    expect(Math.max(...delays)).toBeLessThanOrEqual(2000);
    expect(Math.min(...delays)).toBeGreaterThanOrEqual(250);
    // Spread, not one value: gateways of a fleet do not come back in the same instant.
    expect(new Set(delays.map((d) => Math.floor(d / 250))).size).toBeGreaterThanOrEqual(5);
  });

  it('a refused CONNACK or a taken session waits 5 s to 60 s; a CONNACK resets the quick schedule', () => {
    const schedule = new ReconnectSchedule(defaults, () => 0.99);
    const refused = { ...unreachable, error: new UplinkError('EF_UPLINK_REJECTED', 'not authorized') };
    const slow = Array.from({ length: 10 }, () => schedule.ended(refused).delayMs);
    expect(Math.min(...slow)).toBeGreaterThanOrEqual(5000);
    expect(Math.max(...slow)).toBeGreaterThan(55_000);
    expect(Math.max(...slow)).toBeLessThanOrEqual(60_000);
    schedule.online();
    expect(schedule.ended(unreachable).delayMs).toBeLessThanOrEqual(750);
  });

  it('a connection the broker closes right after CONNACK three times in a row is read as a session taken', () => {
    const schedule = new ReconnectSchedule(defaults);
    const quickClose = {
      error: new UplinkError('EF_UPLINK_CONNECT', 'connection closed'),
      closedByBroker: true,
      onlineMs: 300,
    };
    expect(schedule.ended(quickClose).error.message).toBe('connection closed');
    expect(schedule.ended({ ...quickClose, onlineMs: 120_000 }).error.message).toBe('connection closed'); // a long one breaks the run
    expect(schedule.ended(quickClose).error.message).toBe('connection closed');
    expect(schedule.ended(quickClose).error.message).toBe('connection closed');
    const third = schedule.ended(quickClose);
    expect(third.error).toMatchObject({ code: 'EF_UPLINK_SESSION_TAKEN' });
    expect(third.error.message).toMatch(
      /right after CONNACK 3 times in a row: likely another client with the same client id/,
    );
    expect(third.delayMs).toBeGreaterThanOrEqual(5000);
    // Our own liveness checks closing the connection are not the broker's doing.
    const ours = new ReconnectSchedule(defaults);
    for (let i = 0; i < 5; i++)
      expect(ours.ended({ ...quickClose, closedByBroker: false }).error.message).toBe('connection closed');
  });
});

describe('DISCONNECT from the central broker', () => {
  it('0x8E Session taken over is a taken session naming our client id; other reasons are a lost connection', () => {
    const taken = disconnectError('mqtt://central:1883', 0x8e, 'line4-central');
    expect(taken).toMatchObject({ code: 'EF_UPLINK_SESSION_TAKEN' });
    expect(taken.message).toMatch(/another client uses the client id "line4-central"/);
    expect(disconnectError('mqtt://central:1883', 0x8b, 'line4-central')).toMatchObject({ code: 'EF_UPLINK_CONNECT' });
    // A taken session retries slowly, like a refusal.
    expect(
      new ReconnectSchedule(defaults).ended({ error: taken, closedByBroker: false, onlineMs: 2000 }).delayMs,
    ).toBeGreaterThanOrEqual(5000);
  });
});

describe('outage log', () => {
  it('warns when the uplink goes down, then names the next attempt about once a minute, and once more when back', () => {
    const log = recordingLogger();
    let now = Date.parse('2026-12-06T20:00:00Z');
    const outages = new OutageLog(log, () => now);
    const err = new UplinkError('EF_UPLINK_CONNECT', 'refused');
    for (let attempt = 1; attempt <= 150; attempt++) {
      outages.attempting(attempt);
      outages.offline(err, 1000, 42, attempt === 1);
      now += 1000;
    }
    outages.online({ backlog: 42 });
    const lines = log.lines.filter((l) => l.level !== 'debug').map((l) => l.msg);
    expect(lines).toEqual([
      'uplink lost; buffering (refused)',
      'uplink down; next attempt at 2026-12-06T20:01:01.000Z (attempt 62; refused)',
      'uplink down; next attempt at 2026-12-06T20:02:01.000Z (attempt 122; refused)',
      'uplink online',
    ]);
    expect(log.lines[0].obj).toMatchObject({
      code: 'EF_UPLINK_CONNECT',
      reason: 'refused',
      nextAttemptAt: '2026-12-06T20:00:01.000Z',
      attempt: 2,
      backlog: 42,
    });
    // An expected network error: no `err`, so no stack in the log (docs/architecture.md#errors-and-logs).
    expect(log.lines[0].obj).not.toHaveProperty('err');
  });

  it('a session taken again and again is one error and a count, not a loop of warnings', () => {
    const log = recordingLogger();
    let now = 0;
    const outages = new OutageLog(log, () => now);
    const taken = new UplinkError('EF_UPLINK_SESSION_TAKEN', 'DISCONNECT 0x8e');
    for (let i = 0; i < 5; i++) {
      outages.online({});
      now += 1000;
      outages.offline(taken, 5000, 0, true);
      now += 5000;
    }
    expect(outages.sessionTaken).toBe(5);
    const shown = log.lines.filter((l) => l.level !== 'debug');
    expect(shown.map((l) => l.level)).toEqual(['info', 'error']);
    expect(shown[1].msg).toMatch(/another client with the same client id/);
    outages.online({});
    now += 60_000;
    outages.tick();
    expect(log.lines.filter((l) => l.level !== 'debug').at(-1)?.msg).toMatch(/has kept its session/);
  });
});
