/**
 * Changes to the configuration file as the web console makes them (docs/console.md#configuration): comments,
 * order and the spacing of untouched lines kept; secrets masked both ways; paths that are not there refused.
 */
import { describe, expect, it } from 'vitest';
import {
  applyOps,
  describeChange,
  EditError,
  maskedView,
  parseOps,
  SECRET_MASK,
} from '../../src/config/config-document.js';
import { parse } from 'yaml';
import { unifiedDiff } from '../../src/util/text-diff.js';

const FILE = `# the press line
listeners:
  - type: tcp                # tcp | tls
    port: 1883               # the default port
bridges:
  - name: central
    remote:
      urls: [mqtt://central:1883]
      username: edge
      password: "s3cret pw"   # rotated monthly
connectors:
  - id: press1               # the first press
    type: modbus
    host: 10.0.0.5
    tags:
      - { name: temp, address: 0, type: float32 }   # degrees
      - { name: speed, address: 2, type: uint16 }
`;

describe('configuration document edits', () => {
  it('changes one value and keeps every other line byte for byte, comments and their columns too', () => {
    const out = applyOps(FILE, [{ op: 'set', path: ['connectors', 0, 'host'], value: '10.0.0.6' }]);
    expect(out).toBe(FILE.replace('host: 10.0.0.5', 'host: 10.0.0.6'));
  });

  it('adds a tag at the end of the list and removes another, keeping the list style', () => {
    const out = applyOps(FILE, [
      { op: 'add', path: ['connectors', 0, 'tags'], value: { name: 'count', address: 4, type: 'uint32' } },
      { op: 'remove', path: ['connectors', 0, 'tags', 1] },
    ]);
    expect(out).toContain('      - { name: temp, address: 0, type: float32 }   # degrees\n');
    expect(out).not.toContain('speed');
    expect(out).toMatch(/- \{ name: count, address: 4, type: uint32 \}\n$/);
    expect(out.startsWith('# the press line\nlisteners:\n  - type: tcp                # tcp | tls\n')).toBe(true);
  });

  it('never shows a password, and a mask sent back keeps the stored one', () => {
    const view = maskedView(FILE);
    expect(view.text).not.toContain('s3cret');
    expect(view.text).toContain(`password: ${SECRET_MASK}   # rotated monthly`);
    expect(JSON.stringify(view.config)).not.toContain('s3cret');
    const bridge = (view.config as { bridges: { remote: Record<string, unknown> }[] }).bridges[0];
    const out = applyOps(FILE, [
      { op: 'set', path: ['bridges', 0, 'remote'], value: { ...bridge.remote, username: 'edge2' } },
    ]);
    expect(out).toContain('s3cret pw');
    expect(out).toContain('username: edge2');
    const changed = applyOps(FILE, [{ op: 'set', path: ['bridges', 0, 'remote', 'password'], value: 'new-pw' }]);
    const { diff, added, removed } = describeChange(FILE, changed, 'edgeferry.yaml');
    expect([added, removed]).toEqual([1, 1]);
    expect(diff).not.toMatch(/s3cret|new-pw/);
    expect(diff).toContain(`+      password: ${SECRET_MASK}`);
  });

  it('copies a device as the file has it (its password, comments) to the end of a list, or to a new key', () => {
    const withPassword = FILE.replace('    host: 10.0.0.5\n', '    host: 10.0.0.5\n    password: "plc pw"\n');
    const out = applyOps(withPassword, [
      { op: 'copy', from: ['connectors', 0], path: ['connectors'] },
      { op: 'set', path: ['connectors', 1, 'id'], value: 'press2' },
      { op: 'copy', from: ['bridges', 0, 'remote'], path: ['bridges', 0, 'standby'] },
    ]);
    const doc = parse(out) as {
      connectors: Record<string, unknown>[];
      bridges: { remote: object; standby: object }[];
    };
    expect(doc.connectors[1]).toEqual({ ...doc.connectors[0], id: 'press2' });
    expect(doc.connectors[1].password).toBe('plc pw');
    expect(doc.bridges[0].standby).toEqual(doc.bridges[0].remote);
    expect(out.startsWith(withPassword.slice(0, withPassword.indexOf('connectors:')))).toBe(true);
    expect(() => applyOps(FILE, [{ op: 'copy', from: ['connectors', 4], path: ['connectors'] }])).toThrow(
      /connectors\.4: nothing to copy/,
    );
    expect(() => applyOps(FILE, [{ op: 'copy', from: ['connectors', 0], path: ['bridges', 0, 'name'] }])).toThrow(
      /bridges\.0\.name: is there already/,
    );
    expect(() => parseOps([{ op: 'copy', path: ['connectors'] }])).toThrow(/ops\.0\.from/);
  });

  it('refuses a change at a path that is not there, naming it', () => {
    expect(() => applyOps(FILE, [{ op: 'remove', path: ['connectors', 3] }])).toThrow(
      /connectors\.3: nothing to remove/,
    );
    expect(() => applyOps(FILE, [{ op: 'set', path: ['connectors', 5], value: {} }])).toThrow(EditError);
    expect(() => applyOps(FILE, [{ op: 'add', path: ['connectors', 0, 'host'], value: 1 }])).toThrow(/not a list/);
    expect(() => parseOps([{ op: 'move', path: ['a'] }])).toThrow(/ops\.0\.op: one of set, add, remove/);
    expect(() => parseOps([{ op: 'set', path: [-1], value: 1 }])).toThrow(/ops\.0\.path/);
  });

  it('renders a unified diff as diff -u does', () => {
    const a = 'a\nb\nc\nd\ne\nf\ng\nh\n';
    const b = 'a\nb\nc\nD\ne\nf\ng\nh\ni\n';
    expect(unifiedDiff(a, b, { a: 'x', b: 'y' }, 1)).toBe(
      '--- x\n+++ y\n@@ -3,3 +3,3 @@\n c\n-d\n+D\n e\n@@ -8,1 +8,2 @@\n h\n+i\n',
    );
    expect(unifiedDiff(a, a, { a: 'x', b: 'y' })).toBe('');
  });
});
