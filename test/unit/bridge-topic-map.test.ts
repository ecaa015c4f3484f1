import { describe, expect, it } from 'vitest';
import { TopicMap } from '../../src/bridge/topic-map.js';
import type { BridgeTopicConfig } from '../../src/config/schema.js';

const t = (filter: string, rest: Partial<BridgeTopicConfig> = {}): BridgeTopicConfig =>
  ({ filter, direction: 'out', localPrefix: '', remotePrefix: '', ...rest }) as BridgeTopicConfig;

describe('bridge topic map', () => {
  it('splits rules by direction: out and both go up, in and both come down', () => {
    const map = new TopicMap([t('a/#'), t('b/#', { direction: 'in' }), t('c/#', { direction: 'both' })]);
    expect(map.outRules.map((r) => r.localFilter)).toEqual(['a/#', 'c/#']);
    expect(map.inRules.map((r) => r.remoteFilter)).toEqual(['b/#', 'c/#']);
  });

  it('swaps prefixes like a Mosquitto topic line: local = localPrefix + rest, remote = remotePrefix + rest', () => {
    const map = new TopicMap([t('#', { direction: 'both', localPrefix: 'line4/', remotePrefix: 'plant1/line4/' })]);
    const rule = map.matchOut('line4/press/temp');
    expect(rule?.localFilter).toBe('line4/#');
    expect(map.toRemote(rule!, 'line4/press/temp')).toBe('plant1/line4/press/temp');
    const inRule = map.matchIn('plant1/line4/cmd/stop');
    expect(map.toLocal(inRule!, 'plant1/line4/cmd/stop')).toBe('line4/cmd/stop');
  });

  it('does not match the bare prefix level that `#` would otherwise include', () => {
    const map = new TopicMap([t('#', { localPrefix: 'line4/' })]);
    expect(map.matchOut('line4')).toBeUndefined();
    expect(map.matchOut('line4/x')).toBeDefined();
  });

  it('returns the first matching rule when filters overlap, so a message goes up once', () => {
    const map = new TopicMap([t('a/+', { qos: 0 }), t('a/#', { qos: 1 })]);
    expect(map.matchOut('a/b')?.index).toBe(0);
    expect(map.matchOut('a/b/c')?.index).toBe(1);
  });

  it('never matches $ topics with a leading wildcard [MQTT-4.7.2-1]', () => {
    const map = new TopicMap([t('#')]);
    expect(map.matchOut('$SYS/broker/uptime')).toBeUndefined();
  });
});
