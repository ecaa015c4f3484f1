/**
 * OPC UA for the web console's commissioning (docs/console.md#opc-ua-browse): one node's children with their values
 * and units (`browseChildren`, the code behind `edgeferry opcua browse`), and trusting a server's certificate by the
 * thumbprint the page showed (`trustServer`, the `opcua trust` path). A device of the configuration file is
 * browsed with its own endpoint, security and user, so its password never travels through the page.
 */
import { z } from 'zod';
import { parseRequest, RequestError } from '../contract.js';
import { browseChildren, type ChildNode } from './browse.js';
import { UntrustedServerError } from './open-session.js';
import { securityModes, securityPolicies, type OpcuaConnectorConfig } from './schema.js';
import { opcuaPkiDir, trustServer, type TrustResult } from './trust.js';

const endpoint = z.string().regex(/^opc\.tcp:\/\/[^/:]+(:\d+)?(\/.*)?$/, 'must be an opc.tcp://host[:port][/path] URL');

const browseRequest = z.strictObject({
  /** A configured OPC UA device: its endpoint, security and user. */
  device: z.string().min(1).optional(),
  endpoint: endpoint.optional(),
  securityMode: z.enum(securityModes).optional(),
  securityPolicy: z.enum(securityPolicies).optional(),
  /** Default the Objects folder. */
  node: z.string().min(1).max(4096).optional(),
});

const trustRequest = z.strictObject({
  device: z.string().min(1).optional(),
  endpoint: endpoint.optional(),
  /** As the page showed it: only this certificate is trusted. */
  thumbprint: z.string().regex(/^[0-9a-fA-F:\s]{40,59}$/, 'the SHA-1 thumbprint in hex'),
});

export interface OpcuaToolsContext {
  readonly dataDir: string;
  /** The OPC UA devices of the configuration file now. */
  readonly devices: () => readonly OpcuaConnectorConfig[];
}

export type BrowseAnswer =
  | {
      readonly untrusted?: undefined;
      readonly nodeId: string;
      readonly browsePath: string;
      readonly children: ChildNode[];
    }
  | { readonly untrusted: { readonly thumbprint: string; readonly subject: string; readonly endpoint: string } };

/** The children of a node; an untrusted server certificate is an answer (shown with its thumbprint), not a failure. */
export async function browseForConsole(input: unknown, context: OpcuaToolsContext): Promise<BrowseAnswer> {
  const request = parseRequest(browseRequest, input);
  const device = deviceOf(request.device, context);
  const target = request.endpoint ?? device?.endpoint;
  if (target === undefined) throw new RequestError('endpoint', 'give an endpoint or a configured device');
  const securityMode = request.securityMode ?? device?.securityMode ?? 'None';
  try {
    return await browseChildren(target, {
      pkiDir: device?.pkiDir ?? opcuaPkiDir(context.dataDir),
      securityMode,
      ...(request.securityPolicy !== undefined || device?.securityPolicy !== undefined
        ? { securityPolicy: request.securityPolicy ?? device?.securityPolicy }
        : {}),
      user: device?.endpoint === target ? device.user : { type: 'anonymous' },
      ...(request.node !== undefined ? { node: request.node } : {}),
      connectTimeoutMs: 5000,
      requestTimeoutMs: 5000,
    });
  } catch (err) {
    if (err instanceof UntrustedServerError && err.status === 'BadCertificateUntrusted')
      return { untrusted: { thumbprint: err.thumbprint, subject: err.subject, endpoint: target } };
    throw err;
  }
}

export async function trustForConsole(input: unknown, context: OpcuaToolsContext): Promise<{ trusted: TrustResult[] }> {
  const request = parseRequest(trustRequest, input);
  const device = deviceOf(request.device, context);
  const target = request.endpoint ?? device?.endpoint;
  if (target === undefined) throw new RequestError('endpoint', 'give an endpoint or a configured device');
  const trusted = await trustServer(target, {
    pkiDir: device?.pkiDir ?? opcuaPkiDir(context.dataDir),
    expectedThumbprint: request.thumbprint,
    connectTimeoutMs: 5000,
    requestTimeoutMs: 5000,
  });
  return { trusted };
}

function deviceOf(id: string | undefined, context: OpcuaToolsContext): OpcuaConnectorConfig | undefined {
  if (id === undefined) return undefined;
  const found = context.devices().find((c) => c.id === id);
  if (found === undefined) throw new RequestError('device', `no OPC UA device "${id}" in the configuration file`);
  return found;
}
