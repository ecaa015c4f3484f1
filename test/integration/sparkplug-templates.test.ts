/**
 * Device profiles as Sparkplug Templates (docs/architecture.md#sparkplug-templates), behind `sparkplug.templates`:
 * the NBIRTH defines each profile in use, every device built from it is one Template instance in its DBIRTH,
 * its DDATA carries the instance with the changed members, and a DCMD writes through the instance's members.
 * Through the real gateway process, polled from the pymodbus server, decoded by a host built with the Tahu JS
 * library (`sparkplug-payload`); our own host helper checks the session rules. Run `npm run build` first.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { get as getSparkplug } from 'sparkplug-payload';
import sparkplugProto from 'sparkplug-payload/lib/sparkplugPayloadProto.js';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, startGateway, type Gateway } from '../helpers/gateway.js';
import { startModbusSim, type ModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { hostsMayCommand, startSparkplugHost, type HostMessage } from '../helpers/sparkplug-host.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

const GROUP = 'plant1';
const NODE = 'line4-gw';

const tahu = getSparkplug('spBv1.0');
if (!tahu) throw new Error('sparkplug-payload has no spBv1.0');
const ProtoPayload = sparkplugProto.org.eclipse.tahu.protobuf.Payload;

interface TahuTemplate {
  readonly templateRef?: string;
  readonly isDefinition?: boolean;
  readonly metrics?: TahuMetric[];
}
interface TahuMetric {
  readonly name?: string;
  readonly type?: string;
  readonly value?: unknown;
  readonly properties?: Record<string, { type: string; value: unknown }>;
}

const press = {
  type: 'modbus',
  transport: 'tcp',
  host: '127.0.0.1',
  addressBase: 0,
  pollIntervalMs: 100,
  timeoutMs: 1500,
  retries: 0,
  tags: [
    { name: 'temperature', table: 'holding', address: 0, datatype: 'int16', scale: 0.1, engUnit: '°C' },
    { name: 'setpoint', table: 'holding', address: 1, datatype: 'uint16', writable: true },
  ],
};

/** Two presses on units 1 and 2 of one pymodbus server, both from the profile `press`. */
async function twoPresses(templates: boolean | undefined, plain?: object): Promise<{ sim: ModbusSim; gw: Gateway }> {
  const sim = d.add(await startModbusSim({ units: [1, 2] }));
  await sim.set(1, 'hr', 0, [215, 10]);
  await sim.set(2, 'hr', 0, [180, 20]);
  const gw = d.add(
    await startGateway(
      {
        auth: hostsMayCommand(d.tempDir()),
        sparkplug: {
          groupId: GROUP,
          edgeNodeId: NODE,
          rebirthDebounceMs: 0,
          deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 },
          templates,
          plain,
        },
        profiles: { press: { ...press, port: sim.port } },
        connectors: [
          { id: 'press-1', profile: 'press', unitId: 1 },
          { id: 'press-2', profile: 'press', unitId: 2 },
        ],
      },
      { logLevel: 'info' },
    ),
  );
  return { sim, gw };
}

/** A host that joins and asks for a rebirth; `decoded` holds each message as the Tahu library decodes it. */
async function joinHost(gw: Gateway) {
  const host = d.add(await startSparkplugHost(gw.url, GROUP));
  const decoded: { topic: string; metrics: TahuMetric[]; payload: Buffer }[] = [];
  host.client.on('message', (topic: string, payload: Buffer) => {
    const p = tahu!.decodePayload(payload) as unknown as { metrics?: TahuMetric[] };
    decoded.push({ topic, metrics: p.metrics ?? [], payload });
  });
  await host.rebirth(NODE);
  const last = (type: string, device?: string) =>
    decoded
      .filter((m) => m.topic === `spBv1.0/${GROUP}/${type}/${NODE}${device === undefined ? '' : `/${device}`}`)
      .at(-1);
  await host.waitFor(
    () => last('NBIRTH') && last('DBIRTH', 'press-1') && last('DBIRTH', 'press-2'),
    20_000,
    'NBIRTH and both DBIRTHs',
  );
  return { host, decoded, last };
}

describe('Sparkplug templates (sparkplug.templates)', () => {
  it('defines the profile in the NBIRTH, births each device as an instance with values, sends changed members in DDATA and writes a DCMD member to the right unit', async () => {
    const { sim, gw } = await twoPresses(true);
    const { host, decoded, last } = await joinHost(gw);

    // NBIRTH: one definition per profile in use, for both devices [tck-id-payloads-template-definition-nbirth]
    // [tck-id-topics-nbirth-templates]; is_definition true, no template_ref [tck-id-payloads-template-is-definition-definition]
    // [tck-id-payloads-template-ref-definition]; every member with its datatype and properties, no values
    // [tck-id-payloads-template-definition-members].
    const nbirth = last('NBIRTH')!.metrics;
    const definitions = nbirth.filter((m) => m.type === 'Template');
    expect(definitions.map((m) => m.name)).toEqual(['press']);
    const definition = definitions[0].value as TahuTemplate;
    expect(definition.isDefinition).toBe(true);
    expect(definition.metrics?.map((m) => [m.name, m.type])).toEqual([
      ['temperature', 'Double'],
      ['setpoint', 'UInt16'],
    ]);
    expect(definition.metrics?.[0].properties).toMatchObject({ engUnit: { value: '°C' }, readOnly: { value: true } });
    expect(definition.metrics?.[1].properties).toMatchObject({ readOnly: { value: false } });
    // The raw definition members carry no value at all, not even is_null.
    const rawNbirth = host.messages.filter((m) => m.type === 'NBIRTH').at(-1)!;
    const rawDefinition = rawNbirth.payload.metrics.find((m) => m.name === 'press')!;
    expect(rawDefinition.template?.ref).toBeUndefined(); // Tahu reads an absent template_ref as ''
    expect(rawDefinition.template?.members.map((m) => [m.value, m.isNull])).toEqual([
      [null, false],
      [null, false],
    ]);

    // DBIRTH: one instance metric per device, named and typed Template, is_definition false, template_ref the profile
    // [tck-id-payloads-template-instance-is-definition] [tck-id-payloads-template-instance-ref], with every member
    // and its value [tck-id-payloads-template-instance-members-birth].
    for (const [device, temperature, setpoint] of [
      ['press-1', 21.5, 10],
      ['press-2', 18, 20],
    ] as const) {
      const metrics = last('DBIRTH', device)!.metrics;
      expect(metrics.map((m) => [m.name, m.type])).toEqual([['press', 'Template']]);
      const instance = metrics[0].value as TahuTemplate;
      expect(instance.isDefinition).toBe(false);
      expect(instance.templateRef).toBe('press');
      expect(instance.metrics?.map((m) => m.name)).toEqual(['temperature', 'setpoint']);
      expect(instance.metrics?.[0].value).toBeCloseTo(temperature, 9);
      expect(instance.metrics?.[1].value).toBe(setpoint);
    }

    // A register change on unit 2: press-2's DDATA carries its instance (by alias) with that member only
    // [tck-id-payloads-template-instance-members-data].
    const from = decoded.length;
    await sim.set(2, 'hr', 1, [33]);
    const ddata = await waitFor(
      () => decoded.slice(from).find((m) => m.topic === `spBv1.0/${GROUP}/DDATA/${NODE}/press-2`),
      10_000,
      { message: 'DDATA of press-2' },
    );
    // A DATA metric is its alias and value [tck-id-payloads-alias-data-cmd-requirement]: the Tahu library needs the
    // datatype to find the Template in it, which a host knows from the birth, so read the library's protobuf.
    const [metric] = ProtoPayload.decode(ddata.payload).metrics;
    const instanceAlias = host.births('DBIRTH', 'press-2').at(-1)!.payload.metrics[0].alias;
    expect([metric.name, Number(metric.alias)]).toEqual(['', instanceAlias]);
    const template = metric.templateValue!;
    expect([template.isDefinition, template.templateRef]).toEqual([false, 'press']);
    expect(template.metrics?.map((m) => [m.name, m.datatype, m.intValue])).toEqual([['setpoint', 6, 33]]); // 6: UInt16
    expect(decoded.some((m) => m.topic.endsWith('/DDATA/line4-gw/press-1'))).toBe(false);

    // A DCMD as a Tahu host writes it: the instance with the member to write, to press-1 only. The read-only member
    // in the same command is refused, the writable one reaches unit 1's register and is read back in DDATA.
    const dcmd = tahu!.encodePayload({
      timestamp: Date.now(),
      metrics: [
        {
          name: 'press',
          type: 'Template',
          value: {
            templateRef: 'press',
            isDefinition: false,
            metrics: [
              { name: 'temperature', type: 'Double', value: 99 },
              { name: 'setpoint', type: 'UInt16', value: 77 },
            ],
          },
        },
      ],
    } as never);
    await host.client.publishAsync(`spBv1.0/${GROUP}/DCMD/${NODE}/press-1`, Buffer.from(dcmd), { qos: 0 });
    await host.waitFor(
      (h) =>
        h.messages.some(
          (m) =>
            m.type === 'DDATA' &&
            m.deviceId === 'press-1' &&
            m.payload.metrics[0]?.template?.members.some((x) => x.name === 'setpoint' && x.value === 77),
        ),
      10_000,
      'press-1 setpoint 77 read back',
    );
    expect(await sim.get(1, 'hr', 0, 2)).toEqual([215, 77]);
    expect(await sim.get(2, 'hr', 1, 1)).toEqual([33]);
    await waitFor(() => gw.output().includes('read-only metric'), 5000, {
      message: 'the refusal of the read-only member in the audit log',
    });
    expect(gw.output()).toMatch(
      /"metric":"press\/temperature".*"why":"read-only metric"|"why":"read-only metric".*"metric":"press\/temperature"/,
    );
    // A member is named `profile/tag` in every audit line, the write done as the refusal.
    const done = logLines(gw).filter((l) => l.msg === 'DCMD write done');
    expect(done.map((l) => [l.device, l.metric, l.value, l.readBack])).toEqual([
      ['press-1', 'press/setpoint', '77', '77'],
    ]);
    expect(host.violations).toEqual([]);
  });

  it('answers a reload that brings a new profile with a rebirth defining it before the DBIRTH of its device; a device with its own tags is no instance', async () => {
    const sim = d.add(await startModbusSim({ units: [1, 2, 3] }));
    await sim.set(2, 'hr', 0, [450]);
    const sparkplug = { groupId: GROUP, edgeNodeId: NODE, rebirthDebounceMs: 0, templates: true };
    const gw = d.add(
      await startGateway({
        auth: hostsMayCommand(d.tempDir()),
        sparkplug,
        profiles: { press: { ...press, port: sim.port } },
        connectors: [{ id: 'press-1', profile: 'press', unitId: 1 }],
      }),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP));
    await host.rebirth(NODE);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length > 0, 20_000, 'DBIRTH of press-1');
    const nbirths = host.births('NBIRTH').length;

    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { profiles: object; connectors: object[] };
    config.profiles = {
      ...config.profiles,
      oven: { ...press, port: sim.port, tags: [{ name: 'heat', table: 'holding', address: 0, datatype: 'uint16' }] },
    };
    config.connectors.push(
      { id: 'oven-1', profile: 'oven', unitId: 2 },
      {
        id: 'press-3',
        profile: 'press',
        unitId: 3,
        tags: [{ name: 'temperature', table: 'holding', address: 0, datatype: 'int16' }],
      },
    );
    writeFileSync(gw.configFile, JSON.stringify(config));
    gw.proc.kill('SIGHUP');
    await host.waitFor(
      (h) => h.births('DBIRTH', 'oven-1').length > 0 && h.births('DBIRTH', 'press-3').length > 0,
      20_000,
      'DBIRTHs of oven-1 and press-3',
    );

    // The new NBIRTH defines both profiles in use, and comes before oven-1's DBIRTH [tck-id-topics-nbirth-templates].
    const nbirth = host.births('NBIRTH').at(-1)!;
    expect(host.births('NBIRTH').length).toBe(nbirths + 1);
    expect(nbirth.payload.metrics.filter((m) => m.datatype === 'Template').map((m) => m.name)).toEqual([
      'press',
      'oven',
    ]);
    const oven = host.births('DBIRTH', 'oven-1')[0];
    expect(host.messages.indexOf(nbirth)).toBeLessThan(host.messages.indexOf(oven));
    expect(oven.payload.metrics.map((m) => [m.name, m.datatype, m.template?.ref])).toEqual([
      ['oven', 'Template', 'oven'],
    ]);
    expect(oven.payload.metrics[0].template?.members.map((m) => [m.name, m.value])).toEqual([['heat', 450]]);
    // press-3 lists its own tags: plain metrics, as without templates.
    expect(host.births('DBIRTH', 'press-3')[0].payload.metrics.map((m) => [m.name, m.datatype])).toEqual([
      ['temperature', 'Int16'],
    ]);
    expect(host.violations).toEqual([]);
  });

  it("answers a reload that changes a profile's tags with one rebirth defining it anew: no DBIRTH names a member its NBIRTH does not define", async () => {
    const { sim, gw } = await twoPresses(true);
    const { host } = await joinHost(gw);
    await sim.set(1, 'hr', 2, [33]);
    const nbirths = host.births('NBIRTH').length;
    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { profiles: { press: { tags: object[] } } };
    config.profiles.press.tags.push({ name: 'speed', table: 'holding', address: 2, datatype: 'uint16' });
    writeFileSync(gw.configFile, JSON.stringify(config));
    gw.proc.kill('SIGHUP');
    const membersOf = (m: HostMessage | undefined, definition: boolean) =>
      m?.payload.metrics
        .find((x) => x.datatype === 'Template' && x.template?.isDefinition === definition)
        ?.template?.members.map((x) => x.name);
    await host.waitFor(
      (h) => ['press-1', 'press-2'].every((id) => membersOf(h.births('DBIRTH', id).at(-1), false)?.includes('speed')),
      20_000,
      'DBIRTHs of both presses with the new member',
    );
    // The node defines the changed Template before the first DBIRTH that uses it [tck-id-topics-nbirth-templates]
    // [tck-id-payloads-template-definition-nbirth]: every DBIRTH's members are those of the NBIRTH before it.
    let defined: (string | undefined)[] | undefined;
    for (const m of host.messages) {
      if (m.type === 'NBIRTH') defined = membersOf(m, true);
      if (m.type === 'DBIRTH') expect(membersOf(m, false), `${m.deviceId}'s DBIRTH`).toEqual(defined);
    }
    expect(defined).toEqual(['temperature', 'setpoint', 'speed']);
    // One rebirth: both presses are taken down before the first comes back with the new definition.
    expect(host.births('NBIRTH')).toHaveLength(nbirths + 1);
    expect(host.violations).toEqual([]);
  });

  it('upstream through the uplink bridge: the NBIRTH defines the profile, the DBIRTH and DDATA carry the instance', async () => {
    const central = d.add(await startMosquitto());
    const sim = d.add(await startModbusSim({ units: [1] }));
    await sim.set(1, 'hr', 0, [215, 10]);
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    d.add(
      await startGateway({
        bridges: [
          {
            name: 'central',
            remote: { urls: [central.url], clientId: NODE },
            reconnect: { minDelayMs: 100, maxDelayMs: 200 },
            topics: [
              { filter: 'spBv1.0/#', direction: 'out' },
              { filter: `spBv1.0/${GROUP}/NCMD/${NODE}`, direction: 'in' },
              { filter: `spBv1.0/${GROUP}/DCMD/${NODE}/#`, direction: 'in' },
            ],
          },
        ],
        sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central', templates: true },
        profiles: { press: { ...press, port: sim.port } },
        connectors: [{ id: 'press-1', profile: 'press', unitId: 1 }],
      }),
    );
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length > 0, 20_000, 'upstream DBIRTH of press-1');
    const definition = host
      .births('NBIRTH')
      .at(-1)!
      .payload.metrics.find((m) => m.datatype === 'Template');
    expect([
      definition?.name,
      definition?.template?.isDefinition,
      definition?.template?.members.map((m) => m.name),
    ]).toEqual(['press', true, ['temperature', 'setpoint']]);
    const instance = host.births('DBIRTH', 'press-1').at(-1)!.payload.metrics;
    expect(instance.map((m) => [m.name, m.template?.ref, m.template?.members.map((x) => x.value)])).toEqual([
      ['press', 'press', [21.5, 10]],
    ]);

    await sim.set(1, 'hr', 1, [12]);
    const ddata = await host.waitFor(
      (h) => h.of('DDATA', 'press-1').find((m) => !m.payload.metrics[0]?.isHistorical),
      10_000,
      'upstream DDATA',
    );
    expect(
      ddata.payload.metrics.map((m) => [m.alias, m.template?.ref, m.template?.members.map((x) => [x.name, x.value])]),
    ).toEqual([[instance[0].alias, 'press', [['setpoint', 12]]]]);
    expect(host.violations).toEqual([]);
  });

  it('is off by default: no definitions in the NBIRTH, each tag its own metric in the DBIRTH', async () => {
    const { gw } = await twoPresses(undefined);
    const { host, last } = await joinHost(gw);
    expect(last('NBIRTH')!.metrics.filter((m) => m.type === 'Template')).toEqual([]);
    expect(last('DBIRTH', 'press-1')!.metrics.map((m) => [m.name, m.type])).toEqual([
      ['temperature', 'Double'],
      ['setpoint', 'UInt16'],
    ]);
    expect(host.violations).toEqual([]);
  });

  it('feeds plain topics from the instance members: each tag of a template device has its JSON value', async () => {
    const { sim, gw } = await twoPresses(true, { topic: 'plant1/line4/{device}/{tag}' });
    const reader = d.add(await openClient(gw.url, { clientId: 'hmi' }));
    await reader.subscribe('plant1/line4/#', { qos: 1 });
    const value = (device: string, tag: string) => {
      const last = reader.received(`plant1/line4/${device}/${tag}`).at(-1);
      return last === undefined ? undefined : (JSON.parse(last.payload) as { value: unknown }).value;
    };
    await waitFor(() => value('press-2', 'setpoint') === 20 && value('press-1', 'temperature') === 21.5, 20_000, {
      message: 'plain values of the births',
    });
    await sim.set(2, 'hr', 1, [33]);
    await waitFor(() => value('press-2', 'setpoint') === 33, 10_000, { message: 'plain value of a DDATA member' });
    expect(value('press-1', 'setpoint')).toBe(10);
  });
});
