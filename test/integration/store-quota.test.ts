/**
 * `storage.maxBytes` reached while one message goes to several durable targets: the store decides once, before
 * any target stores it, so a message is in every target or in none. A publisher that retries after 0x97 Quota
 * exceeded then creates no duplicate anywhere (docs/reliability.md#full-disk). The sessions may fill the whole store
 * here (`storage.sessionShare: 1`); below that, they stop at their share instead (session-quota.test.ts). A shared
 * subscription handing a message on to a member whose store refuses it does not bring the gateway down.
 */
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { runCli, startGateway } from '../helpers/gateway.js';
import { openClient } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { RawClient } from '../helpers/raw-client.js';
import { waitFor } from '../helpers/wait.js';
import { drainSession, fillStore, persistent } from '../helpers/store-fill.js';

const d = useDisposer();
const QUOTA_EXCEEDED = 0x97;
/** About 170 queued 1 KiB messages at three copies each. */
const MAX_BYTES = 1024 * 1024;
const SESSIONS = ['historian-a', 'historian-b', 'historian-c'];
/** Each round crosses the limit at another place in a batch: between two targets of a message in about half of them. */
const ROUNDS = 8;

describe('storage.maxBytes between the targets of one message', () => {
  it('stores a refused message in no target and an accepted one in every target; MQTT 5 hears 0x97', async () => {
    const gw = d.add(
      await startGateway(
        { storage: { maxBytes: MAX_BYTES, sessionShare: 1 }, broker: { maxQueuedMessages: 0 } },
        { logLevel: 'info' },
      ),
    );
    for (const clientId of SESSIONS) {
      const sub = await openClient(gw.url, persistent(clientId));
      await sub.subscribe('fill/#', { qos: 1 });
      await sub.disconnect();
    }

    // Each round ends its full episode by draining the sessions.
    let refused = 0;
    let next = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const fill = await fillStore(d, gw, 'fill/q', next, 64);
      next = fill.next;
      expect(fill.codes).toEqual([QUOTA_EXCEEDED]); // [MQTT-3.4.2-1] a PUBACK reason code; not 0x80
      expect(fill.accepted.length).toBeGreaterThan(50);
      refused += fill.refused.length;
      // Every accepted message in every session, in order; nothing refused in any.
      for (const clientId of SESSIONS) {
        expect(
          await drainSession(d, gw, clientId, 'fill/q', fill.accepted.length),
          `${clientId}, round ${round}`,
        ).toEqual(fill.accepted);
      }
    }
    expect(refused).toBeGreaterThanOrEqual(ROUNDS * 64);
    // One episode per round: a warning when it began, a count when room came back.
    const log = gw.output();
    expect(log.match(/store full \(storage.maxBytes\)/g)?.length, log.slice(-3000)).toBe(ROUNDS);
  }, 120_000);

  it('stores a message refused for a persistent session in no bridge outbox either, though drop-oldest could make room', async () => {
    const deadPort = await freePort();
    const gw = d.add(
      await startGateway({
        storage: { maxBytes: MAX_BYTES, sessionShare: 1 },
        broker: { maxQueuedMessages: 0 },
        bridges: [
          {
            name: 'central',
            remote: { urls: [`mqtt://127.0.0.1:${deadPort}`] },
            topics: [{ filter: 'fill/#', direction: 'out', qos: 1 }],
          },
        ],
      }),
    );
    const sub = await openClient(gw.url, persistent('historian'));
    await sub.subscribe('fill/#', { qos: 1 });
    await sub.disconnect();

    const fill = await fillStore(d, gw, 'fill/q', 0, 64);
    expect(fill.codes).toEqual([QUOTA_EXCEEDED]);
    expect(await drainSession(d, gw, 'historian', 'fill/q', fill.accepted.length)).toEqual(fill.accepted);
    await gw.stop();
    // The outbox journaled what was accepted (past the limit it may drop its own oldest, counted), nothing refused.
    const listed = await runCli(['store', 'list', '-c', gw.configFile]);
    const outbox = /outbox central: (\d+) messages, \d+ bytes, oldest [^,]+, dropped (none|queue_full (\d+))/.exec(
      listed.stdout,
    );
    expect(outbox, listed.stdout).not.toBeNull();
    expect(Number(outbox![1]) + Number((outbox![3] as string | undefined) ?? 0)).toBe(fill.accepted.length);
  }, 120_000);
});

describe('storage.maxBytes when a shared subscription hands a message on', () => {
  it('keeps running when the member that takes over cannot store it: the message still goes out live, the failure is logged', async () => {
    // A reject-new bridge outbox fills the store, so the sessions are below their share and still store what they queue.
    const deadPort = await freePort();
    const bridge = {
      name: 'central',
      remote: { urls: [`mqtt://127.0.0.1:${deadPort}`] },
      topics: [{ filter: 'fill/#', direction: 'out', qos: 1 }],
    };
    const gw = d.add(
      await startGateway(
        {
          storage: { maxBytes: MAX_BYTES },
          broker: { maxQueuedMessages: 0 },
          bridges: [{ ...bridge, queue: { overflow: 'reject-new' } }],
        },
        { logLevel: 'info' },
      ),
    );
    // worker: a persistent member of the group, offline while the message is routed, so it goes to the other one.
    const worker = await openClient(gw.url, persistent('worker'));
    await worker.subscribe('$share/g/work', { qos: 1 });
    await worker.disconnect();
    expect((await fillStore(d, gw, 'fill/q', 0, 4)).codes).toEqual([QUOTA_EXCEEDED]);

    const taker = d.add(await RawClient.connect(gw.port, { clientId: 'taker' }, { protocolVersion: 5 }));
    await taker.subscribe('$share/g/work');
    const publisher = d.add(await openClient(gw.url, { clientId: 'publisher' }));
    await publisher.publish('work', 'job-1', { qos: 1 });
    await taker.expect('publish'); // and never acknowledged
    const back = d.add(await openClient(gw.url, persistent('worker')));
    // The taker leaves with the job in flight: it goes to worker, whose store write is refused (quota).
    taker.destroy();
    await back.waitForMessages(1, { topic: 'work' });
    await waitFor(() => gw.output().includes('shared subscription redelivery could not be stored'), 5000, {
      message: () => gw.output().slice(-3000),
    });
    // Still serving: a round trip after the refusal.
    await publisher.publish('after', 'x', { qos: 1 });
  }, 60_000);
});
