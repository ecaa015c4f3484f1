/** The byte pipe under one MQTT connection: a TCP/TLS socket or a WebSocket, behind one small interface. */
import type { Socket } from 'node:net';
import type { PeerCertificate, TLSSocket } from 'node:tls';
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
  /** Hands every chunk read and the close to `reader`; called once. */
  attach(reader: TransportReader): void;
}

/** What a transport reports to (the connection). */
export interface TransportReader {
  received(chunk: Buffer): void;
  peerClosed(): void;
}

/** The reader of a socket, kept on the socket so that its listeners can be shared functions, not closures per connection. */
const kReader = Symbol('edgeferry.reader');
type ReadSocket = Socket & { [kReader]: TransportReader };

function onSocketData(this: ReadSocket, chunk: Buffer): void {
  this[kReader].received(chunk);
}

function onSocketClose(this: ReadSocket): void {
  this[kReader].peerClosed();
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

  attach(reader: TransportReader): void {
    const socket = this.socket as ReadSocket;
    socket[kReader] = reader;
    socket.on('data', onSocketData);
    socket.on('close', onSocketClose);
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
    attach: (reader) => {
      ws.on('message', (data: Buffer | ArrayBuffer | Buffer[]) => {
        reader.received(Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data));
      });
      ws.on('close', () => reader.peerClosed());
      ws.on('error', () => {});
    },
  };
}

function certificateIdentity(socket: Socket): string | undefined {
  if (!isTlsSocket(socket) || !socket.authorized) return undefined;
  const cn = (socket.getPeerCertificate() as Partial<PeerCertificate>).subject?.CN; // Node's type omits a missing subject
  return typeof cn === 'string' && cn.length > 0 ? cn : undefined;
}

/** `encrypted` is Node's documented mark of a TLS socket: no `instanceof`, so node:tls loads only with TLS in use. */
function isTlsSocket(socket: Socket): socket is TLSSocket {
  return (socket as Partial<TLSSocket>).encrypted === true;
}
