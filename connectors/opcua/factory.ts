/**
 * The OPC UA connector factory for the static registry (`connectors/index.ts`). Importing it is cheap:
 * node-opcua itself is loaded only when a connector starts (see opcua-lib.ts).
 */
import type { ConnectorFactory } from '../contract.js';
import { OpcuaConnector } from './opcua-connector.js';
import { opcuaConnectorSchema, type OpcuaConnectorConfig } from './schema.js';
import { opcuaPkiDir } from './trust.js';

/**
 * Without `pkiDir` in the config, the PKI lives under `./data` (the default `storage.path`); the gateway
 * should set `pkiDir: opcuaPkiDir(storage.path)` when it builds the connector config.
 */
export const opcuaFactory: ConnectorFactory<OpcuaConnectorConfig> = {
  type: 'opcua',
  schema: opcuaConnectorSchema,
  // The gateway hands in a logger already bound to this connector (mod, connector id).
  create: (config, log) => new OpcuaConnector(config, log, { pkiDir: config.pkiDir ?? opcuaPkiDir('data') }),
};
