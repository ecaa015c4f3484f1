/**
 * HTTP requests sent "at once" in a known order: every TCP connection is opened first, then each request is
 * written in one loop, so the server reads them in that order (fetch would connect and send each on its own
 * schedule). For races such as a burst of logins.
 */
import { connect, type Socket } from 'node:net';

export interface BurstRequest {
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly headers?: Record<string, string>;
  readonly body?: string;
}

export class HttpBurst {
  /** Each request's status once its answer's status line arrived (undefined while waiting). */
  readonly statuses: (number | undefined)[];
  /** `performance.now()` when each answer's status line arrived. */
  readonly answeredAtMs: (number | undefined)[];

  private constructor(private readonly sockets: Socket[]) {
    this.statuses = sockets.map(() => undefined);
    this.answeredAtMs = sockets.map(() => undefined);
    sockets.forEach((socket, i) => {
      let head = '';
      socket.on('data', (chunk: Buffer) => {
        if (this.statuses[i] !== undefined) return;
        head += chunk.toString('latin1');
        const status = /^HTTP\/1\.1 (\d{3}) /.exec(head);
        if (status !== null) {
          this.statuses[i] = Number(status[1]);
          this.answeredAtMs[i] = performance.now();
        }
      });
      socket.on('error', () => {});
    });
  }

  /** Connects one socket per request to 127.0.0.1:`port`, then writes every request in order. */
  static async send(port: number, requests: readonly BurstRequest[]): Promise<HttpBurst> {
    const sockets = await Promise.all(
      requests.map(
        () =>
          new Promise<Socket>((resolve, reject) => {
            const socket = connect(port, '127.0.0.1');
            socket.once('connect', () => resolve(socket));
            socket.once('error', reject);
          }),
      ),
    );
    const burst = new HttpBurst(sockets);
    requests.forEach((r, i) => {
      const body = r.body ?? '';
      const headers = {
        host: `127.0.0.1:${port}`,
        connection: 'close',
        'content-length': String(Buffer.byteLength(body)),
        ...r.headers,
      };
      const head = Object.entries(headers)
        .map(([name, value]) => `${name}: ${value}\r\n`)
        .join('');
      sockets[i].write(`${r.method} ${r.path} HTTP/1.1\r\n${head}\r\n${body}`);
    });
    return burst;
  }

  count(status: number): number {
    return this.statuses.filter((s) => s === status).length;
  }

  get answered(): number {
    return this.statuses.filter((s) => s !== undefined).length;
  }

  /** Closes every connection (a request still waiting is abandoned); for a test's disposer. */
  stop(): void {
    for (const socket of this.sockets) socket.destroy();
  }
}
