/**
 * systemd's notify protocol (sd_notify(3)): READY=1, STATUS=, WATCHDOG=1, STOPPING=1 as datagrams to
 * `$NOTIFY_SOCKET`. Node has no AF_UNIX datagram sockets, so the optional `unix-dgram` addon sends them (attributed
 * to our PID, works with NotifyAccess=main); without it, the `systemd-notify` binary does (needs NotifyAccess=all,
 * docs/architecture.md#systemd). Without `$NOTIFY_SOCKET` (dev runs, tests) everything is a no-op. `$NOTIFY_SOCKET` is the one
 * setting read from the environment (docs/architecture.md#configuration).
 */
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import type { Logger } from '../util/logger.js';

type Send = (state: string) => Promise<void>;

interface UnixDgramSocket {
  send(buf: Buffer, offset: number, length: number, path: string, cb: (err?: Error) => void): void;
  on(event: 'error', cb: (err: Error) => void): void;
  close(): void;
}

export class SystemdNotifier {
  private watchdogTimer: NodeJS.Timeout | undefined;
  private socket: UnixDgramSocket | undefined;
  private readonly send: Send | undefined;

  constructor(
    private readonly log: Logger,
    private readonly env: NodeJS.ProcessEnv = process.env,
  ) {
    const path = env.NOTIFY_SOCKET;
    if (!path) return;
    this.send = this.viaUnixDgram(path) ?? this.viaBinary();
  }

  get isActive(): boolean {
    return this.send !== undefined;
  }

  /** The watchdog period systemd asked for (WatchdogSec), if any and meant for this process. */
  get watchdogMs(): number | undefined {
    const usec = Number(this.env.WATCHDOG_USEC);
    const pid = this.env.WATCHDOG_PID;
    if (!this.send || !Number.isFinite(usec) || usec <= 0) return undefined;
    if (pid !== undefined && Number(pid) !== process.pid) return undefined;
    return usec / 1000;
  }

  ready(status: string): Promise<void> {
    return this.notify(`READY=1\nSTATUS=${status}`);
  }

  status(status: string): Promise<void> {
    return this.notify(`STATUS=${status}`);
  }

  stopping(): Promise<void> {
    this.stopWatchdog();
    return this.notify('STOPPING=1');
  }

  /**
   * Pings the watchdog at half its period from a timer on the event loop, and only while `isHealthy()` holds:
   * a blocked loop or a failing store stops the pings and systemd restarts us.
   */
  startWatchdog(isHealthy: () => boolean): void {
    const periodMs = this.watchdogMs;
    if (periodMs === undefined) return;
    this.watchdogTimer = setInterval(() => {
      if (isHealthy()) void this.notify('WATCHDOG=1');
      else this.log.warn('health check failed: not pinging the systemd watchdog');
    }, periodMs / 2);
    this.watchdogTimer.unref();
  }

  stopWatchdog(): void {
    if (this.watchdogTimer) clearInterval(this.watchdogTimer);
    this.watchdogTimer = undefined;
  }

  close(): void {
    this.stopWatchdog();
    this.socket?.close();
    this.socket = undefined;
  }

  private async notify(state: string): Promise<void> {
    if (!this.send) return;
    try {
      await this.send(state);
    } catch (err) {
      this.log.error({ err, state: state.split('\n')[0] }, 'systemd notification failed');
    }
  }

  private viaUnixDgram(path: string): Send | undefined {
    if (path.startsWith('@')) return undefined; // abstract namespace: unix-dgram cannot address it
    let socket: UnixDgramSocket;
    try {
      const unixDgram = createRequire(import.meta.url)('unix-dgram') as {
        createSocket(type: 'unix_dgram'): UnixDgramSocket;
      };
      socket = unixDgram.createSocket('unix_dgram');
    } catch (err) {
      this.log.debug({ err }, 'unix-dgram not available; using the systemd-notify binary');
      return undefined;
    }
    socket.on('error', (err) => this.log.error({ err }, 'systemd notify socket error'));
    this.socket = socket;
    return (state) =>
      new Promise<void>((resolve, reject) => {
        const buf = Buffer.from(state);
        socket.send(buf, 0, buf.length, path, (err) => (err ? reject(err) : resolve()));
      });
  }

  private viaBinary(): Send {
    return (state) =>
      new Promise<void>((resolve, reject) => {
        // Blocking mode (no --no-block): the barrier avoids the PID-attribution race systemd-notify(1) warns about.
        execFile('systemd-notify', state.split('\n'), { env: this.env, timeout: 5000 }, (err) =>
          err ? reject(err) : resolve(),
        );
      });
  }
}
