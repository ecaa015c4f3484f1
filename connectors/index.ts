/**
 * The static connector registry: every connector type edgeferry knows, by `type`. No runtime discovery.
 * A registry is created per gateway (factories own shared resources such as Modbus links), so nothing here is
 * module-level mutable state.
 */
import type { Connector } from './contract.js';
import type { Logger } from '../src/util/logger.js';
import { createModbusFactory } from './modbus/factory.js';
import type { ModbusConnectorFactory } from './modbus/factory.js';
import type { ModbusConnectorConfig } from './modbus/schema.js';

/** Any connector's config, discriminated by `type` (the `connectors:` entries of the config file). */
export type ConnectorConfig = ModbusConnectorConfig;

export interface ConnectorRegistry {
  readonly modbus: ModbusConnectorFactory;
  /** Creates the connector for one config entry. */
  create(config: ConnectorConfig, log: Logger): Connector;
}

export function createConnectorRegistry(): ConnectorRegistry {
  const modbus = createModbusFactory();
  return {
    modbus,
    create(config: ConnectorConfig, log: Logger): Connector {
      switch (config.type) {
        case 'modbus':
          return modbus.create(config, log);
      }
    },
  };
}
