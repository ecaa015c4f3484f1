/**
 * A full disk: the data directory on a small tmpfs, 1 KiB QoS 1 publishes into an offline persistent
 * session until the disk is full. A refused message gets 0x97 Quota exceeded (MQTT 5; 3.1.1: no acknowledgement)
 * and is undone everywhere it was routed: the session never delivers it, live or after a restart, and the
 * retained index does not keep it. The refusals are logged once per episode, with a count when it ends.
 * Needs root for the tmpfs mount; skipped with the reason elsewhere.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { IPubackPacket } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { openClient } from '../helpers/mqtt-client.js';
import { RawClient } from '../helpers/raw-client.js';
import { drainSession, fillStore, payload, persistent } from '../helpers/store-fill.js';

const d = useDisposer();
const QUOTA_EXCEEDED = 0x97;
const TMPFS_SIZE = '8m';

/** Why a tmpfs cannot be mounted here (not root), or undefined. */
function mountProblem(dir: string): string | undefined {
  const probe = spawnSync('sh', ['-c', 'mount -t tmpfs -o size=1m tmpfs "$1" && umount "$1"', 'sh', dir], {
    encoding: 'utf8',
  });
  if (probe.error !== undefined) return probe.error.message;
  return probe.status === 0 ? undefined : probe.stderr.trim() || `mount exited ${probe.status}`;
}

/** A data directory on its own small tmpfs, unmounted after the test (after the gateway stopped). */
function smallDisk(): string | { skip: string } {
  const dir = join(d.tempDir('edgeferry-diskfull-'), 'data');
  mkdirSync(dir);
  const problem = mountProblem(dir);
  if (problem !== undefined) return { skip: `needs root to mount a small tmpfs (${problem})` };
  const mounted = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_SIZE}`, 'tmpfs', dir], { encoding: 'utf8' });
  if (mounted.status !== 0) throw new Error(`mount failed: ${mounted.stderr}`);
  d.defer(() => {
    spawnSync('umount', [dir]);
  });
  return dir;
}

const fillDisk = (gw: Gateway, firstId: number, refusals: number) => fillStore(d, gw, 'fill/q', firstId, refusals);
const drain = (gw: Gateway, expected: number) => drainSession(d, gw, 'historian', 'fill/q', expected);

describe('a full disk', () => {
  it('refuses with 0x97, never delivers what it refused (live or after SIGKILL), and logs once per episode', async (ctx) => {
    const dataDir = smallDisk();
    if (typeof dataDir !== 'string') return ctx.skip(dataDir.skip);
    const gw = d.add(
      await startGateway({ storage: { path: dataDir }, broker: { maxQueuedMessages: 0 } }, { logLevel: 'info' }),
    );

    const sub = await openClient(gw.url, persistent('historian'));
    await sub.subscribe('fill/#', { qos: 1 });
    await sub.disconnect();

    // A retained message that stands, then one refused for the same topic: the refused one is never served.
    const first = await fillDisk(gw, 0, 200);
    expect(first.codes).toEqual([QUOTA_EXCEEDED]); // not 0x80 Unspecified error
    expect(first.accepted.length).toBeGreaterThan(1000);
    const retainer = d.add(await RawClient.connect(gw.port, { clientId: 'retainer' }, { protocolVersion: 5 }));
    retainer.publish('fill/retained', 'refused', { qos: 1, retain: true, messageId: 7 });
    expect(((await retainer.expect('puback')) as IPubackPacket).reasonCode).toBe(QUOTA_EXCEEDED);

    // While the disk stays full, LMDB is not asked to write again: each failed write makes it print a "Write error"
    // line on stderr that nothing can catch. The store asks the filesystem (statfs) instead, once a second.
    const writeErrors = (): number => gw.output().split('Write error').length - 1;
    const errorsAtStart = writeErrors();
    for (let id = 1_000_000, until = Date.now() + 3500; Date.now() < until;) {
      const more = await fillDisk(gw, id, 16);
      expect(more.accepted).toEqual([]);
      id = more.next;
    }
    expect(writeErrors() - errorsAtStart).toBe(0);

    // One warn when the episode began; none per refused message.
    const log = gw.output();
    expect(log.match(/store full/g)?.length, log.slice(-3000)).toBe(1);
    expect(log).not.toMatch(/message not accepted/);
    expect(log).not.toMatch(/session store write failed/);
    const lines = log.split('\n').filter((l) => l.trim() !== '').length;
    expect(lines, log.slice(-3000)).toBeLessThan(40);

    // Live: the subscriber drains exactly what was accepted, in order.
    const live = await drain(gw, first.accepted.length);
    expect(live).toEqual(first.accepted);
    const late = d.add(await openClient(gw.url, { clientId: 'late', protocolVersion: 5 }));
    await late.subscribe('fill/retained', { qos: 1 });
    await late.publish('fill/probe', 'x', { qos: 1 });
    expect(late.received('fill/retained')).toEqual([]);

    // The disk has room again: the next message is accepted and the episode ends with its count.
    const after = await fillDisk(gw, first.next, 1);
    expect(after.accepted.length).toBeGreaterThan(0);
    const end = gw
      .output()
      .split('\n')
      .find((l) => l.includes('store accepts messages again'));
    expect(end, gw.output().slice(-3000)).toBeDefined();
    expect(JSON.parse(end!).refused).toBeGreaterThanOrEqual(first.refused.length + 1);

    // After a crash: nothing refused comes back either.
    await gw.kill('SIGKILL');
    await gw.restart();
    const restarted = await drain(gw, after.accepted.length);
    const refused = new Set([...first.refused, ...after.refused]);
    expect(restarted.filter((id) => refused.has(id))).toEqual([]);
    expect(restarted).toEqual(after.accepted.filter((id) => restarted.includes(id)));
    expect(new Set(restarted)).toEqual(new Set(after.accepted));
    console.log(
      `disk full (${TMPFS_SIZE} tmpfs): ${first.accepted.length} accepted, ${first.refused.length} refused (0x97); ` +
        `after freeing: ${after.accepted.length} accepted; log lines during the episode: ${lines}`,
    );
  }, 120_000);

  it('gives a 3.1.1 publisher no acknowledgement for a refused message [MQTT-3.3.4-1]', async (ctx) => {
    const dataDir = smallDisk();
    if (typeof dataDir !== 'string') return ctx.skip(dataDir.skip);
    const gw = d.add(await startGateway({ storage: { path: dataDir }, broker: { maxQueuedMessages: 0 } }));
    const sub = await openClient(gw.url, persistent('historian'));
    await sub.subscribe('fill/#', { qos: 1 });
    await sub.disconnect();
    await fillDisk(gw, 0, 1);

    const old = d.add(await RawClient.connect(gw.port, { clientId: 'v311', clean: true }, { protocolVersion: 4 }));
    old.publish('fill/q', payload(1e6), { qos: 1, messageId: 1 });
    await old.waitForClose(10_000);
    expect(old.packets('puback')).toEqual([]);
  }, 120_000);
});
