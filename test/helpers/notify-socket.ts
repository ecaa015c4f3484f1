/** A fake systemd notify socket: a real AF_UNIX datagram socket (via unix-dgram) collecting what is sent to it. */
import { createRequire } from 'node:module';
import { rmSync } from 'node:fs';
import { join } from 'node:path';

interface DgramSocket {
  bind(path: string): void;
  on(event: 'message', cb: (buf: Buffer) => void): void;
  on(event: 'error', cb: (err: Error) => void): void;
  close(): void;
}

export interface NotifySocket {
  readonly path: string;
  readonly messages: string[];
  close(): void;
}

let opened = 0;

export function openNotifySocket(dir: string): NotifySocket {
  const unixDgram = createRequire(import.meta.url)('unix-dgram') as { createSocket(type: 'unix_dgram'): DgramSocket };
  const socket = unixDgram.createSocket('unix_dgram');
  // A fresh name each time: a gateway restarted in the same directory gets a socket of its own.
  const path = join(dir, `notify-${process.pid}-${++opened}.sock`);
  const messages: string[] = [];
  socket.on('message', (buf) => messages.push(buf.toString()));
  socket.on('error', (err) => messages.push(`error: ${err.message}`));
  socket.bind(path);
  return {
    path,
    messages,
    close: () => {
      socket.close();
      rmSync(path, { force: true });
    },
  };
}
