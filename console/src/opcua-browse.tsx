/**
 * The OPC UA browse panel of the Configuration view (docs/console.md#opc-ua-browse): a node's children with
 * values and units, variables ticked into tags, an untrusted server certificate trusted by its thumbprint.
 */
import { useEffect, useState } from 'preact/hooks';
import { post, type Session } from './api.js';
import type { Device, Tag } from './config-types.js';

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

export function OpcuaBrowse(props: { device: Device; session: Session; onPick: (tags: Tag[]) => void }) {
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
