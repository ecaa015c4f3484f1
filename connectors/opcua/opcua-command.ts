/**
 * `edgeferry opcua browse|trust …`: argument parsing and output for the OPC UA subcommands. `src/cli/opcua.ts`
 * hands over `process.argv.slice(3)`, the configured data directory and OPC UA connectors; the work is done by
 * browse.ts and trust.ts.
 *
 *   edgeferry opcua browse <endpoint> [--node ID] [--depth N] [--tags] [--json] [security options]
 *   edgeferry opcua browse --connector ID …      endpoint, security and user from that connector's config
 *   edgeferry opcua trust <endpoint> [--thumbprint HEX]
 *   edgeferry opcua trust --list
 */
import { readFileSync } from 'node:fs';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { asError } from '../../src/util/errors.js';
import { silentLogger, type Logger } from '../../src/util/logger.js';
import { browse, formatBrowseTable, renderTagList } from './browse.js';
import {
  securityModes,
  securityPolicies,
  type OpcuaConnectorConfig,
  type OpcuaSecurityMode,
  type OpcuaSecurityPolicy,
  type OpcuaUserConfig,
} from './schema.js';
import { formatTrustResults, listCertificates, opcuaPkiDir, trustServer } from './trust.js';

export const opcuaUsage = `Usage:
  edgeferry opcua browse <endpoint> [options]
      List the variables below a node: NodeId, browse path, data type, Sparkplug datatype, access.
        --node ID              start node (default i=85, the Objects folder)
        --depth N              levels below the start node (default 6)
        --tags                 print a ready-to-paste tags: block for the connector config
        --json                 print the rows as JSON
        --include-properties   also list properties (EURange, EngineeringUnits, ...)
        --include-standard     also descend into namespace 0 (the Server object)
        --security-mode MODE   None | Sign | SignAndEncrypt (default None)
        --security-policy P    Basic256Sha256 (default when secured) | Aes128_Sha256_RsaOaep | Aes256_Sha256_RsaPss
        --user NAME            username (the password is read from --password-file or stdin)
        --password-file FILE
        --connector ID         take endpoint, security and user from connector ID of the config file
  edgeferry opcua trust <endpoint> [--thumbprint HEX]
      Fetch the server's certificate and add it to edgeferry's trust list (--thumbprint: only if it matches).
  edgeferry opcua trust --list
      List trusted and rejected server certificates.
  Both take --pki DIR (default: <storage.path>/opcua/pki of the config file).
`;

export interface OpcuaCommandContext {
  /** The data directory of the config (`storage.path`): its PKI folder is the default; `--pki` overrides it. */
  readonly dataDir: string;
  /** The OPC UA connectors of the config file, for `--connector`. */
  readonly connectors?: readonly OpcuaConnectorConfig[];
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  /** Read when a password is needed and no --password-file is given. */
  readonly readPassword?: () => Promise<string>;
  readonly log?: Logger;
}

/** Runs the subcommand; resolves with the exit code (0 ok, 1 runtime error, 2 usage). */
export async function runOpcuaCommand(argv: readonly string[], context: OpcuaCommandContext): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === 'browse') return await browseCommand(rest, context);
    if (command === 'trust') return await trustCommand(rest, context);
    context.stderr(
      argv.length === 0 || command === '--help' || command === '-h'
        ? opcuaUsage
        : `edgeferry opcua: unknown command "${command}"\n${opcuaUsage}`,
    );
    return command === '--help' || command === '-h' ? 0 : 2;
  } catch (err) {
    if (err instanceof UsageError) {
      context.stderr(`edgeferry opcua ${command}: ${err.message}\nTry 'edgeferry opcua --help'.\n`);
      return 2;
    }
    context.stderr(`edgeferry opcua ${command}: ${asError(err).message}\n`);
    return 1;
  }
}

class UsageError extends Error {}

function parse<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  try {
    return parseArgs(config);
  } catch (err) {
    throw new UsageError(asError(err).message);
  }
}

async function browseCommand(argv: readonly string[], context: OpcuaCommandContext): Promise<number> {
  const { values, positionals } = parse({
    args: [...argv],
    allowPositionals: true,
    options: {
      node: { type: 'string' },
      depth: { type: 'string' },
      tags: { type: 'boolean' },
      json: { type: 'boolean' },
      'include-properties': { type: 'boolean' },
      'include-standard': { type: 'boolean' },
      'security-mode': { type: 'string' },
      'security-policy': { type: 'string' },
      user: { type: 'string' },
      'password-file': { type: 'string' },
      connector: { type: 'string' },
      pki: { type: 'string' },
    },
  });
  const fromConfig = values.connector === undefined ? undefined : findConnector(String(values.connector), context);
  const endpoint = (positionals[0] as string | undefined) ?? fromConfig?.endpoint;
  if (endpoint === undefined || positionals.length > 1)
    throw new UsageError('give one endpoint (opc.tcp://host:port/path) or --connector ID');
  if (!endpoint.startsWith('opc.tcp://')) throw new UsageError(`"${endpoint}" is not an opc.tcp:// endpoint`);
  const depth = values.depth === undefined ? undefined : Number(values.depth);
  if (depth !== undefined && (!Number.isInteger(depth) || depth < 1))
    throw new UsageError('--depth must be a whole number >= 1');
  const securityMode =
    oneOf('--security-mode', values['security-mode'], securityModes) ?? fromConfig?.securityMode ?? 'None';
  // The connector's policy only goes with the connector's mode.
  const securityPolicy =
    oneOf('--security-policy', values['security-policy'], securityPolicies) ??
    (values['security-mode'] === undefined ? fromConfig?.securityPolicy : undefined);
  let user: OpcuaUserConfig = fromConfig?.user ?? { type: 'anonymous' };
  if (values.user !== undefined) {
    const password =
      values['password-file'] !== undefined
        ? readFileSync(String(values['password-file']), 'utf8').replace(/\r?\n$/, '')
        : await (context.readPassword ?? (() => Promise.reject(new UsageError('--user needs --password-file'))))();
    user = { type: 'username', username: String(values.user), password };
  }
  const rows = await browse(endpoint, {
    pkiDir: pkiDirOf(values.pki, fromConfig, context),
    ...(values.node !== undefined ? { node: String(values.node) } : {}),
    ...(depth !== undefined ? { depth } : {}),
    securityMode: securityMode as OpcuaSecurityMode,
    ...(securityPolicy !== undefined ? { securityPolicy: securityPolicy as OpcuaSecurityPolicy } : {}),
    user,
    includeProperties: values['include-properties'] === true,
    includeStandardNodes: values['include-standard'] === true,
    log: context.log ?? silentLogger,
  });
  if (values.json) context.stdout(`${JSON.stringify(rows, null, 2)}\n`);
  else if (values.tags) context.stdout(`${renderTagList(rows)}\n`);
  else context.stdout(`${formatBrowseTable(rows)}\n${rows.length} variables\n`);
  return 0;
}

async function trustCommand(argv: readonly string[], context: OpcuaCommandContext): Promise<number> {
  const { values, positionals } = parse({
    args: [...argv],
    allowPositionals: true,
    options: {
      thumbprint: { type: 'string' },
      list: { type: 'boolean' },
      connector: { type: 'string' },
      pki: { type: 'string' },
    },
  });
  const fromConfig = values.connector === undefined ? undefined : findConnector(String(values.connector), context);
  const pkiDir = pkiDirOf(values.pki, fromConfig, context);
  if (values.list) {
    const { trusted, rejected } = listCertificates(pkiDir);
    const line = (c: { thumbprint: string; subject: string; notAfter: string; file: string }) =>
      `  ${c.thumbprint}  ${c.subject}  (valid to ${c.notAfter})\n    ${c.file}`;
    context.stdout(
      `trusted (${trusted.length}):\n${trusted.map(line).join('\n')}\nrejected (${rejected.length}):\n${rejected.map(line).join('\n')}\n`,
    );
    return 0;
  }
  const endpoint = (positionals[0] as string | undefined) ?? fromConfig?.endpoint;
  if (endpoint === undefined || positionals.length > 1)
    throw new UsageError('give one endpoint (opc.tcp://host:port/path), --connector ID or --list');
  const results = await trustServer(endpoint, {
    pkiDir,
    ...(values.thumbprint !== undefined ? { expectedThumbprint: String(values.thumbprint) } : {}),
    log: context.log ?? silentLogger,
  });
  context.stdout(`${formatTrustResults(endpoint, results)}\n`);
  if (values.thumbprint === undefined) {
    context.stdout(
      'Compare the thumbprint with the one the server shows; `edgeferry opcua trust --list` lists the trust list.\n',
    );
  }
  return 0;
}

/** `--pki`, else the connector's own `pkiDir`, else the one the gateway gives its OPC UA connectors. */
function pkiDirOf(option: unknown, fromConfig: OpcuaConnectorConfig | undefined, context: OpcuaCommandContext): string {
  return option !== undefined ? String(option) : (fromConfig?.pkiDir ?? opcuaPkiDir(context.dataDir));
}

function findConnector(id: string, context: OpcuaCommandContext): OpcuaConnectorConfig {
  const found = context.connectors?.find((c) => c.id === id);
  if (found === undefined) {
    const known = (context.connectors ?? []).map((c) => c.id);
    throw new UsageError(
      `no OPC UA connector "${id}" in the config file${known.length > 0 ? ` (there are: ${known.join(', ')})` : ''}`,
    );
  }
  return found;
}

function oneOf(flag: string, value: unknown, allowed: readonly string[]): string | undefined {
  if (value === undefined) return undefined;
  if (!allowed.includes(String(value))) throw new UsageError(`${flag} must be one of ${allowed.join(', ')}`);
  return String(value);
}
