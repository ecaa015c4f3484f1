import { openLmdbStore } from './dist/src/store/lmdb.js';
import pino from 'pino';
import fs from 'node:fs';
const dir = '/tmp/sttest'; fs.rmSync(dir, { recursive: true, force: true });
const store = await openLmdbStore({ path: dir, sync: process.argv[2] ?? 'full', maxBytes: 0, log: pino({ level: 'warn' }) });
const box = store.outbox('central', { maxBytes: 0, maxMessages: 0, maxAgeS: 0, overflow: 'drop-oldest' });
const W = +(process.argv[3] ?? 160), groups = +(process.argv[4] ?? 2), total = 100000;
let sent = 0, done = 0;
const payload = Buffer.alloc(64, 97);
const t0 = performance.now();
await new Promise((resolve) => {
  // `groups` groups of W/groups publishers: a group sends its messages again once all its appends resolved
  const per = W / groups;
  const fire = () => {
    if (sent >= total) return;
    let left = per;
    for (let i = 0; i < per; i++) {
      sent++;
      box.append({ topic: 'bench/p1', payload, qos: 1, retain: false, origin: 'c1' }).then(() => {
        done++;
        if (done === total) resolve();
        if (--left === 0) setImmediate(fire);
      });
    }
  };
  for (let g = 0; g < groups; g++) setTimeout(fire, g);
});
console.log(process.argv[2], 'W', W, 'groups', groups, 'msg/s', Math.round(total / (performance.now() - t0) * 1000));
await store.close();
