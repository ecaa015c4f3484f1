/**
 * `edgeferry passwd FILE USER [--delete]`: the file is replaced atomically, keeping its other lines, its mode, owner
 * and group (the service user must still read it), and through a symlink its target. A new file is 0600.
 */
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { updatePasswordFile } from '../broker/password-file.js';
import { asError } from '../util/errors.js';
import { replaceFile } from '../util/replace-file.js';
import { EXIT } from './errors.js';
import { readPassword } from './read-password.js';

export const passwdUsage = `  edgeferry passwd FILE USER [--delete]
                           add or change USER in a mosquitto_passwd-compatible FILE (the password is
                           read from stdin, or prompted for twice on a terminal); --delete removes USER
`;

/** Returns the exit code: 0 done, 2 usage or a refused change (nothing written). */
export async function passwdCommand(argv: string[]): Promise<number> {
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      options: { delete: { type: 'boolean' } },
      allowPositionals: true,
    });
    const [file, user] = positionals;
    if (!file || !user || positionals.length > 2) throw new TypeError('usage: edgeferry passwd FILE USER [--delete]');
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    const password = values.delete ? undefined : await readPassword({ confirm: true });
    if (password === '') throw new TypeError('the password must not be empty');
    replaceFile(file, await updatePasswordFile(text, user, password), 0o600);
    process.stdout.write(`${values.delete ? 'removed' : 'set'} the password of "${user}" in ${file}\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`edgeferry passwd: ${asError(err).message}\n`);
    return EXIT.config;
  }
}
