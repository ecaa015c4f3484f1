/** The console's calls to the gateway's /api/ (the same endpoints scripts use; docs/console.md). */

export interface Session {
  user: string;
  role: 'viewer' | 'operator' | 'engineer';
  csrf: string;
}

/** Operators act; engineers act too, and also change the configuration. */
export function canAct(session: Session): boolean {
  return session.role !== 'viewer';
}

export function canConfigure(session: Session): boolean {
  return session.role === 'engineer';
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly problems?: { path: string; message: string }[],
  ) {
    super(message);
  }
}

async function answer<T>(res: Response): Promise<T> {
  const body = (await res.json().catch(() => ({}))) as {
    error?: string;
    problems?: { path: string; message: string }[];
  };
  if (!res.ok) throw new ApiError(res.status, body.error ?? res.statusText, body.problems);
  return body as T;
}

export async function get<T>(route: string): Promise<T> {
  return answer<T>(await fetch(`/api/${route}`, { credentials: 'same-origin' }));
}

export async function post<T>(route: string, body: object, csrf?: string): Promise<T> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (csrf !== undefined) headers['x-csrf-token'] = csrf;
  return answer<T>(
    await fetch(`/api/${route}`, { method: 'POST', credentials: 'same-origin', headers, body: JSON.stringify(body) }),
  );
}
