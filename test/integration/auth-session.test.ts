/**
 * Authorization follows the session, not the connection: a persistent session's deliveries answer to the ACL in
 * force now (after a restart, after a reload, while offline), and a session belongs to the identity that made it.
 * Real gateway processes, a password file made by Debian's mosquitto_passwd, real restarts and SIGHUP.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, startGateway, type Gateway } from '../helpers/gateway.js';
import { openClient, VERSIONS, type TestClient } from '../helpers/mqtt-client.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

const PASSWORDS = { reader: 'reader-secret', writer: 'writer-secret', bob: 'bob-secret', alice: 'alice-secret' };
type User = keyof typeof PASSWORDS;

async function authGateway(acl: string): Promise<{ gw: Gateway; aclFile: string }> {
  const dir = d.tempDir('edgeferry-auth-session-');
  const passwordFile = join(dir, 'passwd');
  for (const [i, [user, password]] of Object.entries(PASSWORDS).entries()) {
    execFileSync('mosquitto_passwd', [...(i === 0 ? ['-c'] : []), '-b', passwordFile, user, password], {
      stdio: 'pipe',
    });
  }
  const aclFile = join(dir, 'acl');
  writeFileSync(aclFile, acl);
  const gw = d.add(
    await startGateway({ auth: { passwordFile, aclFile }, broker: { sysIntervalS: 0 } }, { logLevel: 'info' }),
  );
  return { gw, aclFile };
}

/** A persistent session (3.1.1 clean session 0, MQTT 5 session expiry 1 h). */
function persistent(user: User, clientId: string, version: 4 | 5) {
  return {
    username: user,
    password: PASSWORDS[user],
    clientId,
    protocolVersion: version,
    clean: false,
    ...(version === 5 ? { properties: { sessionExpiryInterval: 3600 } } : {}),
  };
}

function sessionPresent(c: TestClient): boolean {
  return c.connack.sessionPresent;
}

async function sighup(gw: Gateway): Promise<void> {
  const reloaded = () => logLines(gw).filter((l) => l.msg === 'config reloaded').length;
  const before = reloaded();
  gw.proc.kill('SIGHUP');
  await waitFor(() => reloaded() > before, 10_000, {
    message: () => `config reloaded after SIGHUP in:\n${gw.output()}`,
  });
}

/**
 * Publishes `topics` (QoS 1) then a marker readable by the reader; resolves with what the reader got up to the
 * marker: anything sent before it would have arrived before it [MQTT-4.6.0-6].
 */
async function receivedBefore(reader: TestClient, publisher: TestClient, marker: string): Promise<string[]> {
  await publisher.publish(marker, 'marker', { qos: 1 });
  await waitFor(() => reader.received().some((m) => m.topic === marker), 5000, {
    message: () => `marker ${marker}, got ${JSON.stringify(reader.received().map((m) => m.topic))}`,
  });
  return reader
    .received()
    .map((m) => m.topic)
    .filter((t) => t !== marker);
}

describe('authorization follows the session', { timeout: 60_000 }, () => {
  for (const version of VERSIONS) {
    it(`checks every delivery to a session restored after a restart against the ACL (MQTT ${version === 5 ? '5' : '3.1.1'})`, async () => {
      const { gw } = await authGateway(
        ['user reader', 'topic read a/b', 'topic read marker', '', 'user writer', 'topic readwrite #', ''].join('\n'),
      );
      const first = await openClient(gw.url, persistent('reader', 'reader-hist', version));
      // Granted: a/b is readable through it; each message is checked on its own topic.
      expect(await first.subscribe('#', { qos: 1 })).toEqual([1]);
      await first.disconnect();
      await gw.restart();

      const writer = d.add(
        await openClient(gw.url, { username: 'writer', password: PASSWORDS.writer, protocolVersion: 5 }),
      );
      for (const topic of ['secret/p1', 'a/b', 'plant/recipe']) await writer.publish(topic, `to ${topic}`, { qos: 1 });
      const reader = d.add(await openClient(gw.url, persistent('reader', 'reader-hist', version)));
      expect(sessionPresent(reader)).toBe(true);
      expect(await receivedBefore(reader, writer, 'marker')).toEqual(['a/b']);
    });
  }

  it('stops an offline session from collecting what a reload revoked, and drops what it queued before (the rules of now decide)', async () => {
    const v1 = ['user reader', 'topic read a/#', 'topic read marker', '', 'user writer', 'topic readwrite #', ''].join(
      '\n',
    );
    const v2 = ['user reader', 'topic read b/#', 'topic read marker', '', 'user writer', 'topic readwrite #', ''].join(
      '\n',
    );
    const { gw, aclFile } = await authGateway(v1);
    const first = await openClient(gw.url, persistent('reader', 'reader-offline', 5));
    expect(await first.subscribe('+/#', { qos: 1 })).toEqual([1]);
    await first.disconnect();
    const writer = d.add(
      await openClient(gw.url, { username: 'writer', password: PASSWORDS.writer, protocolVersion: 5 }),
    );
    await writer.publish('a/1', 'queued under v1', { qos: 1 });

    writeFileSync(aclFile, v2);
    await sighup(gw);
    await writer.publish('a/2', 'revoked', { qos: 1 });
    await writer.publish('b/1', 'granted by v2', { qos: 1 });
    const reader = d.add(await openClient(gw.url, persistent('reader', 'reader-offline', 5)));
    expect(sessionPresent(reader)).toBe(true);
    expect(await receivedBefore(reader, writer, 'marker')).toEqual(['b/1']);
    expect(
      logLines(gw).filter((l) => l.mod === 'audit' && l.msg === 'authentication and ACL rules reloaded'),
    ).toHaveLength(1);
  });

  it("gives a client of another identity a new, empty session under bob's client id: bob's queue is discarded, counted and audited, also after a restart", async () => {
    const acl = [
      'user bob',
      'topic readwrite sensors/#',
      '',
      'user alice',
      'topic write #',
      'topic read marker',
      '',
      'user writer',
      'topic readwrite #',
      '',
    ].join('\n');
    const { gw } = await authGateway(acl);
    const bob = await openClient(gw.url, persistent('bob', 'bob-hist', 5));
    expect(await bob.subscribe('sensors/#', { qos: 1 })).toEqual([1]);
    await bob.disconnect();
    const writer = d.add(
      await openClient(gw.url, { username: 'writer', password: PASSWORDS.writer, protocolVersion: 5 }),
    );
    for (let i = 1; i <= 3; i++) await writer.publish(`sensors/t${i}`, `for bob ${i}`, { qos: 1 });
    // The owner is stored with the session: a restart keeps it.
    await gw.restart();

    // alice may only write: she must not get bob's session, nor what was queued for him.
    const alice = await openClient(gw.url, persistent('alice', 'bob-hist', 5));
    expect(sessionPresent(alice)).toBe(false);
    expect(await alice.subscribe('marker', { qos: 1 })).toEqual([1]);
    const writer2 = d.add(
      await openClient(gw.url, { username: 'writer', password: PASSWORDS.writer, protocolVersion: 5 }),
    );
    expect(await receivedBefore(alice, writer2, 'marker')).toEqual([]);
    await alice.disconnect();

    const audit = await waitFor(
      () => logLines(gw).find((l) => l.mod === 'audit' && String(l.msg).startsWith('session discarded')),
      5000,
      { message: () => `audit line for the discarded session in:\n${gw.output()}` },
    );
    expect(audit).toMatchObject({ clientId: 'bob-hist', owner: 'bob', by: 'alice', droppedMessages: 3 });

    // bob comes back: his session went with alice's connect (alice's took its place), so none is present for him.
    const bobAgain = d.add(await openClient(gw.url, persistent('bob', 'bob-hist', 5)));
    expect(sessionPresent(bobAgain)).toBe(false);
    expect(await bobAgain.subscribe('sensors/#', { qos: 1 })).toEqual([1]);
    expect(await receivedBefore(bobAgain, writer2, 'sensors/marker')).toEqual([]);

    // The same user resumes his own session.
    await bobAgain.disconnect();
    const bobResumes = d.add(await openClient(gw.url, persistent('bob', 'bob-hist', 5)));
    expect(sessionPresent(bobResumes)).toBe(true);
  });

  it('treats an anonymous client and a named one as different owners of a client id', async () => {
    const dir = d.tempDir('edgeferry-anon-owner-');
    const aclFile = join(dir, 'acl');
    writeFileSync(aclFile, ['topic readwrite #', '', 'user named', 'topic readwrite #', ''].join('\n'));
    // No password file: loopback clients are anonymous or who they say they are (as in Mosquitto).
    const gw = d.add(await startGateway({ auth: { aclFile }, broker: { sysIntervalS: 0 } }, { logLevel: 'info' }));
    const named = await openClient(gw.url, {
      username: 'named',
      clientId: 'shared-id',
      clean: false,
      protocolVersion: 4,
    });
    expect(await named.subscribe('plant/#', { qos: 1 })).toEqual([1]);
    await named.disconnect();
    const publisher = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await publisher.publish('plant/x', 'for named', { qos: 1 });
    const anon = d.add(await openClient(gw.url, { clientId: 'shared-id', clean: false, protocolVersion: 4 }));
    expect(sessionPresent(anon)).toBe(false);
    expect(await anon.subscribe('marker', { qos: 1 })).toEqual([1]);
    expect(await receivedBefore(anon, publisher, 'marker')).toEqual([]);
  });
});
