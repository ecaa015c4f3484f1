/**
 * The Configuration view (docs/console.md#configuration): the file's devices, profiles and their tags; for engineers,
 * changes previewed as a diff and applied, undo, forms of devices, profiles, tags, bridges and the Sparkplug ids, a
 * Modbus test read whose layouts can be picked into a tag, an OPC UA browse whose variables can be picked into tags,
 * and a CSV import. Every change goes through /api/config/.
 */
import { useEffect, useState } from 'preact/hooks';
import { ApiError, canConfigure, get, post, type Session } from './api.js';
import { SchemaContext, type SchemaNode } from './config-schema.js';
import type { Device, Op, Problem, Tag } from './config-types.js';
import { CsvImport } from './csv-import.js';
import { ModbusTestRead } from './modbus-test-read.js';
import { OpcuaBrowse } from './opcua-browse.js';
import { DeviceProfile, MakeProfile, ProfilePanel, type Profiles } from './profile-view.js';
import { setOps, SettingsForm } from './settings-form.js';
import { TagTable } from './tag-table.js';

type Values = Record<string, unknown>;

interface ConfigAnswer {
  file: string;
  etag: string;
  text: string;
  config: {
    connectors?: Device[];
    profiles?: Profiles;
    bridges?: (Values & { name: string })[];
    sparkplug?: Values;
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
  const [schema, setSchema] = useState<SchemaNode>();
  /** The device or profile shown. */
  const [selected, setSelected] = useState<{ profile?: string; device?: string }>({});
  const [pending, setPending] = useState<Pending>();
  const [problems, setProblems] = useState<Problem[]>([]);
  const [message, setMessage] = useState<string>();
  const editable = canConfigure(props.session) && config?.editable === true;

  const load = () =>
    get<ConfigAnswer>('config').then((c) => {
      setConfig(c);
      // The device or profile shown stays, unless the change removed it.
      setSelected((s) => {
        const there =
          s.device !== undefined
            ? c.config.connectors?.some((d) => d.id === s.device)
            : s.profile !== undefined && s.profile in (c.config.profiles ?? {});
        return there === true ? s : { device: c.config.connectors?.[0]?.id };
      });
    });
  useEffect(() => {
    load().catch((err: unknown) => setMessage((err as Error).message));
    // Without it the forms offer what the file has, as text (a gateway older than the page).
    get<SchemaNode>('config/schema').then(setSchema, () => undefined);
  }, []);
  // What a button did is brought into view: a problem beside its field, else the diff or message at the top.
  useEffect(() => {
    const field = document.querySelector('.config .settings .bad, .config td .bad');
    if (field !== null) field.scrollIntoView({ block: 'center' });
    else document.querySelector('[data-testid=diff], [data-testid=config-message]')?.scrollIntoView({ block: 'start' });
  }, [message, pending]);
  if (config === undefined) return <p class="empty">{message ?? 'Loading…'}</p>;

  const devices = config.config.connectors ?? [];
  const profiles = config.config.profiles;
  const index = devices.findIndex((d) => d.id === selected.device);
  const device = index < 0 ? undefined : devices[index];
  const profile = device?.profile === undefined ? undefined : profiles?.[device.profile];
  /** The device as its connector runs it: its own keys over its profile's. */
  const effective = device && ({ ...profile, ...device } as Device);

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
      const answer = await post<{ reload: { ok: boolean; error?: string; needsRestart?: string[] } }>(
        `config/${pending.route}`,
        body,
        props.session.csrf,
      );
      setPending(undefined);
      // Said once the page shows the file as the change left it.
      await load();
      const restart = answer.reload.needsRestart ?? [];
      setMessage(
        !answer.reload.ok
          ? `written, but the reload failed: ${answer.reload.error}`
          : restart.length > 0
            ? `applied: ${pending.what}; a restart is needed for ${restart.join(', ')}`
            : `applied: ${pending.what}`,
      );
    } catch (err) {
      refused(err);
    }
  };
  const undo = async () => {
    try {
      await post('config/undo', { etag: config.etag }, props.session.csrf);
      setPending(undefined);
      await load();
      setMessage('the last change was undone');
    } catch (err) {
      refused(err);
    }
  };
  const change = (what: string, ops: Op[]) => void preview(what, 'apply', { ops });
  // A device that takes its tags from its profile gets new ones there.
  const tagsPath =
    device?.tags === undefined && profile ? ['profiles', device?.profile ?? '', 'tags'] : ['connectors', index, 'tags'];
  const addTags = (tags: Tag[], what: string) =>
    change(
      what,
      tags.map((value): Op => ({ op: 'add', path: tagsPath, value })),
    );

  return (
    <SchemaContext.Provider value={schema}>
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
              class={d.id === selected.device ? 'active' : ''}
              onClick={() => setSelected({ device: d.id })}
              data-testid={`device-${d.id}`}
            >
              {d.id} <span class="small">({d.type ?? profiles?.[d.profile ?? '']?.type})</span>
            </a>
          ))}
          {Object.keys(profiles ?? {}).map((name) => (
            <a
              key={`profile-${name}`}
              href="#configuration"
              class={name === selected.profile ? 'active' : ''}
              onClick={() => setSelected({ profile: name })}
              data-testid={`profile-${name}`}
            >
              {name} <span class="small">(profile)</span>
            </a>
          ))}
        </nav>
        {profiles && selected.profile !== undefined && selected.profile in profiles && (
          <ProfilePanel
            name={selected.profile}
            profiles={profiles}
            devices={devices}
            editable={editable}
            problems={problems}
            onChange={change}
            onOpenDevice={(id) => setSelected({ device: id })}
          />
        )}
        {device && effective && (
          <>
            <SettingsForm
              title={`Device ${device.id}`}
              testid="device-settings"
              values={device as unknown as Record<string, unknown>}
              path={['connectors', index]}
              type={effective.type}
              editable={editable}
              problems={problems}
              onSave={(changes) =>
                change(
                  `change device ${device.id}`,
                  setOps(['connectors', index], changes, device as unknown as Values),
                )
              }
              extra={
                editable && (
                  <>
                    <button
                      type="button"
                      onClick={() =>
                        // Copied in the file: a password the page only has masked is copied too.
                        change(`copy device ${device.id}`, [
                          { op: 'copy', from: ['connectors', index], path: ['connectors'] },
                          { op: 'set', path: ['connectors', devices.length, 'id'], value: `${device.id}-copy` },
                        ])
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
            <DeviceProfile device={device} onOpenProfile={(name) => setSelected({ profile: name })} />
            {effective.type && (
              <TagTable
                tags={effective.tags}
                type={effective.type}
                path={tagsPath}
                editable={editable && device.tags !== undefined}
                problems={problems}
                onChange={(what, ops) => change(`${what} of ${device.id}`, ops)}
              />
            )}
            {editable && <MakeProfile device={device} index={index} profiles={profiles} onChange={change} />}
            {editable && effective.type === 'modbus' && (
              <ModbusTestRead
                device={effective}
                session={props.session}
                onPick={(tag) => void addTags([tag], `add tag ${tag.name}`)}
              />
            )}
            {editable && effective.type === 'opcua' && (
              <OpcuaBrowse
                device={effective}
                session={props.session}
                onPick={(tags) => void addTags(tags, `add ${tags.length} tag(s)`)}
              />
            )}
            {editable && device.tags !== undefined && (
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
            values={bridge}
            path={['bridges', i]}
            allKeys
            openGroups={['remote']}
            editable={editable}
            problems={problems}
            onSave={(changes) => change(`change bridge ${bridge.name}`, setOps(['bridges', i], changes, bridge))}
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
            onSave={(changes) =>
              change('change the Sparkplug ids', setOps(['sparkplug'], changes, config.config.sparkplug))
            }
          />
        )}
        <details>
          <summary>The file as it is (passwords masked)</summary>
          <pre class="mono small" data-testid="config-text">
            {config.text}
          </pre>
        </details>
      </section>
    </SchemaContext.Provider>
  );
}
