#!/usr/bin/env node
/**
 * The `edgeferry` command: arguments → config → logger → gateway, and signals to stop (SIGTERM, SIGINT) or
 * reload (SIGHUP). Exit codes: 0 ok, 1 runtime error, 2 bad configuration or usage, 3 the data directory cannot be opened
 * or another edgeferry holds it.
 */
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { updatePasswordFile } from './broker/password-file.js';
import { opcuaUsage, runOpcuaCommand } from '../connectors/opcua/opcua-command.js';
import { opcuaPkiDir } from '../connectors/opcua/trust.js';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { loadConfig } from './config/load.js';
import type { Config } from './config/schema.js';
import { createLogger, type RootLogger } from './ops/log.js';
import { runStoreCommand, storeUsage } from './store/store-command.js';
import { asError, ConfigError, describeError, errorCode, StoreError } from './util/errors.js';
import { silentLogger } from './util/logger.js';
import { replaceFile } from './util/replace-file.js';

const EXIT_RUNTIME = 1;
const EXIT_CONFIG = 2;
const EXIT_STORE = 3;
/** Below systemd's TimeoutStopSec, so a stuck stop ends with our own fatal line rather than SIGKILL. */
const STOP_TIMEOUT_MS = 25_000;
const LOG_FORMATS = ['json', 'pretty'] as const;
type LogFormat = (typeof LOG_FORMATS)[number];

// Both paths are relative to the package root, from dist/src/cli.js.
const DEFAULT_CONFIG_FILE = fileURLToPath(new URL('../../config/edgeferry.yaml', import.meta.url));
const { version: VERSION } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

const USAGE = `Usage: edgeferry [options]

Edge MQTT gateway: local MQTT broker, Sparkplug B edge node, store-and-forward bridges.

Options:
  -c, --config FILE        configuration file (default: ${DEFAULT_CONFIG_FILE})
      --check-config       validate the configuration file and exit
      --reset-store        move the data directory (storage.path) aside to <path>.reset-<time>, then start
                           with an empty store: the way out of an unreadable store, keeping it for analysis
      --log-format FORMAT  json or pretty, overriding log.format
      --version            print the version and exit
  -h, --help               print this help and exit

Commands:
  edgeferry passwd FILE USER [--delete]
                           add or change USER in a mosquitto_passwd-compatible FILE (the password is
                           read from stdin, or prompted for on a terminal); --delete removes USER
${opcuaUsage.replace(/^Usage:\n/, '')}${storeUsage}
Signals: SIGTERM and SIGINT stop gracefully, SIGHUP reloads the configuration file.
Exit codes: 0 ok, 1 runtime error, 2 bad configuration or usage, 3 the data directory cannot be opened
or another edgeferry holds it.
`;

function parseCommandLine() {
  const { values } = parseArgs({
    options: {
      config: { type: 'string', short: 'c' },
      'check-config': { type: 'boolean' },
      'reset-store': { type: 'boolean' },
      'log-format': { type: 'string' },
      version: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const logFormat = values['log-format'];
  if (logFormat !== undefined && !LOG_FORMATS.some((f) => f === logFormat)) {
    throw new TypeError(`--log-format must be one of ${LOG_FORMATS.join(', ')}, not "${logFormat}"`);
  }
  return { ...values, logFormat: logFormat as LogFormat | undefined };
}

/**
 * `edgeferry passwd FILE USER [--delete]`: the file is replaced atomically, keeping its other lines, its mode, owner
 * and group (the service user must still read it), and through a symlink its target. A new file is 0600.
 */
async function passwdCommand(argv: string[]): Promise<void> {
  const { values, positionals } = parseArgs({ args: argv, options: { delete: { type: 'boolean' } }, allowPositionals: true });
  const [file, user] = positionals;
  if (!file || !user || positionals.length > 2) throw new TypeError('usage: edgeferry passwd FILE USER [--delete]');
  const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
  const password = values.delete ? undefined : await readPassword();
  if (password === '') throw new TypeError('the password must not be empty');
  replaceFile(file, await updatePasswordFile(text, user, password), 0o600);
  process.stdout.write(`${values.delete ? 'removed' : 'set'} the password of "${user}" in ${file}\n`);
}

/** The first line of stdin; on a terminal, a prompt without echo. */
async function readPassword(): Promise<string> {
  const rl = createInterface({ input: process.stdin, output: process.stdin.isTTY ? process.stdout : undefined, terminal: process.stdin.isTTY });
  if (process.stdin.isTTY) {
    process.stdout.write('Password: ');
    // Mute the echo of what is typed; readline writes each keystroke through _writeToOutput.
    (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = () => {};
  }
  const line = await new Promise<string>((resolve, reject) => {
    rl.once('line', resolve);
    rl.once('close', () => reject(new TypeError('no password given on stdin')));
  });
  rl.close();
  if (process.stdin.isTTY) process.stdout.write('\n');
  return line;
}

/** Removes `-c FILE` / `--config FILE` from a subcommand's arguments; returns the configuration file. */
function takeConfigOption(argv: string[]): string {
  const i = argv.findIndex((a) => a === '-c' || a === '--config');
  const file = resolve(i >= 0 && argv[i + 1] !== undefined ? argv[i + 1] : DEFAULT_CONFIG_FILE);
  if (i >= 0) argv.splice(i, 2);
  return file;
}

/** `edgeferry opcua browse|trust ...`, with the PKI and connectors of the configuration file (if it loads). */
async function opcuaCommand(argv: string[]): Promise<number> {
  const file = takeConfigOption(argv);
  let config: Config | undefined;
  try {
    config = loadConfig(file);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`edgeferry opcua: ${file} is not usable (${err.message.split('\n')[0]}); using ./data\n`);
  }
  // The same PKI folder the gateway gives its OPC UA connectors.
  const dataDir = config?.storage.path ?? resolve('data');
  return runOpcuaCommand(argv, {
    pkiDir: opcuaPkiDir(dataDir),
    connectors: config?.connectors.flatMap((c) => (c.type === 'opcua' ? [{ ...c, pkiDir: c.pkiDir ?? opcuaPkiDir(dataDir) }] : [])),
    stdout: (t) => process.stdout.write(t),
    stderr: (t) => process.stderr.write(t),
    readPassword,
  });
}

/** Loads the configuration file; a bad one is reported (every problem, with file:line:col) and gives undefined. */
function loadConfigOrReport(file: string, format?: LogFormat): Config | undefined {
  try {
    return loadConfig(file);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    reportEarlyError(err, format);
    return undefined;
  }
}

/**
 * An error before the log exists (the configuration cannot be used): with `--log-format json` one fatal log line
 * like those that follow it (what a log shipper parses), else `edgeferry: EF_CODE: message` on stderr.
 */
function reportEarlyError(err: unknown, format: LogFormat | undefined): void {
  if (format === 'json') createLogger({ level: 'info', format: 'json' }).fatal(errorFields(err), asError(err).message);
  else process.stderr.write(`edgeferry: ${describeError(err)}\n`);
}

/** The fields of a log line about an error: its EF_ code (README "Errors"), and its problems or the error. */
function errorFields(err: unknown): object {
  return err instanceof ConfigError ? { code: err.code, problems: err.problems } : { code: errorCode(err), err: asError(err) };
}

/** `edgeferry store list|delete-outbox NAME`, on the data directory of the configuration file. */
async function storeCommand(argv: string[]): Promise<number> {
  const config = loadConfigOrReport(takeConfigOption(argv));
  if (config === undefined) return EXIT_CONFIG;
  const { path: storePath, sync, maxBytes } = config.storage;
  const { openLmdbStore } = await import('./store/lmdb.js'); // the native module only when needed
  return runStoreCommand(argv, {
    // Never creates a store: a typo in storage.path must not leave an empty one behind.
    open: async () => (existsSync(storePath) ? openLmdbStore({ path: storePath, sync, maxBytes, log: silentLogger }) : undefined),
    salvage: async () => {
      if (!existsSync(resolve(storePath, 'data.mdb'))) return undefined;
      const { acquireLock, SCHEMA_VERSION } = await import('./store/lmdb.js');
      const { salvageStore } = await import('./store/lmdb/salvage.js');
      const lock = acquireLock(resolve(storePath)); // refused while edgeferry runs on it
      try {
        return await salvageStore(resolve(storePath), SCHEMA_VERSION);
      } finally {
        lock.release();
      }
    },
    bridgeNames: config.bridges.map((b) => b.name),
    storePath,
    stdout: (t) => process.stdout.write(t),
    stderr: (t) => process.stderr.write(t),
  });
}

async function main(): Promise<void> {
  if (process.argv[2] === 'store') {
    process.exitCode = await storeCommand(process.argv.slice(3));
    return;
  }
  if (process.argv[2] === 'opcua') {
    process.exitCode = await opcuaCommand(process.argv.slice(3));
    return;
  }
  if (process.argv[2] === 'passwd') {
    try {
      await passwdCommand(process.argv.slice(3));
    } catch (err) {
      process.stderr.write(`edgeferry passwd: ${asError(err).message}\n`);
      process.exitCode = EXIT_CONFIG;
    }
    return;
  }
  let args: ReturnType<typeof parseCommandLine>;
  try {
    args = parseCommandLine();
  } catch (err) {
    process.stderr.write(`edgeferry: ${asError(err).message}\nTry 'edgeferry --help'.\n`);
    process.exitCode = EXIT_CONFIG;
    return;
  }
  if (args.help) {
    process.stdout.write(USAGE);
    return;
  }
  if (args.version) {
    process.stdout.write(`${VERSION}\n`);
    return;
  }

  const file = resolve(args.config ?? DEFAULT_CONFIG_FILE);
  const config = loadConfigOrReport(file, args.logFormat);
  if (config === undefined) {
    process.exitCode = EXIT_CONFIG;
    return;
  }
  if (args['check-config']) {
    process.stdout.write(`config OK: ${file}\n`);
    return;
  }

  const log = createLogger({ ...config.log, format: args.logFormat ?? config.log.format });
  process.on('uncaughtException', (err) => die(log, err, 'uncaught exception'));
  process.on('unhandledRejection', (reason) => die(log, reason, 'unhandled rejection'));
  log.info({ version: VERSION, configFile: file, node: process.version }, 'edgeferry starting');

  // Imported only to run, so --check-config and --help stay fast and load no native modules. Signals are
  // handled from here on: one arriving during a slow start (store recovery) stops the gateway once it is up.
  const started = (async () => {
    if (args['reset-store']) await resetStore(config.storage.path, log);
    const { startGateway } = await import('./gateway.js');
    return startGateway(config, log);
  })();
  let isStopping = false;
  let reloads = Promise.resolve();

  const stop = async (signal: NodeJS.Signals): Promise<void> => {
    if (isStopping) {
      log.fatal({ signal }, 'second signal while stopping, exiting now');
      process.exit(EXIT_RUNTIME);
    }
    isStopping = true;
    log.info({ signal }, 'stopping');
    setTimeout(() => {
      log.fatal({ timeoutMs: STOP_TIMEOUT_MS }, 'stop timed out, exiting');
      process.exit(EXIT_RUNTIME);
    }, STOP_TIMEOUT_MS);
    await (await started).stop();
    log.info('stopped');
    process.exit(0);
  };

  const reload = async (): Promise<void> => {
    let next: Config;
    try {
      next = loadConfig(file);
    } catch (err) {
      log.error({ ...errorFields(err), configFile: file }, 'config reload rejected, keeping the running config');
      return;
    }
    const gw = await started;
    if (isStopping) return;
    log.setLevel(next.log.level);
    try {
      await gw.reload(next);
      log.info({ configFile: file }, 'config reloaded');
    } catch (err) {
      log.error({ ...errorFields(err), configFile: file }, 'config reload failed');
    }
  };

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => void stop(signal).catch((err) => die(log, err, 'stop failed')));
  }
  // Reloads run one after another: a burst of SIGHUPs must not interleave two swaps.
  process.on('SIGHUP', () => {
    reloads = reloads.then(reload);
  });

  try {
    await started;
  } catch (err) {
    // A bad password or ACL file is found when the gateway reads it: still a configuration error.
    if (err instanceof ConfigError) {
      log.fatal(errorFields(err), err.message);
      process.exit(EXIT_CONFIG);
    }
    // An unreadable store needs the operator (salvage, a backup or --reset-store), a held one the holder stopped:
    // restarting cannot help.
    if (err instanceof StoreError && (err.code === 'EF_STORE_OPEN' || err.code === 'EF_STORE_IN_USE')) {
      log.fatal(errorFields(err), err.message);
      process.exit(EXIT_STORE);
    }
    die(log, err, 'startup failed');
  }
}

/**
 * `--reset-store`: moves the data directory aside (`<path>.reset-<time>`, kept for analysis). Refused while another
 * edgeferry holds it: moving a store from under a running gateway would lose what it writes next.
 */
async function resetStore(path: string, log: RootLogger): Promise<void> {
  if (!existsSync(path)) return;
  const { acquireLock } = await import('./store/lmdb.js');
  acquireLock(path).release(); // throws EF_STORE_IN_USE, naming the holder
  const aside = `${path}.reset-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  try {
    renameSync(path, aside);
  } catch (err) {
    throw new StoreError('EF_STORE_OPEN', `--reset-store cannot move ${path} aside: ${asError(err).message}`, { cause: err });
  }
  log.warn({ storePath: path, movedTo: aside }, 'store reset: the old data directory was moved aside');
}

function die(log: RootLogger, err: unknown, msg: string): never {
  log.fatal(errorFields(err), msg);
  process.exit(EXIT_RUNTIME);
}

await main();
