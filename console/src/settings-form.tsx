/**
 * A form of a section's settings (docs/console.md#configuration): text, numbers, true/false, a dropdown of a key's
 * fixed choices, lists of values (a bridge's `remote.urls`) and of objects (a bridge's `topics`), and nested groups
 * of keys (`remote.tls`, `queue`: collapsed until opened), each problem of the gateway beside its field or list
 * entry. The keys, their kinds and choices come from the config schema the gateway serves (config-schema.ts). Save
 * hands over what changed; a password shows as the mask: left as it is, the stored one stays.
 */
import { useContext, useEffect, useState } from 'preact/hooks';
import {
  choicesOf,
  defaultOf,
  keysOf,
  nodesAt,
  SchemaContext,
  shapeOf,
  type SchemaNode,
  type Shape,
} from './config-schema.js';
import { dotted, type FieldKind, type FieldSpec, type Op, type Path, type Problem } from './config-types.js';
import { ListField, ObjectListField, Problems, type Entry } from './list-fields.js';

type Scalar = string | number | boolean;
/** What a form changed, by dotted key (`remote.tls.caFile`): the new value, or undefined for a key emptied. */
export type Changes = Record<string, unknown>;
type Values = Record<string, unknown>;

/** How a key is edited, and its schema (its choices, an entry's keys). */
interface FieldInfo {
  shape: Shape;
  nodes: SchemaNode[];
}
interface Edit {
  text: string | string[] | Entry[];
  info: FieldInfo;
}

const isScalar = (v: unknown): v is Scalar => typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';
const isScalarList = (v: unknown): v is Scalar[] => Array.isArray(v) && v.every(isScalar);
const isObject = (v: unknown): v is Values => typeof v === 'object' && v !== null && !Array.isArray(v);
const NOTHING: Values = {};

/**
 * A `set` of each changed key under `path`, a `remove` of each emptied one; a key in a group the file does not have
 * yet sets the group (`replay: {messagesPerS: 100}`).
 */
export function setOps(path: Path, changes: Changes, values: Values = NOTHING): Op[] {
  const ops: Op[] = [];
  const groups = new Map<string, Values>();
  for (const [key, value] of Object.entries(changes)) {
    const keys = key.split('.');
    let at = 0;
    for (let v: unknown = values; at < keys.length - 1 && isObject(v) && isObject(v[keys[at]]); at++) v = v[keys[at]];
    if (at === keys.length - 1) {
      const where = [...path, ...keys];
      ops.push(value === undefined ? { op: 'remove', path: where } : { op: 'set', path: where, value });
    } else if (value !== undefined) {
      const group = keys.slice(0, at + 1).join('.');
      groups.set(group, nest(groups.get(group) ?? {}, keys.slice(at + 1), value));
    }
  }
  for (const [group, value] of groups) ops.push({ op: 'set', path: [...path, ...group.split('.')], value });
  return ops;
}

/** Dotted changes as the object they make (a new tag), emptied keys left out. */
export function nested(changes: Changes): Values {
  let out: Values = {};
  for (const [key, value] of Object.entries(changes)) if (value !== undefined) out = nest(out, key.split('.'), value);
  return out;
}

function nest(into: Values, keys: string[], value: unknown): Values {
  const [first, ...rest] = keys;
  return { ...into, [first]: rest.length === 0 ? value : nest(isObject(into[first]) ? into[first] : {}, rest, value) };
}

/** A typed-in text as the value the file gets: one of the key's choices, or a number (it stays text when it is none). */
function parse(text: string, info: FieldInfo): unknown {
  const choice = choicesOf(info.nodes)?.find((c) => String(c) === text);
  if (choice !== undefined) return choice;
  if (info.shape === 'number' && text.trim() !== '' && !Number.isNaN(Number(text))) return Number(text);
  if (info.shape === 'boolean') return text === 'true';
  return text;
}

const kindOf = (value: unknown): FieldKind =>
  typeof value === 'number' ? 'number' : typeof value === 'boolean' ? 'boolean' : 'text';

/** The keys of an object list's entries: the schema's, then any an entry has beyond them. */
function entryKeys(info: FieldInfo, entries: Values[]): Map<string, FieldInfo> {
  const items = info.nodes.flatMap((n) => (n.items === undefined ? [] : [n.items]));
  const keys = new Map<string, FieldInfo>();
  for (const [key, nodes] of keysOf(items)) keys.set(key, { shape: shapeOf(nodes) ?? 'text', nodes });
  for (const entry of entries)
    for (const [key, v] of Object.entries(entry)) if (!keys.has(key)) keys.set(key, { shape: kindOf(v), nodes: [] });
  return keys;
}

function entryValue(entry: Entry, keys: Map<string, FieldInfo>): Values {
  const out: Values = {};
  for (const [key, text] of Object.entries(entry))
    if (text !== '') out[key] = parse(text, keys.get(key) ?? { shape: 'text', nodes: [] });
  return out;
}

export function SettingsForm(props: {
  title: string;
  testid: string;
  /** The section as the file has it (absent: a new one). */
  values?: Values;
  /** Where it is in the file: problems under it show beside their fields. */
  path: Path;
  /** The connector type whose schema applies (devices, profiles, tags). */
  type?: string;
  /** Keys offered even when the section does not have them, with their kind. */
  fields?: FieldSpec;
  /** Every key the schema has is offered (a bridge), not only those the section has. */
  allKeys?: boolean;
  /** Groups shown open (`remote`); the others are collapsed until opened. */
  openGroups?: string[];
  editable: boolean;
  problems: Problem[];
  onSave: (changes: Changes) => void;
  extra?: preact.ComponentChildren;
  open?: boolean;
}) {
  const values = props.values ?? NOTHING;
  const root = useContext(SchemaContext);
  const [edits, setEdits] = useState<Record<string, Edit>>({});
  useEffect(() => setEdits({}), [props.values]);
  const prefix = dotted(props.path);
  const changes = (): Changes => {
    const out: Changes = {};
    for (const [key, { text, info }] of Object.entries(edits)) {
      const old = key.split('.').reduce<unknown>((v, k) => (isObject(v) ? v[k] : undefined), values);
      if (info.shape === 'objects') {
        const keys = entryKeys(info, []);
        out[key] = (text as Entry[]).map((e) => entryValue(e, keys));
      } else if (Array.isArray(text)) {
        const items = info.nodes.flatMap((n) => (n.items === undefined ? [] : [n.items]));
        const numbers = isScalarList(old) && old.length > 0 && old.every((e) => typeof e === 'number');
        const item: FieldInfo = { shape: shapeOf(items) ?? (numbers ? 'number' : 'text'), nodes: items };
        out[key] = (text as string[]).map((e) => parse(e, item));
      } else if (text === '') {
        if (old !== undefined) out[key] = undefined;
      } else out[key] = parse(text, info);
    }
    return out;
  };
  const problemsOf = (key: string) =>
    props.problems.filter((p) => p.path === `${prefix}.${key}` || p.path.startsWith(`${prefix}.${key}.`));

  /** The fields of an object (the section, or a group in it) whose keys start with `at`. */
  const fields = (object: Values, nodes: SchemaNode[], at: string, all: boolean, spec?: FieldSpec) => {
    const schemaKeys = keysOf(nodes, props.type);
    const offered = new Map<string, FieldInfo>();
    const infoOf = (key: string, fallback: Shape): FieldInfo => {
      const own = schemaKeys.get(key) ?? [];
      return { shape: shapeOf(own) ?? fallback, nodes: own };
    };
    for (const [key, kind] of spec ?? []) offered.set(key, infoOf(key, kind));
    if (all) for (const key of schemaKeys.keys()) offered.set(key, infoOf(key, 'text'));
    for (const [key, v] of Object.entries(object)) {
      if (offered.has(key)) continue;
      if (isScalarList(v)) offered.set(key, infoOf(key, 'list'));
      else if (isScalar(v)) offered.set(key, infoOf(key, kindOf(v)));
      else if (isObject(v) && shapeOf(schemaKeys.get(key) ?? []) === 'group') offered.set(key, infoOf(key, 'group'));
    }
    return [...offered].map(([key, info]) => {
      const name = at + key;
      const v = object[key];
      const own = problemsOf(name);
      const edited = edits[name] as Edit | undefined;
      const edit = (text: Edit['text']) => setEdits({ ...edits, [name]: { text, info } });
      if (info.shape === 'group')
        return (
          <details key={name} class="group" data-testid={`group-${name}`} open={props.openGroups?.includes(name)}>
            <summary>
              {key}
              {own.length > 0 && <span class="bad small"> ({own.length} problem(s))</span>}
            </summary>
            {fields(isObject(v) ? v : NOTHING, info.nodes, `${name}.`, true)}
          </details>
        );
      if (info.shape === 'objects') {
        const list = Array.isArray(v) ? v.filter(isObject) : [];
        const keys = entryKeys(info, list);
        const entries = list.map((e) =>
          Object.fromEntries(Object.entries(e).flatMap(([k, x]) => (isScalar(x) ? [[k, String(x)]] : []))),
        );
        return (
          <ObjectListField
            key={name}
            name={name}
            path={`${prefix}.${name}`}
            entries={(edited?.text as Entry[] | undefined) ?? entries}
            keys={[...keys.keys()]}
            editable={props.editable}
            problems={own}
            onChange={edit}
            field={(k, input, text, change) => (
              <Input
                name={input}
                info={keys.get(k) ?? { shape: 'text', nodes: [] }}
                shown={text}
                editable={props.editable}
                onEdit={change}
              />
            )}
          />
        );
      }
      if (info.shape === 'list')
        return (
          <ListField
            key={name}
            name={name}
            path={`${prefix}.${name}`}
            entries={(edited?.text as string[] | undefined) ?? (isScalarList(v) ? v.map(String) : [])}
            editable={props.editable}
            problems={own}
            onChange={edit}
          />
        );
      return (
        <label key={name} class="field">
          <span>{key}</span>
          <Input
            name={name}
            info={info}
            shown={(edited?.text as string | undefined) ?? (isScalar(v) ? String(v) : '')}
            editable={props.editable}
            onEdit={edit}
          />
          <Problems problems={own} testid={`problem-${name}`} />
        </label>
      );
    });
  };

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
        {fields(values, nodesAt(root, props.path, props.type), '', props.allKeys === true, props.fields)}
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

/** One value: a dropdown of its choices (and of true/false), else an input; a password as the mask. */
function Input(props: {
  name: string;
  info: FieldInfo;
  shown: string;
  editable: boolean;
  onEdit: (text: string) => void;
}) {
  const { name, info, shown } = props;
  const choices = info.shape === 'boolean' ? [true, false] : choicesOf(info.nodes);
  if (choices !== undefined) {
    const offered = choices.map(String);
    return (
      <select
        name={name}
        disabled={!props.editable}
        value={shown}
        onChange={(e) => props.onEdit(e.currentTarget.value)}
      >
        <option value="">{defaultOf(info.nodes) ?? '(not set)'}</option>
        {offered.map((c) => (
          <option key={c} value={c}>
            {c}
          </option>
        ))}
        {shown !== '' && !offered.includes(shown) && <option value={shown}>{shown}</option>}
      </select>
    );
  }
  return (
    <input
      name={name}
      type={name.split('.').at(-1) === 'password' ? 'password' : 'text'}
      readOnly={!props.editable}
      placeholder={defaultOf(info.nodes)}
      value={shown}
      onInput={(e) => props.onEdit(e.currentTarget.value)}
    />
  );
}
