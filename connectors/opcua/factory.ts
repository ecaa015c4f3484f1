/**
 * The OPC UA connector factory for the static registry (`connectors/index.ts`). Importing it is cheap:
 * node-opcua itself is loaded only when a connector starts (see opcua-lib.ts).
 */
import type { ConnectorFactory } from '../contract.js';
import { OpcuaConnector } from './opcua-connector.js';
import { opcuaConnectorSchema, type OpcuaConnectorConfig } from './schema.js';
import { opcuaPkiDir } from './trust.js';

/** Without `pkiDir` in the config, the PKI is the one every OPC UA connector of the gateway shares, under its data. */
export const opcuaFactory: ConnectorFactory<OpcuaConnectorConfig> = {
  type: 'opcua',
  schema: opcuaConnectorSchema,
  create: (config, { log, dataDir }) =>
    new OpcuaConnector(config, log, { pkiDir: config.pkiDir ?? opcuaPkiDir(dataDir) }),
};
