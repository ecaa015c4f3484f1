/**
 * Mosquitto-compatible password files (`mosquitto_passwd`): `user:$7$<iterations>$<salt b64>$<PBKDF2-SHA512 b64>`
 * (Mosquitto 2 default) and the legacy `user:$6$<salt b64>$<SHA512(password ‖ salt) b64>`. Parsing follows
 * Mosquitto's `security_default.c`; a malformed line never becomes a user without a password (CVE-2018-12551).
 */
import { createHash, pbkdf2, randomBytes, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';

const pbkdf2Async = promisify(pbkdf2);

interface PasswordEntry {
  readonly kind: 6 | 7;
  readonly iterations: number;
  readonly salt: Buffer;
  readonly hash: Buffer;
}

export interface PasswordFileProblem {
  readonly line: number;
  readonly message: string;
}

export class PasswordFile {
  private decoyEntry: PasswordEntry | undefined;

  private constructor(private readonly users: ReadonlyMap<string, PasswordEntry>) {}

  get size(): number {
    return this.users.size;
  }

  /** Parses a file's text; lines that cannot be understood are reported, never accepted. */
  static parse(text: string): { file: PasswordFile; problems: PasswordFileProblem[] } {
    const users = new Map<string, PasswordEntry>();
    const problems: PasswordFileProblem[] = [];
    text.split(/\r?\n/).forEach((raw, i) => {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) return;
      const colon = line.indexOf(':');
      const user = colon > 0 ? line.slice(0, colon).trim() : '';
      const entry = colon > 0 ? parseHash(line.slice(colon + 1)) : undefined;
      if (!user || !entry) problems.push({ line: i + 1, message: 'not a "user:$7$..." or "user:$6$..." line' });
      else users.set(user, entry);
    });
    return { file: new PasswordFile(users), problems };
  }

  has(user: string): boolean {
    return this.users.has(user);
  }

  /**
   * Constant-time check; PBKDF2 runs on the thread pool so high iteration counts do not block the loop. An unknown
   * user costs the same PBKDF2 work as a known one, so the answer's timing does not tell whether a user exists.
   */
  async verify(user: string, password: Buffer): Promise<boolean> {
    const known = this.users.get(user);
    const entry = known ?? this.decoy;
    const computed =
      entry.kind === 7
        ? await pbkdf2Async(password, entry.salt, entry.iterations, entry.hash.length, 'sha512')
        : createHash('sha512').update(password).update(entry.salt).digest();
    return computed.length === entry.hash.length && timingSafeEqual(computed, entry.hash) && known !== undefined;
  }

  /** What an unknown user's password is checked against: a `$7$` entry with the file's most common iteration count. */
  private get decoy(): PasswordEntry {
    if (this.decoyEntry === undefined) {
      const counts = new Map<number, number>();
      for (const e of this.users.values())
        if (e.kind === 7) counts.set(e.iterations, (counts.get(e.iterations) ?? 0) + 1);
      let iterations = 101; // mosquitto_passwd's default
      let most = 0;
      for (const [n, count] of counts) if (count > most) [iterations, most] = [n, count];
      this.decoyEntry = { kind: 7, iterations, salt: randomBytes(12), hash: randomBytes(64) };
    }
    return this.decoyEntry;
  }
}

function parseHash(field: string): PasswordEntry | undefined {
  const parts = field.split('$');
  // '$7$101$salt$hash' splits to ['', '7', '101', 'salt', 'hash']; '$6$salt$hash' to ['', '6', 'salt', 'hash'].
  if (parts[0] !== '') return undefined;
  if (parts[1] === '7' && parts.length === 5) {
    const iterations = Number(parts[2]);
    const salt = Buffer.from(parts[3], 'base64');
    const hash = Buffer.from(parts[4], 'base64');
    if (!Number.isInteger(iterations) || iterations < 1 || salt.length === 0 || hash.length !== 64) return undefined;
    return { kind: 7, iterations, salt, hash };
  }
  if (parts[1] === '6' && parts.length === 4) {
    const salt = Buffer.from(parts[2], 'base64');
    const hash = Buffer.from(parts[3], 'base64');
    if (salt.length === 0 || hash.length !== 64) return undefined;
    return { kind: 6, iterations: 1, salt, hash };
  }
  return undefined;
}

/** One `user:$7$...` line as `mosquitto_passwd` writes it (12-byte salt, 64-byte PBKDF2-SHA512). */
export async function hashPasswordLine(user: string, password: string, iterations = 101): Promise<string> {
  if (user.includes(':') || user.length === 0) throw new TypeError('a user name must be non-empty and contain no ":"');
  const salt = randomBytes(12);
  const hash = await pbkdf2Async(password, salt, iterations, 64, 'sha512');
  return `${user}:$7$${iterations}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/**
 * The text of a password file with `user` set to `password` (added or replaced in place), or removed when
 * `password` is undefined. Other lines, comments included, are kept as they are.
 */
export async function updatePasswordFile(text: string, user: string, password: string | undefined): Promise<string> {
  const lines = text.split(/\r?\n/);
  if (lines[lines.length - 1] === '') lines.pop();
  const index = lines.findIndex((line) => line.indexOf(':') > 0 && line.slice(0, line.indexOf(':')).trim() === user);
  if (password === undefined) {
    if (index < 0) throw new TypeError(`user "${user}" is not in the file`);
    lines.splice(index, 1);
  } else {
    const line = await hashPasswordLine(user, password);
    if (index >= 0) lines[index] = line;
    else lines.push(line);
  }
  return lines.length ? lines.join('\n') + '\n' : '';
}
