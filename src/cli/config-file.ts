/** The configuration file of the command line and its subcommands: the default, `-c FILE`, loading it. */
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { ConfigError } from '../util/errors.js';
import { reportEarlyError, type LogFormat } from './errors.js';

/** The embedded default, relative to the package root (from dist/src/cli/). */
export const DEFAULT_CONFIG_FILE = fileURLToPath(new URL('../../../config/edgeferry.yaml', import.meta.url));

/** Removes `-c FILE` / `--config FILE` from a subcommand's arguments; returns the configuration file. */
export function takeConfigOption(argv: string[]): string {
  const i = argv.findIndex((a) => a === '-c' || a === '--config');
  const file = resolve((i >= 0 ? (argv[i + 1] as string | undefined) : undefined) ?? DEFAULT_CONFIG_FILE);
  if (i >= 0) argv.splice(i, 2);
  return file;
}

/** Loads the configuration file; a bad one is reported (every problem, with file:line:col) and gives undefined. */
export function loadConfigOrReport(file: string, format?: LogFormat): Config | undefined {
  try {
    return loadConfig(file);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    reportEarlyError(err, format);
    return undefined;
  }
}
