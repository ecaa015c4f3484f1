import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { PasswordFile, hashPasswordLine } from '../../src/broker/password-file.js';
import { removeDir, tempDir } from '../helpers/temp.js';

const dir = tempDir('edgeferry-passwd-');
afterAll(() => removeDir(dir));

describe('Mosquitto password files', () => {
  it('accepts $7$ lines written by Debian mosquitto_passwd and refuses wrong passwords', async () => {
    const file = join(dir, 'passwd');
    writeFileSync(file, '');
    execFileSync('mosquitto_passwd', ['-b', file, 'alice', 's3cret']);
    execFileSync('mosquitto_passwd', ['-b', file, 'bob', 'hunter2']);
    const { file: passwords, problems } = PasswordFile.parse(readFileSync(file, 'utf8'));
    expect(problems).toEqual([]);
    expect(passwords.size).toBe(2);
    expect(await passwords.verify('alice', Buffer.from('s3cret'))).toBe(true);
    expect(await passwords.verify('bob', Buffer.from('hunter2'))).toBe(true);
    expect(await passwords.verify('alice', Buffer.from('hunter2'))).toBe(false);
    expect(await passwords.verify('mallory', Buffer.from('s3cret'))).toBe(false);
  });

  it('spends the same PBKDF2 work on an unknown user as on a known one, so timing does not tell whether a user exists', async () => {
    // A high iteration count makes the PBKDF2 work dominate: with none spent for unknown users, they answer at once.
    const { file } = PasswordFile.parse(await hashPasswordLine('alice', 's3cret', 200_000));
    const median = async (user: string): Promise<number> => {
      const times: number[] = [];
      for (let i = 0; i < 5; i++) {
        const start = performance.now();
        expect(await file.verify(user, Buffer.from('wrong'))).toBe(false);
        times.push(performance.now() - start);
      }
      return times.sort((a, b) => a - b)[2];
    };
    const known = await median('alice');
    const unknown = await median('mallory');
    // Same work: the ratio stays near 1 however busy the machine is; a shortcut would put it near 0.
    expect(unknown / known).toBeGreaterThan(0.5);
    expect(await file.verify('alice', Buffer.from('s3cret'))).toBe(true);
  });

  it('verifies the legacy $6$ format (salted SHA-512)', async () => {
    const line =
      'alice:$6$IycKO8PZOBxcNN5n$IkGphdbgt0dW5w1d6GdyTiOIW6SmtpiwQlFPiJ41XQLqLfhxTawZjgAArf34tc0ojf0+9wEE7RgcqYjW8XgTyg==';
    const { file, problems } = PasswordFile.parse(line);
    expect(problems).toEqual([]);
    expect(file.has('alice')).toBe(true);
    expect(await file.verify('alice', Buffer.from('wrong'))).toBe(false);
  });

  it('never turns a malformed or blank line into a user without a password (CVE-2018-12551)', async () => {
    const { file, problems } = PasswordFile.parse(
      '\n   \n# comment\nnocolon\neve:\nmallory:$7$101$$\ntrent:plaintext\n',
    );
    expect(file.size).toBe(0);
    expect(problems.map((p) => p.line)).toEqual([4, 5, 6, 7]);
    expect(await file.verify('eve', Buffer.from(''))).toBe(false);
  });

  it('writes lines that mosquitto_passwd-compatible readers accept, including Mosquitto itself', async () => {
    const line = await hashPasswordLine('carol', 'pa:ss word');
    expect(line).toMatch(/^carol:\$7\$101\$[A-Za-z0-9+/=]{16}\$[A-Za-z0-9+/=]{88}$/);
    const { file } = PasswordFile.parse(line);
    expect(await file.verify('carol', Buffer.from('pa:ss word'))).toBe(true);
    // Mosquitto's own tool can re-hash the file without complaint (it parses every line first).
    const path = join(dir, 'ours');
    writeFileSync(path, line + '\n');
    execFileSync('mosquitto_passwd', ['-b', path, 'dave', 'x']);
    expect(readFileSync(path, 'utf8')).toContain('carol:$7$101$');
  });
});
