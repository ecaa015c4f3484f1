/**
 * Crash safety of the LMDB store with real processes: SIGKILL while appending and acknowledging (every append
 * whose promise resolved survives, in order and intact; counters match the content), and a really full disk
 * (tmpfs in a private mount namespace; skipped where mounting is not allowed).
 * Node 20 cannot run TypeScript in a child, so the store is compiled once into node_modules/.cache (inside the
 * repository so the compiled file resolves `lmdb`).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openLmdbStore } from '../../src/store/lmdb/open.js';
import type { LmdbStore } from '../../src/store/lmdb/store.js';
import { createMessage } from '../../src/protocol/message.js';
import { writeFormat1Outbox } from '../helpers/format1-outbox.js';
import { removeDir, tempDir as makeTempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';
import type { Store } from '../../src/store/types.js';
import { StoreError } from '../../src/util/errors.js';
import { silentLogger } from '../../src/util/logger.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const writerFixture = path.join(root, 'test/fixtures/outbox-writer.mjs');
const diskFullFixture = path.join(root, 'test/fixtures/store-disk-full.mjs');
const moverFixture = path.join(root, 'test/fixtures/dead-letter-mover.mjs');
const LIMITS = { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'drop-oldest' as const };

let buildDir: string;
let compiledStore: string;
const children: ChildProcess[] = [];
const tempDirs: string[] = [];
const stores: Store[] = [];

beforeAll(() => {
  fs.mkdirSync(path.join(root, 'node_modules/.cache'), { recursive: true });
  buildDir = makeTempDir('edgeferry-store-test-', path.join(root, 'node_modules/.cache'));
  const tsc = spawnSync(
    process.execPath,
    [
      path.join(root, 'node_modules/typescript/bin/tsc'),
      '--outDir',
      buildDir,
      '--rootDir',
      root,
      '--module',
      'NodeNext',
      '--moduleResolution',
      'NodeNext',
      '--target',
      'ES2022',
      '--strict',
      '--skipLibCheck',
      '--types',
      'node',
      path.join(root, 'src/store/lmdb/open.ts'),
    ],
    { cwd: root, encoding: 'utf8' },
  );
  if (tsc.status !== 0) throw new Error(`compiling the store failed:\n${tsc.stdout}\n${tsc.stderr}`);
  compiledStore = path.join(buildDir, 'src/store/lmdb/open.js');
}, 180_000);

afterAll(() => {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
  if (buildDir !== undefined) removeDir(buildDir);
});

afterEach(async () => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const s of stores.splice(0)) await s.close();
  for (const d of tempDirs.splice(0)) removeDir(d);
});

function tempDir(): string {
  const d = makeTempDir('edgeferry-crash-');
  tempDirs.push(d);
  return d;
}

function payloadFor(id: number): string {
  return `${id}:${'x'.repeat(id % 300)}`;
}

function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
}

/**
 * Starts a fixture process (tracked for cleanup) and waits for its `ready` line; `out` keeps collecting its output.
 */
async function startFixture(
  args: string[],
  what: string,
): Promise<{ child: ChildProcess; out: { stdout: string; stderr: string } }> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  const out = { stdout: '', stderr: '' };
  child.stdout!.on('data', (d: Buffer) => (out.stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out.stderr += d.toString()));
  await waitFor(() => out.stdout.includes('ready\n') || child.exitCode !== null, 30_000, { message: what });
  expect(child.exitCode, out.stderr).toBeNull();
  return { child, out };
}

describe('LMDB store under crashes', () => {
  it('moves outboxes of store format 1 to the journal through repeated SIGKILLs: every live entry once, in order', async () => {
    const dir = tempDir();
    const names = ['central', 'historian', 'cloud'];
    const n = 20_000;
    const setup = (await openLmdbStore({ path: dir, sync: 'relaxed', maxBytes: 0, log: silentLogger })) as LmdbStore;
    const payloads = (name: string): string[] => Array.from({ length: n }, (_, i) => `${name}:${i}`);
    for (const name of names) {
      const messages = payloads(name).map((p) =>
        createMessage({ topic: 'plant/t', payload: Buffer.from(p), qos: 1, origin: 'c' }),
      );
      writeFormat1Outbox(setup, { name, messages, chunkEntries: 128, floor: 1, removed: [], released: [] });
    }
    await setup.close();

    // Kill the opener (which migrates) until one open completes: a few ms after it says it moved an outbox, so
    // each kill lands while the next one moves (a timer alone missed the whole migration on a fast machine).
    const opener = `const { openLmdbStore } = await import(process.argv[1]);
      const log = { child: () => log, trace() {}, debug() {}, info(o, m) { if (String(m).startsWith('outbox moved')) process.stdout.write('moved\\n'); }, warn() {}, error() {}, fatal() {} };
      const s = await openLmdbStore({ path: process.argv[2], sync: 'full', maxBytes: 0, log });
      process.stdout.write('opened\\n');
      await s.close();`;
    let kills = 0;
    for (let round = 0; round < 10; round++) {
      const child = spawn(process.execPath, ['--input-type=module', '-e', opener, compiledStore, dir], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      let stdout = '';
      let stderr = '';
      const moved = new Promise<void>((resolve) => {
        child.stdout!.on('data', (d: Buffer) => {
          stdout += d.toString();
          if (stdout.includes('moved')) resolve();
        });
      });
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      await Promise.race([moved, exited(child)]);
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 20)));
      if (child.exitCode === null && !stdout.includes('opened')) {
        child.kill('SIGKILL');
        kills++;
      }
      await exited(child);
      if (stdout.includes('opened')) break;
      expect(stderr).toBe('');
    }
    expect(kills).toBeGreaterThan(0);

    const store = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger });
    stores.push(store);
    for (const name of names) {
      const box = store.outbox(name, LIMITS);
      expect(box.peek(n + 1).map((e) => e.msg.payload.toString())).toEqual(payloads(name));
      expect(box.depth.messages).toBe(n);
    }
    expect(store.journalDepth!().entries).toBe(3 * n);
  }, 120_000);

  // With compaction at once (its age 0), the kills also land while runs of chunks are merged and compressed, and
  // while a run is still growing (docs/architecture.md#compaction).
  it.each<[string, number | undefined]>([
    ['', undefined],
    [', with chunks compacted as they go', 0],
  ])(
    'keeps every append whose promise resolved, in order and intact, across repeated SIGKILLs%s',
    async (_what, compactAfterMs) => {
      const dir = tempDir();
      let compressedSeen = false;
      const acked = new Set<number>();
      const removeRequested = new Set<number>();
      const removeResolved = new Set<number>();
      let maxSeqSeen = 0;
      const rounds = 8;
      for (let round = 0; round < rounds; round++) {
        const args = [writerFixture, compiledStore, dir, String(round * 10_000_000)];
        if (compactAfterMs !== undefined) args.push(String(compactAfterMs));
        const { child, out } = await startFixture(args, 'the writer to open the store');

        if (round === 0) {
          // While the writer holds the directory, a second opener is refused instead of corrupting counters.
          const err = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger }).then(
            (s) => s.close().then(() => undefined),
            (e: unknown) => e,
          );
          expect(err).toBeInstanceOf(StoreError);
          expect((err as StoreError).code).toBe('EF_STORE_IN_USE');
          expect((err as StoreError).message).toContain(`in use by another edgeferry, process ${child.pid}`);
        }

        // Let it run for a random time, then kill it without warning.
        const runMs = 150 + Math.floor(Math.random() * 450);
        const startedOk = out.stdout.split('\n').filter((l) => l.startsWith('ok ')).length;
        await new Promise((r) => setTimeout(r, runMs));
        child.kill('SIGKILL');
        await exited(child);
        expect(child.signalCode).toBe('SIGKILL');

        const lines = out.stdout.split('\n');
        lines.pop(); // the last line may be cut short by the kill
        for (const line of lines) {
          const [kind, ...rest] = line.split(' ');
          if (kind === 'fatal') throw new Error(`writer reported: ${line}\n${out.stderr}`);
          if (kind === 'ok') {
            const [first, last] = rest.map(Number);
            for (let id = first; id <= last; id++) acked.add(id);
          } else if (kind === 'rmreq' || kind === 'rmok') {
            for (const pair of rest) {
              const [seq, id] = pair.split(':').map(Number);
              maxSeqSeen = Math.max(maxSeqSeen, seq);
              (kind === 'rmreq' ? removeRequested : removeResolved).add(id);
            }
          }
        }
        expect(lines.filter((l) => l.startsWith('ok ')).length).toBeGreaterThan(startedOk); // it made progress

        // Reopen and check the invariants.
        const store = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger });
        const box = store.outbox('central', LIMITS);
        const entries = box.peek(Number.MAX_SAFE_INTEGER);
        const present = new Set<number>();
        let previousId = -1;
        let bytes = 0;
        for (const e of entries) {
          const id = Number(e.msg.topic.slice(2));
          expect(e.msg.payload.toString(), `payload of ${id}`).toBe(payloadFor(id));
          expect(id, 'ids keep their append order').toBeGreaterThan(previousId);
          previousId = id;
          present.add(id);
          bytes += e.bytes;
          maxSeqSeen = Math.max(maxSeqSeen, e.seq);
        }
        const missing = [...acked].filter((id) => !removeRequested.has(id) && !present.has(id));
        expect(missing, 'acknowledged appends lost').toEqual([]);
        const resurrected = [...removeResolved].filter((id) => present.has(id));
        expect(resurrected, 'entries whose removal resolved came back').toEqual([]);
        // Counters were written in the same transactions as the entries, so they match without a rescan.
        expect(box.depth.messages).toBe(entries.length);
        expect(box.depth.bytes).toBe(bytes);
        // Sequence numbers continue above everything ever seen, even entries that were removed.
        await box.append({ topic: 't/probe', payload: Buffer.from('p'), qos: 1, retain: false, origin: 'test' });
        const probe = box.peek(1, entries.length > 0 ? entries[entries.length - 1].seq : 0)[0];
        expect(probe.msg.topic).toBe('t/probe');
        expect(probe.seq).toBeGreaterThan(maxSeqSeen);
        maxSeqSeen = probe.seq;
        await box.remove([probe.seq]);
        const journal = store.journalDepth!();
        compressedSeen ||= journal.logicalBytes > journal.bytes;
        await store.close();
      }
      expect(acked.size).toBeGreaterThan(rounds * 10);
      // (Without the short age too, at times: the test's own opens compact what is older than 5 s.)
      expect(compressedSeen || compactAfterMs === undefined, 'compacted chunks were read back').toBe(true);
    },
    240_000,
  );

  it('keeps each moved entry (Outbox.moveTo, the dead-letter requeue) in exactly one of the two outboxes across repeated SIGKILLs', async () => {
    const dir = tempDir();
    const count = 5000;
    let moves = 0;
    for (let round = 0; round < 6; round++) {
      const { child, out } = await startFixture(
        [moverFixture, compiledStore, dir, String(count)],
        'the mover to open the store',
      );
      const before = (out.stdout.match(/^moved /gm) ?? []).length;
      await new Promise((r) => setTimeout(r, 150 + Math.floor(Math.random() * 450)));
      child.kill('SIGKILL');
      await exited(child);
      expect(out.stdout, out.stderr).not.toContain('fatal');
      const after = (out.stdout.match(/^moved [1-9]/gm) ?? []).length;
      expect(after, 'it moved entries before the kill').toBeGreaterThan(before);
      moves += after;

      const store = await openLmdbStore({ path: dir, sync: 'full', maxBytes: 0, log: silentLogger });
      const ids: number[] = [];
      for (const name of ['central.dead-letter', 'central']) {
        const box = store.outbox(name, LIMITS);
        const entries = box.peek(Number.MAX_SAFE_INTEGER);
        let bytes = 0;
        for (const e of entries) {
          const id = Number(e.msg.topic.slice(2));
          expect(e.msg.payload.toString(), `payload of ${id}`).toBe(`${id}:${'x'.repeat(id % 200)}`);
          ids.push(id);
          bytes += e.bytes;
        }
        // The counters were written in the transactions that moved the entries.
        expect([box.depth.messages, box.depth.bytes], name).toEqual([entries.length, bytes]);
      }
      expect(ids.length, 'entries in both outboxes or in neither').toBe(count);
      expect(new Set(ids).size).toBe(count);
      await store.close();
    }
    expect(moves).toBeGreaterThan(12);
  }, 240_000);

  it('turns a full disk into rejected writes (EF_STORE_FULL), no crash, and recovers when space is freed', async (ctx) => {
    const dir = tempDir();
    const probe = spawnSync('unshare', ['-m', 'sh', '-c', 'mount -t tmpfs -o size=1m tmpfs "$1"', 'sh', dir], {
      encoding: 'utf8',
    });
    if (probe.error !== undefined || probe.status !== 0) {
      ctx.skip(`needs root and mount namespaces for a small tmpfs (${probe.error?.message ?? probe.stderr.trim()})`);
      return;
    }
    const child = spawn(
      'unshare',
      [
        '-m',
        'sh',
        '-c',
        'mount -t tmpfs -o size=6m tmpfs "$1" && exec "$2" "$3" "$4" "$1"',
        'sh',
        dir,
        process.execPath,
        diskFullFixture,
        compiledStore,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(child);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    await exited(child);
    expect(child.exitCode, stderr).toBe(0);
    const result = JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, unknown>;
    expect(result.unhandled, 'unhandled rejections').toEqual([]);
    expect(result.errorCode).toBe('EF_STORE_FULL');
    expect(result.acked as number).toBeGreaterThan(1000); // the disk held a few MB before it filled
    // The failed batch was rolled back in memory: counters and content agree with what was acknowledged.
    expect(result.depthAfterFailure).toBe(result.acked);
    expect(result.peekAfterFailure).toBe(result.acked);
    expect(result.removed).toBe(Math.floor((result.acked as number) / 2));
    const expected = (result.acked as number) - (result.removed as number) + (result.appendedAfter as number);
    expect(result.afterReopen).toBe(expected);
    expect(result.depthAfterReopen).toBe(expected);
    expect(result.intact).toBe(true);
    // One warning for the episode, and its end once space was freed; nothing per refused append.
    expect(
      (result.logged as string[]).filter((line) => line.includes('store full') || line.includes('accepts messages')),
    ).toEqual([
      'store full (the disk is full): new messages are refused until there is room',
      'store accepts messages again (the disk has room)',
    ]);
    // Report what freeing space achieved (LMDB may need free pages even to delete).
    console.log(
      `disk full: acked ${String(result.acked)}, then ${JSON.stringify(result.errors)}; appended after freeing: ${String(result.appendedAfter)}`,
    );
  }, 120_000);
});
