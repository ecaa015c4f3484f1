/**
 * A form of a section's plain values (docs/console.md#configuration): text, numbers, true/false, and lists of them
 * (a bridge's `remote.urls`), each problem of the gateway beside its field or list entry. Save hands over what
 * changed; a password shows as the mask: left as it is, the stored one stays.
 */
import { useEffect, useState } from 'preact/hooks';
import { dotted, type FieldKind, type FieldSpec, type Op, type Path, type Problem } from './config-types.js';

type Scalar = string | number | boolean;
/** What a form changed, by key: the new value, or undefined for a key emptied (taken out of the file). */
export type Changes = Record<string, unknown>;
type Edit = string | string[];

const isScalar = (v: unknown): v is Scalar => typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';
const isScalarList = (v: unknown): v is Scalar[] => Array.isArray(v) && v.every(isScalar);
const NOTHING: Record<string, unknown> = {};

/** A `set` of each changed key under `path`, a `remove` of each emptied one. */
export function setOps(path: Path, changes: Changes): Op[] {
  return Object.entries(changes).map(([key, value]): Op =>
    value === undefined ? { op: 'remove', path: [...path, key] } : { op: 'set', path: [...path, key], value },
  );
}

/** A typed-in text as the value the file gets: a number stays text when it is none (the gateway says so). */
function parse(text: string, kind: FieldKind): unknown {
  if (kind === 'number' && text.trim() !== '' && !Number.isNaN(Number(text))) return Number(text);
  if (kind === 'boolean') return text === 'true';
  return text;
}

const kindOf = (value: unknown): FieldKind =>
  typeof value === 'number' ? 'number' : typeof value === 'boolean' ? 'boolean' : 'text';

export function SettingsForm(props: {
  title: string;
  testid: string;
  /** The section as the file has it (absent: a new one). */
  values?: Record<string, unknown>;
  /** Where it is in the file: problems under it show beside their fields. */
  path: Path;
  /** Keys offered even when the section does not have them, with their kind. */
  fields?: FieldSpec;
  editable: boolean;
  problems: Problem[];
  onSave: (changes: Changes) => void;
  extra?: preact.ComponentChildren;
  open?: boolean;
}) {
  const values = props.values ?? NOTHING;
  const offered = new Map<string, FieldKind | 'list'>(props.fields ?? []);
  for (const [key, v] of Object.entries(values)) {
    if (isScalarList(v)) offered.set(key, 'list');
    else if (isScalar(v) && !offered.has(key)) offered.set(key, kindOf(v));
  }
  const [edits, setEdits] = useState<Record<string, Edit>>({});
  useEffect(() => setEdits({}), [props.values]);
  const prefix = dotted(props.path);
  const edit = (key: string, value: Edit) => setEdits({ ...edits, [key]: value });
  const changes = (): Changes => {
    const out: Changes = {};
    for (const [key, text] of Object.entries(edits)) {
      const old = values[key];
      if (Array.isArray(text)) {
        const numbers = isScalarList(old) && old.length > 0 && old.every((e) => typeof e === 'number');
        out[key] = text.map((e) => parse(e, numbers ? 'number' : 'text'));
      } else if (text === '') {
        if (old !== undefined) out[key] = undefined;
      } else out[key] = parse(text, offered.get(key) as FieldKind);
    }
    return out;
  };
  const problemsOf = (key: string) =>
    props.problems.filter((p) => p.path === `${prefix}.${key}` || p.path.startsWith(`${prefix}.${key}.`));
  return (
    <details class="card settings" data-testid={props.testid} open={props.open}>
      <summary>
        <strong>{props.title}</strong>
      </summary>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          props.onSave(changes());
        }}
      >
        {[...offered].map(([key, kind]) => {
          const v = values[key];
          const own = problemsOf(key);
          if (kind === 'list')
            return (
              <ListField
                key={key}
                name={key}
                path={`${prefix}.${key}`}
                entries={(edits[key] as string[] | undefined) ?? (v as Scalar[]).map(String)}
                editable={props.editable}
                problems={own}
                onChange={(entries) => edit(key, entries)}
              />
            );
          const shown = (edits[key] as string | undefined) ?? (v === undefined ? '' : String(v as Scalar));
          return (
            <label key={key} class="field">
              <span>{key}</span>
              {kind === 'boolean' ? (
                <select
                  name={key}
                  disabled={!props.editable}
                  value={shown}
                  onChange={(e) => edit(key, e.currentTarget.value)}
                >
                  <option value="">(default)</option>
                  <option value="true">true</option>
                  <option value="false">false</option>
                </select>
              ) : (
                <input
                  name={key}
                  type={key === 'password' ? 'password' : 'text'}
                  readOnly={!props.editable}
                  value={shown}
                  onInput={(e) => edit(key, e.currentTarget.value)}
                />
              )}
              <Problems problems={own} testid={`problem-${key}`} />
            </label>
          );
        })}
        {props.editable && (
          <p>
            <button type="submit" disabled={Object.keys(edits).length === 0}>
              Check and preview
            </button>{' '}
            {props.extra}
          </p>
        )}
      </form>
    </details>
  );
}

function Problems(props: { problems: Problem[]; testid: string; named?: boolean }) {
  return (
    <>
      {props.problems.map((p) => (
        <span key={`${p.path}:${p.message}`} class="bad small" data-testid={props.testid}>
          {props.named ? `${p.path}: ${p.message}` : p.message}
        </span>
      ))}
    </>
  );
}

/**
 * A list of plain values, one input per entry, each with its problems (named by the entry's key path, e.g.
 * `bridges.0.remote.urls.1`); entries are added at the end, removed and moved up or down. The list is saved whole.
 */
function ListField(props: {
  name: string;
  path: string;
  entries: string[];
  editable: boolean;
  problems: Problem[];
  onChange: (entries: string[]) => void;
}) {
  const { entries, name } = props;
  const change = (i: number, text: string) => props.onChange(entries.map((e, j) => (j === i ? text : e)));
  const move = (i: number, by: -1 | 1) => {
    const next = [...entries];
    [next[i], next[i + by]] = [next[i + by], next[i]];
    props.onChange(next);
  };
  const ofEntry = (i: number) =>
    props.problems.filter((p) => p.path === `${props.path}.${i}` || p.path.startsWith(`${props.path}.${i}.`));
  const ofList = props.problems.filter((p) => !/^\d+(\.|$)/.test(p.path.slice(props.path.length + 1)));
  return (
    <div class="field" data-testid={`list-${name}`}>
      <span>{name}</span>
      <ol class="list-field">
        {entries.map((entry, i) => (
          <li key={i}>
            <input
              name={`${name}.${i}`}
              aria-label={`${name} entry ${i + 1}`}
              readOnly={!props.editable}
              value={entry}
              onInput={(e) => change(i, e.currentTarget.value)}
            />
            {props.editable && (
              <>
                <button type="button" title="Move up" disabled={i === 0} onClick={() => move(i, -1)}>
                  ↑
                </button>
                <button type="button" title="Move down" disabled={i === entries.length - 1} onClick={() => move(i, 1)}>
                  ↓
                </button>
                <button
                  type="button"
                  title="Remove this entry"
                  onClick={() => props.onChange(entries.filter((_, j) => j !== i))}
                >
                  ✕
                </button>
              </>
            )}
            <Problems problems={ofEntry(i)} testid={`problem-${name}.${i}`} named />
          </li>
        ))}
        {props.editable && (
          <li>
            <button type="button" onClick={() => props.onChange([...entries, ''])} data-testid={`add-${name}`}>
              Add entry
            </button>
          </li>
        )}
      </ol>
      <Problems problems={ofList} testid={`problem-${name}`} />
    </div>
  );
}
