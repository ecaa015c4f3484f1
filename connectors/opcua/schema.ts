/**
 * Config schema of an OPC UA connector (`type: opcua`). Pure zod, no node-opcua: `config/` imports it to
 * validate the file, and `--check-config` must not pay for loading an OPC UA stack.
 *
 *   - id: press-2
 *     type: opcua
 *     endpoint: opc.tcp://10.0.0.30:4840
 *     securityMode: SignAndEncrypt            # None | Sign | SignAndEncrypt
 *     securityPolicy: Basic256Sha256          # default when secured
 *     user: { type: username, username: edge, passwordFile: /etc/edgeferry/opcua.pw }
 *     subscription: { publishingIntervalMs: 500 }
 *     tags:
 *       - { name: Press/Temperature, nodeId: "ns=3;s=Line4.Press.Temperature", datatype: Double, samplingIntervalMs: 250 }
 *       - { name: Press/Setpoint, browsePath: "/Objects/3:Line4/3:Press/3:Setpoint", datatype: Double, writable: true }
 */
import { z } from 'zod';
import { checkTagProperties, tagPropertyKeys } from '../tag-properties.js';

const positive = z.number().int().positive();
const int = (min: number, max: number) => z.number().int().min(min).max(max);

/** Sparkplug datatypes a tag may declare (the `TagDatatype` union of connectors/contract.ts). */
export const tagDatatypes = [
  'Int8',
  'Int16',
  'Int32',
  'Int64',
  'UInt8',
  'UInt16',
  'UInt32',
  'UInt64',
  'Float',
  'Double',
  'Boolean',
  'String',
  'DateTime',
  'Text',
  'Bytes',
  'Int8Array',
  'Int16Array',
  'Int32Array',
  'Int64Array',
  'UInt8Array',
  'UInt16Array',
  'UInt32Array',
  'UInt64Array',
  'FloatArray',
  'DoubleArray',
  'BooleanArray',
  'StringArray',
  'DateTimeArray',
] as const;

/** Integers, Float and Double, and arrays of them: what a deadband and a range apply to. */
export function isNumericDatatype(datatype: string): boolean {
  return /^(U?Int(8|16|32|64)|Float|Double)(Array)?$/.test(datatype);
}

export const securityModes = ['None', 'Sign', 'SignAndEncrypt'] as const;
export const securityPolicies = [
  'None',
  'Basic256Sha256',
  'Aes128_Sha256_RsaOaep',
  'Aes256_Sha256_RsaPss',
  'Basic128Rsa15',
  'Basic256',
] as const;
/** Deprecated by OPC UA 1.04 (SHA-1, PKCS#1 v1.5 padding): only with `allowDeprecatedPolicies: true`. */
export const deprecatedPolicies: readonly string[] = ['Basic128Rsa15', 'Basic256'];

/**
 * A NodeId in the OPC UA string form: optional `ns=<index>;` or `nsu=<namespace uri>;`, then `i=<number>`,
 * `s=<string>`, `g=<guid>` or `b=<base64>`.
 */
export const nodeIdPattern =
  /^(?:ns=\d+;|nsu=[^;]+;)?(?:i=\d+|s=.+|g=[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|b=[A-Za-z0-9+/]+={0,2})$/s;

/** A browse path from the Root folder: `/Objects/3:Line4/3:Press/3:Temperature` (`<ns>:` for other namespaces). */
export const browsePathPattern = /^(?:\/(?:\d+:)?[^/]+)+$/;

const userSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('anonymous') }),
  z
    .strictObject({
      type: z.literal('username'),
      username: z.string().min(1),
      password: z.string().optional(),
      /** A file holding the password (trailing newline ignored), read at each connect. */
      passwordFile: z.string().min(1).optional(),
    })
    .superRefine((user, ctx) => {
      if ((user.password === undefined) === (user.passwordFile === undefined)) {
        ctx.addIssue({ code: 'custom', path: ['password'], message: 'set exactly one of password or passwordFile' });
      }
    }),
  z.strictObject({
    type: z.literal('certificate'),
    /** X.509 user certificate (PEM or DER) and its private key (PEM). */
    certFile: z.string().min(1),
    keyFile: z.string().min(1),
  }),
]);

const deadbandSchema = z.strictObject({
  /** `absolute`: in engineering units; `percent`: of the node's EURange (the server must have one). */
  type: z.enum(['absolute', 'percent']).default('absolute'),
  value: z.number().nonnegative(),
});

const tagSchema = z
  .strictObject({
    /** The Sparkplug metric name, unique within the connector. */
    name: z.string().min(1),
    /** The whole NodeId, or its end after the connector's `nodeIdPrefix`. */
    nodeId: z.string().min(1).optional(),
    browsePath: z
      .string()
      .regex(browsePathPattern, 'must be a path from the Root folder like /Objects/3:Line4/3:Press/3:Temperature')
      .optional(),
    datatype: z.enum(tagDatatypes),
    /** Server sampling rate; unset: the subscription's publishing interval. 0: the fastest the server offers. */
    samplingIntervalMs: z.number().nonnegative().optional(),
    /** Values the server queues between publishes; >1 keeps fast changes that a publish interval would merge. */
    queueSize: int(1, 10_000).default(1),
    discardOldest: z.boolean().default(true),
    /** Server-side data-change filter (no filter: every change is reported). */
    deadband: deadbandSchema.optional(),
    /** What counts as a change: status only, status or value (default), or also the source timestamp. */
    trigger: z.enum(['status', 'status-value', 'status-value-timestamp']).default('status-value'),
    writable: z.boolean().default(false),
    /** engUnit, engLow, engHigh, description: published in the DBIRTH, over what the server's node says. */
    ...tagPropertyKeys,
  })
  .superRefine((tag, ctx) => {
    if ((tag.nodeId === undefined) === (tag.browsePath === undefined)) {
      ctx.addIssue({ code: 'custom', path: ['nodeId'], message: 'set exactly one of nodeId or browsePath' });
    }
    const numeric = isNumericDatatype(tag.datatype);
    checkTagProperties(tag, numeric, (key, message) => ctx.addIssue({ code: 'custom', path: [key], message }));
    if (tag.deadband !== undefined && !numeric) {
      ctx.addIssue({
        code: 'custom',
        path: ['deadband'],
        message: `a deadband needs a numeric datatype, not ${tag.datatype}`,
      });
    }
    if (tag.deadband?.type === 'percent' && tag.deadband.value > 100) {
      ctx.addIssue({ code: 'custom', path: ['deadband', 'value'], message: 'a percent deadband is at most 100' });
    }
  });

const subscriptionSchema = z
  .strictObject({
    publishingIntervalMs: positive.default(1000),
    /** Publishing intervals without data before the server sends a keep-alive. */
    keepAliveCount: int(1, 65_535).default(10),
    /** Publishing intervals without a client request before the server drops the subscription (≥ 3 × keepAliveCount). */
    lifetimeCount: int(3, 4_294_967_295).default(60),
    /** 0: no limit. */
    maxNotificationsPerPublish: int(0, 4_294_967_295).default(0),
    priority: int(0, 255).default(0),
  })
  .superRefine((s, ctx) => {
    if (s.lifetimeCount < 3 * s.keepAliveCount) {
      ctx.addIssue({
        code: 'custom',
        path: ['lifetimeCount'],
        message: `must be >= 3 × keepAliveCount (${3 * s.keepAliveCount}) [OPC UA Part 4 §5.13.2]`,
      });
    }
  });

const connectorShape = {
  /** The Sparkplug device id. */
  id: z
    .string()
    .min(1)
    .regex(/^[^/+#]+$/, 'must not contain /, + or #'),
  type: z.literal('opcua'),
  /** Set by the profile expansion (src/config/profiles.ts): the device profile whose tags this device has. */
  profile: z.string().optional(),
  endpoint: z.string().regex(/^opc\.tcp:\/\/[^/:]+(:\d+)?(\/.*)?$/, 'must be an opc.tcp://host[:port][/path] URL'),
  securityMode: z.enum(securityModes).default('None'),
  /** Default: None with securityMode None, Basic256Sha256 otherwise. */
  securityPolicy: z.enum(securityPolicies).optional(),
  allowDeprecatedPolicies: z.boolean().default(false),
  user: userSchema.default({ type: 'anonymous' }),
  /**
   * PKI folder (own certificate, trusted/, rejected/, issuers/). Default: `<storage.path>/opcua/pki`,
   * filled in by the gateway; all OPC UA connectors of one gateway share it (one application certificate).
   */
  pkiDir: z.string().min(1).optional(),
  connectTimeoutMs: positive.default(10_000),
  requestTimeoutMs: positive.default(10_000),
  sessionTimeoutMs: positive.default(60_000),
  subscription: subscriptionSchema.prefault({}),
  /**
   * Put before every tag's `nodeId`: one tag list for machines that differ only in where their nodes are
   * (`ns=3;s=Press1.` + `Temperature`), typically in a device profile.
   */
  nodeIdPrefix: z.string().min(1).optional(),
  tags: z.array(tagSchema).min(1),
};

/**
 * A device profile of OPC UA connectors (`profiles:` in the config): any connector key but `id`, tags required;
 * each device that names it gets these keys unless it sets them itself (src/config/profiles.ts).
 */
export const opcuaProfileSchema = z
  .strictObject(connectorShape)
  .omit({ id: true, profile: true })
  .partial()
  .required({ type: true, tags: true });

export const opcuaConnectorSchema = z
  .strictObject(connectorShape)
  .superRefine((c, ctx) => {
    const policy = c.securityPolicy;
    if (c.securityMode === 'None' && policy !== undefined && policy !== 'None') {
      ctx.addIssue({
        code: 'custom',
        path: ['securityPolicy'],
        message: `securityMode None takes securityPolicy None, not ${policy}`,
      });
    }
    if (c.securityMode !== 'None' && policy === 'None') {
      ctx.addIssue({
        code: 'custom',
        path: ['securityPolicy'],
        message: `securityMode ${c.securityMode} needs a policy other than None`,
      });
    }
    if (policy !== undefined && deprecatedPolicies.includes(policy) && !c.allowDeprecatedPolicies) {
      ctx.addIssue({
        code: 'custom',
        path: ['securityPolicy'],
        message: `${policy} is deprecated (SHA-1); set allowDeprecatedPolicies: true to use it anyway`,
      });
    }
    if (c.user.type === 'certificate' && c.securityMode === 'None') {
      ctx.addIssue({
        code: 'custom',
        path: ['user'],
        message: 'an X.509 user identity needs securityMode Sign or SignAndEncrypt',
      });
    }
    const seen = new Map<string, number>();
    c.tags.forEach((tag, i) => {
      if (tag.nodeId !== undefined && !nodeIdPattern.test((c.nodeIdPrefix ?? '') + tag.nodeId)) {
        const what = c.nodeIdPrefix === undefined ? 'must be' : `with nodeIdPrefix "${c.nodeIdPrefix}" must make`;
        ctx.addIssue({
          code: 'custom',
          path: ['tags', i, 'nodeId'],
          message: `${what} a NodeId like ns=3;s=Line4.Press.Temperature, ns=2;i=1001, ns=2;g=<guid> or nsu=<uri>;s=…`,
        });
      }
      const first = seen.get(tag.name);
      if (first !== undefined)
        ctx.addIssue({
          code: 'custom',
          path: ['tags', i, 'name'],
          message: `"${tag.name}" is already the name of tags.${first}`,
        });
      else seen.set(tag.name, i);
    });
  })
  .transform(({ nodeIdPrefix, ...c }) => ({
    ...c,
    securityPolicy: c.securityPolicy ?? (c.securityMode === 'None' ? 'None' : 'Basic256Sha256'),
    tags:
      nodeIdPrefix === undefined
        ? c.tags
        : c.tags.map((tag) => (tag.nodeId === undefined ? tag : { ...tag, nodeId: nodeIdPrefix + tag.nodeId })),
  }));

export type OpcuaConnectorConfig = z.output<typeof opcuaConnectorSchema>;
export type OpcuaConnectorInput = z.input<typeof opcuaConnectorSchema>;
export type OpcuaTagConfig = z.output<typeof tagSchema>;
export type OpcuaUserConfig = z.output<typeof userSchema>;
export type OpcuaSecurityMode = (typeof securityModes)[number];
export type OpcuaSecurityPolicy = (typeof securityPolicies)[number];
