/**
 * `edgeferry opcua browse|trust ...` with the data directory (its PKI folder) and the OPC UA connectors of the
 * configuration file, when it loads; the subcommands themselves are connectors/opcua/opcua-command.ts.
 */
import { resolve } from 'node:path';
import { runOpcuaCommand } from '../../connectors/opcua/opcua-command.js';
import { loadConfig } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { ConfigError, describeError } from '../util/errors.js';
import { takeConfigOption } from './config-file.js';
import { readPassword } from './read-password.js';

export async function opcuaCommand(argv: string[]): Promise<number> {
  const file = takeConfigOption(argv);
  let config: Config | undefined;
  try {
    config = loadConfig(file);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    // Browsing a server needs no configuration: say why it is not used, and go on with the default data directory.
    process.stderr.write(`edgeferry opcua: ${describeError(err).split('\n')[0]}; using ./data\n`);
  }
  return runOpcuaCommand(argv, {
    dataDir: config?.storage.path ?? resolve('data'),
    connectors: config?.connectors.flatMap((c) => (c.type === 'opcua' ? [c] : [])),
    stdout: (t) => process.stdout.write(t),
    stderr: (t) => process.stderr.write(t),
    readPassword,
  });
}
