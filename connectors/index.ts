/**
 * The static connector registry: every connector type edgeferry knows, by `type`. No runtime discovery.
 * A registry is created per gateway (factories may own shared resources, such as Modbus links), so nothing here
 * is module-level mutable state.
 */
import type { Connector, ConnectorContext } from './contract.js';
import { createModbusFactory } from './modbus/factory.js';
import type { ModbusConnectorFactory } from './modbus/factory.js';
import type { ModbusConnectorConfig } from './modbus/schema.js';
import { opcuaFactory } from './opcua/factory.js';
import type { OpcuaConnectorConfig } from './opcua/schema.js';
import { s7Factory } from './s7/factory.js';
import type { S7ConnectorConfig } from './s7/schema.js';

/** Any connector's config, discriminated by `type` (the `connectors:` entries of the config file). */
export type ConnectorConfig = ModbusConnectorConfig | OpcuaConnectorConfig | S7ConnectorConfig;

export interface ConnectorRegistry {
  readonly modbus: ModbusConnectorFactory;
  readonly opcua: typeof opcuaFactory;
  readonly s7: typeof s7Factory;
  /** Creates the connector for one config entry. */
  create(config: ConnectorConfig, context: ConnectorContext): Connector;
}

export function createConnectorRegistry(): ConnectorRegistry {
  const modbus = createModbusFactory();
  return {
    modbus,
    opcua: opcuaFactory,
    s7: s7Factory,
    create(config: ConnectorConfig, context: ConnectorContext): Connector {
      switch (config.type) {
        case 'modbus':
          return modbus.create(config, context);
        case 'opcua':
          return opcuaFactory.create(config, context);
        case 's7':
          return s7Factory.create(config, context);
      }
    },
  };
}
