/**
 * The S7 connector factory for the static registry (`connectors/index.ts`). Each connector has its own connection
 * to its CPU (S7 CPUs serve several clients, each on a connection of its own), so there is nothing to share.
 */
import type { ConnectorFactory } from '../contract.js';
import { S7Connector } from './s7-connector.js';
import { s7ConnectorSchema, type S7ConnectorConfig } from './schema.js';

export const s7Factory: ConnectorFactory<S7ConnectorConfig> = {
  type: 's7',
  schema: s7ConnectorSchema,
  create: (config, { log }) => new S7Connector(config, log),
};
