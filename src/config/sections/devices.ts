/**
 * `connectors:` and `profiles:`: the PLCs the edge node publishes. Each connector type's own schema lives in
 * connectors/<type>/schema.ts; this file joins them and holds the rules across connectors.
 */
import { z } from 'zod';
import { modbusConnectorSchema, modbusProfileSchema } from '../../../connectors/modbus/schema.js';
import { opcuaConnectorSchema, opcuaProfileSchema } from '../../../connectors/opcua/schema.js';
import { s7ConnectorSchema, s7ProfileSchema } from '../../../connectors/s7/schema.js';

/** Every connector type, discriminated by `type`; each connector's own schema lives in connectors/<type>/schema.ts. */
export const connectorSchema = z.discriminatedUnion('type', [
  modbusConnectorSchema,
  opcuaConnectorSchema,
  s7ConnectorSchema,
]);

export const connectorsSchema = z.array(connectorSchema).superRefine((connectors, ctx) => {
  connectors.forEach((connector, i) => {
    // The connector id is the Sparkplug device id: unique within the edge node.
    const first = connectors.findIndex((other) => other.id === connector.id);
    if (first < i)
      ctx.addIssue({
        code: 'custom',
        path: [i, 'id'],
        message: `"${connector.id}" is already the id of connectors.${first}`,
      });
    // Modbus RTU units on one serial port share it, so they must agree on how it is set up.
    if (connector.type === 'modbus' && connector.transport === 'rtu') {
      const bus = connectors.findIndex(
        (other) => other.type === 'modbus' && other.transport === 'rtu' && other.path === connector.path,
      );
      const other = connectors[bus];
      if (bus < i && other.type === 'modbus' && other.transport === 'rtu') {
        const keys = ['baudRate', 'parity', 'dataBits', 'stopBits'] as const;
        const differs = keys.filter((k) => other[k] !== connector[k]);
        if (differs.length > 0) {
          ctx.addIssue({
            code: 'custom',
            path: [i, differs[0]],
            message: `connectors.${bus} uses ${connector.path} with other settings (${differs.join(', ')})`,
          });
        }
      }
    }
  });
});

/**
 * Device profiles by name: what many identical devices share (tag list, poll settings), written once. A connector
 * names one with `profile:` and sets only what differs (id, host, unitId, nodeIdPrefix); src/config/profiles.ts
 * expands it before validation, so every device is checked whole.
 */
export const profilesSchema = z
  .record(
    z.string().regex(/^[^\s.]+$/, 'must be a name without spaces or dots'),
    z.discriminatedUnion('type', [modbusProfileSchema, opcuaProfileSchema, s7ProfileSchema]),
  )
  .superRefine((profiles, ctx) => {
    // Each device checks its tag names again; this names them in a profile that no device uses yet (one the web
    // console just made), with the message a device gives, so that a used profile's problem is reported once.
    for (const [name, profile] of Object.entries(profiles)) {
      const first = new Map<string, number>();
      profile.tags.forEach((tag, i) => {
        const at = first.get(tag.name);
        if (at === undefined) first.set(tag.name, i);
        else
          ctx.addIssue({
            code: 'custom',
            path: [name, 'tags', i, 'name'],
            message: `"${tag.name}" is already the name of tags.${at}`,
          });
      });
    }
  });
