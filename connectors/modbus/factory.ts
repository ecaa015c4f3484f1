/**
 * The Modbus connector factory. Each factory instance owns the pool of open links (TCP connections and serial
 * ports), so connectors addressing the same bus share it; `connectors/index.ts` creates one per gateway.
 */
import type { Connector, ConnectorContext, ConnectorFactory } from '../contract.js';
import { ModbusConnector } from './modbus-connector.js';
import { LinkPool } from './modbus-link.js';
import { modbusConnectorSchema } from './schema.js';
import type { ModbusConnectorConfig } from './schema.js';
import { scanUnits, testRead, type TestReadResult, type UnitAnswer } from './test-read.js';

export interface ModbusConnectorFactory extends ConnectorFactory<ModbusConnectorConfig> {
  /** Requests sent by every connector of this factory (reads and writes). */
  readonly requestCount: number;
  /** A commissioning read on this factory's links (test-read.ts): a bus the connectors use is shared. */
  testRead(input: unknown): Promise<TestReadResult>;
  scanUnits(input: unknown): Promise<UnitAnswer[]>;
}

export function createModbusFactory(): ModbusConnectorFactory {
  const pool = new LinkPool();
  return {
    type: 'modbus',
    schema: modbusConnectorSchema,
    create(config: ModbusConnectorConfig, { log }: ConnectorContext): Connector {
      return new ModbusConnector(config, log, pool);
    },
    get requestCount() {
      return pool.stats.requests;
    },
    testRead: (input) => testRead(pool, input),
    scanUnits: (input) => scanUnits(pool, input),
  };
}
