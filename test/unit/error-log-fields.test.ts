/**
 * `errorLogFields`: expected operational errors are one line with the cause in words and no stack; anything
 * else is a bug and keeps its stack (docs/architecture.md#errors-and-logs). The errors are real: a refused
 * TCP connect to a port nobody listens on, a TypeError thrown by the runtime.
 */
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ConfigError, ConnectorError, errorLogFields, isOperationalError, UplinkError } from '../../src/util/errors.js';
import { freePort } from '../helpers/ports.js';

async function refusedConnect(): Promise<NodeJS.ErrnoException> {
  const port = await freePort();
  return new Promise((resolve) => connect(port, '127.0.0.1').on('error', resolve));
}

function typeError(): TypeError {
  try {
    (undefined as unknown as { x: () => void }).x();
  } catch (err) {
    return err as TypeError;
  }
  throw new Error('unreachable');
}

describe('errorLogFields', () => {
  it('a refused connect, bare or wrapped in an UplinkError, is its reason in words and the socket details, without err', async () => {
    const refused = await refusedConnect();
    const port = (refused as { port?: number }).port;
    expect(errorLogFields(refused)).toEqual({
      reason: `connection refused (127.0.0.1:${port})`,
      errno: 'ECONNREFUSED',
      syscall: 'connect',
      address: '127.0.0.1',
      port,
    });
    const wrapped = new UplinkError('EF_UPLINK_CONNECT', 'mqtt://127.0.0.1:1: connection refused', { cause: refused });
    expect(errorLogFields(wrapped)).toMatchObject({
      code: 'EF_UPLINK_CONNECT',
      reason: 'mqtt://127.0.0.1:1: connection refused',
      errno: 'ECONNREFUSED',
    });
    expect(errorLogFields(wrapped)).not.toHaveProperty('err');
  });

  it('a typed error, with a library error or none as its cause, is expected; its first line is the reason', () => {
    const lost = new ConnectorError(
      'EF_CONNECTOR_UNREACHABLE',
      'press-1',
      'lost opc.tcp://plc:4840: BadCommunicationError',
      {
        cause: new Error('BadCommunicationError'),
      },
    );
    expect(isOperationalError(lost)).toBe(true);
    expect(errorLogFields(lost)).toEqual({
      code: 'EF_CONNECTOR_UNREACHABLE',
      reason: 'lost opc.tcp://plc:4840: BadCommunicationError',
    });
    const config = new ConfigError('gw.yaml', [
      { path: 'a', message: 'bad' },
      { path: 'b', message: 'worse' },
    ]);
    expect(errorLogFields(config)).toEqual({
      code: 'EF_CONFIG_INVALID',
      reason: 'gw.yaml: 2 problems',
      problems: config.problems,
    });
  });

  it('a bug keeps its stack: a TypeError, even wrapped in a typed error; EF_INTERNAL; an unclassified Error', () => {
    const bug = typeError();
    const wrapped = new UplinkError('EF_UPLINK_CONNECT', 'handling a packet failed', { cause: bug });
    const internal = new UplinkError('EF_INTERNAL', 'no free packet id');
    const plain = new Error('something nobody classified');
    for (const [value, code] of [
      [bug, 'EF_INTERNAL'],
      [wrapped, 'EF_UPLINK_CONNECT'],
      [internal, 'EF_INTERNAL'],
      [plain, 'EF_INTERNAL'],
    ] as const) {
      expect(isOperationalError(value)).toBe(false);
      const fields = errorLogFields(value);
      expect(fields).toMatchObject({ code, reason: value.message });
      expect(fields.err?.stack).toContain('    at ');
    }
  });
});
