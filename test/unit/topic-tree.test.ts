import { describe, expect, it } from 'vitest';
import { SharedGroup, TopicTree } from '../../src/broker/topic-tree.js';
import type { Subscriber, Subscription } from '../../src/broker/topic-tree.js';
import { topicMatches } from '../../src/protocol/topics.js';

class FakeSubscriber implements Subscriber {
  routeMark = 0;
  routeSlot = 0;
  online = true;

  constructor(readonly id: string) {}

  isOnline(): boolean {
    return this.online;
  }

  deliver(): void {}
}

/** Adds `s` as the broker does. */
function add(tree: TopicTree, s: Subscription): boolean {
  return tree.add(s.subscriber, s.filter, s, s.group);
}

function sub(subscriber: Subscriber, filter: string, extra: Partial<Subscription> = {}): Subscription {
  return { subscriber, filter, qos: 0, noLocal: false, retainAsPublished: false, retainHandling: 0, ...extra };
}

/** Runs a match and returns `<subscriber id>:<filter>` for every visited subscription and `group:<name>` per group. */
function matchOf(tree: TopicTree, topic: string): string[] {
  const { subscriptions, groups } = tree.match(topic);
  return [
    ...subscriptions.map((s) => `${s.subscriber.id}:${s.filter}`),
    ...groups.map((g) => `group:${g.name}`),
  ].sort();
}

function rootChildren(tree: TopicTree): number {
  return (tree as unknown as { root: { children: Map<string, unknown> } }).root.children.size;
}

describe('TopicTree', () => {
  it('visits exactly the subscriptions whose filters match, like topicMatches does [MQTT-4.7.1-2] [MQTT-4.7.1-3]', () => {
    const filters = [
      '#',
      '+',
      'a',
      'a/#',
      'a/+',
      'a/b',
      'a/+/c',
      '+/b/#',
      '/+',
      '+/+',
      'a//c',
      'a/b/c/d',
      '$SYS/#',
      '$SYS/+',
      '+/x',
    ];
    const topics = [
      'a',
      'a/b',
      'a/b/c',
      'a/x/c',
      'a//c',
      '/a',
      '/',
      'b/b',
      'b/b/c',
      'a/b/c/d',
      '$SYS/x',
      '$SYS',
      'z/x',
      'a/',
    ];
    const tree = new TopicTree();
    // One subscriber per filter so that every visit is attributable.
    for (const f of filters) add(tree, sub(new FakeSubscriber(f), f));
    for (const topic of topics) {
      const expected = filters
        .filter((f) => topicMatches(f, topic))
        .map((f) => `${f}:${f}`)
        .sort();
      expect(matchOf(tree, topic), `topic ${topic}`).toEqual(expected);
    }
  });

  it('never matches topics beginning with `$` through a wildcard at the first level [MQTT-4.7.2-1]', () => {
    const tree = new TopicTree();
    const s = new FakeSubscriber('s');
    add(tree, sub(s, '#'));
    add(tree, sub(s, '+/broker/uptime'));
    add(tree, sub(s, '$SYS/#'));
    add(tree, sub(s, '$SYS/broker/+'));
    expect(matchOf(tree, '$SYS/broker/uptime')).toEqual(['s:$SYS/#', 's:$SYS/broker/+']);
    expect(matchOf(tree, 'x/broker/uptime')).toEqual(['s:#', 's:+/broker/uptime']);
  });

  it('visits every overlapping subscription of one subscriber (the broker merges them) [MQTT-3.3.5-1]', () => {
    const tree = new TopicTree();
    const s = new FakeSubscriber('s');
    add(tree, sub(s, 'a/+', { qos: 0 }));
    add(tree, sub(s, 'a/#', { qos: 2 }));
    add(tree, sub(s, 'a/b', { qos: 1 }));
    const visited = tree.match('a/b').subscriptions;
    expect(visited.map((x) => [x.filter, x.qos]).sort()).toEqual([
      ['a/#', 2],
      ['a/+', 0],
      ['a/b', 1],
    ]);
  });

  it('replaces a subscription to the same filter instead of adding a second one [MQTT-3.8.4-3]', () => {
    const tree = new TopicTree();
    const s = new FakeSubscriber('s');
    expect(add(tree, sub(s, 'a/b', { qos: 0 }))).toBe(false);
    expect(add(tree, sub(s, 'a/b', { qos: 2 }))).toBe(true);
    expect(tree.count).toEqual({ normal: 1, shared: 0 });
    const visited = tree.match('a/b').subscriptions;
    expect(visited).toHaveLength(1);
    expect(visited[0].qos).toBe(2);
  });

  it('keeps subscriptions of different subscribers to the same filter apart', () => {
    const tree = new TopicTree();
    const a = new FakeSubscriber('a');
    const b = new FakeSubscriber('b');
    add(tree, sub(a, 'x/#'));
    add(tree, sub(b, 'x/#'));
    expect(matchOf(tree, 'x/y')).toEqual(['a:x/#', 'b:x/#']);
    expect(tree.remove(a, 'x/#')).toBe(true);
    expect(matchOf(tree, 'x/y')).toEqual(['b:x/#']);
    expect(tree.count.normal).toBe(1);
  });

  it('removes only what exists and prunes empty nodes', () => {
    const tree = new TopicTree();
    const s = new FakeSubscriber('s');
    add(tree, sub(s, 'a/b/c/d'));
    add(tree, sub(s, 'a/+/#'));
    expect(tree.remove(s, 'a/b/c')).toBe(false);
    expect(tree.remove(s, 'q/r')).toBe(false);
    expect(tree.remove(new FakeSubscriber('other'), 'a/b/c/d')).toBe(false);
    expect(tree.remove(s, 'a/b/c/d')).toBe(true);
    expect(tree.remove(s, 'a/b/c/d')).toBe(false);
    expect(rootChildren(tree)).toBe(1); // `a/+/#` still there
    expect(tree.remove(s, 'a/+/#')).toBe(true);
    expect(rootChildren(tree)).toBe(0);
    expect(tree.count).toEqual({ normal: 0, shared: 0 });
    expect(matchOf(tree, 'a/b/c/d')).toEqual([]);
  });

  it('never serves a stale cached match after a subscription is added, replaced or removed', () => {
    const tree = new TopicTree();
    const a = new FakeSubscriber('a');
    const b = new FakeSubscriber('b');
    add(tree, sub(a, 'c/+', { qos: 0 }));
    expect(matchOf(tree, 'c/1')).toEqual(['a:c/+']);
    expect(matchOf(tree, 'c/1')).toEqual(['a:c/+']); // served from the cache
    add(tree, sub(b, 'c/#'));
    expect(matchOf(tree, 'c/1')).toEqual(['a:c/+', 'b:c/#']);
    add(tree, sub(a, 'c/+', { qos: 2 }));
    expect(tree.match('c/1').subscriptions.find((s) => s.subscriber === a)?.qos).toBe(2);
    add(tree, sub(b, 'c/1', { group: 'g' }));
    expect(matchOf(tree, 'c/1')).toEqual(['a:c/+', 'b:c/#', 'group:g']);
    tree.remove(a, 'c/+');
    expect(matchOf(tree, 'c/1')).toEqual(['b:c/#', 'group:g']);
    tree.remove(b, 'c/1', 'g');
    tree.remove(b, 'c/#');
    expect(matchOf(tree, 'c/1')).toEqual([]);
  });

  it('stays correct past the size of its match cache', () => {
    const tree = new TopicTree();
    const a = new FakeSubscriber('a');
    add(tree, sub(a, 'm/+'));
    for (let i = 0; i < 12_000; i++) expect(tree.match(`m/${i}`).subscriptions.length).toBe(1);
    expect(matchOf(tree, 'm/0')).toEqual(['a:m/+']);
    expect(matchOf(tree, 'x/0')).toEqual([]);
  });

  it('reports one shared group per matching filter and counts its members', () => {
    const tree = new TopicTree();
    const a = new FakeSubscriber('a');
    const b = new FakeSubscriber('b');
    add(tree, sub(a, 'job/+', { group: 'workers' }));
    add(tree, sub(b, 'job/+', { group: 'workers' }));
    add(tree, sub(a, 'job/#', { group: 'audit' }));
    add(tree, sub(a, 'job/+')); // a normal subscription to the same filter stays separate
    expect(tree.count).toEqual({ normal: 1, shared: 3 });
    expect(matchOf(tree, 'job/1')).toEqual(['a:job/+', 'group:audit', 'group:workers']);
    expect(matchOf(tree, '$share/workers/job/1')).toEqual([]);
  });

  it('keeps shared and normal bookkeeping consistent when both are removed in any order [docs/reliability.md rule 25]', () => {
    const tree = new TopicTree();
    const a = new FakeSubscriber('a');
    add(tree, sub(a, 't/#', { group: 'g' }));
    add(tree, sub(a, 't/#'));
    expect(tree.remove(a, 't/#')).toBe(true);
    expect(matchOf(tree, 't/1')).toEqual(['group:g']);
    expect(tree.remove(a, 't/#')).toBe(false);
    expect(tree.remove(a, 't/#', 'other')).toBe(false);
    expect(tree.remove(a, 't/#', 'g')).toBe(true);
    expect(matchOf(tree, 't/1')).toEqual([]);
    expect(tree.count).toEqual({ normal: 0, shared: 0 });
    expect(rootChildren(tree)).toBe(0);
  });
});

describe('SharedGroup', () => {
  function groupOf(...members: FakeSubscriber[]): SharedGroup {
    const g = new SharedGroup('g', 'f');
    for (const m of members) g.members.push(sub(m, 'f', { group: 'g' }));
    return g;
  }

  it('picks members round robin', () => {
    const [a, b, c] = [new FakeSubscriber('a'), new FakeSubscriber('b'), new FakeSubscriber('c')];
    const g = groupOf(a, b, c);
    const picks = Array.from({ length: 6 }, () => g.pick()?.subscriber.id);
    expect(picks).toEqual(['a', 'b', 'c', 'a', 'b', 'c']);
  });

  it('prefers online members and falls back to an offline one when nobody is online', () => {
    const [a, b, c] = [new FakeSubscriber('a'), new FakeSubscriber('b'), new FakeSubscriber('c')];
    b.online = false;
    const g = groupOf(a, b, c);
    const picks = Array.from({ length: 4 }, () => g.pick()?.subscriber.id);
    expect(picks).toEqual(['a', 'c', 'a', 'c']);
    a.online = false;
    c.online = false;
    expect(g.pick()?.subscriber.id).toBeDefined();
  });

  it('skips the excluded member (redelivery after a disconnect) and returns nothing if it is alone', () => {
    const [a, b] = [new FakeSubscriber('a'), new FakeSubscriber('b')];
    const g = groupOf(a, b);
    for (let i = 0; i < 4; i++) expect(g.pick(a)?.subscriber.id).toBe('b');
    expect(groupOf(a).pick(a)).toBeUndefined();
    expect(new SharedGroup('empty', 'f').pick()).toBeUndefined();
  });
});
