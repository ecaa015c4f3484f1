/**
 * Who may do what, from the files the configuration names: the MQTT users and ACLs, the credentials of
 * `/metrics` and the console's users. Each is read now, at start and again on every reload, so an edited file
 * applies (docs/architecture.md#configuration).
 */
import type { Config, ConsoleConfig, MetricsConfig } from '../config/schema.js';
import type { Logger } from '../util/logger.js';
import type { BrokerStats } from '../broker/stats.js';
import { loadFileAuth } from '../broker/auth.js';
import type { AuthHooks, ReservedTopics } from '../broker/auth.js';
import { PasswordFile } from '../broker/password-file.js';
import type { MetricsAccess } from '../ops/metrics.js';
import type { ConsoleUsers } from '../console/console.js';
import { metricsToken, readConfiguredFile, usersWithoutPassword } from '../configured-files.js';
import type { LoginThrottle } from '../util/login-throttle.js';

/**
 * Password file and ACL (re-read on every reload, so edited files apply), and the `reserved` topics no client
 * publishes in; failed logins and refusals go to the audit log.
 */
export function createAuth(
  config: Config,
  audit: Logger,
  stats: BrokerStats,
  reserved: ReservedTopics | undefined,
  throttle: LoginThrottle,
): AuthHooks {
  const key = (path: string) => (path === config.auth.aclFile ? 'auth.aclFile' : 'auth.passwordFile');
  return loadFileAuth(
    config.auth,
    (path) => readConfiguredFile(path, key(path)),
    {
      loginRefused: (c, why) => {
        stats.authFailures++;
        audit.warn({ clientId: c.clientId, username: c.username, remote: c.remoteAddress, why }, 'login refused');
      },
      loginAccepted: (c) =>
        audit.info({ clientId: c.clientId, username: c.username, remote: c.remoteAddress }, 'login'),
      denied: (c, action, topic, why) => {
        stats.aclDenied[action]++;
        audit.warn(
          { clientId: c.clientId, username: c.username, action, topic, why },
          why === undefined ? 'denied by ACL' : 'publish refused',
        );
      },
    },
    reserved,
    throttle,
  );
}

/** The credentials of `metrics.auth`, read from their files now (at start, and again on reload). */
export function metricsAccess(metrics: MetricsConfig, passwordFile: string | undefined): MetricsAccess | undefined {
  const { auth } = metrics;
  if (auth === undefined) return undefined;
  let verifyUser: MetricsAccess['verifyUser'];
  let isUser: MetricsAccess['isUser'];
  if (auth.users !== undefined && passwordFile !== undefined) {
    // createAuth has read the same file first and refused it if it has bad lines.
    const { file } = PasswordFile.parse(readConfiguredFile(passwordFile, 'auth.passwordFile'));
    const users = new Set(auth.users);
    // The password is checked first, so an unlisted user costs the same time as a listed one.
    verifyUser = async (user, password) => (await file.verify(user, password)) && users.has(user);
    isUser = (user) => file.has(user);
  }
  let token: string | undefined;
  if (auth.tokenFile !== undefined) token = metricsToken(auth.tokenFile);
  return { verifyUser, isUser, token };
}

/** Console and metrics users missing from the password file cannot log in: said at start (and by --check-config). */
export function warnUsersWithoutPassword(config: Config, log: Logger): void {
  if (config.auth.passwordFile === undefined) return;
  const { file } = PasswordFile.parse(readConfiguredFile(config.auth.passwordFile, 'auth.passwordFile'));
  for (const { path, message } of usersWithoutPassword(config, file)) log.warn({ key: path }, message);
}

/** The console's users, with passwords from auth.passwordFile read now (at start, and again on reload). */
export function consoleUsers(console: ConsoleConfig, passwordFile: string | undefined): ConsoleUsers {
  // The schema requires the password file with a console section; createAuth has read and checked it first.
  const { file } = PasswordFile.parse(readConfiguredFile(passwordFile ?? '', 'auth.passwordFile'));
  return {
    ...console,
    verifyPassword: (user, password) => file.verify(user, password),
    isUser: (user) => file.has(user),
  };
}
