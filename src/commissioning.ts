/**
 * The web console's commissioning tools, put together from the modules they join (docs/console.md#configuration):
 * the configuration editor on the file the gateway started from, validated as `--check-config` validates, applied
 * by the reload SIGHUP runs; and the reads of PLCs that commissioning needs, on the connectors' own links.
 */
import { dirname, join, resolve } from 'node:path';
import type { ConnectorRegistry } from '../connectors/index.js';
import { LinkError, ModbusException } from '../connectors/modbus/modbus-link.js';
import { RequestError } from '../connectors/contract.js';
import { browseForConsole, trustForConsole, type OpcuaToolsContext } from '../connectors/opcua/console-tools.js';
import { ConfigEditor } from './config/config-editor.js';
import { jsonSchema } from './config/json-schema.js';
import { loadConfig, parseConfig } from './config/load.js';
import type { ConfigEditing, Outcome, PlcTools } from './console/config-api.js';
import type { ConfigControl } from './console/sources.js';
import { checkConfiguredFiles } from './configured-files.js';
import { ConfigError, ConnectorError, type ConfigProblem } from './util/errors.js';

/** The previous versions of the configuration file, under the data directory. */
export function configHistoryDir(dataDir: string): string {
  return join(dataDir, 'config-history');
}

export function configEditing(control: ConfigControl, dataDir: string): ConfigEditing {
  const file = control.file;
  return new ConfigEditor({
    file,
    historyDir: configHistoryDir(dataDir),
    validate: (text) => problemsOf(text, file),
    reload: () => control.reload(),
    schema: () => JSON.parse(jsonSchema()) as object,
  });
}

/** What `--check-config` says of `text` as the content of `file`: the schema, then every file it names. */
function problemsOf(text: string, file: string): readonly ConfigProblem[] {
  try {
    checkConfiguredFiles(parseConfig(text, file, dirname(resolve(file))), file);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
}

export function plcTools(registry: ConnectorRegistry, dataDir: string, file: string | undefined): PlcTools {
  const opcua: OpcuaToolsContext = {
    dataDir,
    // The file is the truth: a device added a moment ago is browsed with its settings too.
    devices: () => {
      if (file === undefined) return [];
      try {
        return loadConfig(file).connectors.filter((c) => c.type === 'opcua');
      } catch (err) {
        if (err instanceof ConfigError) return [];
        throw err;
      }
    },
  };
  return {
    modbusRead: (input) => answered(() => registry.modbus.testRead(input)),
    modbusScan: (input) => answered(async () => ({ units: await registry.modbus.scanUnits(input) })),
    opcuaBrowse: (input) => answered(() => browseForConsole(input, opcua)),
    opcuaTrust: (input) => answered(() => trustForConsole(input, opcua)),
  };
}

/** A tool's result, or its refusal: a bad field (400, by key path), a device that refused or did not answer (502). */
async function answered<T extends object>(run: () => Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: true, ...(await run()) };
  } catch (err) {
    if (err instanceof RequestError)
      return { ok: false, status: 400, error: err.message, problems: [{ path: err.path, message: err.message }] };
    if (err instanceof ModbusException || err instanceof LinkError || err instanceof ConnectorError)
      return { ok: false, status: 502, error: err.message };
    throw err;
  }
}
