/**
 * The web console (docs/architecture.md#console, its security in #security-model): the JSON API under /api/, the live stream
 * (/api/events), and the front end under /console/, mounted on the metrics listener. Every /api/ request but
 * the login needs a login cookie; actions need an operator and the login's CSRF token; each action is audited.
 */
import type http from 'node:http';
import { asError } from '../util/errors.js';
import { MAX_DELAY_MS, UNCHECKED_WHY, UNKNOWN_USER, type LoginThrottle } from '../util/login-throttle.js';
import type { Logger } from '../util/logger.js';
import type { Sender } from '../sparkplug/commands.js';
import { LiveStreams } from './live.js';
import { csrfMatches, Logins, mayAct, type Login, type Role } from './logins.js';
import type { ConsoleSources } from './sources.js';
import { configActions, type ConfigAction } from './config-api.js';
import { field, HttpError, readJson, reply, requirePost } from './http.js';
import { StaticFiles } from './static-files.js';
import { parseTagValue } from './tag-value.js';
import { bridges, clients, devices, overview, Sampler, sparkplug } from './views.js';

export interface ConsoleUsers {
  readonly viewers: readonly string[];
  readonly operators: readonly string[];
  readonly engineers: readonly string[];
  readonly sessionTtlS: number;
  /** Checks a password against auth.passwordFile (re-read on reload). */
  readonly verifyPassword: (user: string, password: Buffer) => Promise<boolean>;
  /** Whether a name is a user of auth.passwordFile (others share one throttle key and are logged as `<unknown>`). */
  readonly isUser: (user: string) => boolean;
}

/** POST /api/bridges/:name/dead-letters/requeue or /delete. */
const DEAD_LETTERS_ROUTE = /^bridges\/([^/]+)\/dead-letters\/(requeue|delete)$/;
/** A change to the configuration may carry a device's whole tag list. */
const CONFIG_BODY_BYTES = 2 * 1024 * 1024;

/**
 * A refusal the action's own path already audited (the write path's `command refused`, `console write failed`):
 * no `console action failed` line on top.
 */
class AuditedRefusal extends HttpError {}

/** Actions whose outcome has an audit line of its own (the write path's, naming the user): no `console action` line. */
const SELF_AUDITED: ReadonlySet<string> = new Set(['write-tag']);

type Action = (body: Record<string, unknown>, who: Sender) => Promise<Record<string, unknown>>;

export class WebConsole {
  private readonly sampler: Sampler;
  private readonly live: LiveStreams;
  private readonly logins: Logins;
  private readonly files = new StaticFiles();
  private users: ConsoleUsers;
  /** Maps, not objects: a route named after an Object.prototype member (`toString`, `__proto__`) finds nothing. */
  private readonly reads: ReadonlyMap<string, () => unknown>;
  private readonly actions: ReadonlyMap<string, Action>;
  /** Under /api/config/: engineers only; they write their own audit lines (never a body: it may hold a password). */
  private readonly configActions: ReadonlyMap<string, ConfigAction>;

  constructor(
    private readonly sources: ConsoleSources,
    users: ConsoleUsers,
    private readonly log: Logger,
    private readonly audit: Logger,
    /** The gateway's one login throttle, shared with MQTT and /metrics. */
    private readonly throttle: LoginThrottle,
  ) {
    this.users = users;
    this.logins = new Logins(users.sessionTtlS);
    this.sampler = new Sampler(sources);
    const s = sources;
    this.reads = new Map<string, () => unknown>([
      ['overview', () => overview(s, this.sampler)],
      ['bridges', () => bridges(s)],
      ['sparkplug', () => sparkplug(s)],
      ['devices', () => devices(s)],
      ['clients', () => clients(s)],
      ['log', () => s.logLines()],
      ['history', () => this.sampler.history()],
    ]);
    this.live = new LiveStreams(() => ({
      at: Date.now(),
      overview: overview(s, this.sampler),
      bridges: bridges(s),
      sparkplug: sparkplug(s),
      devices: devices(s),
    }));
    this.configActions = configActions(sources.configEditing, sources.plcTools, audit);
    this.actions = new Map<string, Action>(
      Object.entries({
        'write-tag': (body, who) => this.writeTag(body, who),
        rebirth: async (_body, who) => {
          const node = this.sources.edgeNode;
          if (node === undefined) throw new HttpError(409, 'no Sparkplug edge node is configured');
          return { done: node.requestRebirth(who) };
        },
        'reconnect-bridge': async (body) => {
          const name = field(body, 'bridge');
          const found = this.sources.bridges().find(({ bridge }) => bridge.name === name);
          if (found === undefined) throw new HttpError(404, `no bridge is named "${name}"`);
          found.bridge.reconnect('asked for in the web console');
          return { done: true };
        },
        'disconnect-client': async (body) => {
          const clientId = field(body, 'clientId');
          if (!this.sources.disconnectClient(clientId, 'disconnected from the web console'))
            throw new HttpError(404, `no client "${clientId}" is connected`);
          return { done: true };
        },
        'delete-session': async (body) => {
          const clientId = field(body, 'clientId');
          const result = this.sources.deleteSession(clientId);
          if (result === 'unknown') throw new HttpError(404, `no session "${clientId}"`);
          if (result === 'online') throw new HttpError(409, `"${clientId}" is connected: disconnect it first`);
          return { done: true };
        },
        reload: async () => {
          const config = this.sources.config;
          if (config === undefined) throw new HttpError(409, 'this gateway was not started from a configuration file');
          const outcome = await config.reload();
          if (!outcome.ok) throw new HttpError(422, outcome.error, { problems: outcome.problems });
          return { done: true, needsRestart: outcome.needsRestart };
        },
      } satisfies Record<string, Action>),
    );
  }

  start(): void {
    this.sampler.start();
  }

  stop(): void {
    this.sampler.stop();
    this.live.close();
  }

  /** New user lists or passwords (reload): logins of users no longer listed in their role end. */
  setUsers(users: ConsoleUsers): void {
    this.users = users;
    this.logins.setTtl(users.sessionTtlS);
    this.logins.retain((user) => this.roleOf(user));
  }

  /** Serves /api/... and /console/...; false for other paths (the metrics server answers those). */
  async handle(req: http.IncomingMessage, res: http.ServerResponse, path: string): Promise<boolean> {
    if (path === '/' || path === '/console') {
      res.writeHead(302, { location: '/console/' }).end();
      return true;
    }
    if (path.startsWith('/console/')) {
      const file = decodedPath(path.slice('/console/'.length));
      if (req.method !== 'GET' || file === undefined || !this.files.serve(file, res)) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found (is the console built? npm run build)\n');
      }
      return true;
    }
    if (!path.startsWith('/api/')) return false;
    try {
      await this.api(req, res, path.slice('/api/'.length));
    } catch (err) {
      if (err instanceof HttpError) reply(res, err.status, { error: err.message, ...err.details });
      else throw err;
    }
    return true;
  }

  private async api(req: http.IncomingMessage, res: http.ServerResponse, route: string): Promise<void> {
    const remote = req.socket.remoteAddress;
    if (route === 'login') return this.login(req, res);
    const login = this.logins.find(req.headers.cookie);
    if (login === undefined) throw new HttpError(401, 'log in first: POST /api/login');
    if (route === 'logout') {
      requirePost(req);
      this.logins.end(login);
      this.audit.info({ user: login.user, remote }, 'console logout');
      res.setHeader('set-cookie', Logins.clearedCookie());
      return reply(res, 200, { done: true });
    }
    if (route === 'session') return reply(res, 200, { user: login.user, role: login.role, csrf: login.csrf });
    if (route === 'events') return this.live.open(res, login.user, () => this.logins.holds(login));
    const read = this.reads.get(route);
    if (read !== undefined) {
      if (req.method !== 'GET') throw new HttpError(405, 'GET only');
      return reply(res, 200, read());
    }
    if (route === 'config') {
      if (req.method !== 'GET') throw new HttpError(405, 'GET only');
      const editing = this.sources.configEditing;
      if (editing === undefined) throw new HttpError(409, 'this gateway was not started from a configuration file');
      return reply(res, 200, { ...editing.read(), editable: mayAct(login.role, 'engineer') });
    }
    if (route === 'config/schema' && req.method === 'GET') {
      const editing = this.sources.configEditing;
      if (editing === undefined) throw new HttpError(409, 'this gateway was not started from a configuration file');
      return reply(res, 200, editing.schema());
    }
    if (route.startsWith('config/')) {
      const name = route.slice('config/'.length);
      return this.act(req, res, login, `config-${name}`, this.configActions.get(name), { needs: 'engineer' });
    }
    if (route.startsWith('actions/')) {
      const name = route.slice('actions/'.length);
      return this.act(req, res, login, name, this.actions.get(name));
    }
    const deadLetters = DEAD_LETTERS_ROUTE.exec(route);
    if (deadLetters !== null) {
      const [, bridge, verb] = deadLetters;
      const name = decodedPath(bridge) ?? bridge;
      return this.act(
        req,
        res,
        login,
        `${verb}-dead-letters`,
        async () => this.deadLetters(name, verb as 'requeue' | 'delete'),
        { target: { bridge: name } },
      );
    }
    throw new HttpError(404, `no such endpoint: /api/${route}`);
  }

  private async login(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    requirePost(req);
    const body = await readJson(req);
    const user = typeof body.user === 'string' ? body.user : '';
    const password = typeof body.password === 'string' ? body.password : '';
    const remote = req.socket.remoteAddress ?? '';
    const known = this.users.isUser(user);
    // People type passwords into the user field: a name that is no user is not written to the log.
    const refused = (why: string): void =>
      this.audit.warn({ user: known ? user : UNKNOWN_USER, remote, why }, 'console login refused');
    const outcome: { role?: Role; why: string } = { why: 'bad user name or password' };
    const attempt = { address: remote, user: known ? user : undefined, waiting: () => !req.socket.destroyed };
    const verdict = await this.throttle.check(attempt, async () => {
      // The password is checked first, so an unlisted user costs the same time as a listed one.
      const verified = await this.users.verifyPassword(user, Buffer.from(password, 'utf8'));
      outcome.role = verified ? this.roleOf(user) : undefined;
      if (verified) outcome.why = 'not a console user';
      return outcome.role !== undefined;
    });
    if (verdict === 'busy') {
      refused(UNCHECKED_WHY.busy);
      res.setHeader('retry-after', String(MAX_DELAY_MS / 1000));
      throw new HttpError(429, 'too many login attempts for this user are waiting: try again in a few seconds');
    }
    if (verdict === 'gone') return refused(UNCHECKED_WHY.gone);
    const role = outcome.role;
    if (role === undefined) {
      refused(outcome.why);
      throw new HttpError(401, 'bad user name or password, or not a console user');
    }
    const login = this.logins.create(user, role);
    this.audit.info({ user, role, remote }, 'console login');
    // Secure over HTTPS (metrics.tls): the browser then never sends the cookie in clear.
    res.setHeader('set-cookie', this.logins.cookie(login, 'encrypted' in req.socket));
    reply(res, 200, { user, role, csrf: login.csrf });
  }

  /**
   * Runs `action` for an operator (or `needs`: an engineer) with the login's CSRF token, audited with `target`
   * (what it acts on). The configuration's actions audit themselves, and their bodies are never logged.
   */
  private async act(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    login: Login,
    name: string,
    action: Action | undefined,
    options: { target?: Record<string, unknown>; needs?: Role } = {},
  ): Promise<void> {
    requirePost(req);
    if (action === undefined) throw new HttpError(404, `no such action: ${name}`);
    const remote = req.socket.remoteAddress;
    const facts = { user: login.user, remote, action: name, ...options.target };
    const needs = options.needs ?? 'operator';
    if (!mayAct(login.role, needs)) {
      this.audit.warn({ ...facts, why: `not an ${needs}` }, 'console action refused');
      throw new HttpError(
        403,
        needs === 'engineer'
          ? `${login.user} may not change the configuration: engineers are listed in console.engineers`
          : `${login.user} may view, not act: operators are listed in console.operators`,
      );
    }
    if (!csrfMatches(login, req.headers['x-csrf-token'])) {
      this.audit.warn({ ...facts, why: 'missing or wrong CSRF token' }, 'console action refused');
      throw new HttpError(403, 'missing or wrong x-csrf-token header (GET /api/session gives the token)');
    }
    const config = needs === 'engineer';
    const body = await readJson(req, config ? CONFIG_BODY_BYTES : undefined);
    try {
      const result = await action(body, { who: 'web-console', user: login.user, remote });
      if (!config && !SELF_AUDITED.has(name)) this.audit.info({ ...facts, body, result }, 'console action');
      reply(res, 200, result);
    } catch (err) {
      if (!(err instanceof AuditedRefusal))
        this.audit.warn({ ...facts, ...(config ? {} : { body }), why: asError(err).message }, 'console action failed');
      if (err instanceof HttpError) throw err;
      this.log.error({ err, action: name }, 'console action failed');
      throw new HttpError(500, asError(err).message);
    }
  }

  /** Requeues (sends again) or deletes the dead letters of bridge `name`, with their counts. */
  private async deadLetters(name: string, verb: 'requeue' | 'delete'): Promise<Record<string, unknown>> {
    const found = this.sources.bridges().find(({ bridge }) => bridge.name === name);
    if (found === undefined) throw new HttpError(404, `no bridge is named "${name}"`);
    if (verb === 'requeue') return found.bridge.requeueDeadLetters();
    return { deleted: await found.bridge.deleteDeadLetters() };
  }

  private async writeTag(body: Record<string, unknown>, who: Sender): Promise<Record<string, unknown>> {
    const node = this.sources.edgeNode;
    const deviceId = field(body, 'device');
    const tag = field(body, 'tag');
    const device = node?.deviceList.find((d) => d.id === deviceId);
    if (node === undefined || device === undefined) throw new HttpError(404, `no device "${deviceId}"`);
    const def = device.definitions.get(tag);
    if (def === undefined) throw new HttpError(404, `device ${deviceId} has no tag "${tag}"`);
    const parsed = parseTagValue(def.datatype, body.value);
    if ('problem' in parsed) throw new HttpError(422, parsed.problem);
    const outcome = await node.writeTag(who, deviceId, tag, parsed.value);
    if (!outcome.ok) throw new AuditedRefusal(422, outcome.why);
    return { done: true, readBack: outcome.readBack, matches: outcome.matches };
  }

  private roleOf(user: string): Role | undefined {
    if (this.users.engineers.includes(user)) return 'engineer';
    if (this.users.operators.includes(user)) return 'operator';
    return this.users.viewers.includes(user) ? 'viewer' : undefined;
  }
}

/** A URL path decoded; undefined for a malformed escape (no such file), not an exception. */
function decodedPath(path: string): string | undefined {
  try {
    return decodeURIComponent(path);
  } catch {
    return undefined;
  }
}
