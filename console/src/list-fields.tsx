/**
 * The list fields of a settings form (docs/console.md#configuration): a list of values (a bridge's `remote.urls`)
 * and a list of objects (a bridge's `topics`), one row per entry with its problems named by the entry's key path
 * (`bridges.0.topics.2.filter`); entries are added at the end, removed and moved up or down. A list is saved whole.
 */
import type { Problem } from './config-types.js';

export function Problems(props: { problems: Problem[]; testid: string; named?: boolean }) {
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

/** The controls every list has: its entries, each with ↑ ↓ ✕ and problems, and "Add entry". */
function EditableList<E>(props: {
  name: string;
  path: string;
  entries: E[];
  blank: E;
  editable: boolean;
  problems: Problem[];
  onChange: (entries: E[]) => void;
  entry: (entry: E, i: number, change: (next: E) => void) => preact.ComponentChildren;
  /** `objects`: entries of several fields, laid out across the form. */
  class?: string;
}) {
  const { entries, name } = props;
  const move = (i: number, by: -1 | 1) => {
    const next = [...entries];
    [next[i], next[i + by]] = [next[i + by], next[i]];
    props.onChange(next);
  };
  const ofEntry = (i: number) =>
    props.problems.filter((p) => p.path === `${props.path}.${i}` || p.path.startsWith(`${props.path}.${i}.`));
  const ofList = props.problems.filter((p) => !/^\d+(\.|$)/.test(p.path.slice(props.path.length + 1)));
  return (
    <div class={`field ${props.class ?? ''}`} data-testid={`list-${name}`}>
      <span>{name.split('.').at(-1)}</span>
      <ol class="list-field">
        {entries.map((entry, i) => (
          <li key={i}>
            {props.entry(entry, i, (next) => props.onChange(entries.map((e, j) => (j === i ? next : e))))}
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
            <button type="button" onClick={() => props.onChange([...entries, props.blank])} data-testid={`add-${name}`}>
              Add entry
            </button>
          </li>
        )}
      </ol>
      <Problems problems={ofList} testid={`problem-${name}`} />
    </div>
  );
}

/** A list of plain values, one input per entry. */
export function ListField(props: {
  name: string;
  path: string;
  entries: string[];
  editable: boolean;
  problems: Problem[];
  onChange: (entries: string[]) => void;
}) {
  return (
    <EditableList
      {...props}
      blank=""
      entry={(entry, i, change) => (
        <input
          name={`${props.name}.${i}`}
          aria-label={`${props.name} entry ${i + 1}`}
          readOnly={!props.editable}
          value={entry}
          onInput={(e) => change(e.currentTarget.value)}
        />
      )}
    />
  );
}

/** An entry of a list of objects as typed in: each key's text. */
export type Entry = Record<string, string>;

/** A list of objects, one row of fields per entry (`field` draws one: an input, or a dropdown of its choices). */
export function ObjectListField(props: {
  name: string;
  path: string;
  entries: Entry[];
  keys: string[];
  editable: boolean;
  problems: Problem[];
  onChange: (entries: Entry[]) => void;
  field: (key: string, name: string, text: string, change: (text: string) => void) => preact.ComponentChildren;
}) {
  return (
    <EditableList
      {...props}
      blank={{}}
      class="objects"
      entry={(entry, i, change) => (
        <span class="entry">
          {props.keys.map((key) => (
            <label key={key}>
              <span class="small">{key}</span>
              {props.field(key, `${props.name}.${i}.${key}`, entry[key] ?? '', (text) =>
                change({ ...entry, [key]: text }),
              )}
            </label>
          ))}
        </span>
      )}
    />
  );
}
