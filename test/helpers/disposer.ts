/**
 * Cleanup for tests: register what a test starts, and it is torn down in afterEach, last in first out,
 * even when the test failed.
 *
 *   const d = useDisposer();
 *   it('...', async () => { const m = d.add(await startMosquitto()); ... });
 */
import { afterEach } from 'vitest';
import { removeDir, tempDir } from './temp.js';

/** Anything with `dispose()` (preferred: stops and removes temp files) or `stop()`. */
export type Disposable = { dispose(): Promise<void> | void } | { stop(): Promise<void> | void };

export class Disposer {
  private readonly cleanups: (() => Promise<void> | void)[] = [];

  /** Registers something with `dispose()` or `stop()`; returns it unchanged. */
  add<T extends Disposable>(thing: T): T {
    this.cleanups.push(() => ('dispose' in thing ? thing.dispose() : thing.stop()));
    return thing;
  }

  /** Registers a cleanup function. */
  defer(cleanup: () => Promise<void> | void): void {
    this.cleanups.push(cleanup);
  }

  /** A temp dir removed after the test. */
  tempDir(prefix?: string): string {
    const dir = tempDir(prefix);
    this.defer(() => removeDir(dir));
    return dir;
  }

  /** Runs every cleanup (LIFO); collects errors and throws the first after all ran. */
  async disposeAll(): Promise<void> {
    let first: unknown;
    while (this.cleanups.length > 0) {
      const cleanup = this.cleanups.pop() as () => Promise<void> | void;
      try {
        await cleanup();
      } catch (err) {
        first ??= err;
      }
    }
    if (first !== undefined) throw first;
  }
}

/** A Disposer emptied in afterEach of the calling test file. */
export function useDisposer(): Disposer {
  const disposer = new Disposer();
  afterEach(() => disposer.disposeAll());
  return disposer;
}
