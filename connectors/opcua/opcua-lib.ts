/**
 * Loads node-opcua on first use. node-opcua takes several seconds to load, so a gateway without OPC UA
 * connectors (and `--check-config`) must not pay for it: every module here imports it as types only and
 * calls `loadOpcua()` at connect time. Node's module cache makes later calls cheap.
 *
 * node-opcua prints its own warnings to stdout, which would break the JSON log stream; loading routes them
 * into edgeferry's logger instead (warnings at debug: the connector logs what matters itself; errors at warn).
 */
import type * as ClientModule from 'node-opcua-client';
import type * as CertificateManagerModule from 'node-opcua-certificate-manager';
import type { Logger } from '../../src/util/logger.js';

export type OpcuaClientLib = typeof ClientModule;
export type OpcuaCertificateManager = CertificateManagerModule.OPCUACertificateManager;

export interface OpcuaLib {
  readonly ua: OpcuaClientLib;
  readonly OPCUACertificateManager: typeof CertificateManagerModule.OPCUACertificateManager;
}

export async function loadOpcua(log: Logger): Promise<OpcuaLib> {
  const [clientModule, certificateModule] = await Promise.all([
    import('node-opcua-client'),
    import('node-opcua-certificate-manager'),
  ]);
  // node-opcua up to 2.182 is CommonJS: the whole `module.exports` is the default export and named exports may be
  // partial. From 2.183 (Node 22.13+) it is ESM: named exports only.
  const ua = ('default' in clientModule ? clientModule.default : clientModule) as OpcuaClientLib;
  const cm = (
    'default' in certificateModule ? certificateModule.default : certificateModule
  ) as typeof CertificateManagerModule;
  routeLogs(ua, log.child({ lib: 'node-opcua' }));
  return { ua, OPCUACertificateManager: cm.OPCUACertificateManager };
}

/** node-opcua calls these with (context, ...args); its context says which file and line spoke. */
type PrintFunc = (context: { filename?: string; callerline?: number }, ...args: unknown[]) => void;

function routeLogs(ua: OpcuaClientLib, log: Logger): void {
  const render = (args: unknown[]): string =>
    args
      .map((a) => (typeof a === 'string' ? a : a instanceof Error ? a.message : String(a)))
      .join(' ')
      // node-opcua colours its output for terminals.
      .replace(/\u001b\[[0-9;]*m/g, '')
      .trim();
  const at = (context: { filename?: string; callerline?: number }): string =>
    `${context.filename ?? '?'}:${context.callerline ?? '?'}`;
  const warn: PrintFunc = (context, ...args) => {
    if (log.isLevelEnabled('debug')) log.debug({ at: at(context) }, render(args));
  };
  const error: PrintFunc = (context, ...args) => log.warn({ at: at(context) }, render(args));
  const debug: PrintFunc = (context, ...args) => {
    if (log.isLevelEnabled('trace')) log.trace({ at: at(context) }, render(args));
  };
  ua.setWarningLogger(warn as Parameters<OpcuaClientLib['setWarningLogger']>[0]);
  ua.setErrorLogger(error as Parameters<OpcuaClientLib['setErrorLogger']>[0]);
  ua.setDebugLogger(debug as Parameters<OpcuaClientLib['setDebugLogger']>[0]);
}
