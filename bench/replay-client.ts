/**
 * The reference row `node-client` of `npm run bench:bridge`: a bare Node.js MQTT 3.1.1 client, one connection,
 * no store, pre-encoded packets (`ingest` with one publisher), sending M QoS 1 messages with at most W
 * unacknowledged. Run in its own process, like a gateway, through the same fault proxy to the same upstream: its
 * rate is what a Node.js process gets here with that many in flight and no work per message, the ceiling for a
 * Node gateway's replay. Prints one JSON line: { acked, complete, problem }.
 *
 *   node dist/bench/replay-client.js --port P --messages M --window W --payload-bytes B --tag T
 */
import { parseArgs } from 'node:util';
import { ingest } from './qos1-load.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string' },
    messages: { type: 'string' },
    window: { type: 'string' },
    'payload-bytes': { type: 'string' },
    tag: { type: 'string', default: 'replay-client' },
  },
  strict: true,
});
const number = (name: keyof typeof values): number => {
  const n = Number(values[name]);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name} must be a positive integer`);
  return n;
};
const result = await ingest(number('port'), values.tag as string, {
  messages: number('messages'),
  publishers: 1,
  window: number('window'),
  payloadBytes: number('payload-bytes'),
});
for (const c of result.connections) await c.close();
process.stdout.write(
  `${JSON.stringify({ acked: result.acked, complete: result.complete, problem: result.problem })}\n`,
);
