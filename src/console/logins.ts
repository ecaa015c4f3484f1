/**
 * Console logins: a random session id in an HttpOnly, SameSite=Strict cookie, a sliding expiry, and a CSRF token
 * per session that every action must echo in the `x-csrf-token` header (the cookie alone never authorizes one).
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';

/** Each role may do what the one before it may: engineers also operate, operators also view. */
export type Role = 'viewer' | 'operator' | 'engineer';

const RANK: Record<Role, number> = { viewer: 0, operator: 1, engineer: 2 };

/** Whether `role` may do what `needed` may. */
export function mayAct(role: Role, needed: Role): boolean {
  return RANK[role] >= RANK[needed];
}

export interface Login {
  readonly id: string;
  readonly user: string;
  readonly role: Role;
  readonly csrf: string;
  expiresAtMs: number;
}

export const COOKIE = 'edgeferry_console';
/**
 * Logins kept per user at most; that user's oldest goes first. A script that logs in in a loop cannot fill the
 * memory, and evicts only its own user's logins, never another user's.
 */
const MAX_LOGINS_PER_USER = 100;

export class Logins {
  private readonly byId = new Map<string, Login>();

  constructor(private ttlS: number) {}

  setTtl(ttlS: number): void {
    this.ttlS = ttlS;
  }

  create(user: string, role: Role): Login {
    this.prune();
    const own = [...this.byId.values()].filter((login) => login.user === user);
    if (own.length >= MAX_LOGINS_PER_USER) this.byId.delete(own[0].id);
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
