/** The password of `edgeferry passwd` and `edgeferry opcua browse --user`: the first line of stdin, or a prompt. */
import { createInterface } from 'node:readline';

/** The first line of stdin; on a terminal, a prompt without echo. */
export async function readPassword(): Promise<string> {
  const rl = createInterface({ input: process.stdin, output: process.stdin.isTTY ? process.stdout : undefined, terminal: process.stdin.isTTY });
  if (process.stdin.isTTY) {
    process.stdout.write('Password: ');
    // Mute the echo of what is typed; readline writes each keystroke through _writeToOutput.
    (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = () => {};
  }
  const line = await new Promise<string>((resolve, reject) => {
    rl.once('line', resolve);
    rl.once('close', () => reject(new TypeError('no password given on stdin')));
  });
  rl.close();
  if (process.stdin.isTTY) process.stdout.write('\n');
  return line;
}
