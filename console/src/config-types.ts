/** The configuration as the Configuration view edits it (docs/console.md#configuration). */

export interface Device {
  id: string;
  type: 'modbus' | 'opcua' | 's7';
  transport?: 'tcp' | 'rtu';
  host?: string;
  port?: number;
  path?: string;
  unitId?: number;
  addressBase?: 0 | 1;
  endpoint?: string;
  tags?: Tag[];
}

export type Tag = Record<string, unknown> & { name: string };
export type Op = { op: 'set' | 'add' | 'remove'; path: (string | number)[]; value?: unknown };
export interface Problem {
  path: string;
  message: string;
}
