/**
 * Primary host application STATE (Sparkplug 3.0 §5 "Primary Host Application STATE"): births wait for the
 * host's `spBv1.0/STATE/<id>` online; an offline STATE at least as new ends the session; older ones are ignored.
 * Over an uplink the host's state is known per connection: each new one waits for a STATE on it.
 */
import { describe, expect, it } from 'vitest';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway } from '../helpers/gateway.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { startSparkplugHost, sparkplugUplink } from '../helpers/sparkplug-host.js';
import { delay, waitFor } from '../helpers/wait.js';
import { logLines } from '../helpers/gateway.js';

const d = useDisposer();
const GROUP = 'plant1';
const NODE = 'line4-gw';

const device = (port: number) => ({
  id: 'press-1',
  type: 'modbus',
  transport: 'tcp',
  host: '127.0.0.1',
  port,
  addressBase: 0,
  pollIntervalMs: 100,
  timeoutMs: 1500,
  tags: [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }],
});

const bdSeq = (m: { payload: { metrics: readonly { name?: string; value: unknown }[] } }) =>
  Number(m.payload.metrics.find((x) => x.name === 'bdSeq')?.value);

/** The uplink bridge of these tests: Sparkplug out, the node's commands and the hosts' STATE in. */
const bridgeTo = (url: string) => sparkplugUplink(url, { group: GROUP, node: NODE });

describe('Sparkplug primary host STATE', () => {
  it('on the local broker: no births before the host is online; its death ends the session; a stale online is ignored', async () => {
    const sim = d.add(await startModbusSim());
    const gw = d.add(
      await startGateway(
        {
          sparkplug: { groupId: GROUP, edgeNodeId: NODE, primaryHostId: 'scada-1' },
          connectors: [device(sim.port)],
        },
        { logLevel: 'debug' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, GROUP, { clientId: 'scada-1' }));
    // The press answered reads since the host subscribed: a DBIRTH would follow the first data. A PUBACK to the
    // host comes after anything the broker wrote to it before.
    await sim.polled();
    await host.client.publishAsync('marker/round-trip', 'x', { qos: 1 });
    expect(host.messages).toEqual([]);
    const bornAt = Date.now();
    await host.publishState('scada-1', true, bornAt);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length === 1, 10_000, 'births after STATE online');
    expect(host.messages[0].type).toBe('NBIRTH');
    // The host's Will reuses its birth timestamp: that offline is its death.
    await host.publishState('scada-1', false, bornAt);
    await host.waitFor((h) => h.of('NDEATH').length === 1, 5000, 'NDEATH after STATE offline');
    expect(bdSeq(host.of('NDEATH')[0])).toBe(bdSeq(host.births('NBIRTH')[0]));
    await host.publishState('scada-1', true, bornAt - 1000);
    // The gateway says what it decided: ignored (an online would have birthed at once).
    await waitFor(() => logLines(gw).some((l) => l.msg === 'older online STATE ignored'), 5000, {
      message: 'the stale online STATE ignored',
    });
    expect(host.births('NBIRTH')).toHaveLength(1);
    await host.publishState('scada-1', true, bornAt + 1000);
    await host.waitFor(
      (h) => h.births('NBIRTH').length === 2 && h.births('DBIRTH').length === 2,
      10_000,
      'births after the host is back',
    );
    expect(bdSeq(host.births('NBIRTH')[1])).toBe(bdSeq(host.births('NBIRTH')[0]) + 1);
    expect(host.violations).toEqual([]);
  });

  // The upstream session is born when the host's STATE arrives, through `Bridge.publishNow` (STATE is subscribed
  // after CONNACK, after the prologue).
  it('over the uplink: births wait for the central host STATE, data is stored meanwhile and sent as historical', async () => {
    const central = d.add(await startMosquitto());
    const sim = d.add(await startModbusSim());
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    const gw = d.add(
      await startGateway(
        {
          bridges: [bridgeTo(central.url)],
          sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central', primaryHostId: 'scada-1' },
          connectors: [device(sim.port)],
        },
        { logLevel: 'info' },
      ),
    );
    await waitFor(() => gw.output().includes('births wait for the primary host'), 10_000, {
      message: 'the uplink connected, waiting for the host',
    });
    for (const n of [5, 6, 7]) {
      await sim.set(1, 'hr', 0, [n]);
      await sim.polled(); // read, and stored
    }
    expect(host.of('NBIRTH')).toEqual([]);
    const bornAt = Date.now();
    await host.publishState('scada-1', true, bornAt);
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length === 1, 10_000, 'upstream births after STATE online');
    expect(host.messages[0].type).toBe('NBIRTH');
    // What changed while the host was away went into the outbox and follows the births as history.
    await host.waitFor(
      (h) => h.of('DDATA', 'press-1').some((m) => m.payload.metrics.some((x) => x.isHistorical && x.value === 6)),
      10_000,
      'historical data after the births',
    );
    expect(host.of('DDATA', 'press-1').every((m) => m.payload.metrics.every((x) => x.isHistorical))).toBe(true);
    expect(host.value(NODE, 'press-1', 'count')).toBe(7);
    // The host's death ends the upstream session (NDEATH sent at once); its return starts a new one.
    await host.publishState('scada-1', false, bornAt);
    await host.waitFor((h) => h.of('NDEATH').length === 1, 10_000, 'NDEATH upstream after STATE offline');
    expect(bdSeq(host.of('NDEATH')[0])).toBe(bdSeq(host.births('NBIRTH')[0]));
    await host.publishState('scada-1', true, bornAt + 1);
    await host.waitFor(
      (h) => h.births('NBIRTH').length === 2 && h.births('DBIRTH').length === 2,
      10_000,
      'births when the host is back',
    );
    expect(host.violations).toEqual([]);
  });

  // The central broker restarts while the host's retained STATE there says offline (the host died meanwhile, its
  // death also queued in the gateway's persistent session). The node must not birth on what it knew before the
  // outage: a STATE on the new connection has to say online first [tck-id-message-flow-edge-node-birth-publish-phid-wait]
  // [tck-id-operational-behavior-edge-node-birth-sequence-wait]; a session born then lives until a real offline
  // [tck-id-message-flow-edge-node-birth-publish-phid-offline].
  it('over the uplink: after a central restart, births wait for an online STATE on the new connection', async () => {
    const central = d.add(await startMosquitto({ persistence: true }));
    const proxy = d.add(await startFaultProxy(central.port));
    const sim = d.add(await startModbusSim());
    const host = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    const firstLife = Date.now();
    await host.publishState('scada-1', true, firstLife);
    const gw = d.add(
      await startGateway(
        {
          bridges: [bridgeTo(proxy.url)],
          sparkplug: { groupId: GROUP, edgeNodeId: NODE, uplink: 'central', primaryHostId: 'scada-1' },
          connectors: [device(sim.port)],
        },
        { logLevel: 'debug' },
      ),
    );
    const waits = () => gw.output().split('births wait for the primary host').length - 1;
    await host.waitFor((h) => h.births('DBIRTH', 'press-1').length === 1, 10_000, 'births while the host is online');
    const firstBdSeq = bdSeq(host.births('NBIRTH')[0]);
    // Settle: the bridge acknowledges the STATE once it is durable locally; one cut before would have the central
    // broker deliver it again on the next connection (QoS 1), a replay of an old life this test is not about.
    await delay(1000);

    // The link drops; the host dies while the gateway cannot hear it; the central broker restarts.
    proxy.refuse();
    proxy.reset();
    await host.waitFor((h) => h.of('NDEATH').length === 1, 10_000, 'the Will NDEATH of the lost connection');
    await host.publishState('scada-1', false, firstLife);
    await host.stop();
    await central.stop();
    await central.restart();
    const after = d.add(await startSparkplugHost(central.url, GROUP, { clientId: 'scada-1' }));
    const waitsBefore = waits();
    proxy.restore();
    await waitFor(() => waits() > waitsBefore, 10_000, { message: () => `reconnect\n${gw.output()}` });
    // The retained offline STATE (and the queued one) arrive on this connection: no session may start. A stale
    // online STATE follows them on the same subscription; once the gateway logged it ignored, they were handled.
    // Births would have gone out before the gateway subscribed; a PUBACK to the host follows them. The marker is
    // sent again until the gateway logs it: one sent before the gateway's SUBSCRIBE reached the broker goes nowhere.
    const ignored = () => logLines(gw).filter((l) => l.msg === 'older online STATE ignored').length;
    const staleOnline = JSON.stringify({ online: true, timestamp: firstLife - 1 });
    await waitFor(
      async () => {
        if (ignored() > 0) return true;
        await after.client.publishAsync('spBv1.0/STATE/scada-1', staleOnline, { qos: 1 });
        return false;
      },
      10_000,
      { intervalMs: 200, message: () => `the stale online STATE ignored\n${gw.output()}` },
    );
    await after.client.publishAsync('marker/round-trip', 'x', { qos: 1 });
    expect(after.of('NBIRTH')).toEqual([]);
    expect(after.of('NDEATH')).toEqual([]);

    const secondLife = Date.now();
    await after.publishState('scada-1', true, secondLife);
    await after.waitFor(
      (h) => h.births('DBIRTH', 'press-1').length === 1,
      10_000,
      'births once the host is online again',
    );
    const secondBdSeq = bdSeq(after.births('NBIRTH')[0]);
    expect(secondBdSeq).toBeGreaterThan(firstBdSeq);
    // A live value goes up only while the session lives, behind any NDEATH that ended it.
    await sim.set(1, 'hr', 0, [42]);
    await after.waitFor((h) => h.value(NODE, 'press-1', 'count') === 42, 10_000, 'a live value after the births');
    expect(after.of('NDEATH')).toEqual([]);

    // A link drop while the host stays online: the resumed session gets the retained online STATE again and births.
    proxy.reset();
    await after.waitFor((h) => h.births('NBIRTH').length === 2, 10_000, 'births after a link drop, host still online');
    const deaths = after.of('NDEATH');
    expect(deaths.map(bdSeq)).toEqual([secondBdSeq]);
    const thirdBdSeq = bdSeq(after.births('NBIRTH')[1]);
    expect(thirdBdSeq).toBeGreaterThan(secondBdSeq);

    // Only the host's real death ends the session.
    await after.publishState('scada-1', false, secondLife);
    await after.waitFor((h) => h.of('NDEATH').length === 2, 10_000, 'NDEATH after the host goes offline');
    expect(bdSeq(after.of('NDEATH')[1])).toBe(thirdBdSeq);
    expect(after.births('NBIRTH')).toHaveLength(2);
    expect(after.violations).toEqual([]);
  });
});
