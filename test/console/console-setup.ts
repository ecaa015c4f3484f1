/**
 * A gateway with the web console on, and an HTTP client that logs in like a browser (cookie, CSRF header), for
 * the console's API and browser tests. Users: `shift` (viewer), `maint` (operator), `eng` (engineer), `plc` (in the
 * password file, not a console user).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { deepMerge, startGateway, type Gateway } from '../helpers/gateway.js';
import { freePort } from '../helpers/ports.js';
import { tempDir } from '../helpers/temp.js';

export const PASSWORDS = { shift: 'shift-pw', maint: 'maint-pw', eng: 'eng-pw', plc: 'plc-pw' } as const;

export interface ConsoleGateway {
  readonly gw: Gateway;
  /** http://127.0.0.1:<metrics port> */
  readonly base: string;
}

/** Writes the password file with mosquitto_passwd (an independent tool) and starts the gateway with `patch`. */
export async function startConsoleGateway(patch: object = {}): Promise<ConsoleGateway & { dispose(): Promise<void> }> {
  const dir = tempDir('edgeferry-console-');
  const passwordFile = join(dir, 'passwd');
  execFileSync('mosquitto_passwd', ['-c', '-b', passwordFile, 'shift', PASSWORDS.shift], { stdio: 'pipe' });
  for (const user of ['maint', 'eng', 'plc'] as const)
    execFileSync('mosquitto_passwd', ['-b', passwordFile, user, PASSWORDS[user]], { stdio: 'pipe' });
  const port = await freePort();
  const mqttPort = await freePort();
  const base = {
    listeners: [{ type: 'tcp', host: '127.0.0.1', port: mqttPort, allowAnonymous: true }],
    auth: { passwordFile },
    metrics: { port },
    console: { viewers: ['shift'], operators: ['maint'], engineers: ['eng'] },
    // Audit lines (logins, actions, writes) are info: the tests read them.
    log: { level: 'info' },
  };
  const gw = await startGateway(deepMerge(base, patch as Record<string, unknown>));
  return { gw, base: `http://127.0.0.1:${port}`, dispose: () => gw.dispose() };
}

export interface Answer<T = Record<string, unknown>> {
  readonly status: number;
  readonly headers: Headers;
  readonly body: T;
}

/** One browser's worth of state: the login cookie and the CSRF token the login gave. */
export class ConsoleClient {
  cookie: string | undefined;
  csrf: string | undefined;

  constructor(readonly base: string) {}

  async login(user: string, password: string): Promise<Answer> {
    const answer = await this.post('login', { user, password }, { csrf: false });
    if (answer.status === 200) {
      this.cookie = answer.headers.get('set-cookie')?.split(';')[0];
      this.csrf = answer.body.csrf as string;
    }
    return answer;
  }

  async get<T = Record<string, unknown>>(route: string): Promise<Answer<T>> {
    const res = await fetch(`${this.base}/api/${route}`, { headers: this.cookie ? { cookie: this.cookie } : {} });
    return { status: res.status, headers: res.headers, body: (await res.json()) as T };
  }

  /** An action or other POST; with the login's CSRF token unless `csrf: false`, as JSON unless `contentType` says otherwise. */
  async post(route: string, body: object, options: { csrf?: boolean; contentType?: string } = {}): Promise<Answer> {
    const headers: Record<string, string> = { 'content-type': options.contentType ?? 'application/json' };
    if (this.cookie) headers.cookie = this.cookie;
    if (options.csrf !== false && this.csrf) headers['x-csrf-token'] = this.csrf;
    const res = await fetch(`${this.base}/api/${route}`, { method: 'POST', headers, body: JSON.stringify(body) });
    return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
  }

  act(action: string, body: object = {}, options: { csrf?: boolean; contentType?: string } = {}): Promise<Answer> {
    return this.post(`actions/${action}`, body, options);
  }
}

export async function loggedIn(base: string, user: keyof typeof PASSWORDS): Promise<ConsoleClient> {
  const client = new ConsoleClient(base);
  const answer = await client.login(user, PASSWORDS[user]);
  if (answer.status !== 200) throw new Error(`login of ${user} failed: ${JSON.stringify(answer.body)}`);
  return client;
}
