/**
 * The OPC UA connector against a real node-opcua server in its own process (test/fixtures/opcua-server.mjs).
 * The connector is driven directly, with a TagSink that records what it is given.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TagSample, TagSink } from '../../connectors/contract.js';
import { OpcuaConnector } from '../../connectors/opcua/opcua-connector.js';
import { opcuaConnectorSchema, type OpcuaConnectorInput } from '../../connectors/opcua/schema.js';
import { browse, formatBrowseTable, renderTagList } from '../../connectors/opcua/browse.js';
import { listCertificates, trustServer } from '../../connectors/opcua/trust.js';
import { runOpcuaCommand } from '../../connectors/opcua/opcua-command.js';
import { ConnectorError } from '../../src/util/errors.js';
import type { Logger } from '../../src/util/logger.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { freePort } from '../helpers/ports.js';
import { removeDir, tempDir } from '../helpers/temp.js';
import { waitFor } from '../helpers/wait.js';
import { startOpcuaFixture, type OpcuaFixture } from '../fixtures/opcua-fixture.js';

interface LogEntry {
  level: string;
  obj: Record<string, unknown>;
  msg: string;
}

function recordingLogger(entries: LogEntry[] = []): Logger & { entries: LogEntry[] } {
  const at =
    (level: string) =>
    (objOrMsg: object | string, msg?: string): void => {
      if (typeof objOrMsg === 'string') entries.push({ level, obj: {}, msg: objOrMsg });
      else entries.push({ level, obj: objOrMsg as Record<string, unknown>, msg: msg ?? '' });
    };
  const log = {
    entries,
    fatal: at('fatal'),
    error: at('error'),
    warn: at('warn'),
    info: at('info'),
    debug: at('debug'),
    trace: at('trace'),
    child: () => log,
    isLevelEnabled: () => false,
  };
  return log;
}

class RecordingSink implements TagSink {
  readonly samples: TagSample[] = [];
  readonly batches: number[] = [];
  readonly losses: ConnectorError[] = [];
  data(samples: readonly TagSample[]): void {
    this.samples.push(...samples);
    this.batches.push(samples.length);
  }
  lost(err: ConnectorError): void {
    this.losses.push(err);
  }
  latest(name: string): TagSample | undefined {
    for (let i = this.samples.length - 1; i >= 0; i--) if (this.samples[i]!.name === name) return this.samples[i];
    return undefined;
  }
  count(name: string): number {
    return this.samples.filter((s) => s.name === name).length;
  }
}

const ns = (path: string) => `ns=1;s=Fixture.${path}`;

const scalarTags = [
  { name: 'Scalars/Boolean', nodeId: ns('Scalars.Boolean'), datatype: 'Boolean' },
  { name: 'Scalars/SByte', nodeId: ns('Scalars.SByte'), datatype: 'Int8' },
  { name: 'Scalars/Byte', nodeId: ns('Scalars.Byte'), datatype: 'UInt8' },
  { name: 'Scalars/Int16', nodeId: ns('Scalars.Int16'), datatype: 'Int16' },
  { name: 'Scalars/UInt16', nodeId: ns('Scalars.UInt16'), datatype: 'UInt16' },
  { name: 'Scalars/Int32', nodeId: ns('Scalars.Int32'), datatype: 'Int32' },
  { name: 'Scalars/UInt32', nodeId: ns('Scalars.UInt32'), datatype: 'UInt32' },
  { name: 'Scalars/Int64', nodeId: ns('Scalars.Int64'), datatype: 'Int64' },
  { name: 'Scalars/UInt64', nodeId: ns('Scalars.UInt64'), datatype: 'UInt64' },
  { name: 'Scalars/Float', nodeId: ns('Scalars.Float'), datatype: 'Float' },
  { name: 'Scalars/Double', browsePath: '/Objects/1:Fixture/1:Scalars/1:Double', datatype: 'Double' },
  { name: 'Scalars/String', nodeId: ns('Scalars.String'), datatype: 'String' },
  { name: 'Scalars/DateTime', nodeId: ns('Scalars.DateTime'), datatype: 'DateTime' },
  { name: 'Scalars/ByteString', nodeId: ns('Scalars.ByteString'), datatype: 'Bytes' },
] as const;

const arrayTags = [
  { name: 'Arrays/Boolean', nodeId: ns('Arrays.BooleanArray'), datatype: 'BooleanArray' },
  { name: 'Arrays/SByte', nodeId: ns('Arrays.SByteArray'), datatype: 'Int8Array' },
  { name: 'Arrays/Byte', nodeId: ns('Arrays.ByteArray'), datatype: 'UInt8Array' },
  { name: 'Arrays/Int16', nodeId: ns('Arrays.Int16Array'), datatype: 'Int16Array' },
  { name: 'Arrays/UInt16', nodeId: ns('Arrays.UInt16Array'), datatype: 'UInt16Array' },
  { name: 'Arrays/Int32', nodeId: ns('Arrays.Int32Array'), datatype: 'Int32Array' },
  { name: 'Arrays/UInt32', nodeId: ns('Arrays.UInt32Array'), datatype: 'UInt32Array' },
  { name: 'Arrays/Int64', nodeId: ns('Arrays.Int64Array'), datatype: 'Int64Array' },
  { name: 'Arrays/UInt64', nodeId: ns('Arrays.UInt64Array'), datatype: 'UInt64Array' },
  { name: 'Arrays/Float', nodeId: ns('Arrays.FloatArray'), datatype: 'FloatArray' },
  { name: 'Arrays/Double', nodeId: ns('Arrays.DoubleArray'), datatype: 'DoubleArray' },
  { name: 'Arrays/String', nodeId: ns('Arrays.StringArray'), datatype: 'StringArray' },
  { name: 'Arrays/DateTime', nodeId: ns('Arrays.DateTimeArray'), datatype: 'DateTimeArray' },
] as const;

const when = Date.parse('2024-05-01T12:34:56.789Z');

describe('OPC UA connector against a node-opcua server', () => {
  let server: OpcuaFixture;
  let serverDir: string;
  /** A client PKI that trusts the fixture, for the secured tests that are not about trust. */
  let trustedPki: string;

  beforeAll(async () => {
    serverDir = tempDir('edgeferry-opcua-');
    server = await startOpcuaFixture({ dir: serverDir });
    trustedPki = join(serverDir, 'client-pki-trusted');
    await trustServer(server.endpoint, { pkiDir: trustedPki, expectedThumbprint: server.thumbprint });
  }, 180_000);

  afterAll(async () => {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
    await server?.stop();
    if (serverDir) removeDir(serverDir);
  });

  const d = useDisposer();

  function connector(
    input: Partial<OpcuaConnectorInput> & Pick<OpcuaConnectorInput, 'tags'>,
    log: Logger = recordingLogger(),
    pkiDir?: string,
  ) {
    const config = opcuaConnectorSchema.parse({ id: 'plc-ua', type: 'opcua', endpoint: server.endpoint, ...input });
    const c = new OpcuaConnector(config, log, { pkiDir: pkiDir ?? join(d.tempDir('edgeferry-opcua-client-'), 'pki') });
    d.add(c);
    return c;
  }

  it('delivers every scalar and array datatype as the matching TagValue (64-bit as bigint, DateTime as epoch ms)', async () => {
    const c = connector({ tags: [...scalarTags, ...arrayTags] });
    const sink = new RecordingSink();
    await c.start(sink);
    const all = [...scalarTags, ...arrayTags].map((t) => t.name);
    await waitFor(() => all.every((n) => sink.latest(n) !== undefined), 15_000, {
      message: () => `missing: ${all.filter((n) => sink.latest(n) === undefined).join(', ')}`,
    });
    const v = (name: string) => sink.latest(name)!.value;
    expect(v('Scalars/Boolean')).toBe(true);
    expect(v('Scalars/SByte')).toBe(-12);
    expect(v('Scalars/Byte')).toBe(200);
    expect(v('Scalars/Int16')).toBe(-1234);
    expect(v('Scalars/UInt16')).toBe(54321);
    expect(v('Scalars/Int32')).toBe(-123456789);
    expect(v('Scalars/UInt32')).toBe(4000000000);
    expect(v('Scalars/Int64')).toBe(-(2n ** 40n) - 5n);
    expect(v('Scalars/UInt64')).toBe(2n ** 63n + 7n);
    expect(v('Scalars/Float')).toBe(1.5);
    expect(v('Scalars/Double')).toBe(3.141592653589793);
    expect(v('Scalars/String')).toBe('héllo wörld');
    expect(v('Scalars/DateTime')).toBe(when);
    expect(v('Scalars/ByteString')).toEqual(Buffer.from([0xde, 0xad, 0xbe, 0xef]));
    expect(v('Arrays/Boolean')).toEqual([true, false, true]);
    expect(v('Arrays/SByte')).toEqual([-1, 0, 1]);
    expect(v('Arrays/Byte')).toEqual([1, 2, 255]);
    expect(v('Arrays/Int16')).toEqual([-2, 0, 2]);
    expect(v('Arrays/UInt16')).toEqual([0, 65535]);
    expect(v('Arrays/Int32')).toEqual([-100000, 100000]);
    expect(v('Arrays/UInt32')).toEqual([1, 4294967295]);
    expect(v('Arrays/Int64')).toEqual([1n, -1n]);
    expect(v('Arrays/UInt64')).toEqual([2n, 2n ** 32n]);
    expect(v('Arrays/Float')).toEqual([0.5, -0.25]);
    expect(v('Arrays/Double')).toEqual([1.25, -2.5, 1e300]);
    expect(v('Arrays/String')).toEqual(['a', 'b', 'c']);
    expect(v('Arrays/DateTime')).toEqual([when, 0]);
    expect(sink.samples.every((s) => s.quality === 'good')).toBe(true);
    expect(c.problems).toEqual([]);
    // One sink.data() call per publish response, not one per value.
    expect(sink.batches.length).toBeLessThan(sink.samples.length);
  });

  it('delivers a bad value as bad and an uncertain one (UncertainLastUsableValue) with its value, as uncertain', async () => {
    const c = connector({
      tags: [
        { name: 'broken', nodeId: ns('Status.Broken'), datatype: 'Double' },
        { name: 'doubtful', nodeId: ns('Status.Doubtful'), datatype: 'Double' },
        { name: 'fine', nodeId: ns('Scalars.Double'), datatype: 'Double' },
      ],
    });
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.latest('broken') && sink.latest('doubtful') && sink.latest('fine'), 15_000);
    expect(sink.latest('broken')).toMatchObject({ quality: 'bad', value: 0 });
    expect(sink.latest('doubtful')).toMatchObject({ quality: 'uncertain', value: 19.5 });
    expect(sink.latest('fine')).toMatchObject({ quality: 'good' });
  });

  it('streams changing values from monitored items with the sampling interval asked for', async () => {
    const c = connector({
      subscription: { publishingIntervalMs: 100 },
      tags: [
        { name: 'counter', nodeId: ns('Changing.Counter'), datatype: 'UInt32', samplingIntervalMs: 50, queueSize: 10 },
        { name: 'sine', nodeId: ns('Changing.Sine'), datatype: 'Double', deadband: { type: 'absolute', value: 0.05 } },
      ],
    });
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.count('counter') >= 10 && sink.count('sine') >= 3, 15_000);
    const counters = sink.samples.filter((s) => s.name === 'counter').map((s) => s.value as number);
    // queueSize 10 + 50 ms sampling: the 100 ms ticks arrive one by one, in order, none merged.
    for (let i = 1; i < counters.length; i++) expect(counters[i]).toBe(counters[i - 1]! + 1);
    // The absolute deadband of 0.05 is applied by the server: consecutive values differ by more.
    const sines = sink.samples.filter((s) => s.name === 'sine').map((s) => s.value as number);
    for (let i = 1; i < sines.length; i++) expect(Math.abs(sines[i]! - sines[i - 1]!)).toBeGreaterThan(0.05);
    const latest = sink.latest('counter')!;
    expect(latest.timestamp).toBeGreaterThan(Date.now() - 10_000);
    expect(latest.timestamp).toBeLessThanOrEqual(Date.now() + 1000);
  });

  it('reports an unmapped data type, a datatype mismatch and an unknown node once each as errors naming the tag; the other tags run', async () => {
    const log = recordingLogger();
    const c = connector(
      {
        tags: [
          { name: 'text', nodeId: ns('Unmapped.Text'), datatype: 'String' },
          { name: 'mismatch', nodeId: ns('Scalars.Int16'), datatype: 'Int32' },
          { name: 'ghost', nodeId: 'ns=1;s=Does.Not.Exist', datatype: 'Double' },
          { name: 'lost-path', browsePath: '/Objects/1:Fixture/1:Nowhere', datatype: 'Double' },
          { name: 'ok', nodeId: ns('Scalars.Double'), datatype: 'Double' },
        ],
      },
      log,
    );
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.latest('ok'), 15_000);
    expect(c.problems.map((p) => p.tag).sort()).toEqual(['ghost', 'lost-path', 'mismatch', 'text']);
    expect(c.problems.find((p) => p.tag === 'text')!.reason).toMatch(/LocalizedText, which has no Sparkplug datatype/);
    expect(c.problems.find((p) => p.tag === 'mismatch')!.reason).toMatch(/is Int16 .* declares Int32/);
    // A restart (what the runtime does after a loss) does not repeat the errors.
    await c.stop();
    await c.start(sink);
    const errors = log.entries.filter((e) => e.level === 'error');
    expect(errors.map((e) => e.obj.tag).sort()).toEqual(['ghost', 'lost-path', 'mismatch', 'text']);
    expect(sink.samples.some((s) => ['text', 'mismatch', 'ghost', 'lost-path'].includes(s.name))).toBe(false);
  });

  it("writes with the node's own data type, reads each written node back; the server has the value and the next sample shows it", async () => {
    const c = connector({
      subscription: { publishingIntervalMs: 100 },
      tags: [
        { name: 'setpoint', nodeId: ns('Writable.Setpoint'), datatype: 'Double', writable: true },
        { name: 'mode', nodeId: ns('Writable.Mode'), datatype: 'Int16', writable: true },
        { name: 'total', nodeId: ns('Writable.Total'), datatype: 'Int64', writable: true },
        { name: 'label', nodeId: ns('Writable.Label'), datatype: 'String', writable: true },
        { name: 'enabled', nodeId: ns('Writable.Enabled'), datatype: 'Boolean', writable: true },
      ],
    });
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.latest('setpoint') && sink.latest('total'), 15_000);
    // Each write resolves with the node's Value read back from the server.
    expect(await c.write('setpoint', 12.25)).toMatchObject({ value: 12.25, matches: true });
    expect(await c.write('mode', 3)).toMatchObject({ value: 3, matches: true });
    expect(await c.write('total', 2n ** 53n + 1n)).toMatchObject({ value: 2n ** 53n + 1n, matches: true }); // beyond a double's integers
    expect(await c.write('label', 'running')).toMatchObject({ value: 'running', matches: true });
    expect(await c.write('enabled', true)).toMatchObject({ value: true, matches: true });
    await waitFor(
      () =>
        sink.latest('setpoint')?.value === 12.25 &&
        sink.latest('mode')?.value === 3 &&
        sink.latest('total')?.value === 2n ** 53n + 1n &&
        sink.latest('label')?.value === 'running' &&
        sink.latest('enabled')?.value === true,
      10_000,
    );
    const written = (name: string) => server.events.filter((e) => e.event === 'write' && e.name === name).at(-1)?.value;
    await waitFor(() => written('Enabled') === true, 5000);
    expect(written('Setpoint')).toBe(12.25);
    expect(written('Mode')).toBe(3);
    expect(written('Total')).toEqual([2 ** 21, 1]); // [high, low] words of 2^53 + 1
    expect(written('Label')).toBe('running');
  });

  it('refuses writes to non-writable tags, read-only nodes, unknown tags and with a wrong type, with a ConnectorError', async () => {
    const c = connector({
      tags: [
        { name: 'setpoint', nodeId: ns('Writable.Setpoint'), datatype: 'Double', writable: true },
        { name: 'mode', nodeId: ns('Writable.Mode'), datatype: 'Int16', writable: true },
        { name: 'readonly-tag', nodeId: ns('Writable.Label'), datatype: 'String' },
        { name: 'locked', nodeId: ns('ReadOnly.Locked'), datatype: 'Double', writable: true },
      ],
    });
    const sink = new RecordingSink();
    await expect(c.write('setpoint', 1)).rejects.toThrow(/not connected/);
    await c.start(sink);
    const modeWrites = server.events.filter((e) => e.event === 'write' && e.name === 'Mode').length;
    const refusal = async (tag: string, value: Parameters<typeof c.write>[1], pattern: RegExp) => {
      const err = await c.write(tag, value).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ConnectorError);
      expect((err as ConnectorError).code).toBe('EF_CONNECTOR_WRITE');
      expect((err as ConnectorError).retryable).toBe(false);
      expect((err as Error).message).toMatch(pattern);
    };
    await refusal('readonly-tag', 'x', /not writable/);
    await refusal('locked', 1, /read-only on the server/);
    await refusal('nope', 1, /no such tag/);
    await refusal('setpoint', 'twelve', /write setpoint refused: the node is Double; got the string "twelve"/);
    await refusal('mode', 1.5, /refused: the node is Int16; got the fraction 1.5/);
    await refusal('mode', 70_000, /^write mode refused: 70000 is out of range for Int16 \(-32768..32767\)$/);
    await refusal('mode', -32_769, /-32769 is out of range for Int16/);
    await refusal('mode', Number.NaN, /the node is Int16; got number NaN/);
    await refusal('mode', [1, 2], /scalar Int16; got an array/);
    expect(c.problems).toEqual([]); // a read-only node declared writable is a warning, not a tag error
    // Refused before the wire: the server saw no write of Mode.
    expect(server.events.filter((e) => e.event === 'write' && e.name === 'Mode').length).toBe(modeWrites);
  });

  it('stop() during start() abandons the start and leaves nothing running', async () => {
    const c = connector({ tags: [{ name: 'counter', nodeId: ns('Changing.Counter'), datatype: 'UInt32' }] });
    const sink = new RecordingSink();
    // The expectation is attached at once: the start may reject while stop() is still closing what it opened.
    const abandoned = expect(c.start(sink)).rejects.toThrow(/stopped while starting/);
    await new Promise((resolve) => setTimeout(resolve, 50));
    await c.stop();
    await abandoned;
    expect(c.isConnected).toBe(false);
    const seen = sink.samples.length;
    // And it starts normally afterwards, to a new sink: once the changing counter reached that one twice, anything
    // left running by the abandoned start would have delivered to the first.
    const again = new RecordingSink();
    await c.start(again);
    await waitFor(() => again.count('counter') >= 2, 15_000);
    expect(sink.samples.length).toBe(seen);
  });

  it('start() rejects with a retryable ConnectorError when nothing listens at the endpoint', async () => {
    const port = await freePort();
    const c = connector({
      endpoint: `opc.tcp://127.0.0.1:${port}/UA/Fixture`,
      connectTimeoutMs: 5000,
      tags: [scalarTags[0]],
    });
    const started = Date.now();
    const err = await c.start(new RecordingSink()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectorError);
    expect(err).toMatchObject({ code: 'EF_CONNECTOR_UNREACHABLE', retryable: true, connectorId: 'plc-ua' });
    // The log line (pino appends the messages of causes) says it once, in short: where and why.
    expect(pino.stdSerializers.err(err as Error).message).toBe(
      `cannot reach opc.tcp://127.0.0.1:${port}/UA/Fixture: connection refused`,
    );
    // No retrying inside the connector: the runtime's backoff decides when to try again.
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('refuses an untrusted server certificate with an error naming its thumbprint and the folders, and keeps it in rejected/', async () => {
    const pkiDir = join(d.tempDir('edgeferry-opcua-untrusted-'), 'pki');
    const log = recordingLogger();
    const c = connector(
      {
        securityMode: 'SignAndEncrypt',
        securityPolicy: 'Basic256Sha256',
        user: { type: 'username', username: 'operator', password: 'secret' },
        tags: [scalarTags[0]],
      },
      log,
      pkiDir,
    );
    const err = await c.start(new RecordingSink()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectorError);
    const message = (err as Error).message;
    expect(message).toContain(`thumbprint ${server.thumbprint}`);
    expect(message).toContain(join(pkiDir, 'rejected'));
    expect(message).toContain(join(pkiDir, 'trusted', 'certs'));
    expect(message).toContain(`edgeferry opcua trust ${server.endpoint}`);
    // The runtime retries with backoff; the operator sees one error line, not one per attempt.
    await expect(c.start(new RecordingSink())).rejects.toThrow(/is not trusted/);
    const errors = log.entries.filter((e) => e.level === 'error');
    expect(errors).toHaveLength(1);
    expect(errors[0]!.obj).toMatchObject({ thumbprint: server.thumbprint, rejectedDir: join(pkiDir, 'rejected') });
    expect(readdirSync(join(pkiDir, 'rejected')).some((f) => f.includes(server.thumbprint))).toBe(true);
    expect(listCertificates(pkiDir).rejected.map((r) => r.thumbprint)).toContain(server.thumbprint);

    // The operator trusts it (what `edgeferry opcua trust` does); the runtime's next start() succeeds.
    const trusted = await trustServer(server.endpoint, { pkiDir });
    expect(trusted).toMatchObject([{ thumbprint: server.thumbprint, alreadyTrusted: false }]);
    expect(listCertificates(pkiDir).rejected).toEqual([]);
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.latest(scalarTags[0].name), 15_000);
  });

  it('trust refuses a server whose certificate does not have the expected thumbprint', async () => {
    const pkiDir = join(d.tempDir('edgeferry-opcua-trust-'), 'pki');
    await expect(trustServer(server.endpoint, { pkiDir, expectedThumbprint: 'AA:BB' })).rejects.toThrow(
      /not the expected thumbprint aabb; nothing was trusted/,
    );
    expect(listCertificates(pkiDir).trusted).toEqual([]);
  });

  it('works over SignAndEncrypt with Basic256Sha256 and username/password', async () => {
    const c = connector(
      {
        securityMode: 'SignAndEncrypt',
        user: { type: 'username', username: 'operator', password: 'secret' },
        tags: [scalarTags[7], { name: 'counter', nodeId: ns('Changing.Counter'), datatype: 'UInt32' }],
      },
      recordingLogger(),
      trustedPki,
    );
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.count('counter') >= 2, 15_000);
    expect(sink.latest(scalarTags[7].name)?.value).toBe(-(2n ** 40n) - 5n);
  });

  it('a wrong password is a clear, non-retryable ConnectorError', async () => {
    const c = connector(
      {
        securityMode: 'SignAndEncrypt',
        user: { type: 'username', username: 'operator', password: 'wrong' },
        tags: [scalarTags[0]],
      },
      recordingLogger(),
      trustedPki,
    );
    const err = await c.start(new RecordingSink()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ConnectorError);
    expect(err).toMatchObject({ code: 'EF_CONNECTOR_UNREACHABLE', retryable: false });
    expect((err as Error).message).toMatch(
      /rejected user "operator" \(Bad(UserAccessDenied|IdentityTokenRejected|IdentityTokenInvalid)\): check the username and password/,
    );
  });

  it('a security mode the server does not offer is named, with what it offers', async () => {
    const c = connector(
      { securityMode: 'SignAndEncrypt', securityPolicy: 'Aes256_Sha256_RsaPss', tags: [scalarTags[0]] },
      recordingLogger(),
      trustedPki,
    );
    await expect(c.start(new RecordingSink())).rejects.toThrow(
      /offers no SignAndEncrypt\/Aes256_Sha256_RsaPss endpoint \(it offers: .*SignAndEncrypt\/Basic256Sha256/,
    );
  });

  it('a half-open link (no bytes, no FIN) is detected by the keep-alive deadline and reported with lost()', async () => {
    const proxy = d.add(await startFaultProxy(server.port));
    const c = connector({
      endpoint: `opc.tcp://127.0.0.1:${proxy.port}/UA/Fixture`,
      subscription: { publishingIntervalMs: 200, keepAliveCount: 3, lifetimeCount: 30 },
      requestTimeoutMs: 60_000, // so the keep-alive watchdog, not a request timeout, notices
      tags: [{ name: 'double', nodeId: ns('Scalars.Double'), datatype: 'Double' }],
    });
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.latest('double'), 15_000);
    // Only keep-alives flow now (the value is fixed); they alone keep the connector alive.
    await new Promise((resolve) => setTimeout(resolve, 2500));
    expect(sink.losses).toEqual([]);
    proxy.blackhole();
    await waitFor(() => sink.losses.length > 0, 10_000);
    expect(sink.losses[0]).toMatchObject({ code: 'EF_CONNECTOR_UNREACHABLE', retryable: true });
    expect(sink.losses[0]!.message).toMatch(/no data and no keep-alive/);
    // keep-alive 200 ms × 3 = 600 ms; deadline 1.5 × 600 + 1000 = 1900 ms, checked every ~475 ms: within the wait.
    expect(sink.losses).toHaveLength(1);
  });

  it('browse lists the fixture variables with NodeId, browse path, data type and access, and renders a tag list', async () => {
    const rows = await browse(server.endpoint, {
      pkiDir: join(d.tempDir('edgeferry-opcua-browse-'), 'pki'),
      node: 'ns=1;s=Fixture',
      depth: 3,
    });
    const byId = new Map(rows.map((r) => [r.nodeId, r]));
    expect(byId.get(ns('Scalars.Double'))).toMatchObject({
      browsePath: '/Objects/1:Fixture/1:Scalars/1:Double',
      name: 'Scalars/Double',
      dataType: 'Double',
      datatype: 'Double',
      access: 'r',
    });
    expect(byId.get(ns('Writable.Setpoint'))).toMatchObject({ access: 'rw', datatype: 'Double' });
    expect(byId.get(ns('Arrays.Int64Array'))).toMatchObject({
      dataType: 'Int64',
      valueRank: 1,
      datatype: 'Int64Array',
    });
    expect(byId.get(ns('Unmapped.Text'))).toMatchObject({ dataType: 'LocalizedText' });
    expect(byId.get(ns('Unmapped.Text'))!.datatype).toBeUndefined();
    for (const t of [...scalarTags, ...arrayTags]) {
      if ('nodeId' in t) expect(byId.has(t.nodeId), t.nodeId).toBe(true);
    }
    const table = formatBrowseTable(rows);
    expect(table).toMatch(
      /ns=1;s=Fixture\.Scalars\.UInt64\s+\/Objects\/1:Fixture\/1:Scalars\/1:UInt64\s+UInt64\s+UInt64\s+r/,
    );

    // The rendered tag list is valid connector config, and the browse path of a row resolves to the same node.
    const { parse } = await import('yaml');
    const list = renderTagList(rows, { indent: 0 });
    expect(list).toContain(
      '# - { name: "Unmapped/Text", nodeId: "ns=1;s=Fixture.Unmapped.Text" }  # LocalizedText has no Sparkplug datatype',
    );
    const tags = (parse(list) as { tags: OpcuaConnectorInput['tags'] }).tags;
    expect(tags.length).toBe(rows.filter((r) => r.datatype !== undefined).length);
    const c = connector({
      tags: [...tags, { name: 'by-path', browsePath: byId.get(ns('Scalars.Int32'))!.browsePath, datatype: 'Int32' }],
    });
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.latest('Scalars/Int32') && sink.latest('by-path'), 15_000);
    expect(c.problems).toEqual([]);
    expect(sink.latest('by-path')!.value).toBe(-123456789);
  });
  it('the `edgeferry opcua browse|trust` commands print a table, a tag list and the trust list', async () => {
    const dataDir = d.tempDir('edgeferry-opcua-cli-');
    const pkiDir = join(dataDir, 'opcua', 'pki');
    const run = async (...argv: string[]) => {
      let out = '';
      let err = '';
      const code = await runOpcuaCommand(argv, { dataDir, stdout: (t) => (out += t), stderr: (t) => (err += t) });
      return { code, out, err };
    };
    const table = await run('browse', server.endpoint, '--node', 'ns=1;s=Fixture.Writable', '--depth', '1');
    expect(table).toMatchObject({ code: 0, err: '' });
    expect(table.out).toMatch(
      /ns=1;s=Fixture\.Writable\.Total\s+\/Objects\/1:Fixture\/1:Writable\/1:Total\s+Int64\s+Int64\s+rw/,
    );
    expect(table.out).toContain('10 variables');
    const tags = await run('browse', server.endpoint, '--node', 'ns=1;s=Fixture.Writable', '--tags');
    expect(tags.out).toContain(
      '- { name: "Setpoint", nodeId: "ns=1;s=Fixture.Writable.Setpoint", datatype: Double }  # writable on the server',
    );

    const secured = await run('browse', server.endpoint, '--security-mode', 'SignAndEncrypt');
    expect(secured.code).toBe(1);
    expect(secured.err).toContain(`thumbprint ${server.thumbprint}`);
    const trusted = await run('trust', server.endpoint, '--thumbprint', server.thumbprint.toUpperCase());
    expect(trusted).toMatchObject({ code: 0 });
    expect(trusted.out).toContain(`trusted: ${server.endpoint}\n  thumbprint ${server.thumbprint}`);
    const list = await run('trust', '--list');
    expect(list.out).toMatch(new RegExp(`trusted \\(1\\):\\n  ${server.thumbprint}`));
    expect(list.out).toContain('rejected (0):');
    // The trust list is the one the gateway gives its connectors: <storage.path>/opcua/pki.
    expect(listCertificates(pkiDir).trusted.map((c) => c.thumbprint)).toEqual([server.thumbprint]);
    expect(await run('browse')).toMatchObject({ code: 2 });
    expect(await run('frobnicate')).toMatchObject({ code: 2 });
  });
});

describe('OPC UA connector recovery', () => {
  const d = useDisposer();

  it('after a server restart lost() is called once, and a new start() gets every monitored item flowing again', async () => {
    const dir = d.tempDir('edgeferry-opcua-restart-');
    const server = d.add(await startOpcuaFixture({ dir }));
    const config = opcuaConnectorSchema.parse({
      id: 'plc-restart',
      type: 'opcua',
      endpoint: server.endpoint,
      subscription: { publishingIntervalMs: 100 },
      tags: [
        { name: 'counter', nodeId: ns('Changing.Counter'), datatype: 'UInt32' },
        { name: 'double', nodeId: ns('Scalars.Double'), datatype: 'Double' },
      ],
    });
    const c = d.add(new OpcuaConnector(config, recordingLogger(), { pkiDir: join(dir, 'client-pki') }));
    const sink = new RecordingSink();
    await c.start(sink);
    await waitFor(() => sink.count('counter') >= 3, 15_000);

    await server.kill();
    await waitFor(() => sink.losses.length > 0, 10_000);
    expect(sink.losses[0]).toMatchObject({
      code: 'EF_CONNECTOR_UNREACHABLE',
      retryable: true,
      connectorId: 'plc-restart',
    });
    expect(c.isConnected).toBe(false);

    // What the runtime does: stop, then start again after backoff (here: until the server is back).
    await c.stop();
    await expect(c.start(sink)).rejects.toBeInstanceOf(ConnectorError); // still down
    await server.restart();
    const before = sink.samples.length;
    await c.start(sink);
    // The fixture's counter restarted from 0: fresh values, from fresh monitored items.
    await waitFor(() => sink.samples.slice(before).filter((s) => s.name === 'counter').length >= 3, 15_000);
    expect(sink.samples.slice(before).some((s) => s.name === 'double')).toBe(true);
    expect(sink.losses).toHaveLength(1);
  }, 120_000);
});
