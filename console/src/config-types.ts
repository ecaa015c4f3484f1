/** The configuration as the Configuration view edits it (docs/console.md#configuration). */

export interface Device {
  id: string;
  /** Left out by a device that takes it from its profile. */
  type?: ConnectorType;
  /** The device profile it takes the keys it does not set from (docs/configuration.md, device profiles). */
  profile?: string;
  transport?: 'tcp' | 'rtu';
  host?: string;
  port?: number;
  path?: string;
  unitId?: number;
  addressBase?: 0 | 1;
  endpoint?: string;
  tags?: Tag[];
}

export type ConnectorType = 'modbus' | 'opcua' | 's7';

/** `profiles.NAME`: any connector key but `id`. */
export type Profile = Omit<Device, 'id' | 'profile' | 'type'> & { type: ConnectorType };

export type Tag = Record<string, unknown> & { name: string };
export type Path = (string | number)[];
export type Op = { op: 'set' | 'add' | 'remove'; path: Path; value?: unknown } | { op: 'copy'; from: Path; path: Path };
export interface Problem {
  path: string;
  message: string;
}

/** How a form field is typed in and sent: text, a number, true/false. */
export type FieldKind = 'text' | 'number' | 'boolean';
export type FieldSpec = readonly (readonly [key: string, kind: FieldKind])[];

const PROPERTIES: FieldSpec = [
  ['engUnit', 'text'],
  ['engLow', 'number'],
  ['engHigh', 'number'],
  ['description', 'text'],
];

/**
 * The keys a tag of each connector type offers in its form, in the order shown (the config reference,
 * docs/configuration.md); a key the tag has beyond these shows too.
 */
export const TAG_FIELDS: Record<ConnectorType, FieldSpec> = {
  modbus: [
    ['name', 'text'],
    ['table', 'text'],
    ['address', 'number'],
    ['datatype', 'text'],
    ['byteOrder', 'text'],
    ['length', 'number'],
    ['bit', 'number'],
    ['scale', 'number'],
    ['offset', 'number'],
    ['deadband', 'number'],
    ['writable', 'boolean'],
    ['roundWrites', 'boolean'],
    ...PROPERTIES,
  ],
  opcua: [
    ['name', 'text'],
    ['nodeId', 'text'],
    ['browsePath', 'text'],
    ['datatype', 'text'],
    ['samplingIntervalMs', 'number'],
    ['writable', 'boolean'],
    ...PROPERTIES,
  ],
  s7: [
    ['name', 'text'],
    ['address', 'text'],
    ['datatype', 'text'],
    ['deadband', 'number'],
    ['writable', 'boolean'],
    ...PROPERTIES,
  ],
};

/** The key path `connectors.0.tags` as the gateway names it in problems. */
export const dotted = (path: Path): string => path.join('.');
