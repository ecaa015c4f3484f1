/**
 * The Configuration view (docs/console.md#configuration): the file's devices and their tags; for engineers, changes
 * previewed as a diff and applied, undo, a Modbus test read whose layouts can be picked into a tag, an OPC UA browse
 * whose variables can be picked into tags, and a CSV import. Every change goes through /api/config/.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiError, canConfigure, get, post, type Session } from './api.js';
import type { Device, Op, Problem, Tag } from './config-types.js';
import { ModbusTestRead } from './modbus-test-read.js';
import { OpcuaBrowse } from './opcua-browse.js';

interface ConfigAnswer {
  file: string;
  etag: string;
  text: string;
  config: {
    connectors?: Device[];
    bridges?: { name: string; remote: Record<string, unknown> }[];
    sparkplug?: Record<string, unknown>;
  };
  undoable: number;
  editable: boolean;
}

/** A change waiting for its Apply: its operations (or a CSV import) and the diff the gateway showed. */
interface Pending {
  what: string;
  route: 'apply' | 'tags-import';
  body: Record<string, unknown>;
  diff: string;
}

export function ConfigView(props: { session: Session }) {
  const [config, setConfig] = useState<ConfigAnswer>();
  const [selected, setSelected] = useState<string>();
  const [pending, setPending] = useState<Pending>();
  const [problems, setProblems] = useState<Problem[]>([]);
  const [message, setMessage] = useState<string>();
  const editable = canConfigure(props.session) && config?.editable === true;

  const load = () =>
    get<ConfigAnswer>('config').then((c) => {
      setConfig(c);
      setSelected((s) => s ?? c.config.connectors?.[0]?.id);
    });
  useEffect(() => {
    load().catch((err: unknown) => setMessage((err as Error).message));
  }, []);
  // What a button at the bottom of the page did shows at the top: brought into view.
  useEffect(() => {
    document.querySelector('[data-testid=diff], [data-testid=config-message]')?.scrollIntoView({ block: 'start' });
  }, [message, pending]);
  if (config === undefined) return <p class="empty">{message ?? 'Loading…'}</p>;

  const devices = config.config.connectors ?? [];
  const index = devices.findIndex((d) => d.id === selected);
  const device = devices.at(index);

  const refused = (err: unknown) => {
    const e = err as ApiError;
    setProblems(e.problems ?? []);
    setMessage(e.message);
  };
  /** Shows what a change would do; Apply writes it. */
  const preview = async (what: string, route: Pending['route'], body: Record<string, unknown>) => {
    setProblems([]);
    setMessage(undefined);
    try {
      const previewRoute = route === 'apply' ? 'config/preview' : 'config/tags-import';
      const answer = await post<{ diff: string }>(previewRoute, { etag: config.etag, ...body }, props.session.csrf);
      setPending({ what, route, body, diff: answer.diff });
    } catch (err) {
      setPending(undefined);
      refused(err);
    }
  };
  const apply = async () => {
    if (pending === undefined) return;
    try {
      const body = { etag: config.etag, ...pending.body, ...(pending.route === 'tags-import' ? { apply: true } : {}) };
      const answer = await post<{ reload: { ok: boolean; error?: string } }>(
        `config/${pending.route}`,
        body,
        props.session.csrf,
      );
      setMessage(
        answer.reload.ok ? `applied: ${pending.what}` : `written, but the reload failed: ${answer.reload.error}`,
      );
      setPending(undefined);
      await load();
    } catch (err) {
      refused(err);
    }
  };
  const undo = async () => {
    try {
      await post('config/undo', { etag: config.etag }, props.session.csrf);
      setMessage('the last change was undone');
      setPending(undefined);
      await load();
    } catch (err) {
      refused(err);
    }
  };
  const addTags = (tags: Tag[], what: string) =>
    preview(what, 'apply', {
      ops: tags.map((value): Op => ({ op: 'add', path: ['connectors', index, 'tags'], value })),
    });

  return (
    <section class="config" data-testid="config-view">
      <h2>Configuration</h2>
      <p class="small">
        <span class="mono">{config.file}</span>{' '}
        {editable ? (
          <>
            <button type="button" disabled={config.undoable === 0} onClick={() => void undo()} data-testid="undo">
              Undo last change
            </button>{' '}
            <span class="small">{config.undoable} earlier version(s) kept</span>
          </>
        ) : (
          <span class="badge" data-testid="read-only">
            read-only: engineers change the configuration
          </span>
        )}
      </p>
      {message && (
        <p class={problems.length > 0 ? 'bad' : 'good'} data-testid="config-message">
          {message}
        </p>
      )}
      {problems.length > 0 && (
        <ul class="bad" data-testid="config-problems">
          {problems.map((p) => (
            <li key={`${p.path}:${p.message}`}>
              <span class="mono">{p.path}</span>: {p.message}
            </li>
          ))}
        </ul>
      )}
      {pending && (
        <div class="card" data-testid="diff">
          <h3>Change: {pending.what}</h3>
          <pre class="diff">
            {pending.diff.split('\n').map((line, i) => (
              <span key={i} class={line.startsWith('+') ? 'good' : line.startsWith('-') ? 'bad' : ''}>
                {line}
                {'\n'}
              </span>
            ))}
          </pre>
          <button type="button" onClick={() => void apply()} data-testid="apply">
            Apply
          </button>{' '}
          <button type="button" onClick={() => setPending(undefined)}>
            Cancel
          </button>
        </div>
      )}
      <nav class="devices">
        {devices.map((d) => (
          <a
            key={d.id}
            href="#configuration"
            class={d.id === selected ? 'active' : ''}
            onClick={() => setSelected(d.id)}
            data-testid={`device-${d.id}`}
          >
            {d.id} <span class="small">({d.type})</span>
          </a>
        ))}
      </nav>
      {device && (
        <>
          <SettingsForm
            title={`Device ${device.id}`}
            testid="device-settings"
            values={device as unknown as Record<string, unknown>}
            path={['connectors', index]}
            editable={editable}
            problems={problems}
            onSave={(ops) => void preview(`change device ${device.id}`, 'apply', { ops })}
            extra={
              editable && (
                <>
                  <button
                    type="button"
                    onClick={() =>
                      void preview(`copy device ${device.id}`, 'apply', {
                        ops: [{ op: 'add', path: ['connectors'], value: { ...device, id: `${device.id}-copy` } }],
                      })
                    }
                  >
                    Copy device
                  </button>{' '}
                  <button
                    type="button"
                    onClick={() =>
                      void preview(`remove device ${device.id}`, 'apply', {
                        ops: [{ op: 'remove', path: ['connectors', index] }],
                      })
                    }
                  >
                    Remove device
                  </button>
                </>
              )
            }
          />
          <TagTable
            device={device}
            editable={editable}
            problems={problems}
            index={index}
            onRemove={(i) =>
              void preview(`remove tag ${device.tags?.[i]?.name ?? i}`, 'apply', {
                ops: [{ op: 'remove', path: ['connectors', index, 'tags', i] }],
              })
            }
          />
          {editable && device.type === 'modbus' && (
            <ModbusTestRead
              device={device}
              session={props.session}
              onPick={(tag) => void addTags([tag], `add tag ${tag.name}`)}
            />
          )}
          {editable && device.type === 'opcua' && (
            <OpcuaBrowse
              device={device}
              session={props.session}
              onPick={(tags) => void addTags(tags, `add ${tags.length} tag(s)`)}
            />
          )}
          {editable && (
            <CsvImport
              onPreview={(csv, format) =>
                void preview(`import tags of ${device.id}`, 'tags-import', { device: device.id, csv, format })
              }
            />
          )}
        </>
      )}
      {(config.config.bridges ?? []).map((bridge, i) => (
        <SettingsForm
          key={bridge.name}
          title={`Bridge ${bridge.name}`}
          testid={`bridge-settings-${bridge.name}`}
          values={bridge.remote}
          path={['bridges', i, 'remote']}
          editable={editable}
          problems={problems}
          onSave={(ops) => void preview(`change bridge ${bridge.name}`, 'apply', { ops })}
        />
      ))}
      {config.config.sparkplug && (
        <SettingsForm
          title="Sparkplug"
          testid="sparkplug-settings"
          values={config.config.sparkplug}
          path={['sparkplug']}
          editable={editable}
          problems={problems}
          onSave={(ops) => void preview('change the Sparkplug ids', 'apply', { ops })}
        />
      )}
      <details>
        <summary>The file as it is (passwords masked)</summary>
        <pre class="mono small" data-testid="config-text">
          {config.text}
        </pre>
      </details>
    </section>
  );
}

/**
 * The plain values (text, numbers, true/false) of a section as fields, each problem of the gateway beside its field;
 * Save previews a `set` of each changed one. A password shows as the mask: left as it is, the stored one stays.
 */
function SettingsForm(props: {
  title: string;
  testid: string;
  values: Record<string, unknown>;
  path: (string | number)[];
  editable: boolean;
  problems: Problem[];
  onSave: (ops: Op[]) => void;
  extra?: preact.ComponentChildren;
}) {
  const plain = Object.entries(props.values).filter(
    ([, v]) => typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean',
  );
  const [edits, setEdits] = useState<Record<string, string>>({});
  useEffect(() => setEdits({}), [props.values]);
  const prefix = props.path.join('.');
  const save = () =>
    props.onSave(
      Object.entries(edits).map(([key, text]): Op => {
        const old = props.values[key];
        const value =
          typeof old === 'number' && text.trim() !== '' && !Number.isNaN(Number(text))
            ? Number(text)
            : typeof old === 'boolean'
              ? text === 'true'
              : text;
        return { op: 'set', path: [...props.path, key], value };
      }),
    );
  return (
    <details class="card settings" data-testid={props.testid}>
      <summary>
        <strong>{props.title}</strong>
      </summary>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          save();
        }}
      >
        {plain.map(([key, v]) => {
          const own = props.problems.filter(
            (p) => p.path === `${prefix}.${key}` || p.path.startsWith(`${prefix}.${key}.`),
          );
          return (
            <label key={key}>
              <span>{key}</span>
              {typeof v === 'boolean' ? (
                <select
                  name={key}
                  disabled={!props.editable}
                  value={edits[key] ?? String(v)}
                  onChange={(e) => setEdits({ ...edits, [key]: e.currentTarget.value })}
                >
                  <option value="true">true</option>
                  <option value="false">false</option>
                </select>
              ) : (
                <input
                  name={key}
                  type={key === 'password' ? 'password' : 'text'}
                  readOnly={!props.editable}
                  value={edits[key] ?? String(v)}
                  onInput={(e) => setEdits({ ...edits, [key]: e.currentTarget.value })}
                />
              )}
              {own.map((p) => (
                <span key={p.message} class="bad small" data-testid={`problem-${key}`}>
                  {p.message}
                </span>
              ))}
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

function TagTable(props: {
  device: Device;
  index: number;
  editable: boolean;
  problems: Problem[];
  onRemove: (i: number) => void;
}) {
  const tags = props.device.tags ?? [];
  const columns =
    props.device.type === 'modbus' ? ['table', 'address', 'datatype', 'byteOrder'] : ['nodeId', 'datatype'];
  const prefix = `connectors.${props.index}.tags.`;
  return (
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
          {tags.map((tag, i) => {
            const own = props.problems.filter((p) => p.path.startsWith(`${prefix}${i}.`) || p.path === `${prefix}${i}`);
            return (
              <tr key={`${tag.name}-${i}`}>
                <td class="mono">{tag.name}</td>
                {columns.map((c) => (
                  <td key={c} class="mono">
                    {tag[c] === undefined ? '' : String(tag[c] as string)}
                  </td>
                ))}
                <td>{typeof tag.engUnit === 'string' ? tag.engUnit : ''}</td>
                {props.editable && (
                  <td>
                    <button type="button" onClick={() => props.onRemove(i)}>
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
  );
}

function CsvImport(props: { onPreview: (csv: string, format: string) => void }) {
  const [csv, setCsv] = useState('');
  const [format, setFormat] = useState('edgeferry');
  return (
    <div class="card" data-testid="csv-import">
      <h3>Import tags from CSV</h3>
      <p class="small">Replaces the device's tags; every bad row is named, and nothing is applied while one is bad.</p>
      <select value={format} onChange={(e) => setFormat(e.currentTarget.value)} name="csv-format">
        <option value="edgeferry">edgeferry columns</option>
        <option value="kepware">Kepware tag export</option>
      </select>{' '}
      <input
        type="file"
        accept=".csv,text/csv"
        name="csv-file"
        onChange={(e) => {
          const file = e.currentTarget.files?.[0];
          if (file) void file.text().then(setCsv);
        }}
      />
      <textarea name="csv" rows={6} value={csv} onInput={(e) => setCsv(e.currentTarget.value)} class="mono" />
      <button
        type="button"
        disabled={csv === ''}
        onClick={() => props.onPreview(csv, format)}
        data-testid="csv-preview"
      >
        Check and preview
      </button>
    </div>
  );
}
