/** Numbers, sizes, durations and times in the words and units an operator reads at a glance. */

export function bytes(n: number | undefined): string {
  if (n === undefined) return '–';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n < 10 && i > 0 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

export function rate(n: number): string {
  return n >= 100 ? Math.round(n).toLocaleString() : n.toFixed(1);
}

export function duration(s: number | undefined): string {
  if (s === undefined || !Number.isFinite(s)) return '–';
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.round((s % 86400) / 3600)} h`;
}

export function time(ms: number | undefined): string {
  if (ms === undefined) return '–';
  const d = new Date(ms);
  const sameDay = d.toDateString() === new Date().toDateString();
  return sameDay ? d.toLocaleTimeString() : d.toLocaleString();
}

export function ago(ms: number | undefined, now: number): string {
  return ms === undefined ? '–' : `${duration(Math.max(0, (now - ms) / 1000))} ago`;
}

export function value(v: unknown): string {
  if (v === null || v === undefined) return '–';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toPrecision(6).replace(/\.?0+$/, '');
  if (Array.isArray(v)) return `[${v.join(', ')}]`;
  return String(v);
}

/** A chart's time tick: hours and minutes, with seconds when the ticks are less than a minute apart. */
export function clock(epochS: number, stepS: number): string {
  const d = new Date(epochS * 1000);
  return stepS < 60
    ? d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' })
    : d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

/**
 * A log line's fields as `[key, text]` pairs to read: nested objects flattened (`body.clientId`), an error as its
 * message, a list of objects (the problems of a config) as `path: message; ...`.
 */
export function fields(line: Record<string, unknown>, prefix = ''): [string, string][] {
  const out: [string, string][] = [];
  for (const [key, v] of Object.entries(line)) {
    const name = prefix + key;
    if (v === null || v === undefined) continue;
    if (key === 'err' && typeof v === 'object' && 'message' in v) out.push([name, String(v.message)]);
    else if (Array.isArray(v)) out.push([name, v.map(item).join('; ')]);
    else if (typeof v === 'object') out.push(...fields(v as Record<string, unknown>, `${name}.`));
    else out.push([name, String(v)]);
  }
  return out;
}

function item(v: unknown): string {
  return v !== null && typeof v === 'object' ? Object.values(v).map(String).join(': ') : String(v);
}
