/** The Clients and Log views, read from /api/ while they are open. */
import { useMemo, useState } from 'preact/hooks';
import { type Session } from './api.js';
import { ago, duration, fields, time } from './format.js';
import type { ClientsView } from './types.js';
import { ActionButton, usePolled } from './widgets.js';

export function ClientsPanel({ session, now }: { session: Session; now: number }) {
  const [clients] = usePolled<ClientsView>('clients', 2000);
  if (clients === undefined) return <p class="empty">Loading…</p>;
  return (
    <section>
      <div class="card">
        <h3>Connected ({clients.connected.length})</h3>
        <div class="scroll">
          <table data-testid="clients-table">
            <thead>
              <tr>
                <th>Client id</th>
                <th>User</th>
                <th>Address</th>
                <th>MQTT</th>
                <th>Listener</th>
                <th>Subs</th>
                <th>Queued</th>
                <th>In flight</th>
                <th>Connected</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {clients.connected.map((c) => (
                <tr key={c.clientId}>
                  <td class="mono">{c.clientId}</td>
                  <td>{c.username ?? '–'}</td>
                  <td class="mono">{c.remote}</td>
                  <td>{c.protocolVersion === 5 ? '5.0' : '3.1.1'}</td>
                  <td>{c.listener}</td>
                  <td>{c.subscriptions}</td>
                  <td>{c.queued}</td>
                  <td>{c.inflight}</td>
                  <td>{ago(c.connectedSinceMs, now)}</td>
                  <td>
                    <ActionButton
                      session={session}
                      route="actions/disconnect-client"
                      body={{ clientId: c.clientId }}
                      label="Disconnect"
                      confirm={`Disconnect ${c.clientId}?`}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </div>
      <div class="card">
        <h3>Offline persistent sessions ({clients.offline.length})</h3>
        <div class="scroll">
          <table>
            <thead>
              <tr>
                <th>Client id</th>
                <th>Owner</th>
                <th>Queued</th>
                <th>Subs</th>
                <th>Expiry</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {clients.offline.map((s) => (
                <tr key={s.clientId}>
                  <td class="mono">{s.clientId}</td>
                  <td>{s.owner ?? '–'}</td>
                  <td>{s.queued}</td>
                  <td>{s.subscriptions}</td>
                  <td>{s.expiryIntervalS === 0xffffffff ? 'never' : duration(s.expiryIntervalS)}</td>
                  <td>
                    <ActionButton
                      session={session}
                      route="actions/delete-session"
                      body={{ clientId: s.clientId }}
                      label="Delete"
                      confirm={`Delete the session of ${s.clientId} and its queued messages?`}
                    />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </div>
    </section>
  );
}

const LEVELS: Record<number, string> = {
  10: 'trace',
  20: 'debug',
  30: 'info',
  40: 'warn',
  50: 'error',
  60: 'fatal',
};

export function LogPanel() {
  const [lines] = usePolled<Record<string, unknown>[]>('log', 2000);
  const [filter, setFilter] = useState('');
  const shown = useMemo(() => {
    const f = filter.trim().toLowerCase();
    const all = [...(lines ?? [])].reverse();
    return f === '' ? all : all.filter((l) => JSON.stringify(l).toLowerCase().includes(f));
  }, [lines, filter]);
  return (
    <section>
      <input
        class="filter"
        placeholder="Filter the log"
        value={filter}
        onInput={(e) => setFilter((e.target as HTMLInputElement).value)}
      />
      <div class="card scroll">
        <table class="log" data-testid="log-table">
          <tbody>
            {shown.map((l, i) => {
              const {
                level,
                time: t,
                msg,
                pid: _pid,
                hostname: _host,
                ...rest
              } = l as { level: number; time: number; msg: string; [key: string]: unknown };
              const audit = rest.mod === 'audit';
              if (audit) delete rest.mod; // the level column says it
              return (
                <tr key={i}>
                  <td class="nowrap">{time(t)}</td>
                  <td class={level >= 50 ? 'bad' : level >= 40 ? 'warn' : ''}>{audit ? 'audit' : LEVELS[level]}</td>
                  <td>{msg}</td>
                  <td>
                    <div class="details">
                      {fields(rest).map(([k, v]) => (
                        <span key={k} class="field">
                          <span class="small">{k}</span> {v}
                        </span>
                      ))}
                    </div>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    </section>
  );
}
