/**
 * The child process of `verifyInChild` (verify.ts): walks the store in <dir> read-only and prints its report as
 * JSON. If LMDB aborts or crashes on a damaged page, only this process dies.
 * Usage: node verify-child.js <dir> quick|full
 */
import { open } from 'lmdb';
import { walkStore } from './verify.js';

const [dir, mode] = process.argv.slice(2);
const env = open({ path: dir, readOnly: true, noSubdir: false, maxDbs: 12 });
const report = walkStore(env, mode === 'full' ? 'full' : 'quick');
process.stdout.write(JSON.stringify(report));
await env.close();
