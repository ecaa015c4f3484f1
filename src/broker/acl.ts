/**
 * Mosquitto-compatible ACL files (mosquitto.conf(5) `acl_file`): `topic [read|write|readwrite|deny] <filter>`
 * before any `user` line applies to anonymous clients, after `user <name>` to that user; `pattern ...` with `%c`
 * (client id) and `%u` (user name) applies to everyone. `deny` wins over grants. A client id or user name holding
 * `+`, `#` or `/` never matches a pattern (CVE-2017-7650). An empty file denies everything (CVE-2018-12550).
 */
import { topicMatches, isValidTopicFilter } from '../protocol/topics.js';

type Access = 'read' | 'write' | 'readwrite' | 'deny';

interface Rule {
  readonly access: Access;
  readonly filter: string;
}

export interface AclProblem {
  readonly line: number;
  readonly message: string;
}

export class Acl {
  private constructor(
    private readonly anonymous: readonly Rule[],
    private readonly users: ReadonlyMap<string, readonly Rule[]>,
    private readonly patterns: readonly Rule[],
  ) {}

  /** Rules with the patterns expanded, by identity (client id, and user name when there is one). */
  private readonly expanded = new Map<string, readonly Rule[]>();

  static parse(text: string): { acl: Acl; problems: AclProblem[] } {
    const anonymous: Rule[] = [];
    const users = new Map<string, Rule[]>();
    const patterns: Rule[] = [];
    const problems: AclProblem[] = [];
    let current: Rule[] = anonymous;
    text.split(/\r?\n/).forEach((raw, i) => {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) return;
      const [keyword, ...rest] = line.split(/\s+/);
      if (keyword === 'user') {
        const name = line.slice(4).trim();
        if (!name) return problems.push({ line: i + 1, message: 'user without a name' });
        current = users.get(name) ?? [];
        users.set(name, current);
        return;
      }
      if (keyword !== 'topic' && keyword !== 'pattern') {
        return problems.push({ line: i + 1, message: `unknown keyword "${keyword}"` });
      }
      let access: Access = 'readwrite';
      let filter = line.slice(keyword.length).trim();
      if (['read', 'write', 'readwrite', 'deny'].includes(rest[0]) && rest.length > 1) {
        access = rest[0] as Access;
        filter = filter.slice(rest[0].length).trim();
      }
      const probe = filter.replaceAll('%c', 'c').replaceAll('%u', 'u');
      if (!isValidTopicFilter(probe))
        return problems.push({ line: i + 1, message: `invalid topic filter "${filter}"` });
      (keyword === 'pattern' ? patterns : current).push({ access, filter });
    });
    return { acl: new Acl(anonymous, users, patterns), problems };
  }

  /**
   * May `user`/`clientId` do `action` on `topic`? Called for every delivered message, so it allocates nothing
   * unless a `%c`/`%u` pattern has to be expanded.
   */
  allows(action: 'read' | 'write', topic: string, clientId: string, user: string | undefined): boolean {
    const rules = this.rulesOf(clientId, user);
    for (const r of rules) if (r.access === 'deny' && topicMatches(r.filter, topic)) return false;
    for (const r of rules)
      if ((r.access === 'readwrite' || r.access === action) && topicMatches(r.filter, topic)) return true;
    return false;
  }

  /**
   * May `user`/`clientId` subscribe to `filter`? Granted when some topic it can match is readable: a grant overlaps
   * it and their common part is not wholly denied, as in Mosquitto, so `#` works on a box with one denied subtree.
   * Every delivered message is checked again with `allows('read', topic)`. (Several deny rules that together
   * cover a filter are not detected: such a subscription is granted and receives nothing.)
   */
  allowsSubscription(filter: string, clientId: string, user: string | undefined): boolean {
    const rules = this.rulesOf(clientId, user);
    for (const grant of rules) {
      if (grant.access !== 'read' && grant.access !== 'readwrite') continue;
      const common = intersection(grant.filter, filter);
      if (common !== undefined && !rules.some((r) => r.access === 'deny' && covers(r.filter, common))) return true;
    }
    return false;
  }

  /** The user's (or the anonymous) rules followed by the patterns expanded for this identity. */
  private rulesOf(clientId: string, user: string | undefined): readonly Rule[] {
    const rules = user === undefined ? this.anonymous : (this.users.get(user) ?? NO_RULES);
    if (this.patterns.length === 0) return rules;
    // A client id or user name holding a wildcard or a level separator never matches a pattern (CVE-2017-7650).
    if (/[+#/]/.test(clientId) || (user !== undefined && /[+#/]/.test(user))) return rules;
    // Expanded once per identity, not per delivered message (a new Acl comes with every reload).
    const key = user === undefined ? clientId : `${clientId}\u0000${user}`;
    let all = this.expanded.get(key);
    if (all === undefined) {
      // A `%u` pattern never applies to an anonymous client (Mosquitto): it must be skipped before expansion, or
      // `users/%u/#` would become `users//#` for everyone without a user name.
      const own = this.patterns
        .filter((r) => user !== undefined || !r.filter.includes('%u'))
        .map((r) => ({ access: r.access, filter: r.filter.replaceAll('%c', clientId).replaceAll('%u', user ?? '') }));
      all = [...rules, ...own];
      if (this.expanded.size >= MAX_EXPANDED) this.expanded.clear();
      this.expanded.set(key, all);
    }
    return all;
  }
}

/** Identities whose expanded patterns are kept; past that the cache starts over (it only saves work). */
const MAX_EXPANDED = 10_000;

const NO_RULES: readonly Rule[] = [];

/** The filter matching exactly the topics that match both `a` and `b`, or undefined when none does. */
export function intersection(a: string, b: string): string | undefined {
  // Typed with undefined: the loops below read past the end of the shorter filter.
  const x: (string | undefined)[] = a.split('/');
  const y: (string | undefined)[] = b.split('/');
  const out: string[] = [];
  for (let i = 0; ; i++) {
    if (x[i] === '#') return [...out, ...y.slice(i)].join('/') || '#';
    if (y[i] === '#') return [...out, ...x.slice(i)].join('/') || '#';
    if (x[i] === undefined || y[i] === undefined) {
      // `a/#` also matches `a`: a filter that ends where the other goes on with `#` shares its parent topic.
      if (x[i] === undefined && y[i] === undefined) return out.join('/');
      return (x[i] ?? y[i]) === '#' ? out.join('/') : undefined;
    }
    if (x[i] === '+') out.push(y[i]!);
    else if (y[i] === '+' || x[i] === y[i]) out.push(x[i]!);
    else return undefined;
  }
}

/** Whether every topic that matches `inner` also matches `outer`. */
export function covers(outer: string, inner: string): boolean {
  const o: (string | undefined)[] = outer.split('/');
  const n: (string | undefined)[] = inner.split('/');
  for (let i = 0; ; i++) {
    if (o[i] === '#') return true;
    if (o[i] === undefined) return n[i] === undefined;
    if (n[i] === undefined) return o[i] === '#';
    if (n[i] === '#') return false;
    if (o[i] === '+') continue;
    if (n[i] === '+' || n[i] !== o[i]) return false;
  }
}
