import { writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import { loadConfig, parseConfig } from '../../src/config/load.js';
import { ConfigError, type ConfigProblem } from '../../src/util/errors.js';
import { useDisposer } from '../helpers/disposer.js';

const disposer = useDisposer();
let dir: string;
beforeEach(() => {
  dir = disposer.tempDir('edgeferry-config-');
});

const parse = (yaml: string) => parseConfig(yaml, 'gw.yaml', dir);

function problemsOf(yaml: string): readonly ConfigProblem[] {
  try {
    parse(yaml);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

const bridge = (extra: string) => `
bridges:
  - name: central
    remote: { urls: ["mqtt://backbone.example:1883"] }
    topics: [{ filter: "a/#" }]
${extra}`;

describe('defaults', () => {
  it('an empty file gives the broker-only defaults, with storage relative to the config directory', () => {
    const config = parse('');
    expect(config.listeners).toEqual([
      {
        type: 'tcp',
        host: '127.0.0.1',
        port: 1883,
        path: '/mqtt',
        allowAnonymous: true,
        maxPendingConnections: 1000,
        maxPendingPerAddress: 100,
      },
    ]);
    expect(config.broker.maxPacketBytes).toBe(1_048_576);
    // Bounded by default, so that offline sessions cannot fill the store (docs/reliability.md#sessions-share).
    expect(config.broker.maxSessionExpiryS).toBe(604_800);
    expect(config.broker.maxQueuedBytes).toBe(16_777_216);
    expect(config.storage).toEqual({
      path: join(dir, 'data'),
      sync: 'full',
      maxBytes: 2_147_483_648,
      sessionShare: 0.25,
      verifyOnStart: 'quick',
    });
    expect(config.log).toEqual({ level: 'info', format: 'auto' });
    expect(config.bridges).toEqual([]);
  });

  it('refuses a sessions share of the store outside (0, 1], naming the key', () => {
    expect(problemsOf('storage: { sessionShare: 0 }\n').map((p) => p.path)).toEqual(['storage.sessionShare']);
    expect(problemsOf('storage: { sessionShare: 1.5 }\n').map((p) => p.path)).toEqual(['storage.sessionShare']);
  });

  it('anonymous clients are allowed by default on loopback listeners only', () => {
    const config = parse(`
listeners:
  - { port: 1 }
  - { host: "::1", port: 2 }
  - { host: localhost, port: 3 }
  - { host: 10.0.0.5, port: 6, allowAnonymous: true }
`);
    expect(config.listeners.map((l) => l.allowAnonymous)).toEqual([true, true, true, true]);
  });

  it('a listener others can reach needs a password file or an explicit allowAnonymous: true (secure by default)', () => {
    const problems = problemsOf(
      'listeners:\n  - { host: 0.0.0.0, port: 4 }\n  - { host: 10.0.0.5, port: 5, allowAnonymous: false }\n',
    );
    expect(problems.map((p) => p.path)).toEqual(['listeners.0.allowAnonymous', 'listeners.1.allowAnonymous']);
    expect(problems[0].message).toMatch(/not a loopback address: set auth.passwordFile, or allowAnonymous: true/);
    writeFileSync(join(dir, 'passwd'), '');
    expect(
      parse('auth: { passwordFile: passwd }\nlisteners: [{ host: 0.0.0.0, port: 4 }]\n').listeners[0].allowAnonymous,
    ).toBe(false);
  });

  it('a bridge gets every default, and its client id is derived from the gateway id (the host name) and its name', () => {
    const [b] = parse(bridge('')).bridges;
    expect(b.remote).toMatchObject({
      clientId: `${hostname()}-central`,
      protocolVersion: 5,
      keepaliveS: 60,
      connectTimeoutS: 10,
      cleanStart: false,
    });
    expect(b.topics).toEqual([{ filter: 'a/#', direction: 'out', localPrefix: '', remotePrefix: '' }]);
    expect(b.queue).toEqual({
      maxBytes: 1_073_741_824,
      maxMessages: 10_000_000,
      maxAgeS: 0,
      overflow: 'drop-oldest',
      deadLetter: { maxMessages: 10_000, maxBytes: 16_777_216 },
    });
    expect(b.reconnect).toEqual({ minDelayMs: 250, maxDelayMs: 2000 });
  });

  it('two gateways with the same bridge name get different default client ids; an explicit one is kept', () => {
    const ids = ['line1', 'line2'].map(
      (id) => parse(`${bridge('')}\ngateway: { id: ${id} }\n`).bridges[0].remote.clientId,
    );
    expect(ids).toEqual(['line1-central', 'line2-central']);
    expect(
      parse(`${bridge('').replace('remote: {', 'remote: { clientId: gw4,')}\ngateway: { id: line1 }\n`).bridges[0]
        .remote.clientId,
    ).toBe('gw4');
    expect(problemsOf(`${bridge('')}\ngateway: { id: "line/#" }\n`).map((p) => p.path)).toEqual(['gateway.id']);
  });

  it('the result is deeply frozen', () => {
    const config = parse(bridge(''));
    expect(Object.isFrozen(config.bridges[0].remote.urls)).toBe(true);
    expect(() => {
      (config.broker as { maxInflight: number }).maxInflight = 1;
    }).toThrow(TypeError);
  });
});

describe('problems', () => {
  it('reports every problem at once, each with its key path and file:line:col', () => {
    const problems = problemsOf(`listeners:
  - port: 70000
  - port: "1884"
broker:
  maxInflight: 0
log: { level: loud }
`);
    expect(problems).toEqual([
      { path: 'listeners.0.port', message: 'Too big: expected number to be <=65535', location: 'gw.yaml:2:11' },
      {
        path: 'listeners.1.port',
        message: 'Invalid input: expected number, received string',
        location: 'gw.yaml:3:11',
      },
      { path: 'broker.maxInflight', message: 'Too small: expected number to be >=1', location: 'gw.yaml:5:16' },
      { path: 'log.level', message: expect.stringContaining('expected one of'), location: 'gw.yaml:6:15' },
    ]);
  });

  it('names an unknown key and locates the key itself', () => {
    const problems = problemsOf(`broker:
  maxInflight: 10
  maxInfligth: 20
brdiges: []
bogus: 1
`);
    expect(problems).toEqual([
      {
        path: 'broker.maxInfligth',
        message: 'unknown key "maxInfligth": did you mean "maxInflight"?',
        location: 'gw.yaml:3:3',
      },
      { path: 'brdiges', message: 'unknown key "brdiges": did you mean "bridges"?', location: 'gw.yaml:4:1' },
      { path: 'bogus', message: 'unknown key "bogus"', location: 'gw.yaml:5:1' },
    ]);
  });

  it('suggests the known key nearest to an unknown one, where it is, and reports a misspelt required key once', () => {
    const text = `listners:
  - port: 1883
bridges:
  - name: central
    remote:
      url: mqtt://backbone.example:1883
    topics: [{ filter: "a/#", directoin: out }]
connectors:
  - { id: press-1, type: modbus, transport: tcp, addressBase: 0, host: 10.0.0.5, unitID: 1, tags: [{ name: t, table: holding, address: 0, datatype: int16, scael: 0.1 }] }
  - { id: oven-1, type: opcua, endpont: opc.tcp://10.0.0.6:4840, tags: [{ name: t, nodeId: "ns=1;s=T", datatype: Double }] }
`;
    /** Where `key` is written in the file. */
    const at = (key: string): string => {
      const lines = text.split('\n');
      const line = lines.findIndex((l) => l.includes(`${key}:`));
      return `gw.yaml:${line + 1}:${lines[line].indexOf(`${key}:`) + 1}`;
    };
    // No "missing required key" for the urls that url stands for.
    expect(problemsOf(text).map((p) => [p.location, p.path, p.message])).toEqual([
      [at('url'), 'bridges.0.remote.url', 'unknown key "url": did you mean "urls"?'],
      [at('directoin'), 'bridges.0.topics.0.directoin', 'unknown key "directoin": did you mean "direction"?'],
      // Each connector type's own keys (the variants of a union).
      [at('scael'), 'connectors.0.tags.0.scael', 'unknown key "scael": did you mean "scale"?'],
      [at('unitID'), 'connectors.0.unitID', 'unknown key "unitID": did you mean "unitId"?'],
      [at('endpont'), 'connectors.1.endpont', 'unknown key "endpont": did you mean "endpoint"?'],
      [at('listners'), 'listners', 'unknown key "listners": did you mean "listeners"?'],
    ]);
  });

  it('points a YAML indentation error at the line that is wrong', () => {
    // A key indented deeper than the one above it: the parser sees the rest of that key's value.
    expect(problemsOf('broker:\n  maxInflight: 10\n   maxQueuedMessages: 5\nstorage:\n  path: x\n')).toEqual([
      {
        path: '(root)',
        message:
          'this line is indented deeper than the key above it (line 2): keys of one mapping start at the same column, and a value that is a mapping goes on the lines after its key',
        location: 'gw.yaml:3:4',
      },
    ]);
    // One indented less than its siblings.
    expect(problemsOf('bridges:\n  - name: central\n    remote:\n      urls: [mqtt://x]\n     topics: []\n')).toEqual([
      {
        path: '(root)',
        message: 'All mapping items must start at the same column (BAD_INDENT)',
        location: 'gw.yaml:5:1',
      },
    ]);
  });

  it('refuses more bridges than the store has outboxes for, counting dead-letter outboxes', () => {
    const bridges = (n: number, deadLetters: number) =>
      'bridges:\n' +
      Array.from(
        { length: n },
        (_, i) =>
          `  - { name: b${i}, remote: { urls: ["mqtt://c.example"] }, topics: [{ filter: "a/#" }], queue: { deadLetter: { maxMessages: ${deadLetters} } } }\n`,
      ).join('');
    expect(parse(bridges(16, 10)).bridges).toHaveLength(16);
    expect(parse(bridges(32, 0)).bridges).toHaveLength(32);
    expect(problemsOf(bridges(17, 10))).toEqual([
      expect.objectContaining({ path: 'bridges', message: expect.stringContaining('17 bridges need 34 outboxes') }),
    ]);
  });

  it('a missing required key is reported at its parent', () => {
    const problems = problemsOf(`bridges:
  - name: central
    topics: [{ filter: "a/#" }]
`);
    expect(problems).toEqual([
      { path: 'bridges.0.remote', message: 'missing required key (expected object)', location: 'gw.yaml:2:5' },
    ]);
  });

  it('locates YAML syntax errors, including duplicate keys', () => {
    const problems = problemsOf(`log:
  level: info
  level: debug
`);
    expect(problems).toEqual([
      { path: '(root)', message: expect.stringContaining('DUPLICATE_KEY'), location: 'gw.yaml:3:3' },
    ]);
    expect(problemsOf('listeners: [{ port: 1883 }\nbroker: {}\n')[0].location).toMatch(/^gw\.yaml:\d+:\d+$/);
  });

  it('a document that is not a mapping is reported at the root', () => {
    expect(problemsOf('just text\n')).toEqual([
      { path: '(root)', message: 'Invalid input: expected object, received string', location: 'gw.yaml:1:1' },
    ]);
  });

  it('the error message names the file, the count, and each problem', () => {
    expect(() => parse('broker: { maxInflight: 0, bogus: 1 }\n')).toThrow(
      /^gw\.yaml: 2 problems\n {2}gw\.yaml:1:\d+ broker\.maxInflight: .+\n {2}gw\.yaml:1:\d+ broker\.bogus: unknown key "bogus"$/,
    );
  });

  it('an unreadable file is a ConfigError naming the file', () => {
    const file = join(dir, 'missing.yaml');
    expect(() => loadConfig(file)).toThrow(ConfigError);
    expect(() => loadConfig(file)).toThrow(/missing\.yaml: cannot read the file: ENOENT/);
    expect(() => loadConfig(file)).toThrow(expect.objectContaining({ code: 'EF_CONFIG_UNREADABLE' }));
  });
});

describe('listener rules', () => {
  it('tls is required on tls and wss listeners and refused on tcp and ws listeners', () => {
    const problems = problemsOf(`listeners:
  - { type: tls, port: 8883 }
  - { type: wss, port: 8884 }
  - { type: tcp, port: 1883, tls: { certFile: a.pem, keyFile: a.key } }
  - { type: ws, port: 8080, tls: { certFile: a.pem, keyFile: a.key } }
`);
    expect(problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'listeners.0.tls: required for a tls listener',
      'listeners.1.tls: required for a wss listener',
      'listeners.2.tls: not allowed on a tcp listener (use type tls or wss)',
      'listeners.3.tls: not allowed on a ws listener (use type tls or wss)',
    ]);
  });

  it('client certificate options are checked together', () => {
    const problems = problemsOf(`listeners:
  - { type: tls, port: 8883, tls: { certFile: a.pem, keyFile: a.key, useIdentityAsUsername: true } }
  - { type: tls, port: 8884, tls: { certFile: a.pem, keyFile: a.key, requireCertificate: true } }
`);
    expect(problems.map((p) => p.path)).toEqual(['listeners.0.tls.useIdentityAsUsername', 'listeners.1.tls.caFile']);
  });

  it('tls.ciphers defaults to forward-secret AEAD suites and must select at least one cipher', () => {
    const config = parse('listeners: [{ type: tls, port: 8883, tls: { certFile: /dev/null, keyFile: /dev/null } }]\n');
    expect(
      config.listeners[0].tls?.ciphers
        .split(':')
        .every((c) => /^ECDHE-(ECDSA|RSA)-(AES(128|256)-GCM-SHA(256|384)|CHACHA20-POLY1305)$/.test(c)),
    ).toBe(true);
    const problems = problemsOf(`listeners:
  - { type: tls, port: 8883, tls: { certFile: /dev/null, keyFile: /dev/null, ciphers: "NO-SUCH-CIPHER" } }
${bridge('')
  .replace('remote: {', 'remote: { tls: { ciphers: "" },')
  .replace('mqtt://', 'mqtts://')
  .replace(/^\nbridges:/, 'bridges:')}`);
    expect(problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'listeners.0.tls.ciphers: not an OpenSSL cipher string that selects any cipher (see `openssl ciphers -v STRING`)',
      expect.stringMatching(/^bridges\.0\.remote\.tls\.ciphers: Too small/),
    ]);
  });

  it('allowedOrigins is for WebSocket listeners, each entry an origin as browsers send it', () => {
    const problems = problemsOf(`listeners:
  - { type: tcp, port: 1, allowedOrigins: ["https://a.example"] }
  - { type: ws, port: 2, allowedOrigins: ["https://a.example/", "a.example", "http://b.example:8080"] }
`);
    expect(problems.map((p) => p.path)).toEqual([
      'listeners.0.allowedOrigins',
      'listeners.1.allowedOrigins.0',
      'listeners.1.allowedOrigins.1',
    ]);
  });

  it('a path is only for WebSocket listeners, and defaults to /mqtt', () => {
    expect(problemsOf('listeners: [{ port: 1883, path: /x }]\n').map((p) => p.path)).toEqual(['listeners.0.path']);
    expect(parse('listeners: [{ type: ws, port: 8080 }]\n').listeners[0].path).toBe('/mqtt');
  });

  it('two listeners cannot share a port on the same or a wildcard host; port 0 always can', () => {
    const problems = problemsOf(`listeners:
  - { port: 1883 }
  - { port: 1883, host: 10.0.0.1, allowAnonymous: true }
  - { port: 1883, host: 0.0.0.0, allowAnonymous: true }
  - { port: 1883 }
  - { port: 0 }
  - { port: 0 }
`);
    expect(problems).toEqual([
      { path: 'listeners.2.port', message: 'port 1883 is already used by listeners.0', location: 'gw.yaml:4:13' },
      { path: 'listeners.3.port', message: 'port 1883 is already used by listeners.0', location: 'gw.yaml:5:13' },
    ]);
  });

  it('TLS files resolve against the config directory and must be readable', () => {
    writeFileSync(join(dir, 'gw.pem'), 'cert');
    writeFileSync(join(dir, 'gw.key'), 'key');
    const config = parse('listeners: [{ type: tls, port: 8883, tls: { certFile: gw.pem, keyFile: ./gw.key } }]\n');
    expect(config.listeners[0].tls).toMatchObject({ certFile: join(dir, 'gw.pem'), keyFile: join(dir, 'gw.key') });

    const yaml = 'listeners: [{ type: tls, port: 8883, tls: { certFile: gw.pem, keyFile: nope.key } }]\n';
    expect(problemsOf(yaml)).toEqual([
      {
        path: 'listeners.0.tls.keyFile',
        message: expect.stringMatching(/^cannot read the file: ENOENT/),
        location: `gw.yaml:1:${yaml.indexOf('nope.key') + 1}`,
      },
    ]);
  });
});

describe('metrics rules', () => {
  it('metrics off loopback need auth or allowUnauthenticated: true; basic auth needs the password file', () => {
    const problems = problemsOf('metrics: { host: 0.0.0.0, auth: { users: [prometheus] } }\n');
    expect(problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'metrics.auth.users: basic auth checks passwords in auth.passwordFile: set it',
    ]);
    expect(problemsOf('metrics: { host: 10.0.0.5 }\n').map((p) => p.path)).toEqual(['metrics.auth']);
    expect(problemsOf('metrics: { auth: {} }\n').map((p) => `${p.path}: ${p.message}`)).toEqual([
      'metrics.auth: set users (basic auth), tokenFile (bearer token), or both',
    ]);
    expect(problemsOf('metrics: { auth: { tokenFile: nope.token } }\n').map((p) => p.path)).toEqual([
      'metrics.auth.tokenFile',
    ]);
    expect(parse('metrics: { host: 0.0.0.0, allowUnauthenticated: true }\n').metrics).toMatchObject({
      host: '0.0.0.0',
      allowUnauthenticated: true,
    });
    expect(parse('metrics: {}\n').metrics).toEqual({
      host: '127.0.0.1',
      port: 9883,
      allowUnauthenticated: false,
      readyRequiresDevices: false,
    });
  });
});

describe('bridge rules', () => {
  it('accepts valid topic filters', () => {
    const config = parse(`
bridges:
  - name: b
    remote: { urls: ["mqtt://h"] }
    topics: [{ filter: "#" }, { filter: "+" }, { filter: "a/+/b/#" }, { filter: "/" }, { filter: "spBv1.0/+/NCMD/x" }]
`);
    expect(config.bridges[0].topics).toHaveLength(5);
  });

  it.each(['a/#/b', 'a#', 'a/b+', '+a/b', '', 'a/\u0000'])(
    'rejects the topic filter %j [MQTT-4.7.1-2] [MQTT-4.7.1-3]',
    (filter) => {
      const problems = problemsOf(`
bridges:
  - name: b
    remote: { urls: ["mqtt://h"] }
    topics: [{ filter: ${JSON.stringify(filter)} }]
`);
      expect(problems).toEqual([
        {
          path: 'bridges.0.topics.0.filter',
          message: expect.stringContaining('not a valid MQTT topic filter'),
          location: 'gw.yaml:5:24',
        },
      ]);
    },
  );

  it('rejects wildcards in prefixes, bad url schemes, bad names, and duplicate names', () => {
    const problems = problemsOf(`
bridges:
  - name: Central
    remote: { urls: ["http://h", "mqtts://", "wss://h:443/mqtt"] }
    topics: [{ filter: "a", localPrefix: "x/+/" }]
  - name: b
    remote: { urls: ["mqtt://h"] }
    topics: [{ filter: "a" }]
  - name: b
    remote: { urls: ["mqtt://h"] }
    topics: [{ filter: "a" }]
`);
    expect(problems.map((p) => p.path)).toEqual([
      'bridges.0.name',
      'bridges.0.remote.urls.0',
      'bridges.0.remote.urls.1',
      'bridges.0.topics.0.localPrefix',
      'bridges.2.name',
    ]);
  });

  it('checks the remote credentials and TLS together', () => {
    const problems = problemsOf(`
bridges:
  - name: b
    remote: { urls: ["mqtt://h"], password: x, passwordFile: p, tls: { certFile: c.pem } }
    topics: [{ filter: "a" }]
  - name: c
    remote: { urls: ["mqtt://h"], protocolVersion: 4, password: x }
    topics: [{ filter: "a" }]
`);
    expect(problems.map((p) => `${p.path}: ${p.message}`)).toEqual([
      'bridges.0.remote.tls.keyFile: certFile and keyFile go together',
      'bridges.0.remote.passwordFile: set password or passwordFile, not both',
      'bridges.0.remote.tls: no url uses mqtts:// or wss://',
      'bridges.1.remote.username: MQTT 3.1.1 sends a password only with a username [MQTT-3.1.2-22]',
    ]);
  });

  it('refuses credentials inside a url, pointing at username and password/passwordFile, without repeating them', () => {
    for (const url of [
      'mqtt://gw:s3cret@backbone.example:1883',
      'mqtts://gw@backbone.example',
      'wss://:s3cret@backbone.example/mqtt',
    ]) {
      const problems = problemsOf(bridge('').replace('mqtt://backbone.example:1883', url));
      expect(
        problems.map((p) => `${p.path}: ${p.message}`),
        url,
      ).toEqual([
        'bridges.0.remote.urls.0: must not carry credentials (user:password@): set remote.username, and remote.password or remote.passwordFile',
      ]);
      try {
        parse(bridge('').replace('mqtt://backbone.example:1883', url));
      } catch (err) {
        expect((err as Error).message).not.toContain('s3cret');
      }
    }
  });

  it('a reconnect maxDelayMs below minDelayMs is refused', () => {
    expect(problemsOf(bridge('    reconnect: { minDelayMs: 5000, maxDelayMs: 1000 }')).map((p) => p.path)).toEqual([
      'bridges.0.reconnect.maxDelayMs',
    ]);
  });

  it('replay order and share, message ids and the gateway id: defaults, and refusals naming the key', () => {
    const config = parse(bridge(''));
    expect(config.bridges[0].replay).toEqual({ messagesPerS: 0, bytesPerS: 0, share: 0.5 });
    expect(config.bridges[0].messageId).toEqual({ enabled: true, property: 'edgeferry-id' });
    expect(config.gateway).toEqual({ id: hostname() });
    const problems = problemsOf(`${bridge('    replay: { order: newest, share: 0 }\n    messageId: { property: "" }')}
gateway: { id: "line 4:gw" }
`);
    expect(problems.map((p) => p.path)).toEqual([
      'gateway.id',
      'bridges.0.replay.order',
      'bridges.0.replay.share',
      'bridges.0.messageId.property',
    ]);
  });

  it('reads passwordFile into password, relative to the config directory', () => {
    writeFileSync(join(dir, 'central.password'), 's3cret\n');
    const config = parse(bridge('').replace('remote: {', 'remote: { username: gw, passwordFile: central.password,'));
    expect(config.bridges[0].remote).toMatchObject({ password: 's3cret', passwordFile: join(dir, 'central.password') });

    const problems = problemsOf(bridge('').replace('remote: {', 'remote: { passwordFile: nope,'));
    expect(problems.map((p) => p.path)).toEqual(['bridges.0.remote.passwordFile']);
  });
});

describe('loadConfig', () => {
  it('resolves relative paths against the directory of the file, not the working directory', () => {
    const file = join(dir, 'edgeferry.yaml');
    writeFileSync(file, 'storage: { path: state }\n');
    expect(loadConfig(file).storage.path).toBe(join(dir, 'state'));
  });
});

describe('device profiles', () => {
  const profiles = (connectors: string, tagExtra = '') => `
sparkplug: { groupId: plant1, edgeNodeId: gw }
profiles:
  press:
    type: modbus
    transport: tcp
    addressBase: 0
    pollIntervalMs: 500
    tags: [ { name: t, table: holding, address: 0, datatype: int16${tagExtra} } ]
connectors:
${connectors}`;

  it("expands each device from its profile, the device's own keys winning (tags replace the whole list)", () => {
    const config = parse(
      profiles(`  - { id: p1, profile: press, host: 10.0.0.1, unitId: 3, tags: [ { name: own, table: coil, address: 0, datatype: bool } ] }
  - { id: p2, profile: press, host: 10.0.0.2, pollIntervalMs: 100, tags: [ { name: t, table: holding, address: 0, datatype: int16 } ] }`),
    );
    expect(
      config.connectors.map((c) => ({
        id: c.id,
        type: c.type,
        unitId: 'unitId' in c && c.unitId,
        poll: 'pollIntervalMs' in c && c.pollIntervalMs,
        tags: c.tags.map((t) => t.name),
      })),
    ).toEqual([
      { id: 'p1', type: 'modbus', unitId: 3, poll: 500, tags: ['own'] },
      { id: 'p2', type: 'modbus', unitId: 1, poll: 100, tags: ['t'] },
    ]);
  });

  it('reports a problem in a profile once, at the profile, however many devices take it', () => {
    const problems = problemsOf(
      profiles(
        ['p1', 'p2', 'p3'].map((id) => `  - { id: ${id}, profile: press, host: 10.0.0.1 }`).join('\n'),
        ', bogus: 1',
      ),
    );
    expect(problems.map((p) => `${p.location} ${p.path}: ${p.message}`)).toEqual([
      'gw.yaml:9:69 profiles.press.tags.0.bogus: unknown key "bogus"',
    ]);
  });

  it('names two tags of one name in a profile, used by devices or by none yet, once', () => {
    const twice = ' }, { name: t, table: holding, address: 1, datatype: int16';
    for (const connectors of [
      '  []',
      '  - { id: p1, profile: press, host: 10.0.0.1 }\n  - { id: p2, profile: press, host: 10.0.0.2 }',
    ])
      expect(problemsOf(profiles(connectors, twice)).map((p) => `${p.path}: ${p.message}`)).toEqual([
        'profiles.press.tags.1.name: "t" is already the name of tags.0',
      ]);
  });
});
