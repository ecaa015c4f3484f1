/**
 * Authentication and authorization hooks (validate → authorize → act). The defaults here allow what a local,
 * anonymous-on-loopback broker allows; the password file and ACL implementations plug in behind this interface.
 */
import type { QoS } from '../protocol/message.js';
import { Reason } from '../protocol/reason-codes.js';
import { ConfigError } from '../util/errors.js';
import type { ConfigProblem } from '../util/errors.js';
import { LoginThrottle, UNCHECKED_WHY, UNKNOWN_USER } from '../util/login-throttle.js';
import { Acl } from './acl.js';
import { PasswordFile } from './password-file.js';

export interface ConnectInfo {
  readonly clientId: string;
  readonly username?: string;
  readonly password?: Buffer;
  readonly remoteAddress: string;
  /** Whether the listener the client came in on accepts clients without credentials. */
  readonly allowAnonymous: boolean;
  /** The user name is a verified client certificate's CN: no password is needed. */
  readonly certificateVerified?: boolean;
  /** Whether the client still waits for the answer (a slowed password check waits its turn: LoginThrottle). */
  readonly waiting?: () => boolean;
}

export interface ClientInfo {
  readonly clientId: string;
  readonly username?: string;
}

export interface AuthHooks {
  /**
   * Undefined to accept, or the CONNACK reason code to refuse with; a promise of it when the answer takes I/O or
   * hashing (a password check). Answered at once otherwise, so that an anonymous client's CONNECT costs no promise.
   */
  authenticate(c: ConnectInfo): number | undefined | Promise<number | undefined>;
  /** Undefined to allow a publish (or a will), or the reason code to refuse it with. */
  authorizePublish(c: ClientInfo, topic: string): number | undefined;
  /** The QoS to grant (SUBACK semantics), or a reason code >= 0x80 to refuse this one filter. */
  authorizeSubscribe(c: ClientInfo, filter: string, qos: QoS): QoS | number;
  /** Per delivered message (ACL read), including retained and will messages; absent means always allowed. */
  authorizeRead?(c: ClientInfo, topic: string): boolean;
}

/** What the audit log and the metrics hear from authentication and authorization. */
export interface AuthEvents {
  loginRefused(c: ConnectInfo, why: string): void;
  loginAccepted(c: ConnectInfo): void;
  /** `why` is set when no ACL rule refused, but a rule of the gateway's own (`ReservedTopics`). */
  denied(c: ClientInfo, action: 'publish' | 'subscribe', topic: string, why?: string): void;
}

/**
 * Topics only the gateway publishes: its own Sparkplug edge node namespace (docs/architecture.md#security-model).
 * No client publishes there, whatever the ACL says, except commands to the node, which need an explicit grant of
 * an ACL file (without one, no client may command).
 */
export interface ReservedTopics {
  /** Every reserved topic starts with it: the one check a publish elsewhere costs. */
  readonly prefix: string;
  /** 'command': publishable with an ACL grant; 'gateway': by no client; undefined: not reserved. */
  kind(topic: string): 'command' | 'gateway' | undefined;
}

const GATEWAY_ONLY = "the gateway's own Sparkplug namespace: only the gateway publishes there";
const COMMAND_NEEDS_ACL = 'a command to the edge node needs an ACL file that grants it (auth.aclFile)';

const quietEvents: AuthEvents = { loginRefused: () => {}, loginAccepted: () => {}, denied: () => {} };

/**
 * Authentication with a Mosquitto password file and authorization with a Mosquitto ACL file. Without a password
 * file, clients on listeners that allow anonymous access are accepted and others refused (Mosquitto 2 with
 * `allow_anonymous false` and no password file). Without an ACL file every accepted client may publish and
 * subscribe. Nobody may publish into `$SYS`, the broker's own tree [docs/reliability.md rule 27], nor into the
 * `ReservedTopics` (commands there only with an ACL grant).
 */
export class FileAuth implements AuthHooks {
  constructor(
    private readonly passwords: PasswordFile | undefined,
    private readonly acl: Acl | undefined,
    private readonly events: AuthEvents = quietEvents,
    private readonly reserved?: ReservedTopics,
    /** Shared with the console and /metrics, and kept across reloads (the gateway makes one). */
    private readonly throttle = new LoginThrottle(),
  ) {}

  authenticate(c: ConnectInfo): number | undefined | Promise<number | undefined> {
    if (c.username === undefined) {
      return c.allowAnonymous
        ? undefined
        : this.fail(c, Reason.NotAuthorized, 'anonymous clients are not allowed here');
    }
    if (!c.certificateVerified) {
      if (!this.passwords)
        return c.allowAnonymous ? undefined : this.fail(c, Reason.NotAuthorized, 'no password file configured');
      // A user name without a password is refused when a password file is set (Mosquitto `01-connect-uname-no-password-denied`).
      if (!c.password) return this.fail(c, Reason.BadUserNameOrPassword, 'bad user name or password');
      return this.checkPassword(this.passwords, c.username, c.password, c);
    }
    return this.accepted(c);
  }

  /** The password check, through the login throttle: failures slow this user from this address down, no one else. */
  private async checkPassword(
    passwords: PasswordFile,
    username: string,
    password: Buffer,
    c: ConnectInfo,
  ): Promise<number | undefined> {
    const attempt = {
      address: c.remoteAddress,
      user: passwords.has(username) ? username : undefined,
      waiting: c.waiting ?? (() => true),
    };
    switch (await this.throttle.check(attempt, () => passwords.verify(username, password))) {
      case 'accepted':
        return this.accepted(c);
      case 'busy':
        // MQTT 5's code for a rate limit (3.1.1: 3, server unavailable): try later, not banned.
        return this.fail(c, Reason.ConnectionRateExceeded, UNCHECKED_WHY.busy);
      case 'gone':
        // Nobody reads this answer: the connection closed while it waited.
        return this.fail(c, Reason.NotAuthorized, UNCHECKED_WHY.gone);
      default:
        return this.fail(c, Reason.BadUserNameOrPassword, 'bad user name or password');
    }
  }

  private accepted(c: ConnectInfo): undefined {
    this.events.loginAccepted(c);
    return undefined;
  }

  authorizePublish(c: ClientInfo, topic: string): number | undefined {
    const reserved =
      this.reserved !== undefined && topic.startsWith(this.reserved.prefix) ? this.reserved.kind(topic) : undefined;
    if (reserved === 'gateway' || (reserved === 'command' && !this.acl)) {
      this.events.denied(c, 'publish', topic, reserved === 'gateway' ? GATEWAY_ONLY : COMMAND_NEEDS_ACL);
      return Reason.NotAuthorized;
    }
    if (topic.startsWith('$SYS') || (this.acl && !this.acl.allows('write', topic, c.clientId, c.username))) {
      this.events.denied(c, 'publish', topic);
      return Reason.NotAuthorized;
    }
    return undefined;
  }

  authorizeSubscribe(c: ClientInfo, filter: string, qos: QoS): QoS | number {
    // Shared subscriptions are checked on their inner filter.
    const inner = filter.startsWith('$share/') ? filter.split('/').slice(2).join('/') : filter;
    if (this.acl && !this.acl.allowsSubscription(inner, c.clientId, c.username)) {
      this.events.denied(c, 'subscribe', filter);
      return Reason.NotAuthorized;
    }
    return qos;
  }

  authorizeRead(c: ClientInfo, topic: string): boolean {
    return !this.acl || this.acl.allows('read', topic, c.clientId, c.username);
  }

  private fail(c: ConnectInfo, reason: number, why: string): number {
    // People type passwords into the user field: a name that is no known user is not written to the log.
    const known = c.username === undefined || c.certificateVerified || this.passwords?.has(c.username);
    this.events.loginRefused(known ? c : { ...c, username: UNKNOWN_USER }, why);
    return reason;
  }
}

/** Reads the password and ACL files; every problem of both files is reported at once, with file and line. */
export function loadFileAuth(
  files: { passwordFile?: string; aclFile?: string },
  read: (path: string) => string,
  events?: AuthEvents,
  reserved?: ReservedTopics,
  throttle?: LoginThrottle,
): FileAuth {
  const problems: ConfigProblem[] = [];
  let passwords: PasswordFile | undefined;
  let acl: Acl | undefined;
  if (files.passwordFile) {
    const parsed = PasswordFile.parse(read(files.passwordFile));
    passwords = parsed.file;
    for (const p of parsed.problems)
      problems.push({ path: 'auth.passwordFile', message: p.message, location: `${files.passwordFile}:${p.line}` });
  }
  if (files.aclFile) {
    const parsed = Acl.parse(read(files.aclFile));
    acl = parsed.acl;
    for (const p of parsed.problems)
      problems.push({ path: 'auth.aclFile', message: p.message, location: `${files.aclFile}:${p.line}` });
  }
  if (problems.length > 0) throw new ConfigError(files.aclFile ?? files.passwordFile ?? 'auth', problems);
  return new FileAuth(passwords, acl, events, reserved, throttle);
}
