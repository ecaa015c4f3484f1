/**
 * A tag list in the Configuration view (docs/console.md#configuration): a device's or a profile's tags, each with
 * its problems; for engineers each row opens the tag's form filled in (renaming included), and "Add tag" the same
 * form empty. A device that takes its tags from a profile shows them read-only, edited on the profile.
 */
import { useEffect, useState } from 'preact/hooks';
import { dotted, TAG_FIELDS, type ConnectorType, type Op, type Path, type Problem, type Tag } from './config-types.js';
import { nested, setOps, SettingsForm } from './settings-form.js';

export function TagTable(props: {
  /** Absent: none yet. */
  tags: Tag[] | undefined;
  type: ConnectorType;
  /** Where the list is in the file: `connectors.0.tags`, `profiles.press.tags`. */
  path: Path;
  editable: boolean;
  problems: Problem[];
  onChange: (what: string, ops: Op[]) => void;
}) {
  const tags = props.tags ?? [];
  /** The row whose form is open, or `tags.length` for a new tag; closed when the list changes (applied). */
  const [editing, setEditing] = useState<number>();
  useEffect(() => setEditing(undefined), [props.tags]);
  const columns = props.type === 'modbus' ? ['table', 'address', 'datatype', 'byteOrder'] : ['nodeId', 'datatype'];
  if (props.type === 's7') columns.splice(0, 1, 'address');
  const prefix = `${dotted(props.path)}.`;
  const tag = editing === undefined ? undefined : tags.at(editing);
  return (
    <>
      <div class="scroll">
        <table data-testid="tag-table">
          <thead>
            <tr>
              <th>Tag</th>
              {columns.map((c) => (
                <th key={c}>{c}</th>
              ))}
              <th>unit</th>
              {props.editable && <th />}
            </tr>
          </thead>
          <tbody>
            {tags.map((t, i) => {
              const own = props.problems.filter(
                (p) => p.path.startsWith(`${prefix}${i}.`) || p.path === `${prefix}${i}`,
              );
              return (
                <tr key={`${t.name}-${i}`} class={i === editing ? 'editing' : ''}>
                  <td class="mono">{t.name}</td>
                  {columns.map((c) => (
                    <td key={c} class="mono">
                      {t[c] === undefined ? '' : String(t[c] as string)}
                    </td>
                  ))}
                  <td>{typeof t.engUnit === 'string' ? t.engUnit : ''}</td>
                  {props.editable && (
                    <td>
                      <button type="button" onClick={() => setEditing(i)} data-testid={`edit-tag-${t.name}`}>
                        Edit
                      </button>{' '}
                      <button
                        type="button"
                        onClick={() =>
                          props.onChange(`remove tag ${t.name}`, [{ op: 'remove', path: [...props.path, i] }])
                        }
                      >
                        Remove
                      </button>
                      {own.map((p) => (
                        <span key={p.path} class="bad small">
                          {' '}
                          {p.path.slice(prefix.length)}: {p.message}
                        </span>
                      ))}
                    </td>
                  )}
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
      {props.editable && editing === undefined && (
        <p>
          <button type="button" onClick={() => setEditing(tags.length)} data-testid="add-tag">
            Add tag
          </button>
        </p>
      )}
      {props.editable && editing !== undefined && (
        <SettingsForm
          title={tag === undefined ? 'New tag' : `Tag ${tag.name}`}
          testid="tag-form"
          values={tag}
          path={[...props.path, editing]}
          type={props.type}
          fields={TAG_FIELDS[props.type]}
          editable
          open
          problems={props.problems}
          onSave={(changes) =>
            props.onChange(
              tag === undefined ? `add tag ${String(changes.name)}` : `change tag ${tag.name}`,
              tag === undefined
                ? [{ op: 'add', path: props.path, value: nested(changes) }]
                : setOps([...props.path, editing], changes, tag),
            )
          }
          extra={
            <button type="button" onClick={() => setEditing(undefined)}>
              Close
            </button>
          }
        />
      )}
    </>
  );
}
