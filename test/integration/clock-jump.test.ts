/**
 * docs/reliability.md#fault-scenarios "clock jumps": the gateway runs under libfaketime with only its wall clock faked
 * (FAKETIME_DONT_FAKE_MONOTONIC), starting in 1970 like a box whose RTC battery is flat, until "NTP" steps the
 * clock 56 years forward. Expected:
 * - the TLS uplink fails while the clock says 1970 (the central broker's certificate is "not yet valid"): the
 *   bridge buffers, says why in its log, and retries;
 * - the step ages nothing, in the running process and in the next one of the same boot: `queue.maxAgeS` does not
 *   drop the backlog journaled "in 1970", and a message expiry interval keeps counting from when the message
 *   came, so everything arrives after the step, its expiry interval reduced only by the time that really
 *   passed [MQTT-3.3.2-6];
 * - a delayed will goes out when its delay ends, also when the clock steps back meanwhile [MQTT-3.1.3-9].
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { makeCerts } from '../fixtures/certs.js';
import { checkSequence, collect, connectClient, sequence } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { bridgePatch, logLines, startGateway } from '../helpers/gateway.js';
import { startTlsMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { delay, waitFor } from '../helpers/wait.js';

const d = useDisposer();

/** Debian's `faketime` package (libfaketime); `.ci/run` installs it. */
function libfaketime(): string {
  const candidates = ['x86_64-linux-gnu', 'aarch64-linux-gnu', 'arm-linux-gnueabihf'].map(
    (arch) => `/usr/lib/${arch}/faketime/libfaketimeMT.so.1`,
  );
  const found = candidates.find((file) => existsSync(file));
  if (found === undefined) {
    throw new Error(`libfaketime not found (looked for ${candidates.join(', ')}): install Debian's faketime package`);
  }
  return found;
}

/** libfaketime's absolute time syntax; the clock runs on from there. */
const fakeTime = (date: Date): string => `@${date.toISOString().slice(0, 19).replace('T', ' ')}\n`;

/** A gateway environment whose wall clock (only) reads `clockFile`, re-read on every call: writing it steps the clock. */
const fakeClockEnv = (clockFile: string): Record<string, string> => ({
  LD_PRELOAD: libfaketime(),
  FAKETIME_TIMESTAMP_FILE: clockFile,
  FAKETIME_NO_CACHE: '1',
  FAKETIME_DONT_FAKE_MONOTONIC: '1',
});

/**
 * A central Mosquitto with a TLS listener behind a fault proxy, its checker (MQTT 5, to see expiry intervals),
 * and a gateway whose wall clock reads 1970 and is set through `setClock`; 20 QoS 1 messages are journaled
 * while TLS fails, every other one with a message expiry interval of 3600 s.
 */
async function journalIn1970() {
  const pki = makeCerts(d.tempDir());
  const { central, tlsPort } = await startTlsMosquitto(pki);
  d.add(central);
  const up = d.add(await collect(central.url, 'plant/#', { qos: 1, protocolVersion: 5 }));
  const proxy = d.add(await startFaultProxy(tlsPort));
  const clockFile = join(d.tempDir(), 'faketime');
  const setClock = (date: Date): void => writeFileSync(clockFile, fakeTime(date));
  setClock(new Date('1970-01-02T00:00:00Z'));
  const metricsPort = await freePort();
  const gw = d.add(
    await startGateway(
      {
        ...bridgePatch(`mqtts://127.0.0.1:${proxy.port}`, {
          remote: { tls: { caFile: pki.ca } },
          queue: { maxAgeS: 3600 },
        }),
        metrics: { host: '127.0.0.1', port: metricsPort },
      },
      { env: fakeClockEnv(clockFile) },
    ),
  );
  /** A value of the gateway's /metrics, by the series' name and labels. */
  const metric = async (series: RegExp): Promise<number | undefined> => {
    const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    const m = new RegExp(`^${series.source} (\\S+)$`, 'm').exec(text);
    return m ? Number(m[1]) : undefined;
  };

  // 1970: the certificate is not valid yet. The uplink says so and keeps trying; the messages are journaled.
  await waitFor(() => /not yet valid/.test(gw.output()), 10_000);
  const local = await connectClient(gw.url, { protocolVersion: 5 });
  const payloads = sequence(20, 'm');
  for (const [i, payload] of payloads.entries()) {
    await local.publishAsync('plant/line1', payload, {
      qos: 1,
      properties: i % 2 === 0 ? { messageExpiryInterval: 3600 } : {},
    });
  }
  await local.endAsync();
  expect(up.messages).toHaveLength(0);
  // The link goes down; the next step of the clock is the test's.
  proxy.refuse();
  return { up, proxy, gw, setClock, metric, payloads };
}

type Setup = Awaited<ReturnType<typeof journalIn1970>>;

/** Expiry checks run once a second: after two of them, nothing is dropped; then the link returns and all arrive. */
async function expectNothingAged({ up, proxy, metric, payloads }: Setup): Promise<void> {
  await delay(2500);
  expect(await metric(/edgeferry_bridge_backlog_messages\{bridge="central"\}/)).toBe(payloads.length);
  expect(await metric(/edgeferry_bridge_oldest_age_seconds\{bridge="central"\}/)).toBeLessThan(60);
  proxy.restore();
  await waitFor(() => up.messages.length >= payloads.length, 15_000);
  expect(checkSequence(up.payloads(), payloads)).toEqual({ missing: [], unexpected: [], outOfOrder: 0, duplicates: 0 });
  for (const [i, m] of up.messages.entries()) {
    const expiryS = m.properties?.messageExpiryInterval;
    if (i % 2 === 0) {
      // Reduced by the seconds that really passed since the publish, not by 56 years.
      expect(expiryS).toBeGreaterThan(3500);
      expect(expiryS).toBeLessThanOrEqual(3600);
    } else {
      expect(expiryS).toBeUndefined();
    }
  }
  expect(await metric(/edgeferry_bridge_dropped_total\{bridge="central",reason="expired"\}/)).toBe(0);
}

describe('clock jumps (docs/reliability.md#fault-scenarios)', { timeout: 120_000 }, () => {
  it('buffers while TLS says "not yet valid" in 1970; a 56-year step while running ages nothing', async () => {
    const setup = await journalIn1970();
    setup.setClock(new Date());
    // The log says so once, for whoever wonders at 3 a.m. why timestamps jumped.
    await waitFor(() => /the system clock stepped/.test(setup.gw.output()), 5000);
    const step = setup.gw
      .output()
      .split('\n')
      .filter((line) => line.includes('the system clock stepped'))
      .map((line) => (JSON.parse(line) as { stepS: number }).stepS);
    expect(step).toHaveLength(1);
    expect(step[0]).toBeGreaterThan(56 * 365 * 86_400);
    await expectNothingAged(setup);
  });

  it('a restart after the step, in the same boot, ages nothing either (the clock base is kept in the store)', async () => {
    const setup = await journalIn1970();
    setup.setClock(new Date());
    await setup.gw.kill('SIGKILL');
    await setup.gw.restart();
    await expectNothingAged(setup);
  });

  it('sends a delayed will when its delay ends although the clock stepped back an hour meanwhile [MQTT-3.1.3-9]', async () => {
    const clockFile = join(d.tempDir(), 'faketime');
    writeFileSync(clockFile, fakeTime(new Date()));
    const gw = d.add(await startGateway({}, { env: fakeClockEnv(clockFile), logLevel: 'debug' }));
    const watcher = d.add(await collect(gw.url, 'wills/#', { qos: 1 }));
    const client = await connectClient(gw.url, {
      protocolVersion: 5,
      clientId: 'will-across-a-step',
      properties: { sessionExpiryInterval: 60 },
      will: {
        topic: 'wills/line1',
        payload: Buffer.from('gone'),
        qos: 1,
        retain: false,
        properties: { willDelayInterval: 2 },
      },
    });
    const droppedAt = performance.now();
    client.stream.destroy(); // lost, not a DISCONNECT: the will is due in 2 s
    // The gateway saw the loss and set the will's due time (it logs the close after); now the clock steps back.
    await waitFor(
      () => logLines(gw).some((l) => l.msg === 'connection closed' && l.clientId === 'will-across-a-step'),
      5000,
      { message: 'the lost connection closed' },
    );
    writeFileSync(clockFile, fakeTime(new Date(Date.now() - 3_600_000)));
    await waitFor(() => watcher.messages.length === 1, 8000);
    expect(performance.now() - droppedAt).toBeGreaterThanOrEqual(1900);
    expect(watcher.payloads()).toEqual(['gone']);
    // The clock is watched once a second: on a loaded machine its line may come after the will.
    await waitFor(() => /"stepS":-36\d\d,.*the system clock stepped/.test(gw.output()), 5000, {
      message: () => `the step logged\n${gw.output()}`,
    });
    client.end(true);
  });
});
