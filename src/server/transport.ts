/** The byte pipe under one MQTT connection: a TCP/TLS socket or a WebSocket, behind one small interface. */
import type { Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import type { WebSocket } from 'ws';

export interface Transport {
  readonly remoteAddress: string;
  /** The verified client certificate's subject CN (mTLS), when there is one. */
  readonly certificateIdentity?: string;
  /** Bytes accepted for writing but not yet handed to the kernel. */
  readonly bufferedBytes: number;
  write(data: Buffer): void;
  /** Flushes what was written, then closes. */
  end(): void;
  destroy(): void;
  pause(): void;
  resume(): void;
  onData(cb: (chunk: Buffer) => void): void;
  onClose(cb: () => void): void;
}

/**
 * A TCP or TLS socket. A class rather than an object of closures: there is one per connection, and idle
 * connections should cost little memory.
 */
export class SocketTransport implements Transport {
  readonly remoteAddress: string;
  readonly certificateIdentity: string | undefined;

  constructor(private readonly socket: Socket) {
    socket.setNoDelay(true);
    this.remoteAddress = socket.remoteAddress ?? 'unknown';
    this.certificateIdentity = certificateIdentity(socket);
    // Resets and similar are reported as 'error' followed by 'close'; the close path does the cleanup.
    socket.on('error', ignoreError);
  }

  get bufferedBytes(): number {
    return this.socket.writableLength;
  }

  write(data: Buffer): void {
    this.socket.write(data);
  }

  end(): void {
    this.socket.end();
  }

  destroy(): void {
    this.socket.destroy();
  }

  pause(): void {
    this.socket.pause();
  }

  resume(): void {
    this.socket.resume();
  }

  onData(cb: (chunk: Buffer) => void): void {
    this.socket.on('data', cb);
  }

  onClose(cb: () => void): void {
    this.socket.on('close', cb);
  }
}

function ignoreError(): void {}

/** `socket` is the HTTP(S) connection the WebSocket was upgraded from: for wss, its verified client certificate. */
export function webSocketTransport(ws: WebSocket, remoteAddress: string, socket?: Socket): Transport {
  return {
    remoteAddress,
    certificateIdentity: socket ? certificateIdentity(socket) : undefined,
    get bufferedBytes() {
      return ws.bufferedAmount;
    },
    write: (data) => ws.send(data, { binary: true }),
    end: () => ws.close(),
    destroy: () => ws.terminate(),
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    onData: (cb) =>
      void ws.on('message', (data: Buffer | ArrayBuffer | Buffer[]) => {
        cb(Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data));
      }),
    onClose: (cb) => {
      ws.on('close', cb);
      ws.on('error', () => {});
    },
  };
}

function certificateIdentity(socket: Socket): string | undefined {
  if (!(socket instanceof TLSSocket) || !socket.authorized) return undefined;
  const cn = socket.getPeerCertificate().subject?.CN;
  return typeof cn === 'string' && cn.length > 0 ? cn : undefined;
}
