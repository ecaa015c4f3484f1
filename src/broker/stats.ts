/** The broker's counters. */
import type { DropReason } from './session.js';

/** Plain counters, read by `$SYS` and the metrics endpoint on demand. */
export class BrokerStats {
  /** `performance.now()` at start, for the uptime. */
  readonly startedAtMs = performance.now();
  clientsConnected = 0;
  clientsMaximum = 0;
  connectionsTotal = 0;
  readonly messagesReceived = [0, 0, 0];
  readonly messagesSent = [0, 0, 0];
  /** In-process publishes (the edge node's, bridges' inbound messages); `$SYS` is not counted, as Mosquitto does not. */
  messagesPublishedLocally = 0;
  bytesReceived = 0;
  bytesSent = 0;
  readonly dropped: Record<DropReason, number> = {
    queue_full: 0,
    expired: 0,
    too_large: 0,
    slow_client: 0,
    not_authorized: 0,
    session_taken_over: 0,
    quota_exceeded: 0,
  };
  authFailures = 0;
  readonly aclDenied = { publish: 0, subscribe: 0 };
  /** Connections closed by the broker, by MQTT 5 reason name. */
  readonly disconnects: Record<string, number> = {};
}
