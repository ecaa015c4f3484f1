/**
 * The files the configuration names, read as the gateway reads them (at start and on reload, `gateway.ts`), and all
 * of them at once for `--check-config`: what start would refuse, the check refuses, so the systemd unit's
 * `ExecStartPre` stops a start that would fail; what would start but not work is a warning.
 */
import { readFileSync } from 'node:fs';
import { loadFileAuth } from './broker/auth.js';
import { PasswordFile } from './broker/password-file.js';
import type { Config, MetricsConfig } from './config/schema.js';
import type { HttpTls } from './ops/metrics.js';
import { loadTls } from './server/listeners.js';
import { asError, ConfigError, type ConfigProblem } from './util/errors.js';
import { tlsModule } from './util/on-first-use.js';

/**
 * Reads a file the configuration names (`key`). The loader checked it could be read, but it may have changed since
 * (a reload reads it again): one that cannot be read now is EF_CONFIG_UNREADABLE, naming the key.
 */
export function readConfiguredFile(path: string, key: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(path, [{ path: key, message: `cannot read the file: ${asError(err).message}` }], {
      cause: err,
      code: 'EF_CONFIG_UNREADABLE',
    });
  }
}

/** The metrics listener's certificate and key, read now (at start, and again on reload), or undefined for HTTP. */
export function httpTls(metrics: MetricsConfig): HttpTls | undefined {
  if (metrics.tls === undefined) return undefined;
  const { certFile, keyFile } = metrics.tls;
  const pair = {
    cert: Buffer.from(readConfiguredFile(certFile, 'metrics.tls.certFile')),
    key: Buffer.from(readConfiguredFile(keyFile, 'metrics.tls.keyFile')),
  };
  try {
    tlsModule().createSecureContext(pair);
  } catch (err) {
    throw new ConfigError(
      certFile,
      [{ path: 'metrics.tls', message: `the certificate and key do not load: ${asError(err).message}` }],
      { cause: err },
    );
  }
  return pair;
}

/**
 * Console and metrics users that are not in the password file: they could never log in. The start logs them as
 * warnings, `--check-config` prints them.
 */
export function usersWithoutPassword(config: Config, passwords: PasswordFile): ConfigProblem[] {
  const listed: [string, readonly string[] | undefined][] = [
    ['console.viewers', config.console?.viewers],
    ['console.operators', config.console?.operators],
    ['metrics.auth.users', config.metrics?.auth?.users],
  ];
  return listed.flatMap(([path, users]) =>
    (users ?? [])
      .filter((user) => !passwords.has(user))
      .map((user) => ({ path, message: `user "${user}" is not in auth.passwordFile: it cannot log in` })),
  );
}

/**
 * Every file the configuration names, read and checked as the start does: the password and ACL files (every bad
 * line), the TLS certificates and keys of the listeners and the metrics endpoint, the metrics token. Throws a
 * ConfigError with every problem; returns the warnings: users that cannot log in, a bridge's TLS files that do not
 * load (the start goes on, that bridge never connects).
 */
export function checkConfiguredFiles(config: Config, configFile: string): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const collect = (check: () => void, key: string): void => {
    try {
      check();
    } catch (err) {
      if (err instanceof ConfigError) problems.push(...err.problems);
      else problems.push({ path: key, message: asError(err).message });
    }
  };
  collect(
    () =>
      loadFileAuth(config.auth, (path) =>
        readConfiguredFile(path, path === config.auth.aclFile ? 'auth.aclFile' : 'auth.passwordFile'),
      ),
    'auth',
  );
  config.listeners.forEach((listener, i) => {
    if (listener.tls !== undefined) collect(() => loadTls(listener), `listeners.${i}.tls`);
  });
  const metrics = config.metrics;
  if (metrics !== undefined) {
    collect(() => httpTls(metrics), 'metrics.tls');
    const tokenFile = metrics.auth?.tokenFile;
    if (tokenFile !== undefined) collect(() => metricsToken(tokenFile), 'metrics.auth.tokenFile');
  }
  if (problems.length > 0) throw new ConfigError(configFile, problems);

  const warnings: ConfigProblem[] = [];
  if (config.auth.passwordFile !== undefined)
    warnings.push(
      ...usersWithoutPassword(config, PasswordFile.parse(readFileSync(config.auth.passwordFile, 'utf8')).file),
    );
  config.bridges.forEach(({ remote }, i) => {
    const tls = remote.tls;
    if (tls === undefined) return;
    try {
      const read = (file: string | undefined) => (file === undefined ? undefined : readFileSync(file));
      tlsModule().createSecureContext({ ca: read(tls.caFile), cert: read(tls.certFile), key: read(tls.keyFile) });
    } catch (err) {
      warnings.push({
        path: `bridges.${i}.remote.tls`,
        message: `the TLS files do not load, the bridge cannot connect: ${asError(err).message}`,
      });
    }
  });
  return warnings;
}

/** The bearer token of `metrics.auth.tokenFile`: its one line, which must not be empty. */
export function metricsToken(tokenFile: string): string {
  const token = readConfiguredFile(tokenFile, 'metrics.auth.tokenFile').replace(/\r?\n$/, '');
  if (token === '')
    throw new ConfigError(tokenFile, [{ path: 'metrics.auth.tokenFile', message: 'the token file is empty' }]);
  return token;
}
