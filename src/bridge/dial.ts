/**
 * Opens the byte stream under one uplink connection: TCP (mqtt://), TLS (mqtts://), or a WebSocket (ws://,
 * wss://, subprotocol "mqtt") as a stream. The host name is resolved again at every call, so an uplink follows
 * its central broker to a new address (docs/reliability.md#fault-scenarios). `opened` runs once the stream can carry
 * MQTT: TCP connected, TLS handshake done, WebSocket upgraded; the CONNECT is written then, so that a failed
 * attempt is known to have sent none (Sparkplug counts its bdSeq per CONNECT sent).
 */
import { readFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import type { ConnectionOptions } from 'node:tls';
import type { Duplex } from 'node:stream';
import type * as Ws from 'ws';
import type { BridgeConfig } from '../config/schema.js';
import { onFirstUse, tlsModule } from '../util/on-first-use.js';

/** ws only for a ws:// or wss:// remote (docs/operations.md#memory). */
const loadWs = onFirstUse<typeof Ws>('ws');

type RemoteTls = NonNullable<BridgeConfig['remote']['tls']>;

const DEFAULT_PORTS: Record<string, number> = { 'mqtt:': 1883, 'mqtts:': 8883, 'ws:': 80, 'wss:': 443 };

/** Throws (synchronously) for unreadable or invalid TLS material: the caller counts that as a failed attempt. */
export function dial(url: string, tls: RemoteTls | undefined, opened: () => void): Duplex {
  const parsed = new URL(url);
  switch (parsed.protocol) {
    case 'mqtt:': {
      const socket = tcpConnect({ host: hostOf(parsed), port: portOf(parsed) });
      // Our writes are already batched per tick; Nagle would hold the next small write until the previous one
      // is acknowledged, which the receiver's delayed ACK postpones by up to 40 ms (replay at a few hundred
      // messages/s, measured).
      socket.setNoDelay(true);
      socket.once('connect', opened);
      return socket;
    }
    case 'mqtts:': {
      const socket = tlsModule().connect({ host: hostOf(parsed), port: portOf(parsed), ...tlsOptions(tls) });
      socket.setNoDelay(true);
      socket.once('secureConnect', opened);
      return socket;
    }
    default: {
      // ws sets TCP_NODELAY on its socket itself; compression would cost CPU per message for little gain.
      const { WebSocket, createWebSocketStream } = loadWs();
      const ws = new WebSocket(url, 'mqtt', { ...tlsOptions(tls), perMessageDeflate: false });
      ws.once('open', opened);
      return createWebSocketStream(ws);
    }
  }
}

function hostOf(url: URL): string {
  // An IPv6 literal comes bracketed in a URL; sockets want it bare.
  return url.hostname.replace(/^\[(.*)\]$/, '$1');
}

function portOf(url: URL): number {
  return url.port === '' ? DEFAULT_PORTS[url.protocol] : Number(url.port);
}

/** Read at every attempt, so rotated certificates are picked up without a restart. */
function tlsOptions(tls: RemoteTls | undefined): ConnectionOptions {
  if (!tls) return {};
  return {
    ca: tls.caFile === undefined ? undefined : readFileSync(tls.caFile),
    cert: tls.certFile === undefined ? undefined : readFileSync(tls.certFile),
    key: tls.keyFile === undefined ? undefined : readFileSync(tls.keyFile),
    servername: tls.servername,
    rejectUnauthorized: tls.rejectUnauthorized,
    ciphers: tls.ciphers,
  };
}
