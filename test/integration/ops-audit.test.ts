/** The audit log in its own file (`log.auditFile`): logins and refusals, with who, never the password. */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway } from '../helpers/gateway.js';
import { connectRefused, openClient } from '../helpers/mqtt-client.js';
import { waitFor } from '../helpers/wait.js';
import { hashPasswordLine } from '../../src/broker/password-file.js';

const d = useDisposer();

describe('audit log file', () => {
  it('records accepted and refused logins as JSON lines in log.auditFile, apart from the main log', async () => {
    const dir = d.tempDir('edgeferry-audit-');
    const passwd = join(dir, 'passwd');
    writeFileSync(passwd, (await hashPasswordLine('alice', 's3cret')) + '\n');
    const auditFile = join(dir, 'audit.log');
    const gw = d.add(await startGateway({ auth: { passwordFile: passwd }, log: { auditFile } }, { logLevel: 'info' }));

    d.add(
      await openClient(gw.url, { username: 'alice', password: 's3cret', protocolVersion: 5, clientId: 'audit-ok' }),
    );
    expect(
      await connectRefused(gw.url, {
        username: 'alice',
        password: 'wrong-pw',
        protocolVersion: 5,
        clientId: 'audit-bad',
      }),
    ).toBe(0x86);

    const lines = await waitFor(() => {
      if (!existsSync(auditFile)) return undefined;
      const entries = readFileSync(auditFile, 'utf8')
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      return entries.length >= 2 ? entries : undefined;
    }, 5000);
    expect(lines.every((l) => l.mod === 'audit')).toBe(true);
    expect(lines.map((l) => [l.msg, l.clientId, l.username])).toEqual([
      ['login', 'audit-ok', 'alice'],
      ['login refused', 'audit-bad', 'alice'],
    ]);
    expect(readFileSync(auditFile, 'utf8')).not.toContain('wrong-pw');
    // Not in the main log when it has a file of its own.
    expect(gw.output()).not.toContain('login refused');
  });
});
