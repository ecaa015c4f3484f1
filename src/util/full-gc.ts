/**
 * One full garbage collection, on demand. Used once, when startup is done and before the listeners open: loading
 * the modules and the config leaves some 10 MB of garbage in the old generation, and collecting it then keeps that
 * mark-compact (5-9 ms, with scavenges copying startup objects around it) out of the first seconds of traffic
 * (docs/architecture.md#hot-path, "Garbage and the latency tail"). The last-resort flavour also shrinks the young
 * generation startup grew to its maximum: an idle gateway on Node.js 24 keeps 19 MB less (docs/operations.md#memory);
 * traffic grows it again.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

export function fullGc(): void {
  // `gc` is only defined in contexts created after --expose-gc is set; setting it changes nothing else.
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as (o?: object) => void)({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}
