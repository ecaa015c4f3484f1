/**
 * Security: authentication with a password file written by Debian's `mosquitto_passwd`, failed-login
 * codes, the login throttle (src/util/login-throttle.ts) and audit lines, and authorization with a Mosquitto-format ACL file (publish, subscribe per
 * filter, `$share` inner filters, `%u`/`%c` patterns, per-message read filtering including retained messages).
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, startGateway } from '../helpers/gateway.js';
import {
  RawClient,
  connectRefused,
  openClient,
  runToolOk,
  startMosquittoSub,
  type TestClient,
} from '../helpers/mqtt-client.js';
import { RawClient as PacketClient, connectPacket } from '../helpers/raw-client.js';
import { expectSlowedChecks } from '../helpers/login-throttle.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

const PASSWORDS = {
  admin: 'admin-secret',
  alice: 'alice secret with spaces',
  bob: 'bob-secret',
  legacy: 'legacy-secret',
  iter: 'iter-secret',
};

/** A password file made by mosquitto_passwd: PBKDF2 `$7$` lines (101 and 1000 iterations) and one legacy `$6$` line. */
function mosquittoPasswordFile(dir: string): string {
  const file = join(dir, 'passwd');
  const passwd = (args: string[]) => execFileSync('mosquitto_passwd', args, { stdio: 'pipe' });
  passwd(['-c', '-b', file, 'admin', PASSWORDS.admin]);
  passwd(['-b', file, 'alice', PASSWORDS.alice]);
  passwd(['-b', file, 'bob', PASSWORDS.bob]);
  passwd(['-H', 'sha512', '-b', file, 'legacy', PASSWORDS.legacy]);
  passwd(['-H', 'sha512-pbkdf2', '-I', '1000', '-b', file, 'iter', PASSWORDS.iter]);
  return file;
}

const ACL = [
  '# anonymous clients: only public/#',
  'topic read public/#',
  '',
  'user admin',
  'topic readwrite #',
  '',
  'user alice',
  'topic readwrite sensors/#',
  'topic deny sensors/secret/#',
  'topic read public/#',
  '',
  'user bob',
  'topic read sensors/#',
  'topic write sensors/bob/#',
  '',
  'pattern readwrite users/%u/#',
  'pattern write devices/%c/#',
  '',
].join('\n');

/**
 * A gateway with auth: listeners[0] is loopback TCP that explicitly allows anonymous clients (with a password file
 * set, the default is to refuse them, as in Mosquitto 2), `strictPort` a TCP listener with the default.
 */
async function authGateway(options: { acl?: string; logLevel?: string } = {}) {
  const dir = d.tempDir('edgeferry-auth-');
  const passwordFile = mosquittoPasswordFile(dir);
  let aclFile: string | undefined;
  if (options.acl !== undefined) {
    aclFile = join(dir, 'acl');
    writeFileSync(aclFile, options.acl);
  }
  const port = await freePort();
  const strictPort = await freePort();
  const gw = d.add(
    await startGateway(
      {
        listeners: [
          { type: 'tcp', host: '127.0.0.1', port, allowAnonymous: true },
          { type: 'tcp', host: '127.0.0.1', port: strictPort },
        ],
        auth: { passwordFile, aclFile },
        broker: { sysIntervalS: 0 },
      },
      { logLevel: options.logLevel },
    ),
  );
  return { gw, strictUrl: `mqtt://127.0.0.1:${strictPort}`, strictPort };
}

function login(user: keyof typeof PASSWORDS, extra: Record<string, unknown> = {}) {
  return { username: user, password: PASSWORDS[user], protocolVersion: 5 as const, ...extra };
}

/** SUBACK codes of one SUBSCRIBE; MQTT.js rejects when any filter was refused, with the SUBACK attached. */
async function subackCodes(c: TestClient, filters: string[], qos: 0 | 1 | 2 = 1): Promise<number[]> {
  try {
    return await c.subscribe(filters, { qos });
  } catch (err) {
    const granted = (err as { packet?: { granted?: number[] } }).packet?.granted;
    if (granted) return granted;
    throw err;
  }
}

/** The PUBACK reason code of a QoS 1 publish (0 = success). */
async function pubackCode(c: TestClient, topic: string, payload: string, retain = false): Promise<number> {
  try {
    await c.publish(topic, payload, { qos: 1, retain });
    return 0;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code === 'number') return code;
    throw err;
  }
}

describe('authentication with a mosquitto_passwd file', { timeout: 60_000 }, () => {
  it('accepts users from a file made by Debian mosquitto_passwd ($7$ at 101 and 1000 iterations, $6$), over MQTT 5, 3.1.1 and mosquitto_pub', async () => {
    const { strictUrl, strictPort } = await authGateway();
    const v5 = d.add(await openClient(strictUrl, login('alice')));
    expect(v5.connack.reasonCode ?? 0).toBe(0);
    const v4 = d.add(await openClient(strictUrl, login('legacy', { protocolVersion: 4 })));
    expect(v4.connack.returnCode ?? 0).toBe(0);
    d.add(await openClient(strictUrl, login('iter')));

    const sub = d.add(
      await startMosquittoSub(strictPort, ['-u', 'bob', '-P', PASSWORDS.bob, '-t', 'auth/#', '-q', '1']),
    );
    await runToolOk('mosquitto_pub', [
      '-h',
      '127.0.0.1',
      '-p',
      String(strictPort),
      '-u',
      'admin',
      '-P',
      PASSWORDS.admin,
      '-t',
      'auth/x',
      '-q',
      '1',
      '-m',
      'ok',
    ]);
    const [m] = await sub.waitForMessages(1);
    expect(m).toMatchObject({ topic: 'auth/x', payload: 'ok' });
  });

  it('refuses a wrong password or unknown user with CONNACK 0x86 (MQTT 5) and 4 (3.1.1), anonymous clients on a strict listener with 0x87 / 5', async () => {
    const { strictUrl, strictPort } = await authGateway();
    expect(await connectRefused(strictUrl, { username: 'alice', password: 'wrong', protocolVersion: 5 })).toBe(0x86);
    expect(await connectRefused(strictUrl, { username: 'alice', password: 'wrong', protocolVersion: 4 })).toBe(4);
    expect(await connectRefused(strictUrl, { username: 'nobody', password: PASSWORDS.alice, protocolVersion: 5 })).toBe(
      0x86,
    );
    // A user name without a password is not enough (raw CONNECT: MQTT.js would always send what it is given).
    const { raw, connack } = await RawClient.connect(strictPort, 5, { clientId: 'no-password', username: 'alice' });
    d.add(raw);
    expect(connack.reasonCode).toBe(0x86);
    await raw.waitForClose();
    // Four failures do not lock out this address: the right password still gets in.
    d.add(await openClient(strictUrl, login('bob')));
    // Anonymous clients are refused on the strict listener.
    expect(await connectRefused(strictUrl, { protocolVersion: 5 })).toBe(0x87);
    expect(await connectRefused(strictUrl, { protocolVersion: 4 })).toBe(5);
  });

  it('logs each refused login in the audit log (mod: audit) with user and address, never the password, and a name that is no user as <unknown>', async () => {
    const { gw, strictUrl } = await authGateway();
    const wrong = 'hunter2-NOT-the-password';
    expect(await connectRefused(strictUrl, { username: 'alice', password: wrong, protocolVersion: 5 })).toBe(0x86);
    // People type passwords into the user field: a user name that is not in the password file is not logged.
    const typedIntoUserField = 'Sup3r-Secret-typed-as-user';
    expect(
      await connectRefused(strictUrl, {
        username: typedIntoUserField,
        password: wrong,
        protocolVersion: 4,
        clientId: 'mallory-client',
      }),
    ).toBe(4);
    d.add(await openClient(strictUrl, login('alice')));
    const refused = await waitFor(
      () => {
        const lines = logLines(gw).filter((l) => l.mod === 'audit' && l.msg === 'login refused');
        return lines.length >= 2 ? lines : undefined;
      },
      5000,
      { message: () => `two audit lines for refused logins in:\n${gw.output()}` },
    );
    expect(refused.map((l) => l.username)).toEqual(['alice', '<unknown>']);
    expect(gw.output()).not.toContain(typedIntoUserField);
    expect(refused[1]).toMatchObject({ clientId: 'mallory-client', remote: '127.0.0.1' });
    for (const line of refused) expect(Object.keys(line)).not.toContain('password');
    expect(gw.output()).not.toContain(wrong);
    expect(gw.output()).not.toContain(PASSWORDS.alice);
  });

  it('checks five of 90 CONNECTs sent at once for one user together, the rest one at a time 250 ms, 500 ms, 1 s apart or refused unchecked (0x9F); another user gets in meanwhile', async () => {
    const { gw, strictUrl, strictPort } = await authGateway();
    // All 90 sockets open first, then the CONNECTs written in one go; the right password is the 20th.
    const burst = await Promise.all(
      Array.from({ length: 90 }, () => PacketClient.open(strictPort, { protocolVersion: 5 })),
    );
    for (const raw of burst) d.add(raw);
    burst.forEach((raw, i) =>
      raw.send(
        connectPacket(5, {
          clientId: `guess-${i}`,
          username: 'alice',
          password: Buffer.from(i === 19 ? PASSWORDS.alice : `guess-${i}`),
        }),
      ),
    );
    const codes = () => burst.map((raw) => raw.packets('connack')[0]?.reasonCode);
    const answered = () => codes().filter((c) => c !== undefined).length;
    // At most ten wait for their turn: the others are answered at once, most of them unchecked with 0x9F
    // Connection rate exceeded (MQTT 5 §3.2.2.2), for this user from this address only.
    await waitFor(() => answered() >= 80, 10_000, { message: () => `80 CONNACKs, got ${JSON.stringify(codes())}` });
    expect(codes().filter((c) => c === 0x9f).length).toBeGreaterThanOrEqual(70);
    // Another user's right password and an anonymous client from the same address get in while alice's still wait.
    d.add(await openClient(strictUrl, login('admin')));
    d.add(await openClient(gw.url, { protocolVersion: 5 }));
    expect(answered()).toBeLessThan(90);
    // Five checked together, then one at a time, each 250 ms, 500 ms, 1 s after the previous ended (the audit
    // log's times: the server's clock).
    const checkedAt = () =>
      logLines(gw)
        .filter(
          (l) =>
            l.mod === 'audit' && l.username === 'alice' && (l.msg === 'login' || l.why === 'bad user name or password'),
        )
        .map((l) => Number(l.time));
    await waitFor(() => checkedAt().length >= 8, 10_000, {
      message: () => `eight of alice's logins checked in:\n${gw.output()}`,
    });
    expectSlowedChecks(checkedAt());
  });

  it("never refuses a correct password because of failed logins of others from the same address, and slows a user's own after five failures", async () => {
    const { gw, strictUrl } = await authGateway({ logLevel: 'info' });
    // Any local program can send these: names that are no user, no account needed.
    for (let i = 0; i < 6; i++)
      expect(await connectRefused(strictUrl, { username: `nobody-${i}`, password: 'x', protocolVersion: 5 })).toBe(
        0x86,
      );
    for (let i = 0; i < 5; i++)
      expect(
        await connectRefused(strictUrl, { username: 'alice', password: `guess-${i}`, protocolVersion: 5 }),
        `attempt ${i + 1}`,
      ).toBe(0x86);
    d.add(await openClient(strictUrl, login('admin')));
    d.add(await openClient(strictUrl, login('bob', { protocolVersion: 4 })));
    d.add(await openClient(gw.url, { protocolVersion: 5 }));
    // alice's own right password after her five failures: slowed (250 ms after the last check ended, by the audit
    // log's times), not refused.
    d.add(await openClient(strictUrl, login('alice')));
    const audited = logLines(gw).filter((l) => l.mod === 'audit' && l.msg === 'login refused');
    expect(audited.map((l) => l.username)).toEqual([...Array(6).fill('<unknown>'), ...Array(5).fill('alice')]);
    const alice = await waitFor(
      () => {
        const lines = logLines(gw).filter((l) => l.mod === 'audit' && l.username === 'alice');
        return lines.some((l) => l.msg === 'login') ? lines : undefined;
      },
      5000,
      { message: "alice's login audited" },
    );
    expectSlowedChecks(alice.map((l) => Number(l.time)));
  });
});

describe('authorization with a Mosquitto ACL file', { timeout: 60_000 }, () => {
  it('answers a publish without write access with PUBACK 0x87 (MQTT 5), drops it silently for 3.1.1, and never delivers it', async () => {
    const { strictUrl } = await authGateway({ acl: ACL });
    const admin = d.add(await openClient(strictUrl, login('admin')));
    expect(await subackCodes(admin, ['#'])).toEqual([1]);
    const bob = d.add(await openClient(strictUrl, login('bob')));
    expect(await pubackCode(bob, 'sensors/alice/t', 'denied')).toBe(0x87);
    expect(await pubackCode(bob, 'sensors/bob/t', 'allowed')).toBe(0);
    const bob4 = d.add(await openClient(strictUrl, login('bob', { protocolVersion: 4, clientId: 'bob-v4' })));
    expect(await pubackCode(bob4, 'sensors/alice/t', 'denied-v4')).toBe(0);
    expect(await pubackCode(bob4, 'sensors/bob/t', 'allowed-v4')).toBe(0);
    // Clients never publish into $SYS, not even a user with readwrite #.
    expect(await pubackCode(admin, '$SYS/broker/uptime', 'forged')).toBe(0x87);
    await admin.waitForMessages(2);
    // A marker sent last: once it arrives, anything denied before it would have arrived too.
    await admin.publish('zz/marker', 'end', { qos: 1 });
    await admin.waitForMessages(3);
    expect(admin.payloads()).toEqual(['allowed', 'allowed-v4', 'end']);
  });

  it('filters delivery per message by read access, retained messages included', async () => {
    const { gw, strictUrl } = await authGateway({ acl: ACL });
    const admin = d.add(await openClient(strictUrl, login('admin')));
    // Retained before anyone subscribes: one readable by bob, one not.
    expect(await pubackCode(admin, 'sensors/r', 'retained-readable', true)).toBe(0);
    expect(await pubackCode(admin, 'plant/r', 'retained-hidden', true)).toBe(0);
    // bob has no deny rule, so `#` is accepted (it overlaps his grants) and each message is checked on its topic.
    const bob = d.add(await openClient(strictUrl, login('bob')));
    expect(await subackCodes(bob, ['#'])).toEqual([1]);
    await bob.waitForMessages(1);
    for (const topic of ['plant/a', 'sensors/a', 'users/alice/a', 'public/a', 'sensors/b']) {
      expect(await pubackCode(admin, topic, `live ${topic}`)).toBe(0);
    }
    await bob.waitForMessages(3);
    expect(bob.received().map((m) => [m.topic, m.payload, m.retain])).toEqual([
      ['sensors/r', 'retained-readable', true],
      ['sensors/a', 'live sensors/a', false],
      ['sensors/b', 'live sensors/b', false],
    ]);

    // Anonymous clients get the rules before the first `user` line: public/# only, so plant/# is refused and
    // `+/r` (accepted: it overlaps public/r) delivers neither retained message.
    const anon = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    expect(await subackCodes(anon, ['plant/#', '+/r', 'public/#'])).toEqual([0x87, 1, 1]);
    expect(await pubackCode(admin, 'public/b', 'for everyone')).toBe(0);
    await anon.waitForMessages(1);
    expect(anon.received().map((m) => [m.topic, m.retain])).toEqual([['public/b', false]]);
  });

  it('grants a subscription when some topic it matches is readable, filters each message, refuses it only when nothing it matches is readable, and checks $share filters on their inner filter', async () => {
    const { strictUrl } = await authGateway({ acl: ACL });
    const alice = d.add(await openClient(strictUrl, login('alice')));
    // alice: readwrite sensors/#, deny sensors/secret/#, read public/#. A dashboard subscribing # works (as in
    // Mosquitto); a filter inside the denied subtree or outside every grant is refused.
    expect(
      await subackCodes(alice, [
        '#',
        'sensors/#',
        'sensors/+/x',
        'sensors/secret/a',
        'sensors/secret/#',
        'sensors/public/#',
        'plant/#',
      ]),
    ).toEqual([1, 1, 1, 0x87, 0x87, 1, 0x87]);
    expect(
      await subackCodes(alice, ['$share/g/#', '$share/g/sensors/secret/#', '$share/g/sensors/+/x', '$share/g/plant/#']),
    ).toEqual([1, 0x87, 1, 0x87]);
    // MQTT 3.1.1 says 0x80 for the same refusals.
    const alice4 = d.add(await openClient(strictUrl, login('alice', { protocolVersion: 4, clientId: 'alice-v4' })));
    expect(await subackCodes(alice4, ['#', '$share/g/sensors/secret/#', 'sensors/public/#'])).toEqual([1, 0x80, 1]);
    // The deny also stops alice's own publishes, and holds back what others publish in the denied subtree.
    expect(await pubackCode(alice, 'sensors/secret/a', 'x')).toBe(0x87);
    const admin = d.add(await openClient(strictUrl, login('admin')));
    expect(await pubackCode(admin, 'sensors/secret/b', 'secret')).toBe(0);
    expect(await pubackCode(admin, 'plant/line4', 'not for alice')).toBe(0);
    expect(await pubackCode(alice, 'sensors/public/a', 'ok')).toBe(0);
    // alice: one copy through her merged normal subscriptions, one through the shared $share/g/#.
    await alice.waitForMessages(2);
    await alice4.waitForMessages(1);
    // A marker sent last: once it arrived, a denied message before it would have arrived too [MQTT-4.6.0-6].
    expect(await pubackCode(admin, 'sensors/zz', 'end')).toBe(0);
    await alice.waitForMessages(4);
    await alice4.waitForMessages(2);
    expect(alice.payloads()).toEqual(['ok', 'ok', 'end', 'end']);
    expect(alice4.payloads()).toEqual(['ok', 'end']);
  });

  it('lets a client subscribe # and +/+ with `topic readwrite #` + `topic deny test/nosubscribe`, retained messages included, and refuses test/nosubscribe', async () => {
    const { gw } = await authGateway({ acl: 'topic readwrite #\ntopic deny test/nosubscribe\n' });
    const anon = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'dashboard' }));
    expect(await pubackCode(anon, 'test/retained', 'kept', true)).toBe(0);
    expect(await subackCodes(anon, ['#'])).toEqual([1]);
    await anon.waitForMessages(1);
    expect(await subackCodes(anon, ['+/+'])).toEqual([1]);
    await anon.waitForMessages(2);
    expect(await subackCodes(anon, ['test/nosubscribe'])).toEqual([0x87]);
    expect(anon.received().map((m) => [m.topic, m.payload, m.retain])).toEqual([
      ['test/retained', 'kept', true],
      ['test/retained', 'kept', true],
    ]);
  });

  it('expands %u and %c in patterns, and never for a client id or user name holding + # or /', async () => {
    const { gw, strictUrl } = await authGateway({ acl: ACL });
    const alice = d.add(await openClient(strictUrl, login('alice', { clientId: 'dev1' })));
    // users/+/x overlaps users/alice/# (granted), so it is accepted and filtered per message; devices/dev1/# is
    // write-only for dev1.
    expect(await subackCodes(alice, ['users/alice/#', 'users/+/x', 'devices/dev1/#'])).toEqual([1, 1, 0x87]);
    expect(await pubackCode(alice, 'users/alice/a', 'own user tree')).toBe(0);
    expect(await pubackCode(alice, 'users/bob/a', 'x')).toBe(0x87);
    expect(await pubackCode(alice, 'devices/dev1/state', 'own device')).toBe(0);
    expect(await pubackCode(alice, 'devices/dev2/state', 'x')).toBe(0x87);
    const admin = d.add(await openClient(strictUrl, login('admin')));
    expect(await pubackCode(admin, 'users/bob/x', 'for bob only')).toBe(0);
    expect(await pubackCode(admin, 'users/alice/x', 'for alice')).toBe(0);
    // `pattern write devices/%c/#` with client id `+` would grant devices/+/# (CVE-2017-7650): it grants nothing.
    const wild = d.add(await openClient(strictUrl, login('bob', { clientId: '+' })));
    expect(await pubackCode(wild, 'devices/dev1/state', 'x')).toBe(0x87);
    expect(await subackCodes(wild, ['devices/+/state'])).toEqual([0x87]);
    // %u has no value for anonymous clients.
    const anon = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'anon-dev' }));
    expect(await pubackCode(anon, 'users//a', 'x')).toBe(0x87);
    expect(await pubackCode(anon, 'devices/anon-dev/state', 'anonymous device')).toBe(0);
    await alice.waitForMessages(2);
    expect(alice.payloads()).toEqual(['own user tree', 'for alice']);
  });

  it('does not deliver a will to a subscriber without read access to its topic', async () => {
    const { strictUrl } = await authGateway({ acl: ACL });
    const admin = d.add(await openClient(strictUrl, login('admin')));
    const bob = d.add(await openClient(strictUrl, login('bob')));
    expect(await subackCodes(admin, ['wills/#', 'sensors/#'])).toEqual([1, 1]);
    expect(await subackCodes(bob, ['#'])).toEqual([1]);
    const dying = await openClient(
      strictUrl,
      login('admin', { clientId: 'dying', will: { topic: 'wills/dying', payload: Buffer.from('gone'), qos: 1 } }),
    );
    const dyingToo = await openClient(
      strictUrl,
      login('admin', {
        clientId: 'dying-2',
        will: { topic: 'sensors/dying', payload: Buffer.from('gone too'), qos: 1 },
      }),
    );
    dying.drop();
    dyingToo.drop();
    await admin.waitForMessages(2);
    await bob.waitForMessages(1);
    expect(admin.payloads().sort()).toEqual(['gone', 'gone too']);
    expect(bob.received().map((m) => m.topic)).toEqual(['sensors/dying']);
  });
});
