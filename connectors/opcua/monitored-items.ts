/**
 * The monitored items of a connector's subscription: one per resolved tag, never polling. Tags sharing monitoring
 * parameters (sampling interval, queue, deadband, trigger) go in one CreateMonitoredItems call, up to the
 * server's limit.
 */
import type { ClientMonitoredItemBase, ClientSubscription, DataValue } from 'node-opcua-client';
import { withDeadline, type OpenedSession } from './open-session.js';
import { chunks, type OperationLimits, type ResolvedTag } from './resolve-tags.js';
import type { TagProblems } from './tag-problems.js';

/**
 * Monitors every tag of `resolved` on `subscription`; a tag the server refuses to monitor is reported and
 * removed from `resolved`. `changed` gets each data-change notification.
 */
export async function monitorTags(
  opened: OpenedSession,
  subscription: ClientSubscription,
  resolved: Map<string, ResolvedTag>,
  limits: OperationLimits,
  requestTimeoutMs: number,
  problems: TagProblems,
  changed: (tag: ResolvedTag, dataValue: DataValue) => void,
): Promise<void> {
  const { ua } = opened.lib;
  // Tags sharing monitoring parameters go in one CreateMonitoredItems call (up to the server's limit).
  const groups = new Map<string, ResolvedTag[]>();
  for (const tag of resolved.values()) {
    const key = JSON.stringify([
      tag.config.samplingIntervalMs,
      tag.config.queueSize,
      tag.config.discardOldest,
      tag.config.deadband,
      tag.config.trigger,
    ]);
    const group = groups.get(key);
    if (group === undefined) groups.set(key, [tag]);
    else group.push(tag);
  }
  for (const tags of groups.values()) {
    const first = tags[0]!.config;
    const trigger = {
      status: ua.DataChangeTrigger.Status,
      'status-value': ua.DataChangeTrigger.StatusValue,
      'status-value-timestamp': ua.DataChangeTrigger.StatusValueTimestamp,
    }[first.trigger];
    const needsFilter = first.deadband !== undefined || first.trigger !== 'status-value';
    const parameters = {
      samplingInterval: first.samplingIntervalMs ?? -1,
      queueSize: first.queueSize,
      discardOldest: first.discardOldest,
      filter: needsFilter
        ? new ua.DataChangeFilter({
            trigger,
            deadbandType:
              first.deadband === undefined
                ? ua.DeadbandType.None
                : first.deadband.type === 'percent'
                  ? ua.DeadbandType.Percent
                  : ua.DeadbandType.Absolute,
            deadbandValue: first.deadband?.value ?? 0,
          })
        : null,
    };
    for (const batch of chunks(tags, limits.monitoredItems)) {
      const group = await withDeadline(
        subscription.monitorItems(
          batch.map((t) => ({ nodeId: t.nodeId, attributeId: ua.AttributeIds.Value })),
          parameters,
          ua.TimestampsToReturn.Both,
        ),
        requestTimeoutMs,
        () => new Error(`CreateMonitoredItems got no answer within ${requestTimeoutMs} ms`),
      );
      group.monitoredItems.forEach((item: ClientMonitoredItemBase, i: number) => {
        const tag = batch[i]!;
        const status = item.statusCode as typeof item.statusCode | undefined; // absent from some servers
        if (status !== undefined && !status.isGood()) {
          problems.tag(
            tag.config.name,
            `the server refused to monitor node ${tag.nodeId.toString()}: ${status.name} (${status.description})`,
          );
          resolved.delete(tag.config.name);
        }
      });
      group.on('changed', (_item: ClientMonitoredItemBase, dataValue: DataValue, index: number) => {
        changed(batch[index]!, dataValue);
      });
    }
  }
}
