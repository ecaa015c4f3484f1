/**
 * A Modbus test read in the Configuration view (docs/console.md#modbus-test-read): a register range read now,
 * decoded in every layout a tag can have, each value a button that picks that layout into a new tag.
 */
import { useState } from 'preact/hooks';
import { post, type Session } from './api.js';
import type { Device, Tag } from './config-types.js';

interface RegisterRow {
  address: number;
  hex: string;
  int16: number;
  uint16: number;
  int32?: Record<string, number>;
  float32?: Record<string, number | string>;
}

const WORD_ORDERS = ['ABCD', 'BADC', 'CDAB', 'DCBA'];

export function ModbusTestRead(props: { device: Device; session: Session; onPick: (tag: Tag) => void }) {
  const d = props.device;
  const [address, setAddress] = useState(String(d.addressBase ?? 0));
  const [count, setCount] = useState('10');
  const [table, setTable] = useState('holding');
  const [rows, setRows] = useState<RegisterRow[]>();
  const [error, setError] = useState<string>();
  const [name, setName] = useState('');
  const read = async () => {
    setError(undefined);
    const link =
      d.transport === 'rtu'
        ? { transport: 'rtu', path: d.path }
        : { transport: 'tcp', host: d.host, port: d.port ?? 502 };
    try {
      const answer = await post<{ rows: RegisterRow[] }>(
        'config/modbus-read',
        {
          link,
          unitId: d.unitId ?? 1,
          table,
          address: Number(address),
          addressBase: d.addressBase ?? 0,
          count: Number(count),
        },
        props.session.csrf,
      );
      setRows(answer.rows);
    } catch (err) {
      setRows(undefined);
      setError((err as Error).message);
    }
  };
  const pick = (row: RegisterRow, datatype: string, byteOrder = 'ABCD') =>
    props.onPick({ name: name || `${table}-${row.address}`, table, address: row.address, datatype, byteOrder });
  return (
    <div class="card" data-testid="test-read">
      <h3>Test read (unit {d.unitId ?? 1})</h3>
      <form
        class="filter"
        onSubmit={(e) => {
          e.preventDefault();
          void read();
        }}
      >
        <select value={table} onChange={(e) => setTable(e.currentTarget.value)} name="table">
          <option value="holding">holding</option>
          <option value="input">input</option>
        </select>
        <label>
          address <input name="address" value={address} onInput={(e) => setAddress(e.currentTarget.value)} size={6} />
        </label>
        <label>
          count <input name="count" value={count} onInput={(e) => setCount(e.currentTarget.value)} size={4} />
        </label>
        <button type="submit">Read now</button>
        <label>
          new tag name <input name="tag-name" value={name} onInput={(e) => setName(e.currentTarget.value)} size={14} />
        </label>
      </form>
      {error && <p class="bad">{error}</p>}
      {rows && (
        <div class="scroll">
          <table class="mono small" data-testid="test-read-table">
            <thead>
              <tr>
                <th>address</th>
                <th>hex</th>
                <th>int16</th>
                <th>uint16</th>
                {WORD_ORDERS.map((o) => (
                  <th key={o}>float32 {o}</th>
                ))}
                {WORD_ORDERS.map((o) => (
                  <th key={o}>int32 {o}</th>
                ))}
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => (
                <tr key={row.address}>
                  <td>{row.address}</td>
                  <td>{row.hex}</td>
                  <td>
                    <button type="button" class="pick" onClick={() => pick(row, 'int16')}>
                      {row.int16}
                    </button>
                  </td>
                  <td>
                    <button type="button" class="pick" onClick={() => pick(row, 'uint16')}>
                      {row.uint16}
                    </button>
                  </td>
                  {WORD_ORDERS.map((o) => (
                    <td key={o}>
                      {row.float32 && (
                        <button
                          type="button"
                          class="pick"
                          onClick={() => pick(row, 'float32', o)}
                          data-testid={`pick-${row.address}-float32-${o}`}
                        >
                          {shortNumber(row.float32[o])}
                        </button>
                      )}
                    </td>
                  ))}
                  {WORD_ORDERS.map((o) => (
                    <td key={o}>
                      {row.int32 && (
                        <button type="button" class="pick" onClick={() => pick(row, 'int32', o)}>
                          {row.int32[o]}
                        </button>
                      )}
                    </td>
                  ))}
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function shortNumber(v: number | string | undefined): string {
  if (typeof v !== 'number') return String(v);
  if (v === 0) return '0';
  return Math.abs(v) >= 1e-3 && Math.abs(v) < 1e7 ? String(Number(v.toPrecision(7))) : v.toExponential(3);
}
