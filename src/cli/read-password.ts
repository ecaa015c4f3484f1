/** The password of `edgeferry passwd` and `edgeferry opcua browse --user`: the first line of stdin, or a prompt. */
import { createInterface } from 'node:readline';

/**
 * The first line of stdin; on a terminal, a prompt without echo. `confirm`: on a terminal the password is asked
 * twice and must match, as `mosquitto_passwd` does, since a typo nobody saw would be the new password.
 */
export async function readPassword(options: { confirm?: boolean } = {}): Promise<string> {
  const tty = process.stdin.isTTY === true;
  const rl = createInterface({ input: process.stdin, output: tty ? process.stdout : undefined, terminal: tty });
  // Mute the echo of what is typed; readline writes each keystroke through _writeToOutput.
  if (tty) (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = () => {};
  // Lines that arrive before they are asked for wait in the iterator.
  const lines = rl[Symbol.asyncIterator]();
  const ask = async (prompt: string): Promise<string> => {
    if (tty) process.stdout.write(prompt);
    const { value, done } = await lines.next();
    if (tty) process.stdout.write('\n');
    if (done === true) throw new TypeError('no password given on stdin');
    return value as string;
  };
  try {
    const password = await ask('Password: ');
    if (tty && options.confirm === true && (await ask('Reenter password: ')) !== password)
      throw new TypeError('the passwords do not match');
    return password;
  } finally {
    rl.close();
  }
}
