/**
 * Seeded fuzzing of one `Connection` (parse → dispatch → handlers) with mutated MQTT packets and random bytes
 * [docs/reliability.md rules 1-24]: whatever arrives, nothing throws out of the socket callback, no handler fails (the
 * connection's internal-error path logs at error and closes with 0x83), and the broker keeps routing for a
 * well-behaved connection afterwards. Seeds are fixed, so a failure names a case that reproduces.
 */
import mqttPacket from 'mqtt-packet';
import type { Packet } from 'mqtt-packet';
import { describe, expect, it } from 'vitest';
import { FileAuth } from '../../src/broker/auth.js';
import { Broker } from '../../src/broker/broker.js';
import { Connection, type ConnectionContext, type ListenerPolicy } from '../../src/server/connection.js';
import type { ServerLimits } from '../../src/server/context.js';
import { WriteFlusher } from '../../src/server/write-flusher.js';
import type { Transport, TransportReader } from '../../src/server/transport.js';
import { PendingConnections } from '../../src/server/pending.js';
import { createMemoryStore } from '../../src/store/memory.js';
import { recordingLogger, type LoggedError } from '../helpers/logger.js';
import { seededRandom } from '../helpers/random.js';

class FakeTransport implements Transport {
  readonly remoteAddress = '127.0.0.1';
  bufferedBytes = 0;
  written: Buffer[] = [];
  ended = false;
  private reader: TransportReader | undefined;

  write(data: Buffer): void {
    this.written.push(data);
  }
  end(): void {
    if (this.ended) return;
    this.ended = true;
    // A real socket reports the close asynchronously.
    setImmediate(() => this.reader?.peerClosed());
  }
  destroy(): void {
    this.end();
  }
  pause(): void {}
  resume(): void {}
  attach(reader: TransportReader): void {
    this.reader = reader;
  }
  feed(chunk: Buffer): void {
    this.reader?.received(chunk);
  }
}

const LIMITS: ServerLimits = {
  maxConnections: 10_000,
  maxPacketBytes: 4096,
  maxKeepaliveS: 65_535,
  connectTimeoutMs: 10_000,
  receiveMaximum: 8,
  maxTopicLevels: 16,
  topicAliasMaximum: 4,
  maxSessionExpiryS: 4_294_967_295,
  maxWriteBufferBytes: 1 << 20,
  slowClientTimeoutMs: 60_000,
  retainAvailable: true,
  maxUserProperties: 8,
  maxSubscriptionsPerClient: 1000,
};

function context(errors: LoggedError[]): ConnectionContext {
  const log = recordingLogger(errors);
  const broker = new Broker({
    limits: { maxInflight: 4, maxQueuedMessages: 16, maxQueuedBytes: 0 },
    store: createMemoryStore(),
    log,
  });
  return {
    broker,
    auth: new FileAuth(undefined, undefined),
    limits: LIMITS,
    log,
    flusher: new WriteFlusher(),
    clients: new Map(),
  };
}

/** The listener every fuzzed connection comes in on: its counts show that all of them closed. */
const fuzzListener: ListenerPolicy = {
  allowAnonymous: true,
  identityIsUsername: false,
  connections: 0,
  pending: new PendingConnections(1000, 100),
};

const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Well-formed packets of every kind a client may (or may not) send, as mutation seeds. */
function corpus(version: 4 | 5): Buffer[] {
  const v5 = version === 5;
  const packets: Packet[] = [
    { cmd: 'publish', topic: 'fuzz/a', payload: Buffer.from('hello'), qos: 0, dup: false, retain: false },
    { cmd: 'publish', topic: 'fuzz/b/c', payload: Buffer.alloc(40, 7), qos: 1, messageId: 1, dup: false, retain: true },
    { cmd: 'publish', topic: 'fuzz/q2', payload: Buffer.from('x'), qos: 2, messageId: 2, dup: false, retain: false },
    {
      cmd: 'subscribe',
      messageId: 3,
      subscriptions: [
        { topic: 'fuzz/#', qos: 2 },
        { topic: '$share/g/fuzz/+', qos: 1 },
      ],
    },
    { cmd: 'unsubscribe', messageId: 4, unsubscriptions: ['fuzz/#'] },
    { cmd: 'puback', messageId: 1 },
    { cmd: 'pubrec', messageId: 2 },
    { cmd: 'pubrel', messageId: 2 },
    { cmd: 'pubcomp', messageId: 2 },
    { cmd: 'pingreq' },
    { cmd: 'suback', messageId: 9, granted: [0] },
  ];
  if (v5) {
    packets.push(
      {
        cmd: 'publish',
        topic: 'fuzz/props',
        payload: Buffer.from('p'),
        qos: 1,
        messageId: 5,
        dup: false,
        retain: false,
        properties: {
          payloadFormatIndicator: true,
          messageExpiryInterval: 10,
          topicAlias: 2,
          responseTopic: 'fuzz/resp',
          correlationData: Buffer.from('c'),
          userProperties: { k: ['1', '2'] },
          contentType: 'text/plain',
        },
      },
      {
        cmd: 'publish',
        topic: '',
        payload: Buffer.from('alias'),
        qos: 0,
        dup: false,
        retain: false,
        properties: { topicAlias: 2 },
      },
      {
        cmd: 'subscribe',
        messageId: 6,
        subscriptions: [{ topic: 'fuzz/+', qos: 1, nl: true, rap: true, rh: 1 }],
        properties: { subscriptionIdentifier: 42 },
      },
      { cmd: 'auth', reasonCode: 0x18, properties: { authenticationMethod: 'x' } },
      { cmd: 'disconnect', reasonCode: 0x04, properties: { sessionExpiryInterval: 0 } },
    );
  } else {
    packets.push({ cmd: 'disconnect' });
  }
  return packets.map((p) => mqttPacket.generate(p, { protocolVersion: version }));
}

function connectBytes(version: 4 | 5, clientId: string): Buffer {
  return mqttPacket.generate(
    {
      cmd: 'connect',
      protocolId: 'MQTT',
      protocolVersion: version,
      clean: true,
      keepalive: 30,
      clientId,
      will: { topic: 'fuzz/will', payload: Buffer.from('w'), qos: 1, retain: false },
      properties: version === 5 ? { receiveMaximum: 3, topicAliasMaximum: 2, maximumPacketSize: 2000 } : undefined,
    },
    { protocolVersion: version },
  );
}

function mutate(bytes: Buffer, random: () => number): Buffer {
  const out = Buffer.from(bytes);
  switch (Math.floor(random() * 6)) {
    case 0: {
      // Flip a few bits anywhere, fixed header included.
      for (let i = 0, n = 1 + Math.floor(random() * 3); i < n; i++)
        out[Math.floor(random() * out.length)] ^= 1 << Math.floor(random() * 8);
      return out;
    }
    case 1:
      return out.subarray(0, Math.floor(random() * out.length)); // truncated
    case 2: {
      const extra = Buffer.from(Array.from({ length: 1 + Math.floor(random() * 8) }, () => Math.floor(random() * 256)));
      const at = Math.floor(random() * out.length);
      return Buffer.concat([out.subarray(0, at), extra, out.subarray(at)]);
    }
    case 3:
      out[1] = Math.floor(random() * 256); // a wrong remaining length
      return out;
    case 4:
      out[Math.floor(random() * out.length)] = [0x00, 0xff, 0xc0, 0x80, 0x7f][Math.floor(random() * 5)];
      return out;
    default:
      return out; // unchanged
  }
}

function chunks(bytes: Buffer, random: () => number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < bytes.length;) {
    const n = 1 + Math.floor(random() * Math.min(64, bytes.length - i));
    out.push(bytes.subarray(i, i + n));
    i += n;
  }
  return out;
}

async function runCase(ctx: ConnectionContext, seed: number): Promise<void> {
  const random = seededRandom(seed);
  const version: 4 | 5 = random() < 0.5 ? 4 : 5;
  const seeds = corpus(version);
  const parts: Buffer[] = [];
  const connect = connectBytes(version, `fuzz-${seed}`);
  parts.push(random() < 0.15 ? mutate(connect, random) : connect);
  if (random() < 0.1)
    parts.push(Buffer.from(Array.from({ length: Math.floor(random() * 200) }, () => Math.floor(random() * 256))));
  for (let i = 0, n = 1 + Math.floor(random() * 10); i < n; i++) {
    const base = seeds[Math.floor(random() * seeds.length)];
    parts.push(random() < 0.5 ? mutate(base, random) : base);
  }
  const transport = new FakeTransport();
  new Connection(transport, ctx, fuzzListener);
  let first = true;
  for (const chunk of chunks(Buffer.concat(parts), random)) {
    transport.feed(chunk);
    // Let the asynchronous CONNECT authentication complete after the first bytes, as on a real socket.
    if (first) {
      first = false;
      await turn();
    }
  }
  await turn();
  transport.end(); // the peer goes away
  await turn();
}

/** More cases for a longer local run: `FUZZ_CASES=100000 npx vitest run test/unit/parser-fuzz.test.ts`. */
const CASES = Number(process.env.FUZZ_CASES ?? 3000);

describe('Connection under fuzzed input', () => {
  it(
    `survives ${CASES} seeded cases of mutated packets and random bytes without an exception or a handler failure (0x83), and keeps routing [docs/reliability.md#bad-input-rules]`,
    async () => {
      const errors: LoggedError[] = [];
      const ctx = context(errors);
      const failures: string[] = [];
      for (let seed = 1; seed <= CASES; seed++) {
        try {
          await runCase(ctx, seed);
        } catch (err) {
          failures.push(`seed ${seed}: ${(err as Error).stack ?? String(err)}`);
        }
        if (errors.length > 0) {
          const what = errors.map(
            ({ obj, msg }) => `${msg}: ${(obj.err as Error | undefined)?.stack ?? JSON.stringify(obj)}`,
          );
          failures.push(`seed ${seed}: logged at error/fatal: ${what.join('; ')}`);
          errors.length = 0;
        }
        if (failures.length >= 5) break;
      }
      expect(failures).toEqual([]);
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- absent until the first such disconnect
      expect(ctx.broker.stats.disconnects.implementation_specific_error ?? 0).toBe(0);
      // Every fuzzed connection is gone, and a well-behaved client still gets its messages.
      expect(fuzzListener.connections).toBe(0);
      expect(fuzzListener.pending.size).toBe(0);
      expect(ctx.clients.size).toBe(0);
      const got: string[] = [];
      const unsubscribe = ctx.broker.subscribe(
        'after/#',
        { qos: 0, origin: 'checker' },
        (msg) => void got.push(msg.payload.toString()),
      );
      const transport = new FakeTransport();
      new Connection(transport, ctx, {
        allowAnonymous: true,
        identityIsUsername: false,
        connections: 0,
        pending: new PendingConnections(1000, 100),
      });
      transport.feed(connectBytes(4, 'after-fuzz'));
      await turn();
      transport.feed(
        mqttPacket.generate(
          {
            cmd: 'publish',
            topic: 'after/x',
            payload: Buffer.from('ok'),
            qos: 1,
            messageId: 1,
            dup: false,
            retain: false,
          },
          { protocolVersion: 4 },
        ),
      );
      await turn();
      unsubscribe();
      expect(got).toEqual(['ok']);
    },
    Math.max(60_000, CASES * 20),
  );
});
