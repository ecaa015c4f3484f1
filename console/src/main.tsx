/**
 * The edgeferry web console: log in, then live views fed by one Server-Sent Events stream (/api/events, 2 updates
 * a second); clients and the log are read from /api/ while their view is open. Actions show only for operators,
 * and every one carries the login's CSRF token.
 */
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, get, post, type Session } from './api.js';
import { Chart } from './chart.js';
import { ConfigView } from './config-view.js';
import { DevicesView } from './devices-view.js';
import { ClientsPanel, LogPanel } from './panels.js';
import { ActionButton, Stat, handled, usePolled } from './widgets.js';
import { ago, bytes, duration, rate, time } from './format.js';
import type { BridgeView, History, Live, Overview, SparkplugView } from './types.js';
import './style.css';

const VIEWS = ['overview', 'bridges', 'sparkplug', 'devices', 'clients', 'log', 'configuration'] as const;
type View = (typeof VIEWS)[number];

function currentView(): View {
  const hash = location.hash.slice(1);
  return (VIEWS as readonly string[]).includes(hash) ? (hash as View) : 'overview';
}

function useHistory(): History | undefined {
  const [history] = usePolled<History>('history', 5000);
  return history;
}

/** The last reload's result: when, and what failed or still waits for a restart. */
function LastReload({ last }: { last: Overview['lastReload'] }) {
  if (last === undefined) return <>none since start</>;
  if (!last.ok) {
    return (
      <span class="bad">
        failed {time(last.atMs)}: {last.error}
      </span>
    );
  }
  const restart = last.needsRestart ?? [];
  return restart.length === 0 ? (
    <span class="good">succeeded {time(last.atMs)}</span>
  ) : (
    <span class="warn" data-testid="needs-restart">
      applied {time(last.atMs)}, except what needs a restart of edgeferry: {restart.join(', ')}
    </span>
  );
}

function OverviewView({ o, session, now }: { o: Overview; session: Session; now: number }) {
  const history = useHistory();
  const storeShare = o.storeBytes === undefined ? undefined : o.storeBytes / o.storeMaxBytes;
  return (
    <section>
      <div class="grid">
        <Stat
          label="Readiness"
          value={o.ready ? 'ready' : 'not ready'}
          tone={o.ready ? 'good' : 'bad'}
          testid="ready"
        />
        {o.devices > 0 && (
          <Stat
            label="Devices up"
            value={`${o.devices - o.devicesDown.length} of ${o.devices}`}
            tone={o.devicesDown.length > 0 ? 'bad' : 'good'}
            testid="devices-up"
          />
        )}
        <Stat label="Clients connected" value={o.clients} testid="clients" />
        <Stat label="Messages in /s" value={rate(o.msgInPerS)} testid="msg-in" />
        <Stat label="Messages out /s" value={rate(o.msgOutPerS)} testid="msg-out" />
        <Stat
          label="Store"
          value={`${bytes(o.storeBytes)} of ${bytes(o.storeMaxBytes)}`}
          tone={storeShare !== undefined && storeShare > 0.8 ? 'warn' : undefined}
        />
        <Stat
          label="Event-loop lag"
          value={`${o.loopLagMs.toFixed(1)} ms`}
          tone={o.loopLagMs > 100 ? 'warn' : undefined}
        />
        <Stat label="Uptime" value={duration(o.uptimeS)} />
        <Stat label="Version" value={o.version} />
      </div>
      {o.devicesDown.length > 0 && (
        <ul class="problems" data-testid="devices-down">
          {o.devicesDown.map((d) => (
            <li key={d.id}>
              <a href="#devices">{d.id}</a> does not answer since {time(d.since)} ({ago(d.since, now)})
              {d.lastError && `: ${d.lastError}`}
            </li>
          ))}
        </ul>
      )}
      {o.problems.length > 0 && (
        <ul class="problems" data-testid="problems">
          {o.problems.map((p) => (
            <li key={p}>{p}</li>
          ))}
        </ul>
      )}
      <div class="card">
        <h3>Messages per second, last hour</h3>
        {history && (
          <Chart
            t={history.t}
            series={[
              { label: 'in', values: history.msgInPerS, color: '#3b82f6' },
              { label: 'out', values: history.msgOutPerS, color: '#22c55e' },
            ]}
          />
        )}
      </div>
      <div class="card">
        <h3>Configuration</h3>
        <p class="mono">{o.configFile ?? '–'}</p>
        <p data-testid="last-reload">
          Last reload: <LastReload last={o.lastReload} />
        </p>
        <ActionButton
          session={session}
          route="actions/reload"
          label="Reload configuration"
          confirm="Reload the configuration file now?"
          testid="reload"
          said={(a) =>
            (a.needsRestart as string[]).length === 0
              ? 'done'
              : `done; a restart is needed for ${(a.needsRestart as string[]).join(', ')}`
          }
        />
      </div>
    </section>
  );
}

function stateTone(state: string): 'good' | 'bad' | 'warn' {
  return state === 'online' ? 'good' : state === 'offline' || state === 'stopped' ? 'bad' : 'warn';
}

function BridgesView({ bridges, session }: { bridges: BridgeView[]; session: Session }) {
  const history = useHistory();
  if (bridges.length === 0) return <p class="empty">No bridges are configured.</p>;
  return (
    <section class="cards">
      {bridges.map((b) => {
        const drops = Object.entries(b.dropped).filter(([, n]) => n > 0);
        return (
          <div class="card" key={b.name} data-testid={`bridge-${b.name}`}>
            <h3>
              {b.name}{' '}
              <span class={`badge ${stateTone(b.state)}`} data-testid="bridge-state">
                {b.state}
              </span>
            </h3>
            {b.error && (
              <p class="bad">
                {b.error}
                {b.retryInMs !== undefined && ` (retry in ${duration(b.retryInMs / 1000)})`}
              </p>
            )}
            {b.pausedReason && <p class="warn">paused: {b.pausedReason}</p>}
            <p class="mono small">{b.urls.join(', ')}</p>
            <div class="grid">
              <Stat label="Backlog" value={b.backlogMessages.toLocaleString()} testid="backlog" />
              <Stat label="Backlog size" value={bytes(b.backlogBytes)} />
              <Stat label="Oldest entry" value={b.backlogMessages > 0 ? duration(b.oldestAgeS) : '–'} />
              <Stat label="Replay rate /s" value={rate(b.replayRatePerS)} />
              <Stat label="Drained in" value={b.drainS === undefined ? '–' : duration(b.drainS)} />
              <Stat label="In flight" value={b.inflight} />
              <Stat
                label="Dead letters"
                value={b.deadLetters}
                tone={b.deadLetters > 0 ? 'warn' : undefined}
                testid="dead-letters"
              />
              <Stat label="Reconnects" value={b.reconnects} />
            </div>
            {drops.length > 0 && <p class="warn">Dropped: {drops.map(([why, n]) => `${why} ${n}`).join(', ')}</p>}
            {history?.backlog[b.name] && (
              <Chart
                t={history.t}
                series={[{ label: 'backlog', values: history.backlog[b.name], color: '#f59e0b' }]}
                height={120}
              />
            )}
            <ActionButton
              session={session}
              route="actions/reconnect-bridge"
              body={{ bridge: b.name }}
              label="Reconnect now"
              testid={`reconnect-${b.name}`}
            />
            {b.deadLetters > 0 && (
              <>
                <ActionButton
                  session={session}
                  route={`bridges/${encodeURIComponent(b.name)}/dead-letters/requeue`}
                  label="Send dead letters again"
                  confirm={`Send the ${b.deadLetters} dead letters of ${b.name} to the central broker again?`}
                  testid={`requeue-${b.name}`}
                  said={(a) => `moved ${String(a.moved)}, ${String(a.left)} left`}
                />
                <ActionButton
                  session={session}
                  route={`bridges/${encodeURIComponent(b.name)}/dead-letters/delete`}
                  label="Delete dead letters"
                  confirm={`Delete the ${b.deadLetters} dead letters of ${b.name}? They are not sent.`}
                  testid={`delete-dead-${b.name}`}
                  said={(a) => `deleted ${String(a.deleted)}`}
                />
              </>
            )}
          </div>
        );
      })}
    </section>
  );
}

function SparkplugPanel({ sp, session, now }: { sp: SparkplugView | null; session: Session; now: number }) {
  if (sp === null) return <p class="empty">No Sparkplug edge node is configured.</p>;
  const c = sp.lastCommand;
  return (
    <section class="card">
      <div class="grid">
        <Stat label="Group / edge node" value={`${sp.groupId} / ${sp.edgeNodeId}`} />
        <Stat label="bdSeq" value={sp.bdSeq} />
        <Stat label="Local session" value={sp.localBorn ? 'born' : 'dead'} tone={sp.localBorn ? 'good' : 'bad'} />
        <Stat label="Uplink session" value={sp.uplinkBorn ? 'born' : 'dead'} tone={sp.uplinkBorn ? 'good' : 'warn'} />
        <Stat
          label="Primary host"
          value={sp.primaryHostOnline === undefined ? 'not configured' : sp.primaryHostOnline ? 'online' : 'offline'}
          tone={sp.primaryHostOnline === false ? 'bad' : undefined}
        />
        <Stat label="Devices online" value={sp.devicesOnline} />
        <Stat label="Writes ok / failed" value={`${sp.writesOk} / ${sp.writesFailed}`} />
        <Stat label="Commands refused" value={sp.commandsRefused} />
      </div>
      <p>
        Last command:{' '}
        {c === undefined
          ? 'none since start'
          : `${c.kind} ${c.topic} from ${c.user ?? c.who}${c.remote ? ` (${c.remote})` : ''}, ${ago(c.at, now)}`}
      </p>
      <ActionButton
        session={session}
        route="actions/rebirth"
        label="Request rebirth"
        confirm="Publish NBIRTH and every DBIRTH again?"
        testid="rebirth"
      />
    </section>
  );
}

function Login({ onLogin }: { onLogin: (s: Session) => void }) {
  const [user, setUser] = useState('');
  const [password, setPassword] = useState('');
  const [error, setError] = useState<string>();
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      onLogin(await post<Session>('login', { user, password }));
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <form class="login card" onSubmit={handled(submit)}>
      <h2>edgeferry</h2>
      <label>
        User{' '}
        <input
          name="user"
          autocomplete="username"
          value={user}
          onInput={(e) => setUser((e.target as HTMLInputElement).value)}
        />
      </label>
      <label>
        Password{' '}
        <input
          name="password"
          type="password"
          autocomplete="current-password"
          value={password}
          onInput={(e) => setPassword((e.target as HTMLInputElement).value)}
        />
      </label>
      <button type="submit">Log in</button>
      {error && (
        <p class="bad" data-testid="login-error">
          {error}
        </p>
      )}
    </form>
  );
}

function useTheme(): [string, () => void] {
  const [theme, setTheme] = useState(
    () => localStorage.getItem('theme') ?? (matchMedia('(prefers-color-scheme: light)').matches ? 'light' : 'dark'),
  );
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
    localStorage.setItem('theme', theme);
  }, [theme]);
  return [theme, () => setTheme(theme === 'dark' ? 'light' : 'dark')];
}

function App() {
  const [session, setSession] = useState<Session | null | undefined>(undefined);
  const [live, setLive] = useState<Live>();
  const [connected, setConnected] = useState(false);
  const [view, setView] = useState<View>(currentView());
  const [theme, toggleTheme] = useTheme();

  useEffect(() => {
    get<Session>('session').then(setSession, () => setSession(null));
    const onHash = () => setView(currentView());
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);

  useEffect(() => {
    if (!session) return;
    const events = new EventSource('/api/events');
    events.onmessage = (e) => setLive(JSON.parse(e.data as string) as Live);
    events.onopen = () => setConnected(true);
    events.onerror = () => {
      setConnected(false);
      // A 401 (the login expired, or the gateway restarted) ends the stream for good: back to the login form.
      get<Session>('session').catch(
        (err: unknown) => err instanceof ApiError && err.status === 401 && setSession(null),
      );
    };
    return () => events.close();
  }, [session]);

  if (session === undefined) return null;
  if (session === null) return <Login onLogin={setSession} />;
  const logout = () => post('logout', {}).finally(() => setSession(null));
  const now = live?.at ?? Date.now();
  return (
    <>
      <header>
        <strong>edgeferry</strong>
        <nav>
          {VIEWS.map((v) => (
            <a key={v} href={`#${v}`} class={v === view ? 'active' : ''}>
              {v[0].toUpperCase() + v.slice(1)}
            </a>
          ))}
        </nav>
        <span class="who">
          <span
            class={`dot ${connected ? 'good' : 'bad'}`}
            title={connected ? 'live' : 'reconnecting'}
            data-testid="live"
          />
          <span data-testid="whoami">
            {session.user} ({session.role})
          </span>
          <button type="button" onClick={toggleTheme} title="Theme">
            {theme === 'dark' ? 'Light' : 'Dark'}
          </button>
          <button type="button" onClick={handled(logout)}>
            Log out
          </button>
        </span>
      </header>
      <main>
        {live === undefined ? (
          <p class="empty">Connecting…</p>
        ) : view === 'overview' ? (
          <OverviewView o={live.overview} session={session} now={now} />
        ) : view === 'bridges' ? (
          <BridgesView bridges={live.bridges} session={session} />
        ) : view === 'sparkplug' ? (
          <SparkplugPanel sp={live.sparkplug} session={session} now={now} />
        ) : view === 'devices' ? (
          <DevicesView devices={live.devices} session={session} now={now} />
        ) : view === 'clients' ? (
          <ClientsPanel session={session} now={now} />
        ) : view === 'configuration' ? (
          <ConfigView session={session} />
        ) : (
          <LogPanel />
        )}
      </main>
    </>
  );
}

render(<App />, document.getElementById('app') as HTMLElement);
