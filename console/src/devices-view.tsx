/** The Devices view: each connector with its tags, values and quality; operators write a tag from here. */
import { useState } from 'preact/hooks';
import { canAct, post, type Session } from './api.js';
import { ago, time, value } from './format.js';
import type { DeviceView, TagView } from './types.js';
import { handled } from './widgets.js';

function WriteCell({ device, tag, session }: { device: string; tag: string; session: Session }) {
  const [input, setInput] = useState('');
  const [result, setResult] = useState<{ ok: boolean; text: string }>();
  if (!canAct(session)) return null;
  const write = async (e: Event) => {
    e.preventDefault();
    try {
      const r = await post<{ readBack?: string; matches: boolean }>(
        'actions/write-tag',
        { device, tag, value: input },
        session.csrf,
      );
      setResult({ ok: r.matches, text: r.readBack === undefined ? 'written' : `read back ${r.readBack}` });
    } catch (err) {
      setResult({ ok: false, text: (err as Error).message });
    }
  };
  return (
    <form class="write" onSubmit={handled(write)}>
      <input
        value={input}
        onInput={(e) => setInput((e.target as HTMLInputElement).value)}
        aria-label={`new value for ${tag}`}
        data-testid={`write-${device}-${tag}`}
      />
      <button type="submit">Write</button>
      {result && (
        <span class={result.ok ? 'good' : 'bad'} data-testid={`write-${device}-${tag}-result`}>
          {result.text}
        </span>
      )}
    </form>
  );
}

/** A tag's quality in words: `stale` for a value kept from before its device was lost. */
function qualityText(t: TagView): string {
  return t.timestamp === undefined ? 'no value' : t.stale ? 'stale' : t.quality;
}

export function DevicesView({ devices, session, now }: { devices: DeviceView[]; session: Session; now: number }) {
  const [filter, setFilter] = useState('');
  const f = filter.trim().toLowerCase();
  if (devices.length === 0) return <p class="empty">No connectors are configured.</p>;
  return (
    <section>
      <input
        class="filter"
        placeholder="Filter devices and tags"
        value={filter}
        onInput={(e) => setFilter((e.target as HTMLInputElement).value)}
        data-testid="tag-filter"
      />
      {devices.map((d) => {
        const tags = d.tags.filter(
          (t) => f === '' || d.id.toLowerCase().includes(f) || t.name.toLowerCase().includes(f),
        );
        if (tags.length === 0 && f !== '') return null;
        return (
          <div class="card" key={d.id} data-testid={`device-${d.id}`}>
            <h3>
              {d.id}{' '}
              <span class={`badge ${d.online ? 'good' : 'bad'}`} data-testid="device-state">
                {d.online ? 'up' : 'down'}
              </span>{' '}
              <span class="small">
                since {time(d.since)} ({ago(d.since, now)})
              </span>
            </h3>
            {!d.online && d.lastError && <p class="bad">{d.lastError}</p>}
            <p class="small">
              {d.samples.toLocaleString()} samples, {d.deaths} losses, {d.restarts} restarts
              {d.readP50Ms !== undefined && (
                <span data-testid={`poll-${d.id}`}>
                  , poll {d.readP50Ms.toFixed(1)} ms (p99 {(d.readP99Ms ?? d.readP50Ms).toFixed(1)} ms)
                </span>
              )}
            </p>
            <div class="scroll">
              <table class="tags">
                <thead>
                  <tr>
                    <th>Tag</th>
                    <th>Value</th>
                    <th>Quality</th>
                    <th class="type">Type</th>
                    <th>Timestamp</th>
                    {canAct(session) && <th>Write</th>}
                  </tr>
                </thead>
                <tbody>
                  {tags.map((t) => (
                    <tr key={t.name} title={t.description}>
                      <td>{t.name}</td>
                      <td class={`value ${t.stale ? 'stale' : ''}`}>
                        <span class="mono" data-testid={`value-${d.id}-${t.name}`}>
                          {value(t.value)}
                        </span>
                        {t.unit && ` ${t.unit}`}
                      </td>
                      <td
                        class={t.stale ? 'warn' : t.quality === 'good' ? 'good' : 'bad'}
                        data-testid={`quality-${d.id}-${t.name}`}
                      >
                        {qualityText(t)}
                      </td>
                      <td class="type">{t.datatype}</td>
                      <td class="time">{time(t.timestamp)}</td>
                      {canAct(session) && (
                        <td class="write-cell">
                          {t.writable && <WriteCell device={d.id} tag={t.name} session={session} />}
                        </td>
                      )}
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          </div>
        );
      })}
    </section>
  );
}
