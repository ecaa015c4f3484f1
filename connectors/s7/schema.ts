/**
 * The config of one S7 connector (= one Sparkplug device = one CPU). A pure schema file: config/schema.ts composes
 * it into the `connectors:` list (docs/configuration.md#s7-connectors).
 *
 *   - id: line-3
 *     type: s7
 *     host: 10.0.0.31
 *     rack: 0
 *     slot: 1                 # S7-1200/1500: 1; S7-300: 2; S7-400: see the hardware configuration
 *     tags:
 *       - { name: speed, address: 'DB10,REAL4', engUnit: rpm }
 *       - { name: running, address: Q0.1 }
 */
import { z } from 'zod';
import { checkTagProperties, tagPropertyKeys } from '../tag-properties.js';
import { AddressError, byteLength, parseAddress, S7_TYPES } from './address.js';
import { writeLimit } from './s7comm.js';
import { isNumeric } from './values.js';

const tsap = z.number().int().min(0).max(0xffff);

const tagSchema = z
  .strictObject({
    /** The Sparkplug metric name; `/` builds folders in host applications. */
    name: z.string().min(1),
    /** `DB10,REAL4`, `DB10.DBX2.1`, `MW20`, `I0.3`, `Q1.0`… (connectors/s7/address.ts). */
    address: z.string().min(1),
    /** Reads a sized address (B, W, D) as another type of that size, e.g. MD20 as REAL. */
    datatype: z.enum(S7_TYPES).optional(),
    /** Report by exception: a numeric change smaller than this is not published. */
    deadband: z.number().nonnegative().optional(),
    writable: z.boolean().default(false),
    /** engUnit, engLow, engHigh, description: published in the DBIRTH. */
    ...tagPropertyKeys,
  })
  .superRefine((tag, ctx) => {
    const issue = (path: string, message: string): void => ctx.addIssue({ code: 'custom', path: [path], message });
    let address;
    try {
      address = parseAddress(tag.address, tag.datatype);
    } catch (err) {
      if (err instanceof AddressError) {
        issue(err.key, err.message);
        return;
      }
      throw err;
    }
    const numeric = isNumeric(address);
    checkTagProperties(tag, numeric, issue);
    if (!numeric && tag.deadband !== undefined) issue('deadband', 'a deadband applies to single numbers only');
    if (tag.writable && address.area === 'I') issue('writable', 'inputs (I/E) are read-only: the CPU overwrites them');
    if (tag.writable && address.type === 'BOOL' && address.array && (address.bit !== 0 || address.count % 8 !== 0)) {
      issue('writable', 'a writable BOOL array must cover whole bytes (start at bit 0, a multiple of 8 bits)');
    }
  });

const common = {
  id: z.string().regex(/^[^+/#\u0000]+$/, 'must be a non-empty Sparkplug device id without +, /, # (or NUL)'),
  type: z.literal('s7'),
  /** Set by the profile expansion (src/config/profiles.ts): the device profile whose tags this device has. */
  profile: z.string().optional(),
  host: z.string().min(1),
  /** ISO-on-TCP (RFC 1006). */
  port: z.number().int().min(1).max(65_535).default(102),
  /** Where the CPU sits (a PG connection): S7-1200/1500 rack 0 slot 1, S7-300 rack 0 slot 2. */
  rack: z.number().int().min(0).max(7).optional(),
  slot: z.number().int().min(0).max(31).optional(),
  /** Instead of rack and slot, for devices that need other TSAPs (LOGO!, S7-200, CPs): both, e.g. 0x0100 and 0x0200. */
  localTsap: tsap.optional(),
  remoteTsap: tsap.optional(),
  /** Asked for in setup communication; the CPU grants at most its own (S7-300/1200: 240, S7-1500: 960). */
  pduSize: z.number().int().min(240).max(960).default(960),
  pollIntervalMs: z.number().int().min(10).default(1000),
  /** Per request (and for the whole connect). */
  timeoutMs: z.number().int().positive().default(1000),
  /** A request that timed out is repeated this many times before the CPU counts as lost. */
  retries: z.number().int().min(0).max(10).default(1),
  /** Unused bytes between tags that are still read to save an item. */
  maxGapBytes: z.number().int().min(0).max(512).default(32),
  /** Items per Read Var request (S7 CPUs take up to 20). */
  maxItemsPerRead: z.number().int().min(1).max(20).default(20),
  tags: z.array(tagSchema).min(1),
};

/**
 * A device profile of S7 connectors (`profiles:` in the config): any connector key but `id`, tags required; each
 * device that names it gets these keys unless it sets them itself (src/config/profiles.ts).
 */
export const s7ProfileSchema = z
  .strictObject(common)
  .omit({ id: true, profile: true })
  .partial()
  .required({ type: true, tags: true });

export const s7ConnectorSchema = z.strictObject(common).superRefine((c, ctx) => {
  const issue = (path: (string | number)[], message: string): void => ctx.addIssue({ code: 'custom', path, message });
  if ((c.localTsap === undefined) !== (c.remoteTsap === undefined)) {
    issue([c.localTsap === undefined ? 'localTsap' : 'remoteTsap'], 'set both TSAPs, or neither (rack and slot)');
  }
  if (c.localTsap !== undefined && (c.rack !== undefined || c.slot !== undefined)) {
    issue([c.rack !== undefined ? 'rack' : 'slot'], 'rack and slot make the TSAPs: set one or the other');
  }
  const seen = new Map<string, number>();
  c.tags.forEach((tag, i) => {
    const first = seen.get(tag.name);
    if (first !== undefined) issue(['tags', i, 'name'], `"${tag.name}" is already the name of tags.${first}`);
    else seen.set(tag.name, i);
    if (!tag.writable) return;
    let bytes: number;
    try {
      bytes = byteLength(parseAddress(tag.address, tag.datatype));
    } catch {
      return; // reported by the tag's own check
    }
    const limit = writeLimit(c.pduSize);
    if (bytes > limit) {
      issue(
        ['tags', i, 'writable'],
        `${bytes} bytes do not fit one write with pduSize ${c.pduSize} (at most ${limit})`,
      );
    }
  });
});

export type S7ConnectorConfig = z.output<typeof s7ConnectorSchema>;
export type S7TagConfig = S7ConnectorConfig['tags'][number];
