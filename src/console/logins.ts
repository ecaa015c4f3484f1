/**
 * Console logins: a random session id in an HttpOnly, SameSite=Strict cookie, a sliding expiry, and a CSRF token
 * per session that every action must echo in the `x-csrf-token` header (the cookie alone never authorizes one).
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';

export type Role = 'viewer' | 'operator';

export interface Login {
  readonly id: string;
  readonly user: string;
  readonly role: Role;
  readonly csrf: string;
  expiresAtMs: number;
}

export const COOKIE = 'edgeferry_console';
/** Logins kept at most; the oldest goes first (a script that logs in in a loop cannot fill the memory). */
const MAX_LOGINS = 1000;

export class Logins {
  private readonly byId = new Map<string, Login>();

  constructor(private ttlS: number) {}

  setTtl(ttlS: number): void {
    this.ttlS = ttlS;
  }

  create(user: string, role: Role): Login {
    this.prune();
    if (this.byId.size >= MAX_LOGINS) this.byId.delete(this.byId.keys().next().value as string);
    const login: Login = { id: token(), user, role, csrf: token(), expiresAtMs: Date.now() + this.ttlS * 1000 };
    this.byId.set(login.id, login);
    return login;
  }

  /** The login a request's cookie names, still valid (its expiry slides on); undefined otherwise. */
  find(cookieHeader: string | undefined): Login | undefined {
    const id = cookieValue(cookieHeader, COOKIE);
    const login = id === undefined ? undefined : this.byId.get(id);
    if (login === undefined) return undefined;
    const now = Date.now();
    if (login.expiresAtMs <= now) {
      this.byId.delete(login.id);
      return undefined;
    }
    login.expiresAtMs = now + this.ttlS * 1000;
    return login;
  }

  end(login: Login): void {
    this.byId.delete(login.id);
  }

  /** Whether a login found earlier still holds (not ended, not expired): a live stream asks at every tick. */
  holds(login: Login): boolean {
    return this.byId.get(login.id) === login && login.expiresAtMs > Date.now();
  }

  /** Ends the logins of users no longer listed, or listed with another role (a reload changed the lists). */
  retain(roleOf: (user: string) => Role | undefined): void {
    for (const login of this.byId.values()) if (roleOf(login.user) !== login.role) this.byId.delete(login.id);
  }

  cookie(login: Login, secure: boolean): string {
    return `${COOKIE}=${login.id}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${this.ttlS}${secure ? '; Secure' : ''}`;
  }

  static clearedCookie(): string {
    return `${COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0`;
  }

  private prune(): void {
    const now = Date.now();
    for (const login of this.byId.values()) if (login.expiresAtMs <= now) this.byId.delete(login.id);
  }
}

/**
 * Failed logins per address: after MAX_FAILURES within a minute the address is refused until that minute is over,
 * like the MQTT listeners' ban (docs/architecture.md#security-model), so passwords cannot be tried at speed.
 */
export class LoginThrottle {
  static readonly MAX_FAILURES = 5;
  static readonly WINDOW_MS = 60_000;
  private readonly failures = new Map<string, { count: number; sinceMs: number }>();

  blocked(address: string): boolean {
    const entry = this.failures.get(address);
    if (entry === undefined) return false;
    if (Date.now() - entry.sinceMs >= LoginThrottle.WINDOW_MS) {
      this.failures.delete(address);
      return false;
    }
    return entry.count >= LoginThrottle.MAX_FAILURES;
  }

  failed(address: string): void {
    const now = Date.now();
    // Old entries go when the map grows: a scan of addresses cannot fill the memory.
    if (this.failures.size >= MAX_LOGINS) for (const [a, e] of this.failures) if (now - e.sinceMs >= LoginThrottle.WINDOW_MS) this.failures.delete(a);
    const entry = this.failures.get(address);
    if (entry === undefined || now - entry.sinceMs >= LoginThrottle.WINDOW_MS) this.failures.set(address, { count: 1, sinceMs: now });
    else entry.count++;
  }
}

/** Whether `given` is the login's CSRF token, compared in constant time. */
export function csrfMatches(login: Login, given: string | string[] | undefined): boolean {
  if (typeof given !== 'string') return false;
  const a = Buffer.from(given);
  const b = Buffer.from(login.csrf);
  return a.length === b.length && timingSafeEqual(a, b);
}

function token(): string {
  return randomBytes(24).toString('base64url');
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
