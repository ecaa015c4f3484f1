/**
 * planReload: what a SIGHUP adds, changes, removes and leaves for a restart, decided from two validated
 * configurations alone (no sockets; `gateway.ts` applies the plan, test/integration/*-reload.test.ts show that).
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { planReload } from '../../src/config/reload-plan.js';
import type { Config } from '../../src/config/schema.js';

const bridge = (name: string, filter = 'plant/#', direction = 'out') => ({
  name,
  remote: { urls: ['mqtt://127.0.0.1:1884'] },
  topics: [{ filter, direction }],
});
const modbus = (id: string, address = 0) => ({
  id,
  type: 'modbus',
  transport: 'tcp',
  host: '127.0.0.1',
  addressBase: 0,
  tags: [{ name: 'count', table: 'holding', address, datatype: 'uint16' }],
});

/** A validated, frozen Config (the loader's output), from a plain object. */
const config = (doc: object): Config => parseConfig(JSON.stringify(doc), 'gw.yaml', '/tmp');

const names = (list: readonly { name: string }[]) => list.map((b) => b.name);
const ids = (list: readonly { id: string }[]) => list.map((c) => c.id);

describe('planReload', () => {
  it('plans nothing for the same file, but reads the password and ACL files again when they are set', () => {
    const plain = config({ bridges: [bridge('a')] });
    const plan = planReload(plain, config({ bridges: [bridge('a')] }));
    expect(plan).toMatchObject({ reloadAuth: false, needsRestart: [] });
    expect(plan.bridges).toEqual({ add: [], change: [], remove: [] });
    expect(plan.connectors).toEqual({ add: [], change: [], remove: [] });
    expect(plan.inForce).toEqual(plain);

    const withAcl = config({ auth: { aclFile: '/dev/null' } });
    expect(planReload(withAcl, withAcl).reloadAuth).toBe(true);
  });

  it('adds, changes and removes bridges by name, leaving the unchanged ones alone', () => {
    const old = config({ bridges: [bridge('keep'), bridge('edit'), bridge('gone')] });
    const next = config({ bridges: [bridge('keep'), bridge('edit', 'other/#'), bridge('new')] });
    const plan = planReload(old, next);
    expect(names(plan.bridges.add)).toEqual(['new']);
    expect(names(plan.bridges.change)).toEqual(['edit']);
    expect(plan.bridges.change[0].topics[0].filter).toBe('other/#');
    expect(names(plan.bridges.remove)).toEqual(['gone']);
    expect(plan.needsRestart).toEqual([]);
    expect(names(plan.inForce.bridges)).toEqual(['keep', 'edit', 'new']);
  });

  it('never touches the Sparkplug uplink: a change to it waits for a restart and the old one stays in force', () => {
    const sparkplug = { groupId: 'g', edgeNodeId: 'n', uplink: 'central' };
    // A Sparkplug uplink needs in filters for NCMD and DCMD: `both` on spBv1.0/# gives them.
    const old = config({ bridges: [bridge('central', 'spBv1.0/#', 'both'), bridge('side')], sparkplug });
    const next = config({ bridges: [bridge('central', 'spBv1.0/g/#', 'both'), bridge('side', 'x/#')], sparkplug });
    const plan = planReload(old, next);
    expect(names(plan.bridges.change)).toEqual(['side']);
    expect(plan.bridges.add).toEqual([]);
    expect(plan.needsRestart).toEqual(['bridges (central, the Sparkplug uplink)']);
    expect(plan.inForce.bridges.find((b) => b.name === 'central')?.topics[0].filter).toBe('spBv1.0/#');
    // Said again at the next reload of the same file: it still is not in force.
    expect(planReload(plan.inForce, next).needsRestart).toEqual(['bridges (central, the Sparkplug uplink)']);
  });

  it('swaps connectors by id on the running edge node; the sparkplug section itself waits for a restart', () => {
    const old = config({
      sparkplug: { groupId: 'g', edgeNodeId: 'n' },
      connectors: [modbus('keep'), modbus('edit'), modbus('gone')],
    });
    const next = config({
      sparkplug: { groupId: 'g', edgeNodeId: 'n', rebirthDebounceMs: 5000 },
      connectors: [modbus('keep'), modbus('edit', 7), modbus('new')],
    });
    const plan = planReload(old, next);
    expect(ids(plan.connectors.add)).toEqual(['new']);
    expect(ids(plan.connectors.change)).toEqual(['edit']);
    expect(ids(plan.connectors.remove)).toEqual(['gone']);
    expect(plan.needsRestart).toEqual(['sparkplug']);
    expect(plan.inForce.sparkplug).toEqual(old.sparkplug);
    expect(ids(plan.inForce.connectors)).toEqual(['keep', 'edit', 'new']);
  });

  it('without an edge node, connectors are a restart too (a sparkplug section added by reload starts nothing)', () => {
    const old = config({});
    const next = config({ sparkplug: { groupId: 'g', edgeNodeId: 'n' }, connectors: [modbus('press')] });
    const plan = planReload(old, next);
    expect(plan.connectors).toEqual({ add: [], change: [], remove: [] });
    expect(plan.needsRestart).toEqual(['sparkplug', 'connectors']);
    expect(plan.inForce.sparkplug).toBeUndefined();
    expect(plan.inForce.connectors).toEqual([]);
  });

  it('names each section built at start that changed, keeps it in force, and applies the log level at once', () => {
    const old = config({ listeners: [{ port: 1884 }], metrics: { port: 9100 } });
    const next = config({
      listeners: [{ port: 1885 }],
      broker: { maxInflight: 10 },
      storage: { path: '/tmp/elsewhere' },
      metrics: { port: 9101 },
      gateway: { id: 'line4-gw' },
      log: { level: 'debug', format: 'pretty', auditFile: '/tmp/audit.log' },
    });
    const plan = planReload(old, next);
    expect(plan.needsRestart).toEqual([
      'listeners',
      'broker',
      'storage',
      'metrics',
      'gateway',
      'log.format',
      'log.auditFile',
    ]);
    expect(plan.inForce.gateway).toEqual(old.gateway); // the id in the running bridges' message ids
    expect(plan.inForce.listeners).toEqual(old.listeners);
    expect(plan.inForce.broker).toEqual(old.broker);
    expect(plan.inForce.storage).toEqual(old.storage);
    expect(plan.inForce.metrics).toEqual(old.metrics);
    expect(plan.inForce.log).toEqual({ ...old.log, level: 'debug' });
  });

  it('applies the console users at once, but adding or removing the console section waits for a restart', () => {
    const base = { auth: { passwordFile: '/dev/null' }, metrics: {} };
    const viewers = config({ ...base, console: { viewers: ['shift'] } });
    const operators = config({ ...base, console: { viewers: ['shift'], operators: ['maint'] } });
    const changed = planReload(viewers, operators);
    expect(changed.needsRestart).toEqual([]);
    expect(changed.inForce.console?.operators).toEqual(['maint']);
    const removed = planReload(viewers, config(base));
    expect(removed.needsRestart).toEqual(['console']);
    expect(removed.inForce.console).toEqual(viewers.console);
    expect(planReload(config(base), viewers).needsRestart).toEqual(['console']);
  });

  it('reads the auth files when the auth section changed, also to none', () => {
    expect(planReload(config({ auth: { aclFile: '/dev/null' } }), config({})).reloadAuth).toBe(true);
  });
});
