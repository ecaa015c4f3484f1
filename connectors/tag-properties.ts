/**
 * The per-tag keys that describe a tag to people (engineering unit, range, description), shared by every
 * connector's schema so they read and check the same everywhere; published as metric properties in the births
 * (docs/architecture.md#tag-properties).
 */
import { z } from 'zod';
import type { TagProperties } from './contract.js';

const finite = z.number().refine(Number.isFinite, 'must be a finite number');

/** Spread into a tag's zod object. */
export const tagPropertyKeys = {
  /** Engineering unit, e.g. `bar` (published as `engUnit`). */
  engUnit: z.string().min(1).optional(),
  /** The normal range of the value in engineering units (published as `engLow`/`engHigh`, Double). */
  engLow: finite.optional(),
  engHigh: finite.optional(),
  /** What the tag is, for people (published as `documentation`, the property Ignition shows; empty: none). */
  description: z.string().optional(),
};

type PropertyKeys = { engUnit?: string; engLow?: number; engHigh?: number; description?: string };

/** Problems of a tag's property keys: a range belongs to a number and runs upwards. */
export function checkTagProperties(
  tag: PropertyKeys,
  numeric: boolean,
  issue: (key: keyof PropertyKeys, message: string) => void,
): void {
  if (!numeric) {
    for (const key of ['engLow', 'engHigh'] as const)
      if (tag[key] !== undefined) issue(key, 'a range applies to numeric tags only');
    return;
  }
  if (tag.engLow !== undefined && tag.engHigh !== undefined && !(tag.engLow < tag.engHigh)) {
    issue('engHigh', `must be above engLow (${tag.engLow})`);
  }
}

/** The properties a tag's config sets (keys left out stay absent, so a device's own values can fill them). */
export function tagProperties(tag: PropertyKeys): TagProperties {
  const out: { -readonly [K in keyof TagProperties]: TagProperties[K] } = {};
  if (tag.engUnit !== undefined) out.engUnit = tag.engUnit;
  if (tag.engLow !== undefined) out.engLow = tag.engLow;
  if (tag.engHigh !== undefined) out.engHigh = tag.engHigh;
  if (tag.description) out.description = tag.description;
  return out;
}
