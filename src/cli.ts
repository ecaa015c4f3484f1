#!/usr/bin/env node
/**
 * The `edgeferry` command: arguments → config → logger → gateway, and signals to stop (SIGTERM, SIGINT) or
 * reload (SIGHUP); the subcommands (`passwd`, `opcua`, `store`) are in cli/. Exit codes: 0 ok, 1 runtime error, 2 bad configuration or usage, 3 the data directory cannot be opened
 * or another edgeferry holds it.
 */
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { opcuaUsage } from '../connectors/opcua/opcua-command.js';
import type { Config } from './config/schema.js';
import { loadConfig } from './config/load.js';
import { createLogger, LogRing, type RootLogger } from './ops/pino-logger.js';
import type { ConfigControl, ReloadOutcome } from './console/sources.js';
import { asError, ConfigError, errorCode, errorLogFields, StoreError, type ConfigProblem } from './util/errors.js';
import { checkConfiguredFiles } from './configured-files.js';
import { DEFAULT_CONFIG_FILE, loadConfigOrReport } from './cli/config-file.js';
import { EXIT, LOG_FORMATS, reportEarlyError, type LogFormat } from './cli/errors.js';
import { opcuaCommand } from './cli/opcua.js';
import { passwdCommand, passwdUsage } from './cli/passwd.js';
import { storeCommand, storeUsage } from './cli/store.js';

/** Below systemd's TimeoutStopSec, so a stuck stop ends with our own fatal line rather than SIGKILL. */
const STOP_TIMEOUT_MS = 25_000;

/** The tools beside the gateway, as Mosquitto keeps mosquitto_passwd apart from the broker: src/cli/. */
const SUBCOMMANDS = new Map<string, (argv: string[]) => Promise<number>>([
  ['passwd', passwdCommand],
  ['opcua', opcuaCommand],
  ['store', storeCommand],
]);

// Relative to the package root, from dist/src/cli.js.
const { version: VERSION } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/** `edgeferry COMMAND --help`: what each tool takes. */
const COMMAND_USAGE = new Map<string, string>([
  ['passwd', passwdUsage],
  ['opcua', opcuaUsage.replace(/^Usage:\n/, '')],
  ['store', storeUsage],
]);

/** `--help`, laid out like a manual page: what an operator at the box reads first. */
const USAGE = `EDGEFERRY(8)

NAME
  edgeferry - edge MQTT gateway: a local MQTT 3.1.1/5.0 broker, a Sparkplug B edge node for PLCs (Modbus,
  OPC UA), and store-and-forward bridges to central brokers

SYNOPSIS
  edgeferry [-c FILE] [--log-format json|pretty] [--reset-store]
  edgeferry --check-config [-c FILE]
  edgeferry passwd FILE USER [--delete]
  edgeferry opcua browse|trust ...
  edgeferry store list|delete-outbox|requeue|salvage [-c FILE]
  edgeferry --version | --help | COMMAND --help

DESCRIPTION
  Without a command, runs the gateway on the configuration FILE until SIGTERM: listeners, the durable store
  (storage.path), bridges, connectors and the Sparkplug edge node, as the file says. It tells systemd when it is
  ready and keeps its watchdog fed (Type=notify). Logs go to stdout (JSON, or pretty on a terminal).

OPTIONS
  -c, --config FILE        configuration file (default: ${DEFAULT_CONFIG_FILE})
      --check-config       validate the configuration file and exit
      --reset-store        move the data directory (storage.path) aside to <path>.reset-<time>, then start
                           with an empty store: the last way out of an unreadable store, keeping it for analysis
      --log-format FORMAT  json or pretty, overriding log.format
      --version            print the version and exit
  -h, --help               print this help and exit; after a COMMAND, that command's help

COMMANDS
${passwdUsage}${COMMAND_USAGE.get('opcua') ?? ''}${storeUsage}
FILES
  The configuration file: every key, its default and what it does is in config/edgeferry.example.yaml beside the
  gateway (/opt/edgeferry/config/ when installed from the package; the package's own file is
  /etc/edgeferry/edgeferry.yaml). storage.path holds the store (data.mdb), edgeferry.lock (one process per
  directory) and the OPC UA PKI (opcua/pki).

SIGNALS
  SIGTERM, SIGINT  stop gracefully: connections closed, bridges and the store flushed
  SIGHUP           reload the configuration file: users, ACLs, bridges, connectors, log level; what needs a
                   restart is named in the log and stays as it was

EXIT STATUS
  0  ok
  1  runtime error
  2  bad configuration or usage
  3  the data directory cannot be opened (damaged: see store salvage) or another edgeferry holds it

ENVIRONMENT
  NOTIFY_SOCKET, WATCHDOG_USEC  set by systemd for Type=notify and its watchdog

SEE ALSO
  README.md and docs/ (operations, configuration, security, troubleshooting, ...) beside the gateway; mosquitto_passwd(1), systemctl(1)
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

async function main(): Promise<void> {
  const subcommand = SUBCOMMANDS.get(process.argv[2] ?? '');
  if (subcommand !== undefined && ['--help', '-h'].includes(process.argv[3] ?? '')) {
    process.stdout.write(COMMAND_USAGE.get(process.argv[2]) ?? USAGE);
    return;
  }
  if (subcommand !== undefined) {
    process.exitCode = await subcommand(process.argv.slice(3));
    return;
  }
  let args: ReturnType<typeof parseCommandLine>;
  try {
    args = parseCommandLine();
  } catch (err) {
    process.stderr.write(`edgeferry: ${asError(err).message}\nTry 'edgeferry --help'.\n`);
    process.exitCode = EXIT.config;
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
    process.exitCode = EXIT.config;
    return;
  }
  if (args['check-config']) {
    // Every file it names too, as the start reads them: what the start would refuse fails here (exit 2).
    let warnings: ConfigProblem[];
    try {
      warnings = checkConfiguredFiles(config, file);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      reportEarlyError(err, args.logFormat);
      process.exitCode = EXIT.config;
      return;
    }
    for (const { path, message } of warnings) process.stderr.write(`edgeferry: warning: ${path}: ${message}\n`);
    process.stdout.write(
      `config OK: ${file}${warnings.length > 0 ? ` (${warnings.length} warning${warnings.length === 1 ? '' : 's'})` : ''}\n`,
    );
    return;
  }

  // The web console shows the recent warn/error and audit lines: kept only when there is a console.
  const logRing = config.console === undefined ? undefined : new LogRing();
  const log = createLogger({ ...config.log, format: args.logFormat ?? config.log.format }, { ring: logRing });
  process.on('uncaughtException', (err) => die(log, err, 'uncaught exception'));
  process.on('unhandledRejection', (reason) => die(log, reason, 'unhandled rejection'));
  log.info({ version: VERSION, configFile: file, node: process.version }, 'edgeferry starting');

  // Imported only to run, so --check-config and --help stay fast and load no native modules. Signals are
  // handled from here on: one arriving during a slow start (store recovery) stops the gateway once it is up.
  let lastReload: ReloadOutcome | undefined;
  const configControl: ConfigControl = {
    file,
    get last() {
      return lastReload;
    },
    reload: () => queueReload(),
  };
  const started = (async () => {
    if (args['reset-store']) await resetStore(config.storage.path, log);
    const { startGateway } = await import('./gateway.js');
    return startGateway(config, log, { config: configControl, logRing });
  })();
  let isStopping = false;
  let reloads: Promise<unknown> = Promise.resolve();

  const stop = async (signal: NodeJS.Signals): Promise<void> => {
    if (isStopping) {
      log.fatal({ signal }, 'second signal while stopping, exiting now');
      process.exit(EXIT.runtime);
    }
    isStopping = true;
    log.info({ signal }, 'stopping');
    setTimeout(() => {
      log.fatal({ timeoutMs: STOP_TIMEOUT_MS }, 'stop timed out, exiting');
      process.exit(EXIT.runtime);
    }, STOP_TIMEOUT_MS);
    await (await started).stop();
    log.info('stopped');
    process.exit(0);
  };

  const reload = async (): Promise<ReloadOutcome> => {
    const failed = (err: unknown): ReloadOutcome => ({
      ok: false,
      atMs: Date.now(),
      error: asError(err).message,
      problems: err instanceof ConfigError ? err.problems.map(({ path, message }) => ({ path, message })) : undefined,
    });
    let next: Config;
    try {
      next = loadConfig(file);
    } catch (err) {
      log.error({ ...errorLogFields(err), configFile: file }, 'config reload rejected, keeping the running config');
      return (lastReload = failed(err));
    }
    const gw = await started;
    if (isStopping) return (lastReload = failed(new Error('the gateway is stopping')));
    log.setLevel(next.log.level);
    try {
      const { needsRestart } = await gw.reload(next);
      log.info({ configFile: file }, 'config reloaded');
      return (lastReload = { ok: true, atMs: Date.now(), needsRestart });
    } catch (err) {
      log.error({ ...errorLogFields(err), configFile: file }, 'config reload failed');
      return (lastReload = failed(err));
    }
  };
  // Reloads run one after another: a burst of SIGHUPs (or console clicks) must not interleave two swaps.
  const queueReload = (): Promise<ReloadOutcome> => {
    const outcome = reloads.then(reload);
    reloads = outcome;
    return outcome;
  };

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => void stop(signal).catch((err) => die(log, err, 'stop failed')));
  }
  process.on('SIGHUP', () => void queueReload());

  try {
    await started;
  } catch (err) {
    // Files the configuration names (password, ACL, TLS, audit log) are read by the gateway: a configuration error.
    const code = errorCode(err);
    if (code === 'EF_CONFIG_INVALID' || code === 'EF_CONFIG_UNREADABLE') {
      log.fatal(errorLogFields(err), asError(err).message);
      process.exit(EXIT.config);
    }
    // A port in use, a data directory that cannot be opened or is held: the message names what and the way out (a
    // stack adds nothing), in one line. An unreadable or held store needs the operator: restarting cannot help.
    if (code === 'EF_LISTENER_BIND' || code === 'EF_STORE_OPEN' || code === 'EF_STORE_IN_USE') {
      log.fatal({ code }, asError(err).message);
      process.exit(code === 'EF_LISTENER_BIND' ? EXIT.runtime : EXIT.store);
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
  const { accessError, acquireLock } = await import('./store/lmdb/open.js');
  acquireLock(path).release(); // throws EF_STORE_IN_USE, naming the holder
  const aside = `${path}.reset-${new Date().toISOString().replace(/[:.]/g, '-')}`;
  try {
    renameSync(path, aside);
  } catch (err) {
    const what = `--reset-store cannot move it aside (${asError(err).message})`;
    throw (
      accessError(path, what, err) ??
      new StoreError('EF_STORE_OPEN', `--reset-store cannot move ${path} aside: ${asError(err).message}`, {
        cause: err,
      })
    );
  }
  log.warn({ storePath: path, movedTo: aside }, 'store reset: the old data directory was moved aside');
}

function die(log: RootLogger, err: unknown, msg: string): never {
  log.fatal(errorLogFields(err), msg);
  process.exit(EXIT.runtime);
}

await main();
