/**
 * Device profiles (docs/architecture.md#device-profiles): a connector entry with `profile: NAME` gets every key
 * of `profiles.NAME` that it does not set itself, before validation, so each device is checked whole, as if
 * written out. A problem in a key the device took from its profile is reported at the profile's line, once for
 * all its devices; a problem only one device has (its own `addressBase` against the profile's addresses) names
 * that device.
 */
export type Path = readonly (string | number)[];

export interface Expansion {
  /** The config input with every profile reference replaced by the profile's keys. */
  readonly input: unknown;
  /** Bad references: no such profile, or one for another connector type. */
  readonly problems: readonly { readonly path: Path; readonly message: string }[];
  /**
   * Where a problem found at `path` of the expanded input belongs in the file, and the device to name when it
   * is in a key the device took from its profile; null when it follows from a bad reference (already reported).
   */
  locate(path: Path): { path: Path; device?: string } | null;
}

type Entry = Record<string, unknown>;

const isEntry = (value: unknown): value is Entry =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export function expandProfiles(input: unknown): Expansion {
  const noProfiles: Expansion = { input, problems: [], locate: (path) => ({ path }) };
  if (!isEntry(input) || !Array.isArray(input.connectors)) return noProfiles;
  const profiles = isEntry(input.profiles) ? input.profiles : {};
  const problems: { path: Path; message: string }[] = [];
  /** Per connector index: the profile it took keys from, and which keys. */
  const origins = new Map<number, { profile: string; keys: ReadonlySet<string>; device: string }>();
  const broken = new Set<number>();

  const connectors = input.connectors.map((entry: unknown, i) => {
    if (!isEntry(entry) || entry.profile === undefined) return entry;
    const { profile: name, ...own } = entry;
    const profile = typeof name === 'string' ? profiles[name] : undefined;
    if (!isEntry(profile)) {
      const known = Object.keys(profiles);
      const hint = known.length > 0 ? `profiles: ${known.join(', ')}` : 'the config has no profiles section';
      problems.push({
        path: ['connectors', i, 'profile'],
        message: `no profile named ${JSON.stringify(name)} (${hint})`,
      });
      broken.add(i);
      return own;
    }
    if (own.type !== undefined && own.type !== profile.type) {
      problems.push({
        path: ['connectors', i, 'type'],
        message: `profile "${name as string}" is for ${String(profile.type)} connectors, not ${String(own.type)}`,
      });
      broken.add(i);
      return own;
    }
    const keys = new Set(Object.keys(profile).filter((key) => !(key in own)));
    origins.set(i, { profile: name as string, keys, device: String(own.id) });
    // The profile's name stays with a device that has the profile's tags: it is an instance of the profile's
    // Sparkplug Template (docs/architecture.md#sparkplug-templates); one with a tag list of its own is not.
    return keys.has('tags') ? { ...profile, ...own, profile: name } : { ...profile, ...own };
  });

  return {
    input: { ...input, connectors },
    problems,
    locate(path) {
      if (path[0] !== 'connectors' || typeof path[1] !== 'number') return { path };
      if (broken.has(path[1])) return null;
      const origin = origins.get(path[1]);
      const key = path[2];
      if (origin === undefined || typeof key !== 'string' || !origin.keys.has(key)) return { path };
      return { path: ['profiles', origin.profile, ...path.slice(2)], device: origin.device };
    },
  };
}
