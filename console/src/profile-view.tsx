/**
 * Device profiles in the Configuration view (docs/console.md#configuration): a profile's settings and tags edited
 * as a device's are, copied and removed; a device that takes its tags from a profile shows them read-only with the
 * way to the profile; a device's own tags made into a profile that the device then uses.
 */
import { useState } from 'preact/hooks';
import type { Device, Op, Problem, Profile } from './config-types.js';
import { setOps, SettingsForm } from './settings-form.js';
import { TagTable } from './tag-table.js';

export type Profiles = Record<string, Profile>;

/** The ops that add profile `name`: into the section, or as the section when the file has none yet. */
function addProfile(profiles: Profiles | undefined, name: string, value: Profile): Op {
  return profiles === undefined
    ? { op: 'set', path: ['profiles'], value: { [name]: value } }
    : { op: 'set', path: ['profiles', name], value };
}

export function ProfilePanel(props: {
  name: string;
  profiles: Profiles;
  devices: Device[];
  editable: boolean;
  problems: Problem[];
  onChange: (what: string, ops: Op[]) => void;
  onOpenDevice: (id: string) => void;
}) {
  const { name } = props;
  const profile = props.profiles[name];
  const users = props.devices.filter((d) => d.profile === name);
  const copy = `${name}-copy`;
  return (
    <>
      <SettingsForm
        title={`Profile ${name} (${profile.type})`}
        testid="profile-settings"
        values={profile as Record<string, unknown>}
        path={['profiles', name]}
        type={profile.type}
        editable={props.editable}
        problems={props.problems}
        open
        onSave={(changes) =>
          props.onChange(
            `change profile ${name}`,
            setOps(['profiles', name], changes, profile as Record<string, unknown>),
          )
        }
        extra={
          props.editable && (
            <>
              <button
                type="button"
                disabled={copy in props.profiles}
                title={copy in props.profiles ? `a profile named ${copy} exists` : undefined}
                onClick={() =>
                  props.onChange(`copy profile ${name}`, [
                    { op: 'copy', from: ['profiles', name], path: ['profiles', copy] },
                  ])
                }
              >
                Copy profile
              </button>{' '}
              <button
                type="button"
                onClick={() => props.onChange(`remove profile ${name}`, [{ op: 'remove', path: ['profiles', name] }])}
              >
                Remove profile
              </button>
            </>
          )
        }
      />
      <p data-testid="profile-users">
        {users.length === 0 ? 'No device uses this profile.' : 'Used by '}
        {users.map((d, i) => (
          <span key={d.id}>
            {i > 0 && ', '}
            <a href="#configuration" onClick={() => props.onOpenDevice(d.id)} data-testid={`user-${d.id}`}>
              {d.id}
            </a>
          </span>
        ))}
        {users.length > 0 && ': a change restarts these devices (DDEATH, then a new DBIRTH), and no other.'}
      </p>
      <TagTable
        tags={profile.tags}
        type={profile.type}
        path={['profiles', name, 'tags']}
        editable={props.editable}
        problems={props.problems}
        onChange={(what, ops) => props.onChange(`${what} of profile ${name}`, ops)}
      />
    </>
  );
}

/** press-1, press-2, ...: `press`, the profile of presses; `press-1-profile` when that name is taken. */
function freeName(id: string, profiles: Profiles | undefined): string {
  const base = id.replace(/[-_]?\d+$/, '');
  return base !== '' && !(profiles !== undefined && base in profiles) ? base : `${id}-profile`;
}

/** Where the tags of a device that names a profile come from, and the way to that profile. */
export function DeviceProfile(props: { device: Device; onOpenProfile: (name: string) => void }) {
  const { profile, tags } = props.device;
  if (profile === undefined) return null;
  return (
    <p data-testid="device-profile">
      {tags === undefined
        ? `Tags and the settings this device does not set itself come from profile ${profile} (read-only here). `
        : `This device names profile ${profile} but has a tag list of its own, which takes the place of the profile's. `}
      <button type="button" onClick={() => props.onOpenProfile(profile)} data-testid="open-profile">
        Open profile {profile}
      </button>
    </p>
  );
}

/** A device's own tags made a profile, which the device then uses: the first of identical devices. */
export function MakeProfile(props: {
  device: Device;
  index: number;
  profiles: Profiles | undefined;
  onChange: (what: string, ops: Op[]) => void;
}) {
  const { device } = props;
  const [name, setName] = useState(() => freeName(device.id, props.profiles));
  const { type, tags } = device;
  if (device.profile !== undefined || tags === undefined || type === undefined) return null;
  const taken = props.profiles !== undefined && name in props.profiles;
  return (
    <form
      data-testid="make-profile"
      onSubmit={(e) => {
        e.preventDefault();
        props.onChange(`make profile ${name} of ${device.id}'s tags`, [
          addProfile(props.profiles, name, { type, tags }),
          { op: 'remove', path: ['connectors', props.index, 'tags'] },
          { op: 'set', path: ['connectors', props.index, 'profile'], value: name },
        ]);
      }}
    >
      <p class="small">
        Identical devices? Make these tags profile{' '}
        <input name="profile-name" size={16} value={name} onInput={(e) => setName(e.currentTarget.value)} />{' '}
        <button type="submit" disabled={name === '' || taken}>
          Make profile
        </button>{' '}
        this device then uses; Copy device makes the next one.
        {taken && <span class="bad"> A profile named {name} exists.</span>}
      </p>
    </form>
  );
}
