/**
 * The Configuration view (docs/console.md#configuration): the file's devices and their tags; for engineers, changes
 * previewed as a diff and applied, undo, a Modbus test read whose layouts can be picked into a tag, an OPC UA browse
 * whose variables can be picked into tags, and a CSV import. Every change goes through /api/config/.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiError, canConfigure, get, post, type Session } from './api.js';

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

interface Device {
  id: string;
  type: 'modbus' | 'opcua';
  transport?: 'tcp' | 'rtu';
  host?: string;
  port?: number;
  path?: string;
  unitId?: number;
  addressBase?: 0 | 1;
  endpoint?: string;
  tags?: Tag[];
}

type Tag = Record<string, unknown> & { name: string };
type Op = { op: 'set' | 'add' | 'remove'; path: (string | number)[]; value?: unknown };
interface Problem {
  path: string;
  message: string;
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

interface RegisterRow {
  address: number;
  hex: string;
  int16: number;
  uint16: number;
  int32?: Record<string, number>;
  float32?: Record<string, number | string>;
}

const WORD_ORDERS = ['ABCD', 'BADC', 'CDAB', 'DCBA'];

function ModbusTestRead(props: { device: Device; session: Session; onPick: (tag: Tag) => void }) {
  const d = props.device;
  const [address, setAddress] = useState(String(d.addressBase ?? 0));
  const [count, setCount] = useState('10');
  const [table, setTable] = useState('holding');
  const [rows, setRows] = useState<RegisterRow[]>();
  const [error, setError] = useState<string>();
  const [name, setName] = useState('');
  const read = async () => {
    setError(undefined);
    const link =
      d.transport === 'rtu'
        ? { transport: 'rtu', path: d.path }
        : { transport: 'tcp', host: d.host, port: d.port ?? 502 };
    try {
      const answer = await post<{ rows: RegisterRow[] }>(
        'config/modbus-read',
        {
          link,
          unitId: d.unitId ?? 1,
          table,
          address: Number(address),
          addressBase: d.addressBase ?? 0,
          count: Number(count),
        },
        props.session.csrf,
      );
      setRows(answer.rows);
    } catch (err) {
      setRows(undefined);
      setError((err as Error).message);
    }
  };
  const pick = (row: RegisterRow, datatype: string, byteOrder = 'ABCD') =>
    props.onPick({ name: name || `${table}-${row.address}`, table, address: row.address, datatype, byteOrder });
  return (
    <div class="card" data-testid="test-read">
      <h3>Test read (unit {d.unitId ?? 1})</h3>
      <form
        class="filter"
        onSubmit={(e) => {
          e.preventDefault();
          void read();
        }}
      >
        <select value={table} onChange={(e) => setTable(e.currentTarget.value)} name="table">
          <option value="holding">holding</option>
          <option value="input">input</option>
        </select>
        <label>
          address <input name="address" value={address} onInput={(e) => setAddress(e.currentTarget.value)} size={6} />
        </label>
        <label>
          count <input name="count" value={count} onInput={(e) => setCount(e.currentTarget.value)} size={4} />
        </label>
        <button type="submit">Read now</button>
        <label>
          new tag name <input name="tag-name" value={name} onInput={(e) => setName(e.currentTarget.value)} size={14} />
        </label>
      </form>
      {error && <p class="bad">{error}</p>}
      {rows && (
        <div class="scroll">
          <table class="mono small" data-testid="test-read-table">
            <thead>
              <tr>
                <th>address</th>
                <th>hex</th>
                <th>int16</th>
                <th>uint16</th>
                {WORD_ORDERS.map((o) => (
                  <th key={o}>float32 {o}</th>
                ))}
                {WORD_ORDERS.map((o) => (
                  <th key={o}>int32 {o}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => (
                <tr key={row.address}>
                  <td>{row.address}</td>
                  <td>{row.hex}</td>
                  <td>
                    <button type="button" class="pick" onClick={() => pick(row, 'int16')}>
                      {row.int16}
                    </button>
                  </td>
                  <td>
                    <button type="button" class="pick" onClick={() => pick(row, 'uint16')}>
                      {row.uint16}
                    </button>
                  </td>
                  {WORD_ORDERS.map((o) => (
                    <td key={o}>
                      {row.float32 && (
                        <button
                          type="button"
                          class="pick"
                          onClick={() => pick(row, 'float32', o)}
                          data-testid={`pick-${row.address}-float32-${o}`}
                        >
                          {shortNumber(row.float32[o])}
                        </button>
                      )}
                    </td>
                  ))}
                  {WORD_ORDERS.map((o) => (
                    <td key={o}>
                      {row.int32 && (
                        <button type="button" class="pick" onClick={() => pick(row, 'int32', o)}>
                          {row.int32[o]}
                        </button>
                      )}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function shortNumber(v: number | string | undefined): string {
  if (typeof v !== 'number') return String(v);
  if (v === 0) return '0';
  return Math.abs(v) >= 1e-3 && Math.abs(v) < 1e7 ? String(Number(v.toPrecision(7))) : v.toExponential(3);
}

interface Child {
  nodeId: string;
  displayName: string;
  nodeClass: 'Object' | 'Variable';
  variable?: {
    nodeId: string;
    datatype?: string;
    dataType: string;
    access: string;
    value: string;
    engUnit?: string;
    engLow?: number;
    engHigh?: number;
    description?: string;
  };
}

function OpcuaBrowse(props: { device: Device; session: Session; onPick: (tags: Tag[]) => void }) {
  const [trail, setTrail] = useState<{ nodeId?: string; name: string }[]>([{ name: 'Objects' }]);
  const [children, setChildren] = useState<Child[]>();
  const [untrusted, setUntrusted] = useState<{ thumbprint: string; subject: string }>();
  const [chosen, setChosen] = useState<Set<string>>(new Set());
  const [error, setError] = useState<string>();
  const node = trail.at(-1)?.nodeId;
  const browse = async () => {
    setError(undefined);
    try {
      const answer = await post<{ children?: Child[]; untrusted?: { thumbprint: string; subject: string } }>(
        'config/opcua-browse',
        { device: props.device.id, ...(node !== undefined ? { node } : {}) },
        props.session.csrf,
      );
      setUntrusted(answer.untrusted);
      setChildren(answer.children);
    } catch (err) {
      setError((err as Error).message);
    }
  };
  useEffect(() => {
    void browse();
  }, [node]);
  const trust = async () => {
    try {
      await post(
        'config/opcua-trust',
        { device: props.device.id, thumbprint: untrusted?.thumbprint },
        props.session.csrf,
      );
      await browse();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const picked = (children ?? []).filter((c) => c.variable?.datatype !== undefined && chosen.has(c.nodeId));
  return (
    <div class="card" data-testid="browse">
      <h3>
        Browse{' '}
        {trail.map((t, i) => (
          <a key={i} href="#configuration" onClick={() => setTrail(trail.slice(0, i + 1))}>
            /{t.name}
          </a>
        ))}
      </h3>
      {error && <p class="bad">{error}</p>}
      {untrusted && (
        <p data-testid="untrusted">
          The server's certificate is not trusted: thumbprint <span class="mono">{untrusted.thumbprint}</span> (
          {untrusted.subject}). Compare it with the one the server shows, then{' '}
          <button type="button" onClick={() => void trust()}>
            Trust this certificate
          </button>
        </p>
      )}
      {children && (
        <table data-testid="browse-table">
          <thead>
            <tr>
              <th />
              <th>Node</th>
              <th>Type</th>
              <th>Value</th>
              <th>Unit</th>
              <th>Access</th>
            </tr>
          </thead>
          <tbody>
            {children.map((c) => (
              <tr key={c.nodeId}>
                <td>
                  {c.variable?.datatype !== undefined && (
                    <input
                      type="checkbox"
                      aria-label={`pick ${c.displayName}`}
                      data-testid={`pick-${c.displayName}`}
                      checked={chosen.has(c.nodeId)}
                      onChange={() => {
                        const next = new Set(chosen);
                        if (!next.delete(c.nodeId)) next.add(c.nodeId);
                        setChosen(next);
                      }}
                    />
                  )}
                </td>
                <td>
                  {c.nodeClass === 'Object' ? (
                    <a
                      href="#configuration"
                      onClick={() => setTrail([...trail, { nodeId: c.nodeId, name: c.displayName }])}
                    >
                      {c.displayName}/
                    </a>
                  ) : (
                    c.displayName
                  )}
                </td>
                <td class="mono small">{c.variable ? (c.variable.datatype ?? `${c.variable.dataType} (none)`) : ''}</td>
                <td class="mono">{c.variable?.value ?? ''}</td>
                <td>{c.variable?.engUnit ?? ''}</td>
                <td>{c.variable?.access ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <button
        type="button"
        disabled={picked.length === 0}
        data-testid="add-picked"
        onClick={() =>
          props.onPick(
            picked.map((c) => {
              const v = c.variable!;
              const tag: Tag = { name: c.displayName, nodeId: v.nodeId, datatype: v.datatype };
              if (v.engUnit !== undefined) tag.engUnit = v.engUnit;
              if (v.engLow !== undefined && v.engHigh !== undefined)
                Object.assign(tag, { engLow: v.engLow, engHigh: v.engHigh });
              if (v.description !== undefined) tag.description = v.description;
              return tag;
            }),
          )
        }
      >
        Add {picked.length} picked as tags
      </button>
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
