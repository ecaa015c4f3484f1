/**
 * The web console's commissioning tools, put together from the modules they join (docs/console.md#configuration):
 * the configuration editor on the file the gateway started from, validated as `--check-config` validates, applied
 * by the reload SIGHUP runs.
 */
import { dirname, join, resolve } from 'node:path';
import { ConfigEditor } from './config/config-editor.js';
import { parseConfig } from './config/load.js';
import type { ConfigEditing } from './console/config-api.js';
import type { ConfigControl } from './console/sources.js';
import { checkConfiguredFiles } from './configured-files.js';
import { ConfigError, type ConfigProblem } from './util/errors.js';

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
