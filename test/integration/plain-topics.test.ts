/**
 * Plain topics (`sparkplug.plain`) through the real gateway process, fed by a pymodbus server: retained JSON
 * values for MQTT clients that do not speak Sparkplug, published by exception like the Sparkplug data, and
 * `/set` writes authorized by the ACL and checked like DCMD. Run `npm run build` first.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, startGateway } from '../helpers/gateway.js';
import { float32Words, modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import type { ModbusSim } from '../helpers/modbus-sim.js';
import { openClient } from '../helpers/mqtt-client.js';
import type { TestClient } from '../helpers/mqtt-client.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

const TOPIC = 'plant1/line4/{device}/{tag}';
const AT = 'plant1/line4/press-1';

const TAGS = [
  { name: 'temperature', table: 'holding', address: 0, datatype: 'float32', deadband: 0.5, engUnit: '°C' },
  { name: 'count', table: 'holding', address: 2, datatype: 'uint32' },
  { name: 'setpoint', table: 'holding', address: 4, datatype: 'int16', writable: true },
  { name: 'total', table: 'holding', address: 5, datatype: 'int64', writable: true },
  { name: 'running', table: 'coil', address: 0, datatype: 'bool', writable: true },
];

const sparkplug = (plain?: object) => ({
  groupId: 'plant1',
  edgeNodeId: 'line4-gw',
  deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 },
  ...(plain ? { plain } : {}),
});

/**
 * The anonymous client only reads; `operator` may write the setpoint and the running flag (and publish to the `/set`
 * topics of a read-only tag, an unknown tag and an unknown device, which the gateway refuses), `viewer` may not.
 */
const ACL = [
  'topic read plant1/#',
  'user operator',
  'topic read plant1/#',
  `topic write ${AT}/setpoint/set`,
  `topic write ${AT}/total/set`,
  `topic write ${AT}/running/set`,
  `topic write ${AT}/count/set`,
  `topic write ${AT}/nosuch/set`,
  'topic write plant1/line4/press-9/setpoint/set',
  'user viewer',
  'topic read plant1/#',
  '',
].join('\n');

async function plainGateway(sim: ModbusSim, plain: object) {
  const aclFile = join(d.tempDir('edgeferry-plain-'), 'acl');
  writeFileSync(aclFile, ACL);
  return d.add(
    await startGateway(
      {
        auth: { aclFile },
        broker: { sysIntervalS: 0 },
        sparkplug: sparkplug(plain),
        connectors: [modbusPress(sim, TAGS)],
      },
      { logLevel: 'info' },
    ),
  );
}

const json = (c: TestClient, tag: string) =>
  c
    .received(`${AT}/${tag}`)
    .map((m) => JSON.parse(m.payload) as { value: unknown; ts: number; quality: string; unit?: string });
const last = (c: TestClient, tag: string) => json(c, tag).at(-1);

describe('plain topics', () => {
  it('publishes each tag as retained JSON with value, sample time and quality, by exception, and marks them stale when the device is lost', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [...float32Words(21.5), 0, 7, 5, 0, 0, 0, 40]);
    const gw = await plainGateway(sim, { topic: TOPIC });
    const first = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await first.subscribe(`${AT}/#`, { qos: 1 });
    await first.waitForMessages(5, { timeoutMs: 10_000 });

    // A late subscriber gets the last value of each tag, retained [MQTT-3.3.1-6].
    const late = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await late.subscribe(`${AT}/#`, { qos: 1 });
    const retained = await late.waitForMessages(5);
    expect(retained.every((m) => m.retain && m.qos === 1)).toBe(true);
    expect(
      retained.every(
        (m) => m.properties?.contentType === 'application/json' && m.properties.payloadFormatIndicator === true,
      ),
    ).toBe(true);
    expect(
      Object.fromEntries(retained.map((m) => [m.topic.slice(AT.length + 1), JSON.parse(m.payload).value])),
    ).toEqual({
      temperature: 21.5,
      count: 7,
      setpoint: 5,
      total: 40,
      running: false,
    });
    const temperature = last(late, 'temperature');
    // The tag's engineering unit when it has one; left out, not guessed, when it has none.
    expect(Object.keys(temperature ?? {})).toEqual(['value', 'ts', 'quality', 'unit']);
    expect(temperature?.unit).toBe('°C');
    expect(Object.keys(last(late, 'count') ?? {})).toEqual(['value', 'ts', 'quality']);
    expect(temperature?.quality).toBe('good');
    expect(temperature?.ts).toBeGreaterThan(Date.now() - 30_000);

    // Report by exception, as for DDATA: within the deadband nothing, a changed counter alone.
    await sim.set(1, 'hr', 0, [...float32Words(21.8), 0, 8]);
    await late.waitForMessages(6);
    await sim.set(1, 'hr', 2, [0, 9]);
    await waitFor(() => last(late, 'count')?.value === 9, 5000, { message: 'count 9' });
    expect(
      late.messages.slice(5).map((m) => [m.topic.slice(AT.length + 1), JSON.parse(m.payload).value, m.retain]),
    ).toEqual([
      ['count', 8, false],
      ['count', 9, false],
    ]);

    // Device loss: the last values stay, marked stale (as a Sparkplug host marks them after DDEATH).
    await sim.kill();
    await waitFor(
      () => ['temperature', 'count', 'setpoint', 'total', 'running'].every((t) => last(late, t)?.quality === 'stale'),
      10_000,
      {
        message: 'stale values',
      },
    );
    expect(last(late, 'count')?.value).toBe(9);
    expect(last(late, 'temperature')?.value).toBe(21.5);
  });

  it('marks every value stale on a graceful stop, and at the next start until the tag is read again, also after a crash', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [...float32Words(21.5), 0, 7, 5, 0, 0, 0, 40]);
    const gw = await plainGateway(sim, { topic: TOPIC });
    const names = ['temperature', 'count', 'setpoint', 'total', 'running'];
    const quality = (c: TestClient) => names.map((t) => last(c, t)?.quality);
    const values = (c: TestClient) => names.map((t) => last(c, t)?.value);
    const good = [21.5, 7, 5, 40, false];
    const watcher = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await watcher.subscribe(`${AT}/#`, { qos: 1 });
    await waitFor(() => quality(watcher).every((q) => q === 'good'), 10_000, { message: 'good values' });

    // SIGTERM: the subscriber hears every value go stale before the broker closes, the value kept.
    await gw.stop();
    expect(quality(watcher)).toEqual(names.map(() => 'stale'));
    expect(values(watcher)).toEqual(good);

    // The next start, with the PLC not answering: the retained values say stale.
    await sim.mute(1);
    await gw.restart();
    const afterStop = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await afterStop.subscribe(`${AT}/#`, { qos: 1 });
    await afterStop.waitForMessages(5, { timeoutMs: 10_000 });
    expect(quality(afterStop)).toEqual(names.map(() => 'stale'));
    expect(values(afterStop)).toEqual(good);

    // Read again: good. Then a crash, which cannot say anything: the next start marks the values of the last run
    // stale until each tag is read (the PLC is silent meanwhile), and they are good again once it answers.
    await sim.unmute(1);
    await waitFor(() => quality(afterStop).every((q) => q === 'good'), 10_000, { message: 'good again' });
    await gw.kill('SIGKILL');
    await sim.mute(1);
    await gw.restart();
    const afterCrash = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await afterCrash.subscribe(`${AT}/#`, { qos: 1 });
    await waitFor(() => quality(afterCrash).every((q) => q === 'stale'), 10_000, { message: 'stale after the crash' });
    expect(values(afterCrash)).toEqual(good);
    // The unit stays beside the value: only the quality (and the time it was said) changed.
    expect(last(afterCrash, 'temperature')?.unit).toBe('°C');
    await sim.unmute(1);
    await waitFor(() => quality(afterCrash).every((q) => q === 'good'), 10_000, { message: 'good after the crash' });
    expect(values(afterCrash)).toEqual(good);
  });

  it('writes a value published to <topic>/set by a user the ACL lets write there, and confirms it with the value read back', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 4, [5]);
    const gw = await plainGateway(sim, { topic: TOPIC, writes: true });
    const operator = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'hmi-7', username: 'operator' }));
    await operator.subscribe(`${AT}/#`, { qos: 1 });
    await operator.waitForMessages(5, { timeoutMs: 10_000 });

    await operator.publish(`${AT}/setpoint/set`, '{"value": -42}', { qos: 1 });
    await operator.publish(`${AT}/running/set`, 'true', { qos: 1 });
    // 64-bit integers beyond 2^53 come as strings of digits (a JSON number would be rounded).
    await operator.publish(`${AT}/total/set`, '{"value": "-9000000000000000001"}', { qos: 1 });
    await waitFor(() => last(operator, 'setpoint')?.value === -42 && last(operator, 'running')?.value === true, 5000, {
      message: 'read back',
    });
    await waitFor(() => operator.payloads(`${AT}/total`).at(-1)?.startsWith('{"value":-9000000000000000001,'), 5000, {
      message: 'total read back',
    });
    expect(await sim.get(1, 'hr', 4, 5)).toEqual([0x10000 - 42, 0x8319, 0x93af, 0x1d7b, 0xffff]);
    expect(await sim.get(1, 'co', 0, 1)).toEqual([1]);
    // Audited like a DCMD: who (client id, user, address), what, and the value read back.
    const done = logLines(gw).filter((l) => l.msg === 'plain write done');
    expect(done.map((l) => [l.mod, l.who, l.user, l.remote, l.device, l.metric, l.value, l.readBack]).sort()).toEqual([
      ['audit', 'hmi-7', 'operator', '127.0.0.1', 'press-1', 'running', 'true', 'true'],
      ['audit', 'hmi-7', 'operator', '127.0.0.1', 'press-1', 'setpoint', '-42', '-42'],
      ['audit', 'hmi-7', 'operator', '127.0.0.1', 'press-1', 'total', '-9000000000000000001', '-9000000000000000001'],
    ]);
  });

  it('refuses a value out of range or of the wrong kind with an audit line, and writes nothing [tck-id-operational-behavior-data-commands-dcmd-metric-value]', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 4, [5]);
    const gw = await plainGateway(sim, { topic: TOPIC, writes: true });
    const operator = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'hmi-7', username: 'operator' }));
    await operator.subscribe(`${AT}/#`, { qos: 1 });
    await operator.waitForMessages(5, { timeoutMs: 10_000 });
    await sim.resetRequests();

    await operator.publish(`${AT}/setpoint/set`, '{"value": 70000}', { qos: 1 });
    await operator.publish(`${AT}/setpoint/set`, '{"value": 1.5}', { qos: 1 });
    await operator.publish(`${AT}/setpoint/set`, 'hot', { qos: 1 });
    await operator.publish(`${AT}/total/set`, '9007199254740993', { qos: 1 });
    await operator.publish(`${AT}/running/set`, '{"state": 1}', { qos: 1 });
    // What the node cannot write is refused and audited too, as a DCMD would be: a read-only tag, a tag and a
    // device it does not have (their value as sent: without a tag there is no datatype to read it by).
    await operator.publish(`${AT}/count/set`, '{"value": 3}', { qos: 1 });
    await operator.publish(`${AT}/nosuch/set`, '{"value": 4}', { qos: 1 });
    await operator.publish('plant1/line4/press-9/setpoint/set', '5', { qos: 1 });
    await waitFor(() => logLines(gw).filter((l) => l.msg === 'command refused').length === 8, 10_000, {
      message: 'eight refusals',
    });
    expect(
      logLines(gw)
        .filter((l) => l.msg === 'command refused')
        .map((l) => [l.who, l.user, l.topic, l.metric, l.value, l.why]),
    ).toEqual([
      ['hmi-7', 'operator', `${AT}/setpoint/set`, 'setpoint', '70000', '70000 is outside Int16 (-32768..32767)'],
      ['hmi-7', 'operator', `${AT}/setpoint/set`, 'setpoint', '1.5', '1.5 is not an integer (Int16)'],
      [
        'hmi-7',
        'operator',
        `${AT}/setpoint/set`,
        'setpoint',
        undefined,
        'not JSON: send {"value": ...} or a bare JSON value',
      ],
      [
        'hmi-7',
        'operator',
        `${AT}/total/set`,
        'total',
        undefined,
        '9007199254740992 is beyond 2^53 and was rounded by JSON: send it as a string of digits',
      ],
      ['hmi-7', 'operator', `${AT}/running/set`, 'running', undefined, 'a JSON object needs a "value"'],
      ['hmi-7', 'operator', `${AT}/count/set`, 'count', '3', 'read-only metric'],
      ['hmi-7', 'operator', `${AT}/nosuch/set`, 'nosuch', '{"value": 4}', 'unknown metric'],
      ['hmi-7', 'operator', 'plant1/line4/press-9/setpoint/set', 'setpoint', '5', 'unknown device'],
    ]);
    expect((await sim.requests()).filter((r) => r.op === 'write')).toEqual([]);
    expect(await sim.get(1, 'hr', 4, 1)).toEqual([5]);
    expect(logLines(gw).filter((l) => typeof l.msg === 'string' && l.msg.startsWith('plain write'))).toEqual([]);
  });

  it('lets no client write whom the ACL does not allow to publish on the /set topic', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 4, [5]);
    const gw = await plainGateway(sim, { topic: TOPIC, writes: true });
    const viewer = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'viewer-1', username: 'viewer' }));
    const anonymous = d.add(await openClient(gw.url, { protocolVersion: 4, clientId: 'script-1' }));
    await viewer.subscribe(`${AT}/#`, { qos: 1 });
    await viewer.waitForMessages(5, { timeoutMs: 10_000 });
    await sim.resetRequests();

    // MQTT 5: PUBACK 0x87 Not authorized; 3.1.1: acknowledged and dropped.
    await expect(viewer.publish(`${AT}/setpoint/set`, '7', { qos: 1 })).rejects.toThrow(/135|authori/i);
    await anonymous.publish(`${AT}/setpoint/set`, '8', { qos: 1 });
    await waitFor(
      () => logLines(gw).filter((l) => l.msg === 'denied by ACL' && l.action === 'publish').length === 2,
      5000,
      { message: 'two ACL denials' },
    );
    // A write the ACL allows still goes through afterwards: the two above were refused, not just slow.
    const operator = d.add(await openClient(gw.url, { protocolVersion: 5, clientId: 'hmi-7', username: 'operator' }));
    await operator.publish(`${AT}/setpoint/set`, '9', { qos: 1 });
    await waitFor(() => last(viewer, 'setpoint')?.value === 9, 5000, { message: 'the allowed write' });
    expect((await sim.requests()).filter((r) => r.op === 'write').map((r) => r.address)).toEqual([4]);
    expect(json(viewer, 'setpoint').map((v) => v.value)).toEqual([5, 9]);
  });

  it('is off by default: no plain topics, and a /set is no write', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 4, [5]);
    const gw = d.add(
      await startGateway({ broker: { sysIntervalS: 0 }, sparkplug: sparkplug(), connectors: [modbusPress(sim, TAGS)] }),
    );
    const all = d.add(await openClient(gw.url, { protocolVersion: 5 }));
    await all.subscribe('#', { qos: 1 });
    await all.publish(`${AT}/setpoint/set`, '7', { qos: 1 });
    await sim.set(1, 'hr', 2, [0, 9]);
    await waitFor(() => all.received().some((m) => m.topic === 'spBv1.0/plant1/DDATA/line4-gw/press-1'), 10_000, {
      message: 'DDATA',
    });
    expect(
      all
        .received()
        .filter((m) => !m.topic.startsWith('spBv1.0/'))
        .map((m) => m.topic),
    ).toEqual([`${AT}/setpoint/set`]);
    expect((await sim.requests()).filter((r) => r.op === 'write')).toEqual([]);
  });

  it('refuses a configuration that would let every client write, or a template without a topic per tag, naming the key', () => {
    const dir = d.tempDir('edgeferry-plain-config-');
    const file = join(dir, 'gw.yaml');
    const check = (plain: object, extra: object = {}) => {
      writeFileSync(
        file,
        JSON.stringify({
          storage: { path: join(dir, 'data') },
          sparkplug: sparkplug(plain),
          connectors: [
            {
              ...modbusPress({ port: 502 } as ModbusSim, [
                { name: 'a+b', table: 'holding', address: 0, datatype: 'int16' },
              ]),
            },
          ],
          ...extra,
        }),
      );
      const r = spawnSync(process.execPath, ['dist/src/cli.js', '--check-config', '--config', file], {
        encoding: 'utf8',
      });
      return { status: r.status, out: r.stderr + r.stdout };
    };
    const template = check({ topic: 'plant1/{tag}' });
    expect(template.status).toBe(2);
    expect(template.out).toContain('sparkplug.plain.topic: must contain {device} and {tag} once each');
    const open = check({ topic: TOPIC, writes: true });
    expect(open.status).toBe(2);
    expect(open.out).toContain('sparkplug.plain.writes: writes are authorized by the ACL: set auth.aclFile');
    expect(open.out).toContain('connectors.0.tags.0.name: sparkplug.plain makes it part of a topic: no +, # (or NUL)');
  });
});
