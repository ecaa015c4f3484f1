/** Topic names, topic filters and shared subscriptions (MQTT 5.0 §4.7, §4.8.2; 3.1.1 §4.7). */

export interface SharedFilter {
  readonly group: string;
  readonly filter: string;
}

const SHARE_PREFIX = '$share/';

function hasForbiddenChars(s: string): boolean {
  // U+0000 is forbidden in every UTF-8 string [MQTT-1.5.3-2]. mqtt-packet decodes ill-formed UTF-8 to U+FFFD,
  // the only trace of it that survives decoding, so we treat U+FFFD as ill-formed input [MQTT-1.5.3-1].
  return s.includes('\u0000') || s.includes('\uFFFD');
}

/** True for a valid UTF-8 string under [MQTT-1.5.3-1/2] as far as it can be checked after decoding. */
export function isValidMqttString(s: string): boolean {
  return !hasForbiddenChars(s);
}

/** A PUBLISH topic name: non-empty, no wildcards [MQTT-3.3.2-2], at most `maxLevels` levels. */
export function isValidTopicName(topic: string, maxLevels: number): boolean {
  if (topic.length === 0 || topic.length > 65535) return false;
  if (topic.includes('+') || topic.includes('#') || hasForbiddenChars(topic)) return false;
  // A name has at most one level more than it has chars: most are shorter than the limit and need no count.
  return topic.length < maxLevels || countLevels(topic) <= maxLevels;
}

/** A topic filter: `#` only as the whole last level, `+` only as a whole level [MQTT-4.7.1-2/3]. */
export function isValidTopicFilter(filter: string, maxLevels: number = Infinity): boolean {
  const n = filter.length;
  if (n === 0 || n > 65535 || hasForbiddenChars(filter)) return false;
  // Char by char, not split: a SUBSCRIBE of a thousand filters checks each, and the split levels were garbage.
  let levels = 1;
  for (let i = 0; i < n; i++) {
    const c = filter.charCodeAt(i);
    if (c === 47 /* / */) levels++;
    else if (c === 35 /* # */ || c === 43 /* + */) {
      // A wildcard is a whole level: it starts its level, `+` ends it, `#` ends the filter.
      if (i > 0 && filter.charCodeAt(i - 1) !== 47) return false;
      if (c === 35 && i !== n - 1) return false;
      if (c === 43 && i + 1 < n && filter.charCodeAt(i + 1) !== 47) return false;
    }
  }
  return levels <= maxLevels;
}

function countLevels(topic: string): number {
  let n = 1;
  for (let i = 0; i < topic.length; i++) if (topic.charCodeAt(i) === 47) n++;
  return n;
}

/**
 * Splits `$share/<group>/<filter>`. Returns undefined for an ordinary filter and 'invalid' for a malformed
 * shared one: empty or wildcard group name, missing filter [MQTT-4.8.2-1/2].
 */
export function parseSharedFilter(filter: string): SharedFilter | 'invalid' | undefined {
  if (!filter.startsWith(SHARE_PREFIX)) return filter === '$share' ? 'invalid' : undefined;
  const rest = filter.slice(SHARE_PREFIX.length);
  const slash = rest.indexOf('/');
  if (slash <= 0) return 'invalid';
  const group = rest.slice(0, slash);
  const inner = rest.slice(slash + 1);
  if (group.includes('+') || group.includes('#') || inner.length === 0) return 'invalid';
  return { group, filter: inner };
}

/** Whether `topic` matches `filter`; leading wildcards never match `$` topics [MQTT-4.7.2-1]. */
export function topicMatches(filter: string, topic: string): boolean {
  if (topic.charCodeAt(0) === 36 /* $ */ && (filter.charCodeAt(0) === 43 || filter.charCodeAt(0) === 35)) {
    return false;
  }
  // Walks both strings level by level without splitting them: this runs per message (ACLs, bridge rules).
  let fi = 0;
  let ti = 0;
  for (;;) {
    const fEnd = levelEnd(filter, fi);
    const level = fEnd - fi;
    if (level === 1 && filter.charCodeAt(fi) === 35 /* # */) return true; // also matches the parent level
    if (ti > topic.length) return false; // the topic has fewer levels
    const tEnd = levelEnd(topic, ti);
    if (!(level === 1 && filter.charCodeAt(fi) === 43 /* + */)) {
      if (tEnd - ti !== level) return false;
      for (let k = 0; k < level; k++) if (filter.charCodeAt(fi + k) !== topic.charCodeAt(ti + k)) return false;
    }
    fi = fEnd + 1;
    ti = tEnd + 1;
    if (fi > filter.length) return ti > topic.length; // both end at the same level
  }
}

/** Index of the '/' ending the level that starts at `from`, or the string's length. */
function levelEnd(s: string, from: number): number {
  const i = s.indexOf('/', from);
  return i === -1 ? s.length : i;
}
