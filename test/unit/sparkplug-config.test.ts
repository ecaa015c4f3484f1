import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { ConfigError } from '../../src/util/errors.js';

const bridge = `
bridges:
  - name: central
    remote: { urls: ["mqtt://127.0.0.1:1884"] }
    topics: [{ filter: "spBv1.0/#", direction: both }]
`;
const device = `
connectors:
  - id: press-1
    type: modbus
    transport: tcp
    host: 10.0.0.21
    addressBase: 1
    tags: [{ name: temperature, table: holding, address: 101, datatype: float32, byteOrder: CDAB, deadband: 0.5 }]
`;

function problems(text: string): string[] {
  try {
    parseConfig(text, 'edgeferry.yaml', '/tmp');
    return [];
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.problems.map((p) => `${p.location} ${p.path}: ${p.message}`);
  }
}

describe('sparkplug and connectors config', () => {
  it('accepts an edge node with an uplink and a Modbus device, defaults filled in', () => {
    const config = parseConfig(
      `sparkplug: { groupId: plant1, edgeNodeId: line4-gw, uplink: central }\n${bridge}${device}`,
      'edgeferry.yaml',
      '/tmp',
    );
    expect(config.sparkplug).toMatchObject({
      groupId: 'plant1',
      rebirthDebounceMs: 2000,
      deviceReconnect: { minDelayMs: 1000, maxDelayMs: 30_000 },
    });
    expect(config.connectors[0]).toMatchObject({
      id: 'press-1',
      port: 502,
      unitId: 1,
      tags: [{ address: 101, writable: false }],
    });
  });

  it('gives the uplink a clean session and refuses a config that keeps one, naming the key [tck-id-principles-persistence-clean-session-50] [tck-id-principles-persistence-clean-session-311]', () => {
    const two = (remote: string) =>
      `sparkplug: { groupId: plant1, edgeNodeId: line4-gw, uplink: central }\n` +
      `bridges:\n  - name: central\n    remote: { urls: ["mqtt://127.0.0.1:1884"]${remote} }\n    topics: [{ filter: "spBv1.0/#", direction: both }]\n` +
      `  - name: archive\n    remote: { urls: ["mqtt://127.0.0.1:1885"] }\n    topics: [{ filter: "spBv1.0/#" }]\n`;
    const config = parseConfig(two(''), 'edgeferry.yaml', '/tmp');
    expect(config.bridges.map((b) => [b.name, b.remote.cleanStart, b.remote.sessionExpiryS])).toEqual([
      ['central', true, 0],
      ['archive', false, 86_400],
    ]);
    expect(
      parseConfig(two(', cleanStart: true, sessionExpiryS: 0'), 'edgeferry.yaml', '/tmp').bridges[0].remote,
    ).toMatchObject({ cleanStart: true, sessionExpiryS: 0 });
    const why =
      'the Sparkplug uplink (sparkplug.uplink) keeps no session: commands queued while the link was down must never reach the PLC';
    expect(problems(two(', cleanStart: false, sessionExpiryS: 3600'))).toEqual([
      `edgeferry.yaml:4:60 bridges.0.remote.cleanStart: must be true (or absent): ${why}`,
      `edgeferry.yaml:4:83 bridges.0.remote.sessionExpiryS: must be 0 (or absent): ${why}`,
    ]);
    // Other bridges keep what they say.
    const archive = parseConfig(two('').replace('1885"]', '1885"], cleanStart: true'), 'edgeferry.yaml', '/tmp')
      .bridges[1].remote;
    expect([archive.cleanStart, archive.sessionExpiryS]).toEqual([true, 86_400]);
  });

  it('refuses Sparkplug ids with + / # [tck-id-topic-structure-namespace-valid-group-id]', () => {
    expect(problems('sparkplug: { groupId: "plant/1", edgeNodeId: "gw#1" }')).toEqual([
      'edgeferry.yaml:1:23 sparkplug.groupId: must be a non-empty Sparkplug id without +, /, # (or NUL)',
      'edgeferry.yaml:1:46 sparkplug.edgeNodeId: must be a non-empty Sparkplug id without +, /, # (or NUL)',
    ]);
  });

  it('needs the uplink to name a bridge, connectors to have a sparkplug section, and unique connector ids', () => {
    expect(problems('sparkplug: { groupId: g, edgeNodeId: n, uplink: nowhere }')).toEqual([
      'edgeferry.yaml:1:49 sparkplug.uplink: no bridge is named "nowhere"',
    ]);
    expect(problems(device)[0]).toMatch(/connectors: connectors publish through the Sparkplug edge node/);
    const twice = `sparkplug: { groupId: g, edgeNodeId: n }\n${device}${device.replace('connectors:\n', '')}`;
    expect(problems(twice)).toEqual([
      expect.stringMatching(/connectors.1.id: "press-1" is already the id of connectors.0/),
    ]);
  });

  it('needs the uplink to bring NCMD, DCMD of every device and the primary host STATE down, with local prefixes, naming the filter to add', () => {
    const text = (topics: string) =>
      `sparkplug: { groupId: plant1, edgeNodeId: line4-gw, uplink: central, primaryHostId: scada-1 }\n` +
      `bridges:\n  - name: central\n    remote: { urls: ["mqtt://127.0.0.1:1884"] }\n    topics: ${topics}\n${device}`;
    const fix = (key: string, filter: string) =>
      `sparkplug.${key}: the uplink bridge "central" has no in filter for ${filter}: add { filter: "${filter}", direction: in } to bridges[0].topics`;
    expect(problems(text('[{ filter: "spBv1.0/#" }]')).map((p) => p.replace(/^\S+ /, ''))).toEqual([
      fix('uplink', 'spBv1.0/plant1/NCMD/line4-gw'),
      fix('uplink', 'spBv1.0/plant1/DCMD/line4-gw/#'),
      fix('primaryHostId', 'spBv1.0/STATE/scada-1'),
    ]);
    // DCMD for another device only, STATE of another host only: still missing.
    expect(
      problems(
        text(
          '[{ filter: "spBv1.0/plant1/NCMD/line4-gw", direction: in }, { filter: "spBv1.0/plant1/DCMD/line4-gw/press-2", direction: in }, { filter: "spBv1.0/STATE/scada-2", direction: in }]',
        ),
      ).length,
    ).toBe(2);
    // A rule whose local side is prefixed brings the topic down under that prefix, not as itself.
    expect(problems(text('[{ filter: "spBv1.0/#", direction: in, localPrefix: "central/" }]'))).toHaveLength(3);
    expect(problems(text('[{ filter: "spBv1.0/#", direction: both }]'))).toEqual([]);
  });

  it('needs Modbus RTU units on one serial port to agree on its settings', () => {
    const rtu = (id: string, unitId: number, baudRate: number) =>
      `  - { id: ${id}, type: modbus, transport: rtu, path: /dev/ttyUSB0, baudRate: ${baudRate}, unitId: ${unitId}, addressBase: 0, tags: [{ name: t, table: input, address: 0, datatype: uint16 }] }\n`;
    const text = (b: number) =>
      `sparkplug: { groupId: g, edgeNodeId: n }\nconnectors:\n${rtu('m1', 1, 9600)}${rtu('m2', 2, b)}`;
    expect(problems(text(9600))).toEqual([]);
    expect(problems(text(19200))).toEqual([
      expect.stringMatching(/connectors.1.baudRate: connectors.0 uses \/dev\/ttyUSB0 with other settings \(baudRate\)/),
    ]);
  });

  it('reports a bad tag with its key path', () => {
    const bad = device.replace('datatype: float32', 'datatype: float33');
    expect(problems(`sparkplug: { groupId: g, edgeNodeId: n }\n${bad}`)[0]).toMatch(/connectors.0.tags.0.datatype: /);
  });
});
