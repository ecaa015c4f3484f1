/**
 * The Sparkplug part of `npm run bench:fleet`: the first `--sparkplug` gateways also read a Modbus press (one
 * pymodbus server for all of them, a counter that moves every second) and publish it as a Sparkplug edge node
 * through the same `central` bridge; a host application at the central broker (test/helpers/sparkplug-host.ts, which
 * checks the Sparkplug rules on every message) sees their births, data and deaths. Per outage: how long after the
 * link or the broker was back each node was born again, and every rule the host saw broken.
 */
import { startModbusSim, type ModbusSim } from '../test/helpers/modbus-sim.js';
import { startSparkplugHost, type SparkplugHost } from '../test/helpers/sparkplug-host.js';

const GROUP = 'fleet';
const HOST_ID = 'fleet-host';

export interface SparkplugOutage {
  /** Seconds from the return to each node's first NBIRTH after it: p50 and max, over the nodes born again. */
  rebirthS: { p50: number; max: number } | undefined;
  /** Nodes without an NBIRTH after the return within the wait. */
  notReborn: number;
  /** DDATA the host received since the return. */
  ddata: number;
}

export class FleetSparkplug {
  private counter = 0;
  private readonly ticker: NodeJS.Timeout;

  private constructor(
    private readonly centralUrl: string,
    readonly nodes: number,
    private readonly sim: ModbusSim,
    private host: SparkplugHost,
    /** Rule breaks of hosts already stopped. */
    private readonly pastViolations: string[] = [],
  ) {
    // A value that moves, so that every node sends DDATA each second.
    this.ticker = setInterval(() => void this.sim.set(1, 'hr', 2, [0, ++this.counter]).catch(() => undefined), 1000);
  }

  static async start(centralPort: number, nodes: number): Promise<FleetSparkplug> {
    const url = `mqtt://127.0.0.1:${centralPort}`;
    const sim = await startModbusSim();
    await sim.set(1, 'hr', 0, [0x41a8, 0x0000, 0, 0]); // 21.0 as float32, count 0
    return new FleetSparkplug(url, nodes, sim, await startSparkplugHost(url, GROUP, { clientId: HOST_ID }));
  }

  isNode(index: number): boolean {
    return index < this.nodes;
  }

  /** The Sparkplug additions to gateway `index`'s configuration: the node, its Modbus press, its bridge topics. */
  config(index: number): { sparkplug: object; connectors: object[]; topics: object[] } {
    const node = `gw${index}`;
    return {
      sparkplug: { groupId: GROUP, edgeNodeId: node, uplink: 'central' },
      connectors: [
        {
          id: 'press-1',
          type: 'modbus',
          transport: 'tcp',
          host: '127.0.0.1',
          port: this.sim.port,
          unitId: 1,
          addressBase: 0,
          pollIntervalMs: 500,
          tags: [
            { name: 'temperature', table: 'holding', address: 0, datatype: 'float32' },
            { name: 'count', table: 'holding', address: 2, datatype: 'uint32' },
          ],
        },
      ],
      topics: [
        { filter: 'spBv1.0/#', direction: 'out' },
        { filter: `spBv1.0/${GROUP}/NCMD/${node}`, direction: 'in' },
        { filter: `spBv1.0/${GROUP}/DCMD/${node}/#`, direction: 'in' },
        { filter: 'spBv1.0/STATE/+', direction: 'in' },
      ],
    };
  }

  /** Waits (at most `timeoutMs`) until every node has an NBIRTH and a DBIRTH of its press at the host. */
  async born(timeoutMs: number): Promise<void> {
    await this.host.waitFor(
      (h) => this.names().every((n) => h.births('NBIRTH').some((m) => m.edgeNodeId === n)),
      timeoutMs,
      'an NBIRTH of every Sparkplug gateway',
    );
  }

  /** The central broker goes: the host with it (it does not reconnect); `hostBack` starts a new one. */
  async hostGone(): Promise<void> {
    this.pastViolations.push(...this.host.violations);
    await this.host.stop().catch(() => undefined);
  }

  async hostBack(): Promise<void> {
    this.host = await startSparkplugHost(this.centralUrl, GROUP, { clientId: HOST_ID });
  }

  /** After an outage that ended at `backAtMs` (Date.now()): waits for every node's rebirth, at most `timeoutMs`. */
  async outage(backAtMs: number, timeoutMs: number): Promise<SparkplugOutage> {
    const firstBirth = (node: string) =>
      this.host.births('NBIRTH').find((m) => m.edgeNodeId === node && m.receivedAtMs >= backAtMs);
    await this.host
      .waitFor(() => this.names().every((n) => firstBirth(n) !== undefined), timeoutMs, 'rebirths')
      .catch(() => undefined);
    const times = this.names()
      .map((n) => firstBirth(n))
      .filter((m) => m !== undefined)
      .map((m) => Math.round(m.receivedAtMs - backAtMs) / 1000)
      .sort((a, b) => a - b);
    return {
      rebirthS: times.length === 0 ? undefined : { p50: times[Math.floor(times.length / 2)], max: times.at(-1)! },
      notReborn: this.nodes - times.length,
      ddata: this.host.of('DDATA').filter((m) => m.receivedAtMs >= backAtMs).length,
    };
  }

  /** Every Sparkplug rule a host saw broken, over the whole run. */
  violations(): string[] {
    return [...this.pastViolations, ...this.host.violations];
  }

  async stop(): Promise<void> {
    clearInterval(this.ticker);
    await this.host.stop().catch(() => undefined);
    await this.sim.dispose();
  }

  private names(): string[] {
    return Array.from({ length: this.nodes }, (_, i) => `gw${i}`);
  }
}
