/** The value shapes and host checks that several config sections share. */
import { isIP } from 'node:net';
import { z } from 'zod';

export const int = (min: number, max: number) => z.number().int().min(min).max(max);
export const count = z.number().int().nonnegative();
export const positive = z.number().int().positive();
export const filePath = z.string().min(1);

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'));
}

export function isWildcard(host: string): boolean {
  return host === '0.0.0.0' || host === '::';
}
