/**
 * The configuration schema: the one place that names config keys, their defaults and their limits. Types
 * are inferred from it. `load.ts` validates the YAML file against it; `json-schema.ts` publishes it for editors.
 * Each section's keys live in `sections/` (one file per section or group of sections); this file joins them and
 * holds the rules across sections. Cross-field rules sit on the smallest object they concern, so that a problem
 * in one bridge does not hide a problem in the listeners (zod skips an object's refinements while its own fields
 * have issues).
 */
import { hostname } from 'node:os';
import { z } from 'zod';
import { missingUplinkFilters, sparkplugSchema } from '../sparkplug/schema.js';
import { isLoopback } from './sections/common.js';
import { tlsSchema } from './sections/tls.js';
import { listenerSchema, listenersSchema } from './sections/listeners.js';
import { authSchema, brokerSchema, logSchema, storageSchema } from './sections/broker.js';
import { consoleProblems, consoleSchema, metricsAuthSchema, metricsSchema } from './sections/metrics.js';
import {
  bridgesSchema,
  bridgeTopicSchema,
  gatewaySchema,
  uplinkSessionProblems,
  withSession,
} from './sections/bridges.js';
import { connectorSchema, connectorsSchema, profilesSchema } from './sections/devices.js';

export { DEFAULT_TLS_CIPHERS } from './sections/tls.js';

export const configSchema = z
  .strictObject({
    listeners: listenersSchema.prefault([{ port: 1883 }]),
    broker: brokerSchema.prefault({}),
    storage: storageSchema.prefault({}),
    log: logSchema.prefault({}),
    auth: authSchema.prefault({}),
    /** Absent: no metrics endpoint. */
    metrics: metricsSchema.optional(),
    /** Absent: no web console. Served by the metrics listener. */
    console: consoleSchema.optional(),
    gateway: gatewaySchema.prefault({}),
    bridges: bridgesSchema.default([]),
    /** The gateway as a Sparkplug B edge node (optional; required by connectors). */
    sparkplug: sparkplugSchema.optional(),
    profiles: profilesSchema.default({}),
    connectors: connectorsSchema.default([]),
  })
  .superRefine((config, ctx) => {
    // Cross-section references: checked once each section is valid on its own.
    config.listeners.forEach((listener, i) => {
      // Secure by default: a port others can reach needs credentials, or an explicit allowAnonymous: true.
      if (!(listener.allowAnonymous ?? isLoopback(listener.host)) && config.auth.passwordFile === undefined) {
        ctx.addIssue({
          code: 'custom',
          path: ['listeners', i, 'allowAnonymous'],
          message: `${listener.host} is not a loopback address: set auth.passwordFile, or allowAnonymous: true to accept anyone`,
        });
      }
    });
    if (config.metrics?.auth?.users !== undefined && config.auth.passwordFile === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['metrics', 'auth', 'users'],
        message: 'basic auth checks passwords in auth.passwordFile: set it',
      });
    }
    consoleProblems(config, ctx);
    const uplink = config.sparkplug?.uplink;
    const uplinkIndex = config.bridges.findIndex((bridge) => bridge.name === uplink);
    if (uplink !== undefined && uplinkIndex < 0) {
      ctx.addIssue({ code: 'custom', path: ['sparkplug', 'uplink'], message: `no bridge is named "${uplink}"` });
    }
    if (uplinkIndex >= 0) uplinkSessionProblems(config.bridges[uplinkIndex].remote, uplinkIndex, ctx);
    if (config.sparkplug !== undefined && uplinkIndex >= 0) {
      const ids = config.connectors.map((c) => c.id);
      for (const { key, filter } of missingUplinkFilters(config.sparkplug, config.bridges[uplinkIndex].topics, ids)) {
        ctx.addIssue({
          code: 'custom',
          path: ['sparkplug', key],
          message: `the uplink bridge "${uplink}" has no in filter for ${filter}: add { filter: "${filter}", direction: in } to bridges[${uplinkIndex}].topics`,
        });
      }
    }
    if (config.sparkplug?.plain !== undefined) {
      // Each tag name becomes part of a topic to publish.
      config.connectors.forEach((connector, i) =>
        connector.tags.forEach((tag, j) => {
          if (/[+#\0]/.test(tag.name)) {
            ctx.addIssue({
              code: 'custom',
              path: ['connectors', i, 'tags', j, 'name'],
              message: 'sparkplug.plain makes it part of a topic: no +, # (or NUL)',
            });
          }
        }),
      );
    }
    if (config.sparkplug?.plain?.writes && config.auth.aclFile === undefined) {
      // Without an ACL every local client could write to the PLC.
      ctx.addIssue({
        code: 'custom',
        path: ['sparkplug', 'plain', 'writes'],
        message: 'writes are authorized by the ACL: set auth.aclFile',
      });
    }
    if (config.connectors.length > 0 && config.sparkplug === undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['connectors'],
        message: 'connectors publish through the Sparkplug edge node: add a sparkplug section',
      });
    }
  })
  .transform((config) => {
    const gatewayId = config.gateway.id ?? hostname();
    return {
      ...config,
      gateway: { ...config.gateway, id: gatewayId },
      // Unique per gateway by default: a fleet of gateways with the same bridge name must not take each other's
      // session on the central broker (docs/architecture.md#fleet).
      bridges: config.bridges.map((bridge) => ({
        ...bridge,
        remote: withSession(
          { ...bridge.remote, clientId: bridge.remote.clientId ?? `${gatewayId}-${bridge.name}` },
          bridge.name === config.sparkplug?.uplink,
        ),
        status: { ...bridge.status, topic: bridge.status.topic ?? `edgeferry/${gatewayId}/status` },
      })),
      // Like Mosquitto 2: anonymous clients are welcome only where nobody else can reach the port, and not at all
      // once a password file is set, unless a listener says otherwise.
      listeners: config.listeners.map((listener) => ({
        ...listener,
        allowAnonymous:
          listener.allowAnonymous ?? (isLoopback(listener.host) && config.auth.passwordFile === undefined),
      })),
    };
  });

export type Config = z.output<typeof configSchema>;
export type ListenerConfig = z.output<typeof listenerSchema>;
export type TlsConfig = z.output<typeof tlsSchema>;
export type BrokerConfig = z.output<typeof brokerSchema>;
export type StorageConfig = z.output<typeof storageSchema>;
export type LogConfig = z.output<typeof logSchema>;
export type AuthConfig = z.output<typeof authSchema>;
export type MetricsConfig = z.output<typeof metricsSchema>;
export type ConsoleConfig = z.output<typeof consoleSchema>;
export type MetricsAuthConfig = z.output<typeof metricsAuthSchema>;
export type BridgeConfig = Config['bridges'][number];
export type BridgeTopicConfig = z.output<typeof bridgeTopicSchema>;
export type ConnectorConfigEntry = z.output<typeof connectorSchema>;
