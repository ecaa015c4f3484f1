/** What every view of the console uses: actions, polled reads, a figure with its label. */
import { useEffect, useState } from 'preact/hooks';
import { ApiError, canAct, get, post, type Session } from './api.js';

/** An async event handler whose failure is logged: Preact ignores the promise a handler returns. */
export function handled<A extends unknown[]>(handler: (...args: A) => Promise<unknown>): (...args: A) => void {
  return (...args) => {
    handler(...args).catch((err: unknown) => console.error(err));
  };
}

/** Re-reads a GET endpoint every `everyMs` while mounted. */
export function usePolled<T>(route: string, everyMs: number): [T | undefined, () => void] {
  const [data, setData] = useState<T>();
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    const load = () =>
      get<T>(route).then(
        (d) => live && setData(d),
        () => undefined,
      );
    void load(); // handles its own failure: the next poll tries again
    const timer = setInterval(load, everyMs);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [route, everyMs, tick]);
  return [data, () => setTick((n) => n + 1)];
}

/** An action button: confirms if asked, posts with the CSRF token, shows what came back (`done`, or `said` of the answer). */
export function ActionButton(props: {
  session: Session;
  /** `actions/<name>`, or another action's route under /api/. */
  route: string;
  body?: object;
  label: string;
  confirm?: string;
  testid?: string;
  said?: (answer: Record<string, unknown>) => string;
}) {
  const [state, setState] = useState<{ busy: boolean; message?: string; error?: boolean }>({ busy: false });
  if (!canAct(props.session)) return null;
  const run = async () => {
    if (props.confirm !== undefined && !window.confirm(props.confirm)) return;
    setState({ busy: true });
    try {
      const answer = await post<Record<string, unknown>>(props.route, props.body ?? {}, props.session.csrf);
      setState({ busy: false, message: props.said?.(answer) ?? 'done' });
    } catch (err) {
      const e = err as ApiError;
      const problems = e.problems?.map((p) => `${p.path}: ${p.message}`).join('; ');
      setState({ busy: false, error: true, message: problems ? `${e.message} (${problems})` : e.message });
    }
  };
  return (
    <span class="action">
      <button type="button" disabled={state.busy} onClick={handled(run)} data-testid={props.testid}>
        {props.label}
      </button>
      {state.message && (
        <span class={state.error ? 'bad' : 'good'} data-testid={props.testid && `${props.testid}-result`}>
          {state.message}
        </span>
      )}
    </span>
  );
}

export function Stat(props: {
  label: string;
  value: string | number;
  tone?: 'good' | 'bad' | 'warn';
  testid?: string;
}) {
  return (
    <div class="stat">
      <div class="label">{props.label}</div>
      <div class={`value ${props.tone ?? ''}`} data-testid={props.testid}>
        {props.value}
      </div>
    </div>
  );
}
