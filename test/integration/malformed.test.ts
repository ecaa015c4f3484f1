/**
 * Bad input never hurts other clients (docs/reliability.md#bad-input-rules, the checklist rows named in each test). Raw
 * bytes on a socket to the real gateway process; each case asserts the exact MQTT 5 reason code where the spec
 * gives one (or a close with no packet for MQTT 3.1.1), that the offending connection is closed, and then that a
 * separate healthy pair of clients still publishes and receives, the gateway process is alive and it logged no
 * error (an error line means a handler threw: the connection would have been closed with 0x83, a bug).
 *
 * Rows covered elsewhere: #16 topic aliases (v5-properties.test.ts), #18 Receive Maximum boundary
 * (flow-control.test.ts; a bulk flood is here), #24 `$share` names (shared.test.ts), #27 PUBLISH to `$SYS`
 * (sys.test.ts), #34 slow readers (flow-control.test.ts). Not applicable: #12 (no `%c`/`%u` ACL patterns exist
 * yet), #25, #28, #32, #33, #36-#38 (other areas).
 */
import { readFileSync } from 'node:fs';
import type { MqttClient } from 'mqtt';
import mqttPacket from 'mqtt-packet';
import type { IConnackPacket, IPublishPacket } from 'mqtt-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectClient } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { startGateway, type Gateway } from '../helpers/gateway.js';
import { RawClient, type ConnectOptions, type ProtocolVersion } from '../helpers/raw-client.js';
import { delay, waitFor } from '../helpers/wait.js';

const CONNECT_TIMEOUT_MS = 2500;
const MAX_PACKET_BYTES = 65_536;
const RECEIVE_MAXIMUM = 10;
const MAX_KEEPALIVE_S = 60;
/** How fast a close decided at the fixed header must come: well before the connect timeout could do it. */
const PROMPT_MS = 1000;

let gw: Gateway;
let healthySub: MqttClient;
let healthyPub: MqttClient;
const healthyGot: string[] = [];
let healthSeq = 0;

beforeAll(async () => {
  gw = await startGateway({
    broker: {
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
      maxPacketBytes: MAX_PACKET_BYTES,
      receiveMaximum: RECEIVE_MAXIMUM,
      maxKeepaliveS: MAX_KEEPALIVE_S,
      maxUserProperties: 64,
    },
  });
  healthySub = await connectClient(gw.url, { protocolVersion: 5, clientId: 'healthy-sub' });
  healthySub.on('message', (_topic, payload) => healthyGot.push(payload.toString()));
  await healthySub.subscribeAsync('healthy/#', { qos: 1 });
  healthyPub = await connectClient(gw.url, { protocolVersion: 4, clientId: 'healthy-pub' });
});
afterAll(async () => {
  /* eslint-disable @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed */
  await healthySub?.endAsync(true);
  await healthyPub?.endAsync(true);
  await gw?.dispose();
  /* eslint-enable @typescript-eslint/no-unnecessary-condition */
});
const d = useDisposer();

/**
 * The other clients are unaffected: the healthy pair (connected since the start) still works, nothing crashed, and
 * nothing was logged at error since `logFrom` (an offset into the gateway's output).
 */
async function expectBrokerHealthy(logFrom = 0): Promise<void> {
  const payload = `alive-${++healthSeq}`;
  await healthyPub.publishAsync('healthy/check', payload, { qos: 1 });
  await waitFor(() => healthyGot.includes(payload), 5000, { message: `the healthy subscriber did not get ${payload}` });
  expect(healthySub.connected && healthyPub.connected).toBe(true);
  expect(gw.proc.exitCode, 'gateway exit code').toBeNull();
  expect(gw.proc.signalCode, 'gateway exit signal').toBeNull();
  // pino levels 50/60: error/fatal. A handler exception is logged at error before the 0x83 close.
  const errors = gw
    .output()
    .slice(logFrom)
    .split('\n')
    .filter((line) => /"level":(50|60)/.test(line));
  expect(errors, 'error-level log lines').toEqual([]);
}

/** A test case that then checks the broker is healthy. */
function malformed(name: string, fn: () => Promise<void>, timeoutMs?: number): void {
  it(
    name,
    async () => {
      const logFrom = gw.output().length;
      await fn();
      await expectBrokerHealthy(logFrom);
    },
    timeoutMs,
  );
}

async function open(version: ProtocolVersion = 4): Promise<RawClient> {
  return d.add(await RawClient.open(gw.port, { protocolVersion: version }));
}

async function connected(version: ProtocolVersion, connect: ConnectOptions = {}): Promise<RawClient> {
  return d.add(await RawClient.connect(gw.port, connect, { protocolVersion: version }));
}

/** MQTT 5: DISCONNECT with `reasonCode`, then the close. */
async function expectDisconnect(c: RawClient, reasonCode: number): Promise<void> {
  const disconnect = await c.expectDisconnect(3000);
  expect(disconnect.reasonCode, `reason code; received ${c.describe()}`).toBe(reasonCode);
  await c.waitForClose(3000);
}

/** Closed with no packet after the ones already taken (MQTT 3.1.1, or before CONNECT). */
async function expectSilentClose(c: RawClient, withinMs = 3000): Promise<void> {
  await c.waitForClose(withinMs);
  expect(c.packets('disconnect'), `received ${c.describe()}`).toEqual([]);
  expect(c.parseError).toBeUndefined();
}

/** Closed without a successful CONNACK (a refusal CONNACK is allowed, a session is not). */
async function expectRefusedConnect(c: RawClient, withinMs = 3000): Promise<void> {
  await c.waitForClose(withinMs);
  for (const p of c.packets('connack')) {
    const code = (p as IConnackPacket).reasonCode ?? (p as IConnackPacket).returnCode ?? 0;
    expect(code, 'CONNACK code').not.toBe(0);
  }
}

function hex(s: string): Buffer {
  return Buffer.from(s.replace(/\s+/g, ''), 'hex');
}

function generate(packet: Parameters<typeof mqttPacket.generate>[0], version: ProtocolVersion): Buffer {
  return mqttPacket.generate(packet, { protocolVersion: version });
}

describe('#1 the first packet is not CONNECT [MQTT-3.1.0-1]', () => {
  for (const [what, bytes] of [
    ['PUBLISH', '30 05 0001 61 6869'],
    ['PINGREQ', 'c0 00'],
    ['SUBSCRIBE', '82 06 0001 0001 61 00'],
    ['DISCONNECT', 'e0 00'],
  ] as const) {
    malformed(`closes the connection at once when the first packet is ${what}, answering nothing`, async () => {
      const c = await open();
      c.write(bytes);
      await c.waitForClose(PROMPT_MS);
      expect(c.bytesReceived).toBe(0);
    });
  }

  malformed(
    'closes at the fixed header when a non-CONNECT first packet declares 268,435,455 bytes, before any body (CVE-2023-0809)',
    async () => {
      const c = await open();
      c.write('82 ff ff ff 7f');
      await c.waitForClose(PROMPT_MS);
      expect(c.bytesReceived).toBe(0);
    },
  );
});

describe('#2 and #6: a CONNECT that never comes', () => {
  malformed(
    `closes a connection that sends nothing after broker.connectTimeoutMs (${CONNECT_TIMEOUT_MS} ms)`,
    async () => {
      const c = await open();
      await c.waitForClose(CONNECT_TIMEOUT_MS + 3000);
      const afterMs = (c.closedAtMs as number) - c.openedAtMs;
      expect(afterMs).toBeGreaterThanOrEqual(CONNECT_TIMEOUT_MS - 50);
      expect(c.bytesReceived).toBe(0);
    },
  );

  malformed(
    'closes a CONNECT trickled one byte at a time (slowloris) at the connect timeout, not when the bytes stop',
    async () => {
      const c = await open();
      const connect = generate(
        {
          cmd: 'connect',
          protocolId: 'MQTT',
          protocolVersion: 4,
          clean: true,
          keepalive: 30,
          clientId: 'x'.repeat(200),
        },
        4,
      );
      let sent = 0;
      const trickle = setInterval(() => {
        if (sent < connect.length - 1) c.write(connect.subarray(sent, ++sent)); // never the last byte
      }, 50);
      d.defer(() => clearInterval(trickle));
      await c.waitForClose(CONNECT_TIMEOUT_MS + 3000);
      clearInterval(trickle);
      const afterMs = (c.closedAtMs as number) - c.openedAtMs;
      expect(afterMs).toBeGreaterThanOrEqual(CONNECT_TIMEOUT_MS - 50);
      expect(sent).toBeGreaterThan(10); // it was still sending when it was cut off
      expect(c.bytesReceived).toBe(0);
    },
  );

  malformed(
    `keeps a publisher whose every write ends inside a packet, for longer than the connect timeout: each packet is timed, not the stream`,
    async () => {
      const sub = await connected(5);
      await sub.subscribe('stream/#');
      // Keep alive 1 s: the deadline for one packet is then the connect timeout.
      const c = await connected(5, { keepalive: 1 });
      const one = generate(
        { cmd: 'publish', topic: 'stream/x', payload: Buffer.alloc(100, 1), qos: 0, dup: false, retain: false },
        5,
      );
      const stream = Buffer.concat(Array.from({ length: 500 }, () => one));
      // Writes of one packet and a byte every 35 ms: each read ends inside a packet that the next one completes, and
      // one ends on a packet boundary only every `one.length` (113, a prime) writes, 4 s.
      expect(one.length).toBe(113);
      const step = one.length + 1;
      const startedAt = performance.now();
      let offset = 0;
      while (performance.now() - startedAt < CONNECT_TIMEOUT_MS * 2 && !c.closed) {
        c.write(stream.subarray(offset, offset + step));
        offset += step;
        await delay(35);
      }
      expect(c.closed, c.describe()).toBe(false);
      // Finish the last packet, then every one went through.
      const whole = Math.ceil(offset / one.length);
      c.write(stream.subarray(offset, whole * one.length));
      await c.ping();
      await sub.until(() => sub.publishes.length >= whole, 5000, `${whole} messages`);
    },
  );

  malformed(
    'refuses a CONNECT header declaring 268,435,455 bytes with no buffering: closed before the body comes',
    async () => {
      const c = await open();
      c.write('10 ff ff ff 7f 00 04 4d 51 54 54');
      await c.waitForClose(PROMPT_MS);
      expect(c.bytesReceived).toBe(0);
    },
  );

  malformed('refuses 50 such CONNECT headers at once without the gateway growing by their declared size', async () => {
    const rssBefore = rssKb(gw.proc.pid as number);
    const clients = await Promise.all(Array.from({ length: 50 }, () => open()));
    for (const c of clients) c.write('10 ff ff ff 7f 00 04 4d 51 54 54 05');
    await Promise.all(clients.map((c) => c.waitForClose(PROMPT_MS * 3)));
    // 50 × 256 MB would be 12.8 GB; allow for ordinary noise only.
    expect(rssKb(gw.proc.pid as number) - rssBefore).toBeLessThan(64 * 1024);
  });
});

describe('#3 a second CONNECT [MQTT-3.1.0-2]', () => {
  malformed('MQTT 5: DISCONNECT 0x82 Protocol Error, then close', async () => {
    const c = await connected(5);
    c.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 5, clean: true, keepalive: 30, clientId: 'again' });
    await expectDisconnect(c, 0x82);
  });

  malformed('MQTT 3.1.1: close without a packet', async () => {
    const c = await connected(4);
    c.send({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, keepalive: 30, clientId: 'again' });
    await expectSilentClose(c);
    expect(c.received.map((p) => p.cmd)).toEqual(['connack']);
  });
});

describe('#4 a Remaining Length of more than 4 bytes', () => {
  malformed('MQTT 5: DISCONNECT 0x81 Malformed Packet', async () => {
    const c = await connected(5);
    c.write('30 ff ff ff ff 01');
    await expectDisconnect(c, 0x81);
  });

  malformed('MQTT 3.1.1: close', async () => {
    const c = await connected(4);
    c.write('30 ff ff ff ff 01');
    await expectSilentClose(c);
  });

  malformed('before CONNECT: close without answering', async () => {
    const c = await open();
    c.write('10 ff ff ff ff 01');
    await c.waitForClose(PROMPT_MS);
    expect(c.bytesReceived).toBe(0);
  });
});

describe(`#5 a packet larger than broker.maxPacketBytes (${MAX_PACKET_BYTES})`, () => {
  /** A v5 QoS 0 PUBLISH on `m/b` of exactly `total` bytes. */
  function publishOfSize(total: number): Buffer {
    // 1 header byte + 3 length bytes (16384..2097151) + topic (2 + 3) + properties length (1) + payload.
    const payload = Buffer.alloc(total - 1 - 3 - 5 - 1, 'p');
    const bytes = generate({ cmd: 'publish', topic: 'm/b', payload, qos: 0, dup: false, retain: false }, 5);
    expect(bytes.length).toBe(total);
    return bytes;
  }

  malformed(
    'MQTT 5: DISCONNECT 0x95 Packet too large, decided at the fixed header before the body comes [MQTT-3.2.2-15]',
    async () => {
      const c = await connected(5);
      c.write('30 80 80 08'); // declares 131,072 bytes; nothing follows
      await expectDisconnect(c, 0x95);
    },
  );

  malformed('MQTT 3.1.1: close at the fixed header', async () => {
    const c = await connected(4);
    c.write('30 80 80 08');
    await expectSilentClose(c);
  });

  malformed(
    'MQTT 5: refuses a too-large packet that arrives whole in one write, and delivers nothing of it',
    async () => {
      const sub = await connected(5);
      await sub.subscribe('m/#');
      const c = await connected(5);
      c.write(publishOfSize(MAX_PACKET_BYTES + 1000));
      await expectDisconnect(c, 0x95);
      await sub.ping();
      expect(sub.publishes).toEqual([]);
    },
  );

  malformed(
    'counts the whole packet against the Maximum Packet Size: exactly the maximum is accepted, one byte more is not (MQTT 5 §3.1.2.11.4)',
    async () => {
      const sub = await connected(5);
      await sub.subscribe('m/#');
      const c = await connected(5);
      c.write(publishOfSize(MAX_PACKET_BYTES));
      await sub.until(() => sub.publishes.length >= 1, 5000, 'the maximum-size message');
      c.write(publishOfSize(MAX_PACKET_BYTES + 1));
      await expectDisconnect(c, 0x95);
      await sub.ping();
      expect(sub.publishes).toHaveLength(1);
    },
  );

  malformed('refuses a CONNECT larger than the maximum before answering it', async () => {
    const c = await open(5);
    const connect = generate(
      {
        cmd: 'connect',
        protocolId: 'MQTT',
        protocolVersion: 5,
        clean: true,
        keepalive: 30,
        clientId: 'big',
        will: { topic: 'w', payload: Buffer.alloc(MAX_PACKET_BYTES), qos: 0, retain: false },
      },
      5,
    );
    c.write(connect);
    await expectRefusedConnect(c);
  });
});

describe('#7 wrong reserved bits in the fixed header [MQTT-2.2.2-2]', () => {
  for (const [what, bytes] of [
    ['SUBSCRIBE with flags 0', '80 07 0001 00 0001 61 00'],
    ['UNSUBSCRIBE with flags 0', 'a0 06 0001 00 0001 61'],
    ['PUBREL with flags 0', '60 02 0001'],
    ['PUBACK with flags 1', '41 02 0001'],
    ['PINGREQ with flags 1', 'c1 00'],
    ['DISCONNECT with flags 1', 'e1 00'],
  ] as const) {
    malformed(`MQTT 5: ${what} gets DISCONNECT 0x81`, async () => {
      const c = await connected(5);
      c.write(bytes);
      await expectDisconnect(c, 0x81);
    });
  }

  malformed('MQTT 3.1.1: SUBSCRIBE with flags 0 closes the connection', async () => {
    const c = await connected(4);
    c.write('80 06 0001 0001 61 00');
    await expectSilentClose(c);
    expect(c.packets('suback')).toEqual([]);
  });
});

describe('#8 PUBLISH with QoS 3 [MQTT-3.3.1-4]', () => {
  malformed('MQTT 5: DISCONNECT 0x81', async () => {
    const c = await connected(5);
    c.write('36 07 0001 61 0001 00 78');
    await expectDisconnect(c, 0x81);
  });

  malformed('MQTT 3.1.1: close', async () => {
    const c = await connected(4);
    c.write('36 06 0001 61 0001 78');
    await expectSilentClose(c);
  });
});

describe('#9 unknown protocol name or level', () => {
  malformed('answers an unknown protocol level (6) with the 3.1.1 CONNACK 0x01 and closes [MQTT-3.1.2-2]', async () => {
    const c = await open();
    c.write('10 0c 0004 4d515454 06 02 001e 0000');
    await c.waitForClose(PROMPT_MS);
    expect(c.rawBytes).toEqual(hex('20 02 00 01'));
  });

  malformed('closes on an unknown protocol name without a CONNACK [MQTT-3.1.2-1]', async () => {
    const c = await open();
    c.write('10 0c 0004 4d515458 04 02 001e 0000');
    await c.waitForClose(PROMPT_MS);
    expect(c.bytesReceived).toBe(0);
  });

  malformed(
    'accepts MQTT 3.1 (MQIsdp, level 3), so the refusals above are about the bytes, not the client',
    async () => {
      const c = await connected(3, { clientId: 'mqtt31' });
      await c.ping();
    },
  );
});

describe('#10 malformed CONNECT flags', () => {
  for (const [what, flags] of [
    ['the reserved flag bit 0 set [MQTT-3.1.2-3]', '03'],
    ['Will QoS set without the Will Flag [MQTT-3.1.2-13]', '0a'],
    ['Will Retain set without the Will Flag [MQTT-3.1.2-15]', '22'],
  ] as const) {
    malformed(`closes on a CONNECT with ${what} without a CONNACK`, async () => {
      const c = await open();
      c.write(`10 0e 0004 4d515454 04 ${flags} 001e 0002 6964`);
      await c.waitForClose(PROMPT_MS);
      expect(c.bytesReceived).toBe(0);
    });
  }

  malformed('MQTT 3.1.1: closes on a CONNECT with Will QoS 3 without a CONNACK [MQTT-3.1.2-14]', async () => {
    const c = await open();
    // flags 0x1e: will QoS 3, will flag, clean session; client id "id", will topic "t", will payload "p".
    c.write('10 14 0004 4d515454 04 1e 001e 0002 6964 0001 74 0001 70');
    await c.waitForClose(PROMPT_MS);
    expect(c.bytesReceived).toBe(0);
  });

  malformed(
    'MQTT 5: refuses a CONNECT with Will QoS 3 with CONNACK 0x81 Malformed Packet [MQTT-3.1.2-12]',
    async () => {
      const c = await open(5);
      // As above with empty CONNECT and will property lists.
      c.write('10 16 0004 4d515454 05 1e 001e 00 0002 6964 00 0001 74 0001 70');
      const connack = (await c.expect('connack', PROMPT_MS)) as IConnackPacket;
      expect(connack.reasonCode).toBe(0x81);
      await c.waitForClose(PROMPT_MS);
    },
  );

  malformed('MQTT 3.1.1: closes on a password without a user name [MQTT-3.1.2-22]', async () => {
    const c = await open();
    // flags 0x42: password + clean session; client id "id", password "pw".
    c.write('10 12 0004 4d515454 04 42 001e 0002 6964 0002 7077');
    await expectRefusedConnect(c, PROMPT_MS);
  });

  malformed('MQTT 5: accepts a password without a user name (allowed in 5.0, §3.1.2.9)', async () => {
    const c = await open(5);
    // Hand-made: mqtt-packet will not encode a password without a user name. Flags 0x42, no properties,
    // client id "pw-only", password "pw".
    c.write('10 18 0004 4d515454 05 42 001e 00 0007 70772d6f6e6c79 0002 7077');
    const connack = (await c.expect('connack')) as IConnackPacket;
    expect(connack.reasonCode).toBe(0);
  });
});

describe('#11 zero-length client id', () => {
  malformed(
    'MQTT 3.1.1: CONNACK 0x02 Identifier rejected with Clean Session 0, then close [MQTT-3.1.3-8]',
    async () => {
      const c = await open(4);
      c.write('10 0c 0004 4d515454 04 00 001e 0000'); // hand-made: mqtt-packet refuses to encode this
      const connack = (await c.expect('connack')) as IConnackPacket;
      expect(connack.returnCode).toBe(0x02);
      await c.waitForClose(3000);
    },
  );

  malformed('MQTT 3.1.1: accepted with Clean Session 1 [MQTT-3.1.3-7]', async () => {
    const c = await open(4);
    expect((await c.connect({ clientId: '', clean: true })).returnCode).toBe(0);
  });

  malformed('MQTT 5: accepted with an Assigned Client Identifier [MQTT-3.1.3-6] [MQTT-3.2.2-16]', async () => {
    const c = await open(5);
    c.write('10 0d 0004 4d515454 05 00 001e 00 0000'); // Clean Start 0, empty id
    const connack = (await c.expect('connack')) as IConnackPacket;
    expect(connack.reasonCode).toBe(0);
    expect(connack.properties?.assignedClientIdentifier).toMatch(/.+/);
  });
});

describe('#13 ill-formed UTF-8 and U+0000', () => {
  for (const [what, bytes] of [
    ['a PUBLISH topic with an overlong encoding (C0 AF) [MQTT-1.5.4-1]', '30 06 0002 c0af 00 78'],
    ['a PUBLISH topic with a lone surrogate (ED A0 80) [MQTT-1.5.4-1]', '30 07 0003 eda080 00 78'],
    ['a PUBLISH topic containing U+0000 [MQTT-1.5.4-2]', '30 06 0002 6100 00 78'],
    ['a SUBSCRIBE topic filter [MQTT-1.5.4-1]', '82 08 0001 00 0002 c0af 01'],
    ['an UNSUBSCRIBE topic filter [MQTT-1.5.4-1]', 'a2 07 0001 00 0002 c0af'],
    ['a user property of a PUBLISH [MQTT-1.5.4-1]', '30 0d 0001 61 08 26 0001 6b 0002 c0af 78'],
    ['the content type of a PUBLISH [MQTT-1.5.4-1]', '30 09 0001 61 04 03 0001 ff 78'],
    ['the response topic of a PUBLISH [MQTT-1.5.4-1]', '30 09 0001 61 04 08 0001 ff 78'],
  ] as const) {
    malformed(`MQTT 5: ${what} is a Malformed Packet: DISCONNECT 0x81`, async () => {
      const sub = await connected(5);
      await sub.subscribe('#');
      const c = await connected(5);
      c.write(bytes);
      await expectDisconnect(c, 0x81);
      await sub.ping();
      expect(sub.publishes.filter((p) => p.topic !== 'healthy/check')).toEqual([]);
    });
  }

  malformed(
    'MQTT 5: an ill-formed filter deep in a long SUBSCRIBE (checked across turns) subscribes none of the packet [MQTT-1.5.4-1]',
    async () => {
      // 300 filters, the 200th ill-formed: well past the first turn's slice of checks.
      const filters = Array.from({ length: 300 }, (_, i) => (i === 199 ? hex('c0af') : Buffer.from(`deep/${i}`)));
      const body = Buffer.concat([
        hex('0007 00'), // packet id 7, no properties
        ...filters.map((f) => Buffer.concat([Buffer.from([f.length >> 8, f.length & 0xff]), f, Buffer.from([1])])),
      ]);
      const length = body.length; // < 16384: a two-byte remaining length
      const session = { clientId: 'deep-malformed', clean: false, properties: { sessionExpiryInterval: 300 } };
      const c = await connected(5, session);
      c.write(Buffer.concat([Buffer.from([0x82, (length & 0x7f) | 0x80, length >> 7]), body]));
      await expectDisconnect(c, 0x81);
      expect(c.packets('suback')).toEqual([]);
      // The session lives on: none of the 199 well-formed filters before the bad one became a subscription.
      const again = await RawClient.open(gw.port, { protocolVersion: 5 });
      d.add(again);
      expect((await again.connect(session)).sessionPresent).toBe(true);
      const pub = await connected(5);
      pub.publish('deep/0', 'x', { qos: 1 });
      await pub.expect('puback');
      await again.subscribe('deep/fence');
      pub.publish('deep/fence', 'f', { qos: 1, messageId: 2 });
      await again.expect('publish');
      expect(again.publishes.map((p) => p.topic)).toEqual(['deep/fence']);
    },
  );

  malformed('MQTT 3.1.1: an ill-formed PUBLISH topic closes the connection [MQTT-1.5.3-1]', async () => {
    const c = await connected(4);
    c.write('30 05 0002 c0af 78');
    await expectSilentClose(c);
  });

  for (const [what, bytes] of [
    ['client id', '10 0e 0004 4d515454 04 02 001e 0002 c0af'],
    ['client id with U+0000', '10 0e 0004 4d515454 04 02 001e 0002 6100'],
    ['user name', '10 12 0004 4d515454 04 82 001e 0001 61 0003 75ff73'],
  ] as const) {
    malformed(`refuses a CONNECT with an ill-formed ${what} without opening a session [MQTT-1.5.3-1]`, async () => {
      const c = await open();
      c.write(bytes);
      await expectRefusedConnect(c, PROMPT_MS);
    });
  }
});

describe('#14 and #15: topic names a PUBLISH may not use', () => {
  for (const topic of ['a/+/b', 'a/#', '#', '+']) {
    malformed(`MQTT 5: a PUBLISH to "${topic}" gets DISCONNECT 0x90 Topic Name invalid [MQTT-3.3.2-2]`, async () => {
      const c = await connected(5);
      c.publish(topic, 'x', { qos: 1 });
      await expectDisconnect(c, 0x90);
      expect(c.packets('puback')).toEqual([]);
    });
  }

  malformed('MQTT 3.1.1: a PUBLISH to "a/#" closes the connection [MQTT-3.3.2-2]', async () => {
    const c = await connected(4);
    c.publish('a/#', 'x', { qos: 1 });
    await expectSilentClose(c);
    expect(c.packets('puback')).toEqual([]);
  });

  malformed('MQTT 5: a zero-length topic without a topic alias gets DISCONNECT 0x82 (CVE-2021-34432)', async () => {
    const c = await connected(5);
    c.write('30 04 0000 00 78');
    await expectDisconnect(c, 0x82);
  });

  malformed('MQTT 3.1.1: a zero-length topic closes the connection [MQTT-4.7.3-1]', async () => {
    const c = await connected(4);
    c.write('30 03 0000 78');
    await expectSilentClose(c);
  });
});

describe('#17 packet identifier 0 [MQTT-2.3.1-1]', () => {
  malformed('MQTT 5: a QoS 1 PUBLISH with packet id 0 gets DISCONNECT 0x82', async () => {
    const c = await connected(5);
    c.write('32 07 0001 61 0000 00 78');
    await expectDisconnect(c, 0x82);
    expect(c.packets('puback')).toEqual([]);
  });

  malformed('MQTT 5: a QoS 2 PUBLISH with packet id 0 gets DISCONNECT 0x82', async () => {
    const c = await connected(5);
    c.write('34 07 0001 61 0000 00 78');
    await expectDisconnect(c, 0x82);
  });

  malformed('MQTT 3.1.1: a QoS 1 PUBLISH with packet id 0 closes the connection', async () => {
    const c = await connected(4);
    c.write('32 06 0001 61 0000 78');
    await expectSilentClose(c);
  });

  malformed('MQTT 5: a SUBSCRIBE with packet id 0 gets DISCONNECT 0x82', async () => {
    const c = await connected(5);
    c.write('82 07 0000 00 0001 61 00');
    await expectDisconnect(c, 0x82);
    expect(c.packets('suback')).toEqual([]);
  });

  malformed('MQTT 5: an UNSUBSCRIBE with packet id 0 gets DISCONNECT 0x82', async () => {
    const c = await connected(5);
    c.write('a2 06 0000 00 0001 61');
    await expectDisconnect(c, 0x82);
  });
});

describe('#18 a flood of QoS 2 PUBLISHes beyond Receive Maximum', () => {
  malformed(
    `MQTT 5: 2000 unreleased QoS 2 PUBLISHes in one write get DISCONNECT 0x93 after the first ${RECEIVE_MAXIMUM} (CVE-2023-28366)`,
    async () => {
      const sub = await connected(5);
      await sub.subscribe('flood/#');
      const c = await connected(5);
      const flood = Buffer.concat(
        Array.from({ length: 2000 }, (_, i) =>
          generate(
            {
              cmd: 'publish',
              topic: 'flood/x',
              payload: Buffer.from(String(i)),
              qos: 2,
              messageId: i + 1,
              dup: false,
              retain: false,
            },
            5,
          ),
        ),
      );
      c.write(flood);
      await expectDisconnect(c, 0x93);
      expect(c.packets('pubrec')).toHaveLength(RECEIVE_MAXIMUM);
      // What was accepted was delivered once; nothing after the violation was.
      await sub.until(() => sub.publishes.length >= RECEIVE_MAXIMUM, 5000, 'the accepted messages');
      await sub.ping();
      expect(sub.publishes.map((p) => p.payload.toString())).toEqual(
        Array.from({ length: RECEIVE_MAXIMUM }, (_, i) => String(i)),
      );
    },
  );
});

describe('#19 and #20: acknowledgement abuse', () => {
  malformed(
    'delivers a QoS 2 PUBLISH repeated 50 times with the same packet id and no PUBREL exactly once, without using up Receive Maximum (MQTT 5 §4.3.3)',
    async () => {
      const sub = await connected(5);
      await sub.subscribe('qos2/#');
      const c = await connected(5);
      for (let i = 0; i < 50; i++) c.publish('qos2/repeat', 'once', { qos: 2, messageId: 7, dup: i > 0 });
      await c.until(() => c.packets('pubrec').length >= 50, 5000, '50 PUBREC');
      expect(c.packets('pubrec').every((p) => p.messageId === 7 && (p.reasonCode ?? 0) === 0)).toBe(true);
      await sub.until(() => sub.publishes.length >= 1, 5000, 'the message');
      await sub.ping();
      expect(sub.publishes.map((p) => p.payload.toString())).toEqual(['once']);
      // The id is released by PUBREL; after that the same id carries a new message.
      c.send({ cmd: 'pubrel', messageId: 7 });
      expect(await c.expect('pubcomp')).toMatchObject({ messageId: 7, reasonCode: 0 });
      c.publish('qos2/repeat', 'second', { qos: 2, messageId: 7 });
      await sub.until(() => sub.publishes.length >= 2, 5000, 'the second message');
      expect(sub.publishes.map((p) => p.payload.toString())).toEqual(['once', 'second']);
    },
  );

  malformed(
    'ignores PUBACK and PUBCOMP for unknown packet ids and answers PUBREC/PUBREL for unknown ids with 0x92, staying connected',
    async () => {
      const c = await connected(5);
      c.send({ cmd: 'puback', messageId: 4001 });
      c.send({ cmd: 'pubcomp', messageId: 4002 });
      c.send({ cmd: 'pubrec', messageId: 4003 });
      c.send({ cmd: 'pubrel', messageId: 4004 });
      expect(await c.expect('pubrel')).toMatchObject({ messageId: 4003, reasonCode: 0x92 });
      expect(await c.expect('pubcomp')).toMatchObject({ messageId: 4004, reasonCode: 0x92 });
      await c.ping();
      expect(c.closed).toBe(false);
    },
  );

  malformed('MQTT 3.1.1: ignores acknowledgements for unknown packet ids and stays connected', async () => {
    const c = await connected(4);
    c.send({ cmd: 'puback', messageId: 5001 });
    c.send({ cmd: 'pubcomp', messageId: 5002 });
    c.send({ cmd: 'pubrec', messageId: 5003 });
    await c.ping();
    expect(c.closed).toBe(false);
  });
});

describe('#21 server-only packets from a client (CVE-2021-28166)', () => {
  const packets = [
    ['CONNACK', { cmd: 'connack', sessionPresent: false, reasonCode: 0, returnCode: 0 }],
    ['SUBACK', { cmd: 'suback', messageId: 1, granted: [0] }],
    ['UNSUBACK', { cmd: 'unsuback', messageId: 1, granted: [0] }],
    ['PINGRESP', { cmd: 'pingresp' }],
  ] as const;
  for (const [what, packet] of packets) {
    malformed(`MQTT 5: ${what} gets DISCONNECT 0x82`, async () => {
      const c = await connected(5);
      c.send(packet as never);
      await expectDisconnect(c, 0x82);
    });

    malformed(`MQTT 3.1.1: ${what} closes the connection`, async () => {
      const c = await connected(4);
      c.send(packet as never);
      await expectSilentClose(c);
    });
  }
});

describe('#22 SUBSCRIBE and UNSUBSCRIBE without topic filters', () => {
  malformed('MQTT 5: an empty SUBSCRIBE gets DISCONNECT 0x82 [MQTT-3.8.3-3]', async () => {
    const c = await connected(5);
    c.write('82 03 0001 00');
    await expectDisconnect(c, 0x82);
  });

  malformed('MQTT 5: an empty UNSUBSCRIBE gets DISCONNECT 0x82 [MQTT-3.10.3-2]', async () => {
    const c = await connected(5);
    c.write('a2 03 0001 00');
    await expectDisconnect(c, 0x82);
  });

  malformed('MQTT 3.1.1: an empty SUBSCRIBE closes the connection without a SUBACK [MQTT-3.8.3-3]', async () => {
    const c = await connected(4);
    c.write('82 02 0001');
    await expectSilentClose(c);
    expect(c.packets('suback')).toEqual([]);
  });

  malformed('MQTT 3.1.1: an empty UNSUBSCRIBE closes the connection [MQTT-3.10.3-2]', async () => {
    const c = await connected(4);
    c.write('a2 02 0001');
    await expectSilentClose(c);
  });
});

describe('#23 invalid topic filters are refused per filter, not per connection', () => {
  const bad = ['a/#/b', 'a+', 'a/b#', '#/a', '+a/b', ''];

  malformed(
    'MQTT 5: SUBACK 0x8F for each invalid filter, the valid one in the same packet granted [MQTT-4.7.1-2] [MQTT-4.7.1-3]',
    async () => {
      const c = await connected(5);
      const suback = await c.subscribe([
        ...bad.map((topic) => ({ topic, qos: 1 as const })),
        { topic: 'ok/+', qos: 1 },
      ]);
      expect(suback.granted).toEqual([...bad.map(() => 0x8f), 1]);
      await c.ping();
    },
  );

  malformed('MQTT 3.1.1: SUBACK 0x80 for each invalid filter [MQTT-3.9.3-2]', async () => {
    const c = await connected(4);
    const suback = await c.subscribe([...bad.map((topic) => ({ topic, qos: 1 as const })), { topic: 'ok/#', qos: 2 }]);
    expect(suback.granted).toEqual([...bad.map(() => 0x80), 2]);
    await c.ping();
  });
});

describe('#26 wildcards and topics starting with $ [MQTT-4.7.2-1]', () => {
  malformed(
    'does not deliver a $-topic to # or +/… subscribers, but does to a filter that names the $ level',
    async () => {
      const wild = await connected(5);
      await wild.subscribe([
        { topic: '#', qos: 0 },
        { topic: '+/dollar', qos: 0 },
        { topic: '+/+', qos: 0 },
      ]);
      const named = await connected(5);
      await named.subscribe([{ topic: '$app/#', qos: 0 }]);
      const pub = await connected(5);
      pub.publish('$app/dollar', 'hidden', { qos: 1, messageId: 3 });
      expect(await pub.expect('puback')).toMatchObject({ reasonCode: 0 });
      await named.until(() => named.publishes.length >= 1, 5000, 'the $app message');
      await wild.ping();
      expect(wild.publishes.filter((p) => p.topic.startsWith('$'))).toEqual([]);
    },
  );
});

describe('#29 user property floods (CVE-2021-41039)', () => {
  const props = (n: number): Record<string, string[]> => ({ k: Array.from({ length: n }, (_, i) => `v${i}`) });

  malformed('forwards a PUBLISH with 64 user properties (broker.maxUserProperties) in order', async () => {
    const sub = await connected(5);
    await sub.subscribe('props/#');
    const c = await connected(5);
    c.publish('props/ok', 'x', { qos: 1, properties: { userProperties: props(64) } });
    expect(await c.expect('puback')).toMatchObject({ reasonCode: 0 });
    const p = (await sub.expect('publish')) as IPublishPacket;
    expect(p.properties?.userProperties).toEqual(props(64));
  });

  malformed('MQTT 5: a PUBLISH with 65 user properties gets DISCONNECT 0x95 and is not delivered', async () => {
    const sub = await connected(5);
    await sub.subscribe('props/#');
    const c = await connected(5);
    c.publish('props/flood', 'x', { qos: 1, properties: { userProperties: props(65) } });
    await expectDisconnect(c, 0x95);
    await sub.ping();
    expect(sub.publishes).toEqual([]);
  });

  malformed('MQTT 5: a CONNECT with 65 user properties is refused without a session', async () => {
    const c = await open(5);
    c.send({
      cmd: 'connect',
      protocolId: 'MQTT',
      protocolVersion: 5,
      clean: true,
      keepalive: 30,
      clientId: 'props-connect',
      properties: { userProperties: props(65) },
    });
    await expectRefusedConnect(c);
  });

  malformed('MQTT 5: a SUBSCRIBE with 65 user properties gets DISCONNECT 0x95', async () => {
    const c = await connected(5);
    c.send({
      cmd: 'subscribe',
      messageId: 1,
      subscriptions: [{ topic: 'a', qos: 0 }],
      properties: { userProperties: props(65) },
    });
    await expectDisconnect(c, 0x95);
  });
});

describe(`#30 keep alive above broker.maxKeepaliveS (${MAX_KEEPALIVE_S})`, () => {
  malformed(
    'MQTT 5: accepted with Server Keep Alive set to the maximum for 120 s and for 0 (no keep alive) (MQTT 5 §3.2.2.3.14)',
    async () => {
      for (const keepalive of [120, 0]) {
        const c = await open(5);
        const connack = await c.connect({ keepalive });
        expect(connack.reasonCode).toBe(0);
        expect(connack.properties?.serverKeepAlive, `keepalive ${keepalive}`).toBe(MAX_KEEPALIVE_S);
      }
      const within = await open(5);
      const connack = await within.connect({ keepalive: 30 });
      expect(connack.properties?.serverKeepAlive).toBeUndefined();
    },
  );

  malformed(
    'MQTT 3.1.1: refused with CONNACK 0x02 for 120 s and for 0, as Mosquitto does with max_keepalive (CVE-2020-13849)',
    async () => {
      for (const keepalive of [120, 0]) {
        const c = await open(4);
        const connack = await c.connect({ keepalive });
        expect(connack.returnCode, `keepalive ${keepalive}`).toBe(0x02);
        await c.waitForClose(3000);
      }
      const within = await open(4);
      expect((await within.connect({ keepalive: MAX_KEEPALIVE_S })).returnCode).toBe(0);
    },
  );
});

describe('#31 keep-alive expiry', () => {
  async function willWatcher(topic: string): Promise<RawClient> {
    const w = await connected(5);
    await w.subscribe(topic);
    return w;
  }

  malformed(
    'MQTT 5: nothing received for 1.5 × keep alive gets DISCONNECT 0x8D and the will is published [MQTT-3.1.2-22]',
    async () => {
      const watcher = await willWatcher('will/ka5');
      const c = await open(5);
      await c.connect({
        keepalive: 1,
        will: { topic: 'will/ka5', payload: Buffer.from('gone'), qos: 1, retain: false },
      });
      const connectedAt = performance.now();
      await expectDisconnect(c, 0x8d);
      const afterMs = performance.now() - connectedAt;
      expect(afterMs).toBeGreaterThanOrEqual(1500 - 50); // not before 1.5 × the keep alive; the wait bounds it
      await watcher.until(() => watcher.publishes.length >= 1, 5000, 'the will');
      expect(watcher.publishes[0].payload.toString()).toBe('gone');
    },
  );

  malformed(
    'MQTT 3.1.1: nothing received for 1.5 × keep alive closes the connection and publishes the will [MQTT-3.1.2-24 (3.1.1)]',
    async () => {
      const watcher = await willWatcher('will/ka4');
      const c = await open(4);
      await c.connect({
        keepalive: 1,
        will: { topic: 'will/ka4', payload: Buffer.from('gone4'), qos: 0, retain: false },
      });
      await expectSilentClose(c, 4000);
      await watcher.until(() => watcher.publishes.length >= 1, 5000, 'the will');
      expect(watcher.publishes[0].payload.toString()).toBe('gone4');
    },
  );

  malformed('keeps a client that sends PINGREQ within the keep alive', async () => {
    const c = await open(5);
    await c.connect({ keepalive: 1 });
    for (let i = 0; i < 4; i++) {
      await delay(600); // pacing: less than the 1 s keep alive
      await c.ping();
    }
    expect(c.closed).toBe(false);
  });
});

describe('#35 many idle TCP connections', () => {
  malformed(
    'keeps serving while 500 connections sit idle without CONNECT, and closes them all at the connect timeout',
    async () => {
      const idle: RawClient[] = [];
      for (let batch = 0; batch < 10; batch++)
        idle.push(...(await Promise.all(Array.from({ length: 50 }, () => open()))));
      await expectBrokerHealthy();
      await waitFor(() => idle.every((c) => c.closed), CONNECT_TIMEOUT_MS + 5000, {
        message: () => `${idle.filter((c) => !c.closed).length} idle connections still open`,
      });
      expect(idle.reduce((n, c) => n + c.bytesReceived, 0)).toBe(0);
    },
    20_000,
  );
});

function rssKb(pid: number): number {
  const status = readStatus(pid);
  const match = /VmRSS:\s+(\d+) kB/.exec(status);
  if (!match) throw new Error(`no VmRSS for ${pid}`);
  return Number(match[1]);
}

function readStatus(pid: number): string {
  return readFileSync(`/proc/${pid}/status`, 'utf8');
}
