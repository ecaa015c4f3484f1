/**
 * A damaged data file: 4 KiB of random bytes written into a stopped store, for several fixed seeds.
 * The gateway never crashes on it: the integrity walk runs in a child process, and a damaged store is exit 3
 * (which the systemd unit does not restart) with a message naming the directory, what is damaged and the two
 * ways out. `edgeferry store salvage` then recovers every record it does not report lost (it counts them against
 * LMDB's own record count), and the gateway starts on the result and delivers them, intact and in order.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, openSync, readFileSync, statSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import type { IPubackPacket } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { runCli, startGateway } from '../helpers/gateway.js';
import { openClient } from '../helpers/mqtt-client.js';
import { freePort } from '../helpers/ports.js';
import { RawClient } from '../helpers/raw-client.js';
import { seededRandom } from '../helpers/random.js';
import { namedDatabaseRoot, PAGE } from '../helpers/lmdb-file.js';

const d = useDisposer();
const ROOT = join(import.meta.dirname, '..', '..');
const CLI = join(ROOT, 'dist', 'src', 'cli.js');
const SEEDS = [1, 2, 3, 4, 5, 6];
const MESSAGES = 1500;

/** Overwrites 4 KiB at a random offset past LMDB's two meta pages with random bytes; returns the offset. */
function damage(file: string, seed: number): number {
  const random = seededRandom(seed);
  const size = statSync(file).size;
  const offset = 2 * PAGE + Math.floor(random() * (size - 3 * PAGE));
  const bytes = Buffer.alloc(PAGE);
  for (let i = 0; i < PAGE; i++) bytes[i] = Math.floor(random() * 256);
  const fd = openSync(file, 'r+');
  writeSync(fd, bytes, 0, PAGE, offset);
  closeSync(fd);
  return offset;
}

const persistent = {
  clientId: 'historian',
  clean: false,
  protocolVersion: 5 as const,
  properties: { sessionExpiryInterval: 3600 },
};

describe('a damaged data file', () => {
  it('is refused with exit 3 and a message, never crashes the gateway, and salvage recovers all it does not report lost', async () => {
    const deadPort = await freePort();
    const patch = {
      bridges: [
        {
          name: 'central',
          remote: { urls: [`mqtt://127.0.0.1:${deadPort}`] },
          topics: [{ filter: 'plant/#', direction: 'out', qos: 1 }],
        },
      ],
      broker: { maxQueuedMessages: 0 },
      storage: { verifyOnStart: 'full' },
    };
    // A store with a session queue and a bridge outbox of 1 KiB messages, written by the gateway and stopped.
    const gw = d.add(await startGateway(patch));
    const sub = await openClient(gw.url, persistent);
    await sub.subscribe('plant/#', { qos: 1 });
    await sub.disconnect();
    const pub = d.add(await RawClient.connect(gw.port, { clientId: 'filler' }, { protocolVersion: 5 }));
    for (let id = 0; id < MESSAGES; id += 50) {
      for (let i = 0; i < 50; i++)
        pub.publish('plant/line', `m${id + i};`.padEnd(1024, 'x'), { qos: 1, messageId: i + 1 });
      for (let i = 0; i < 50; i++) expect(((await pub.expect('puback')) as IPubackPacket).reasonCode ?? 0).toBe(0);
    }
    pub.stop();
    await gw.stop();
    const unit = readFileSync(join(ROOT, 'systemd', 'edgeferry.service'), 'utf8');
    const noRestart = /^RestartPreventExitStatus=(.*)$/m.exec(unit)?.[1].split(/\s+/) ?? [];

    const rates: string[] = [];
    for (const seed of SEEDS) {
      const dir = join(d.tempDir(`edgeferry-damaged-${seed}-`), 'data');
      cpSync(gw.dataDir, dir, { recursive: true });
      const offset = damage(join(dir, 'data.mdb'), seed);
      const config = join(dir, '..', 'gw.yaml');
      writeFileSync(
        config,
        JSON.stringify({
          ...patch,
          listeners: [{ port: 0, host: '127.0.0.1' }],
          storage: { path: dir, verifyOnStart: 'full' },
          log: { format: 'json' },
        }),
      );

      // The start: refused with exit 3 (the unit does not restart it), or, when the bytes fell on pages in no use, a
      // normal start (stopped here by SIGTERM). Never a crash.
      const start = spawnSync(process.execPath, [CLI, '--config', config], {
        encoding: 'utf8',
        timeout: 8000,
        killSignal: 'SIGTERM',
      });
      const said = start.stdout + start.stderr;
      expect(start.signal, `seed ${seed}: ${said.slice(-2000)}`).toBeNull();
      if (start.status === 0) {
        expect(said).toMatch(/edgeferry started/);
        rates.push(`seed ${seed} @${offset}: no live data damaged`);
        continue;
      }
      expect(start.status, `seed ${seed}: ${said.slice(-2000)}`).toBe(3);
      expect(noRestart).toContain('3');
      expect(said).toContain(`the data directory ${dir} is damaged`);
      expect(said).toMatch(/edgeferry store salvage/);
      expect(said).toMatch(/--reset-store/);

      const salvaged = await runCli(['store', 'salvage', '-c', config]);
      expect(salvaged.code, salvaged.stderr).toBe(0);
      // What salvage says the session queue lost, by LMDB's count of its records before and after.
      const lostLine = /queue of session \(all of them\): (\d+) of (\d+) records lost/.exec(salvaged.stdout);
      const reportedLost = lostLine === null ? 0 : Number(lostLine[1]);
      if (lostLine !== null) expect(Number(lostLine[2])).toBe(MESSAGES);

      // The salvaged store starts, verifies, and delivers everything salvage did not report lost, intact, in order.
      const again = d.add(await startGateway({ ...patch, storage: { path: dir, verifyOnStart: 'full' } }));
      const historian = d.add(await openClient(again.url, persistent));
      const expected = MESSAGES - reportedLost;
      await historian.waitForMessages(expected, { timeoutMs: 20_000 });
      await historian.publish('probe/x', 'x', { qos: 1 }); // a round trip: anything beyond `expected` has arrived
      const ids = historian.payloads().map((p) => Number(p.slice(1, p.indexOf(';'))));
      expect(ids).toHaveLength(expected);
      expect(ids).toEqual([...ids].sort((a, b) => a - b));
      expect(new Set(ids).size).toBe(ids.length);
      expect(historian.payloads().every((p) => p.length === 1024 && p.endsWith('x'))).toBe(true);
      rates.push(
        `seed ${seed} @${offset}: ${expected}/${MESSAGES} queued messages recovered; ${salvaged.stdout.split('\n').slice(1).join(' ').trim()}`,
      );
      await historian.stop();
      await again.stop();
    }
    console.log(`salvage over ${SEEDS.length} seeds:\n  ${rates.join('\n  ')}`);
    expect(rates.filter((r) => r.includes('recovered')).length).toBeGreaterThanOrEqual(SEEDS.length / 2);
  }, 300_000);

  it('skips a damaged queued message while running: never delivered, counted in the metrics, logged with its session and seq', async () => {
    const metricsPort = await freePort();
    const gw = d.add(
      await startGateway(
        { metrics: { host: '127.0.0.1', port: metricsPort }, broker: { sysIntervalS: 0 } },
        { logLevel: 'info' },
      ),
    );
    const sub = await openClient(gw.url, persistent);
    await sub.subscribe('plant/#', { qos: 1 });
    await sub.disconnect();
    const pub = d.add(await openClient(gw.url, { clientId: 'filler', protocolVersion: 5 }));
    for (let i = 0; i < 20; i++) await pub.publish('plant/line', `m${i};`.padEnd(300, 'y'), { qos: 1 });
    await pub.stop();
    await gw.stop();

    // One bit of message 7's payload flipped wherever it lies in the file (old page copies included): its value's
    // checksum fails, while LMDB's structure is intact, so the default quick check at start passes.
    const file = join(gw.dataDir, 'data.mdb');
    const bytes = readFileSync(file);
    let at = bytes.indexOf('m7;yyyy');
    expect(at).toBeGreaterThan(0);
    for (; at >= 0; at = bytes.indexOf('m7;yyyy', at + 1)) bytes[at + 100] ^= 0x01;
    writeFileSync(file, bytes);

    await gw.restart();
    const historian = d.add(await openClient(gw.url, persistent));
    await historian.waitForMessages(19);
    await historian.publish('probe/x', 'x', { qos: 1 });
    expect(historian.payloads().map((p) => p.slice(0, p.indexOf(';')))).toEqual(
      [...Array(20).keys()].filter((i) => i !== 7).map((i) => `m${i}`),
    );
    expect(historian.payloads().every((p) => /^m\d+;y+$/.test(p))).toBe(true); // nothing damaged delivered
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/^edgeferry_store_corrupt_records_total 1$/m);
    const line = gw
      .output()
      .split('\n')
      .find((l) => l.includes('damaged records in the store skipped'));
    expect(line, gw.output().slice(-2000)).toBeDefined();
    expect(JSON.parse(line!)).toMatchObject({ what: 'queued messages', clientIds: ['historian'], records: 1 });
  }, 60_000);

  it('salvage recovers the records under a damaged branch page, which no walk through LMDB can reach', async () => {
    const gw = d.add(await startGateway({ broker: { maxQueuedMessages: 0 } }));
    const sub = await openClient(gw.url, persistent);
    await sub.subscribe('plant/#', { qos: 1 });
    await sub.disconnect();
    const pub = d.add(await RawClient.connect(gw.port, { clientId: 'filler' }, { protocolVersion: 5 }));
    const total = 600;
    for (let id = 0; id < total; id += 50) {
      for (let i = 0; i < 50; i++)
        pub.publish('plant/line', `m${id + i};`.padEnd(1024, 'x'), { qos: 1, messageId: i + 1 });
      for (let i = 0; i < 50; i++) await pub.expect('puback');
    }
    pub.stop();
    await gw.stop();

    // The root page of the session queue's B-tree (a branch page: 600 records of 1 KiB fill some 200 leaves),
    // overwritten: every leaf is cut off, both walks through LMDB fail at once.
    const file = join(gw.dataDir, 'data.mdb');
    const bytes = readFileSync(file);
    const root = namedDatabaseRoot(bytes, 'session-queue');
    expect(bytes.readUInt16LE(root * PAGE + 18)).toBe(0x01); // a branch page
    bytes.fill(0x5a, root * PAGE, (root + 1) * PAGE);
    writeFileSync(file, bytes);
    const start = spawnSync(process.execPath, [CLI, '--config', gw.configFile], { encoding: 'utf8', timeout: 8000 });
    expect(start.status, start.stdout + start.stderr).toBe(3);
    expect((start.stdout + start.stderr).replaceAll('\\"', '"')).toContain(
      `database "session-queue": page ${root} carries the page number`,
    );

    const salvaged = await runCli(['store', 'salvage', '-c', gw.configFile]);
    expect(salvaged.code, salvaged.stderr).toBe(0);
    expect(salvaged.stdout).not.toMatch(/records lost/);
    await gw.restart();
    const historian = d.add(await openClient(gw.url, persistent));
    await historian.waitForMessages(total, { timeoutMs: 20_000 });
    expect(historian.payloads().map((p) => Number(p.slice(1, p.indexOf(';'))))).toEqual([...Array(total).keys()]);
  }, 120_000);

  it('refuses a store whose counter record is damaged, whatever verifyOnStart says, and salvage counts it again from the records', async () => {
    const deadPort = await freePort();
    const patch = {
      bridges: [
        {
          name: 'central',
          remote: { urls: [`mqtt://127.0.0.1:${deadPort}`] },
          topics: [{ filter: 'plant/#', direction: 'out', qos: 1 }],
        },
      ],
      storage: { verifyOnStart: 'off' },
    };
    const gw = d.add(await startGateway(patch));
    const pub = d.add(await openClient(gw.url, { clientId: 'filler', protocolVersion: 5 }));
    for (let i = 0; i < 30; i++) await pub.publish('plant/line', `m${i};`, { qos: 1 });
    await pub.stop();
    await gw.stop();

    // One bit of the outbox's counter record flipped, in every copy of it in the file.
    const file = join(gw.dataDir, 'data.mdb');
    const bytes = readFileSync(file);
    let copies = 0;
    // (Only the outbox's record: the journal's own record, `{"lastSeq":30,"cursors":...}`, keeps its slot.)
    const record = '{"lastSeq":30,"messages":';
    for (let at = bytes.indexOf(record); at >= 0; at = bytes.indexOf(record, at + 1), copies++) bytes[at + 12] ^= 0x01;
    expect(copies).toBeGreaterThan(0);
    writeFileSync(file, bytes);
    const start = spawnSync(process.execPath, [CLI, '--config', gw.configFile], { encoding: 'utf8', timeout: 8000 });
    const said = (start.stdout + start.stderr).replaceAll('\\"', '"');
    expect(start.status, said).toBe(3);
    expect(said).toContain(`the data directory ${gw.dataDir} is damaged`);
    expect(said).toContain('store metadata "outbox:central": 1 damaged record');

    const salvaged = await runCli(['store', 'salvage', '-c', gw.configFile]);
    expect(salvaged.code, salvaged.stderr).toBe(0);
    const listed = await runCli(['store', 'list', '-c', gw.configFile]);
    expect(listed.stdout).toMatch(/outbox central: 30 messages/);
    // The outbox goes on after its last entry: a new message is the 31st.
    await gw.restart();
    const again = d.add(await openClient(gw.url, { clientId: 'filler', protocolVersion: 5 }));
    await again.publish('plant/line', 'm30;', { qos: 1 });
    await again.stop();
    await gw.stop();
    expect((await runCli(['store', 'list', '-c', gw.configFile])).stdout).toMatch(/outbox central: 31 messages/);
  }, 60_000);
});
