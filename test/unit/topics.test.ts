import { describe, expect, it } from 'vitest';
import {
  isValidMqttString,
  isValidTopicFilter,
  isValidTopicName,
  parseSharedFilter,
  topicMatches,
} from '../../src/protocol/topics.js';

describe('topic names', () => {
  it.each(['a', 'a/b/c', '/', '/a', 'a/', 'a//b', '$SYS/broker/uptime', 'ä/€/𝄞', ' spaced topic '])(
    'accepts %j as a topic name [MQTT-4.7.3-1]',
    (topic) => {
      expect(isValidTopicName(topic, 128)).toBe(true);
    },
  );

  it.each([
    ['', 'empty [MQTT-4.7.3-1]'],
    ['a/+', 'single-level wildcard [MQTT-3.3.2-2]'],
    ['a/#', 'multi-level wildcard [MQTT-3.3.2-2]'],
    ['a+b', 'wildcard inside a level [MQTT-3.3.2-2]'],
    ['a#', 'wildcard inside a level [MQTT-3.3.2-2]'],
    ['a/\u0000', 'U+0000 [MQTT-1.5.3-2]'],
    ['a/\uFFFD', 'ill-formed UTF-8 as decoded [MQTT-1.5.3-1]'],
  ])('rejects %j as a topic name: %s', (topic) => {
    expect(isValidTopicName(topic, 128)).toBe(false);
  });

  it('rejects a topic name longer than 65535 characters', () => {
    expect(isValidTopicName('a'.repeat(65535), 128)).toBe(true);
    expect(isValidTopicName('a'.repeat(65536), 128)).toBe(false);
  });

  it('counts levels against the maximum, empty levels included', () => {
    expect(isValidTopicName('a/b/c', 3)).toBe(true);
    expect(isValidTopicName('a/b/c', 2)).toBe(false);
    expect(isValidTopicName('//', 3)).toBe(true);
    expect(isValidTopicName('//', 2)).toBe(false);
    // At the boundary where a name has as many chars as the limit (it may have one level more).
    expect(isValidTopicName('/'.repeat(127), 128)).toBe(true);
    expect(isValidTopicName('/'.repeat(128), 128)).toBe(false);
    expect(isValidTopicName('a'.repeat(128), 128)).toBe(true);
  });
});

describe('topic filters', () => {
  it.each([
    '#',
    '+',
    'a/#',
    '+/+/#',
    'a/+/b',
    '/',
    '/#',
    '+/',
    'a//+',
    '$SYS/#',
    '$share/g/a',
    'sport/tennis/player1/#',
  ])('accepts %j as a topic filter [MQTT-4.7.1-2] [MQTT-4.7.1-3]', (filter) => {
    expect(isValidTopicFilter(filter)).toBe(true);
  });

  it.each([
    ['', 'empty [MQTT-4.7.3-1]'],
    ['a/#/b', '# not last [MQTT-4.7.1-2]'],
    ['#/a', '# not last [MQTT-4.7.1-2]'],
    ['a#', '# inside a level [MQTT-4.7.1-2]'],
    ['a/b#', '# inside a level [MQTT-4.7.1-2]'],
    ['a+', '+ inside a level [MQTT-4.7.1-3]'],
    ['a/+b/c', '+ inside a level [MQTT-4.7.1-3]'],
    ['++', 'two + in one level [MQTT-4.7.1-3]'],
    ['a/\u0000', 'U+0000 [MQTT-1.5.3-2]'],
  ])('rejects %j as a topic filter: %s', (filter) => {
    expect(isValidTopicFilter(filter)).toBe(false);
  });

  it('enforces the maximum number of levels on filters', () => {
    expect(isValidTopicFilter('a/+/#', 3)).toBe(true);
    expect(isValidTopicFilter('a/+/c/#', 3)).toBe(false);
  });
});

describe('UTF-8 strings', () => {
  it('accepts ordinary strings and rejects U+0000 and U+FFFD [MQTT-1.5.3-1] [MQTT-1.5.3-2]', () => {
    expect(isValidMqttString('client-1')).toBe(true);
    expect(isValidMqttString('')).toBe(true);
    expect(isValidMqttString('\uFEFF')).toBe(true); // BOM is a valid character [MQTT-1.5.3-3]
    expect(isValidMqttString('a\u0000b')).toBe(false);
    expect(isValidMqttString('a\uFFFDb')).toBe(false);
  });
});

describe('shared subscriptions', () => {
  it.each([
    ['$share/g/a/b', { group: 'g', filter: 'a/b' }],
    ['$share/group-1/#', { group: 'group-1', filter: '#' }],
    ['$share/g/+/x', { group: 'g', filter: '+/x' }],
    ['$share/g//', { group: 'g', filter: '/' }],
  ])('splits %j into group and filter [MQTT-4.8.2-1]', (input, expected) => {
    expect(parseSharedFilter(input)).toEqual(expected);
  });

  it.each([
    ['$share/ab', 'no filter part'],
    ['$share/g/', 'empty filter [MQTT-4.8.2-2]'],
    ['$share//a', 'empty share name [MQTT-4.8.2-1]'],
    ['$share/g+/a', '+ in the share name [MQTT-4.8.2-2]'],
    ['$share/g#/a', '# in the share name [MQTT-4.8.2-2]'],
    ['$share/+/a', '+ as the share name [MQTT-4.8.2-2]'],
    ['$share', 'bare $share'],
    ['$share/', 'nothing after the prefix'],
  ])('refuses the malformed shared filter %j: %s', (input) => {
    expect(parseSharedFilter(input)).toBe('invalid');
  });

  it.each(['a/b', '#', '$SYS/#', '$sharex/g/a', 'share/g/a', '$SHARE/g/a'])(
    'leaves the ordinary filter %j alone',
    (input) => {
      expect(parseSharedFilter(input)).toBeUndefined();
    },
  );
});

describe('topic matching', () => {
  it.each([
    ['a/b', 'a/b', true],
    ['a/b', 'a/c', false],
    ['a/b', 'a/b/c', false],
    ['a/b/c', 'a/b', false],
    ['+', 'a', true],
    ['+', 'a/b', false],
    ['+', '/a', false],
    ['+/+', '/a', true],
    ['/+', '/a', true],
    ['+', '', true],
    ['a/+', 'a/', true],
    ['a/+', 'a', false],
    ['a/+/c', 'a//c', true],
    ['a/+/c', 'a/b/c', true],
    ['a/+/c', 'a/b/d', false],
    ['#', 'a', true],
    ['#', 'a/b/c', true],
    ['#', '/a', true],
    ['a/#', 'a', true], // the parent level too [MQTT-4.7.1-2]
    ['a/#', 'a/b/c', true],
    ['a/#', 'ab', false],
    ['a/#', 'b/a', false],
    ['+/#', 'a', true],
    ['+/b/#', 'a/b', true],
    ['sport/tennis/+', 'sport/tennis', false],
    ['sport/tennis/+', 'sport/tennis/', true],
    ['A/b', 'a/b', false], // case sensitive [MQTT-4.7.3-4]
    ['a/b/#', 'a/b', true],
    ['+/+', 'a', false],
    ['a//b', 'a//b', true],
    ['a//b', 'a/b', false],
    ['/', '/', true],
    ['ab/c', 'a/c', false],
    ['a/bc', 'a/b', false],
  ])('filter %j matches topic %j: %s', (filter, topic, expected) => {
    expect(topicMatches(filter, topic)).toBe(expected);
  });

  it.each([
    ['#', '$SYS/broker/uptime', false],
    ['+/broker/uptime', '$SYS/broker/uptime', false],
    ['+/#', '$SYS/a', false],
    ['$SYS/#', '$SYS/broker/uptime', true],
    ['$SYS/+/uptime', '$SYS/broker/uptime', true],
    ['$SYS', '$SYS', true],
    ['a/#', 'a/$b', true], // `$` only matters at the first level
    ['+/$b', 'a/$b', true],
  ])('`$` topics are not matched by leading wildcards: %j vs %j is %s [MQTT-4.7.2-1]', (filter, topic, expected) => {
    expect(topicMatches(filter, topic)).toBe(expected);
  });
});
