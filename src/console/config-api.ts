/**
 * The console's configuration endpoints (docs/console.md#configuration): everyone logged in reads the file (secrets
 * masked); engineers preview, apply and undo changes, which are written to the file and applied by reload, each an
 * audit line `console config change` with the user and a summary of the diff. The file handling itself is
 * `config/config-editor.ts`, handed over by the composition root.
 */
import type { Logger } from '../util/logger.js';
import type { Sender } from '../sparkplug/commands.js';
import { HttpError } from './http.js';

export interface EditProblem {
  readonly path: string;
  readonly message: string;
  readonly location?: string;
}

/** A refusal with its HTTP status and, for a bad field, its problems by key path (the page shows them beside it). */
export interface Refused {
  readonly ok: false;
  readonly status: number;
  readonly error: string;
  readonly problems?: readonly EditProblem[];
  readonly diff?: string;
}

export type Outcome<T extends object> = ({ readonly ok: true } & T) | Refused;

export type EditOutcome = Outcome<
  { readonly etag: string; readonly diff: string; readonly reload?: unknown } & ChangeFacts
>;

interface ChangeFacts {
  readonly added: number;
  readonly removed: number;
  readonly paths: readonly string[];
}

/** What the console uses of the configuration editor (config/config-editor.ts). */
export interface ConfigEditing {
  read(): { file: string; etag: string; text: string; config: unknown; undoable: number };
  /** The config file's JSON Schema (config/json-schema.ts): the forms take their fields and choices from it. */
  schema(): object;
  preview(etag: string, ops: unknown): Promise<EditOutcome>;
  apply(etag: string, ops: unknown, user: string): Promise<EditOutcome>;
  undo(etag: string): Promise<EditOutcome>;
  importTags(etag: string, input: unknown, user: string): Promise<EditOutcome>;
  exportTags(device: unknown): Outcome<{ csv: string }>;
}

/** The PLC tools of commissioning (`src/commissioning.ts`): Modbus test reads and unit scans, OPC UA browse and trust. */
export interface PlcTools {
  modbusRead(input: unknown): Promise<Outcome<object>>;
  modbusScan(input: unknown): Promise<Outcome<object>>;
  opcuaBrowse(input: unknown): Promise<Outcome<object>>;
  opcuaTrust(input: unknown): Promise<Outcome<object>>;
}

export type ConfigAction = (body: Record<string, unknown>, who: Sender) => Promise<Record<string, unknown>>;

/** The actions under /api/config/, by name; each needs an engineer and the login's CSRF token. */
export function configActions(
  editing: ConfigEditing | undefined,
  tools: PlcTools,
  audit: Logger,
): Map<string, ConfigAction> {
  const changed = (action: string, outcome: EditOutcome, who: Sender): Record<string, unknown> => {
    const done = settled(outcome);
    audit.info(
      {
        user: who.user,
        remote: who.remote,
        action,
        added: done.added,
        removed: done.removed,
        paths: done.paths,
        etag: done.etag,
      },
      'console config change',
    );
    return { done: true, ...done };
  };
  /** A read of a PLC is an audit line too: it touches the plant's network. */
  const probe =
    (action: string, run: (input: unknown) => Promise<Outcome<object>>): ConfigAction =>
    async (body, who) => {
      audit.info({ user: who.user, remote: who.remote, action, target: probeTarget(body) }, 'console commissioning');
      return { ...settled(await run(body)) };
    };
  const probes: [string, ConfigAction][] = [
    ['modbus-read', probe('modbus-read', (input) => tools.modbusRead(input))],
    ['modbus-scan', probe('modbus-scan', (input) => tools.modbusScan(input))],
    ['opcua-browse', probe('opcua-browse', (input) => tools.opcuaBrowse(input))],
    ['opcua-trust', probe('opcua-trust', (input) => tools.opcuaTrust(input))],
  ];
  if (editing === undefined) return new Map(probes);
  return new Map<string, ConfigAction>([
    ...probes,
    ['preview', async (body) => ({ ...settled(await editing.preview(etagOf(body), body.ops)) })],
    ['apply', async (body, who) => changed('apply', await editing.apply(etagOf(body), body.ops, who.user ?? ''), who)],
    ['undo', async (body, who) => changed('undo', await editing.undo(etagOf(body)), who)],
    [
      'tags-import',
      async (body, who) => {
        const outcome = await editing.importTags(etagOf(body), body, who.user ?? '');
        return body.apply === true ? changed('tags-import', outcome, who) : { ...settled(outcome) };
      },
    ],
    ['tags-export', async (body) => ({ ...settled(editing.exportTags(body.device)) })],
  ]);
}

/** What a probe addresses, for its audit line (never a password: the OPC UA user is left out). */
function probeTarget(body: Record<string, unknown>): Record<string, unknown> {
  const pick = [
    'link',
    'unitId',
    'table',
    'address',
    'count',
    'from',
    'to',
    'device',
    'endpoint',
    'node',
    'thumbprint',
  ];
  return Object.fromEntries(pick.filter((key) => key in body).map((key) => [key, body[key]]));
}

/** The outcome's answer, or its refusal as the HTTP error the page shows (problems beside their fields). */
export function settled<T extends object>(outcome: Outcome<T>): { readonly ok: true } & T {
  if (outcome.ok) return outcome;
  const details: Record<string, unknown> = {};
  if (outcome.problems !== undefined) details.problems = outcome.problems;
  if (outcome.diff !== undefined) details.diff = outcome.diff;
  throw new HttpError(outcome.status, outcome.error, details);
}

export function etagOf(body: Record<string, unknown>): string {
  const etag = body.etag;
  if (typeof etag !== 'string' || etag === '')
    throw new HttpError(400, '"etag" (the one GET /api/config gave) is required');
  return etag;
}
