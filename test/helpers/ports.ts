/** Free TCP ports on 127.0.0.1, for processes whose port 0 would not be discoverable from outside. */
import { createServer } from 'node:net';

/** Binds port 0, reads the port the OS chose, and releases it. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
