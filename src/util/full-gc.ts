/**
 * One full garbage collection, on demand. Used once, when startup is done and before the listeners open: loading
 * the modules and the config leaves some 10 MB of garbage in the old generation, and collecting it then keeps that
 * mark-compact (5-9 ms, with scavenges copying startup objects around it) out of the first seconds of traffic
 * (docs/architecture.md#hot-path, "Garbage and the latency tail").
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

export function fullGc(): void {
  // `gc` is only defined in contexts created after --expose-gc is set; setting it changes nothing else.
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}
