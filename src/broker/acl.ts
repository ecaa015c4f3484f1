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
      if (!isValidTopicFilter(probe)) return problems.push({ line: i + 1, message: `invalid topic filter "${filter}"` });
      (keyword === 'pattern' ? patterns : current).push({ access, filter });
    });
    return { acl: new Acl(anonymous, users, patterns), problems };
  }

  /** May `user`/`clientId` do `action` on `topic`? For subscriptions, `topic` is the filter itself. */
  allows(action: 'read' | 'write', topic: string, clientId: string, user: string | undefined, isFilter = false): boolean {
    const rules = user === undefined ? this.anonymous : (this.users.get(user) ?? []);
    const safeIdentity = !/[+#/]/.test(clientId) && (user === undefined || !/[+#/]/.test(user));
    // A `%u` pattern never applies to an anonymous client (Mosquitto): it must be skipped before expansion, or
    // `users/%u/#` would become `users//#` for everyone without a user name.
    const expanded = safeIdentity
      ? this.patterns
          .filter((r) => user !== undefined || !r.filter.includes('%u'))
          .map((r) => ({ access: r.access, filter: r.filter.replaceAll('%c', clientId).replaceAll('%u', user ?? '') }))
      : [];
    const all = [...rules, ...expanded];
    // For a subscription filter, a rule applies if some topic could match both: a deny that overlaps refuses the
    // whole subscription (so `#` cannot bypass it), a grant that overlaps allows it, and every delivered message
    // is checked again with `read` on its own topic.
    const matches = (r: Rule): boolean => (isFilter ? filtersOverlap(r.filter, topic) : topicMatches(r.filter, topic));
    if (all.some((r) => r.access === 'deny' && matches(r))) return false;
    return all.some((r) => (r.access === 'readwrite' || r.access === action) && matches(r));
  }
}

/** Whether some topic could match both filters. */
function filtersOverlap(a: string, b: string): boolean {
  const x = a.split('/');
  const y = b.split('/');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] === '#' || y[i] === '#') return true;
    if (x[i] === undefined || y[i] === undefined) return false;
    if (x[i] !== '+' && y[i] !== '+' && x[i] !== y[i]) return false;
  }
  return true;
}
