import { afterEach, describe, expect, it, vi } from 'vitest';
import { SystemdNotifier } from '../../src/ops/systemd.js';
import { silentLogger } from '../../src/util/logger.js';
import { useDisposer } from '../helpers/disposer.js';
import { openNotifySocket, type NotifySocket } from '../helpers/notify-socket.js';
import { waitFor } from '../helpers/wait.js';

const disposer = useDisposer();
let socket: NotifySocket | undefined;
let notifier: SystemdNotifier | undefined;
afterEach(() => {
  vi.useRealTimers();
  notifier?.close();
  socket?.close();
  socket = notifier = undefined;
});

describe('systemd notify protocol (sd_notify)', () => {
  it('is a no-op without NOTIFY_SOCKET', async () => {
    notifier = new SystemdNotifier(silentLogger, {});
    expect(notifier.isActive).toBe(false);
    await notifier.ready('up');
    expect(notifier.watchdogMs).toBeUndefined();
  });

  it('sends READY with a STATUS line, then STOPPING, to a real datagram socket', async () => {
    socket = openNotifySocket(disposer.tempDir('edgeferry-notify-'));
    notifier = new SystemdNotifier(silentLogger, { NOTIFY_SOCKET: socket.path });
    await notifier.ready('listening on 1 listener');
    await notifier.stopping();
    await waitFor(() => socket!.messages.length >= 2, 2000);
    expect(socket.messages).toEqual(['READY=1\nSTATUS=listening on 1 listener', 'STOPPING=1']);
  });

  it('pings WATCHDOG=1 at half of WATCHDOG_USEC while healthy, and stops when a health check fails', async () => {
    socket = openNotifySocket(disposer.tempDir('edgeferry-notify-'));
    notifier = new SystemdNotifier(silentLogger, {
      NOTIFY_SOCKET: socket.path,
      WATCHDOG_USEC: '200000',
      WATCHDOG_PID: String(process.pid),
    });
    expect(notifier.watchdogMs).toBe(200);
    // The interval is driven by fake timers; the datagrams go over the real socket.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    let healthy = true;
    let pings = 0;
    notifier.startWatchdog(() => {
      if (healthy) pings++;
      return healthy;
    });
    vi.advanceTimersByTime(99);
    expect(pings).toBe(0);
    vi.advanceTimersByTime(1); // half of WATCHDOG_USEC
    expect(pings).toBe(1);
    vi.advanceTimersByTime(200);
    expect(pings).toBe(3);
    healthy = false;
    vi.advanceTimersByTime(200); // two periods with the check failing
    // STOPPING=1 goes over the same socket after those periods: once it is in, any ping from them would be too.
    await notifier.stopping();
    await waitFor(() => socket!.messages.includes('STOPPING=1'), 2000);
    expect(socket.messages).toEqual(['WATCHDOG=1', 'WATCHDOG=1', 'WATCHDOG=1', 'STOPPING=1']);
  });

  it('ignores a watchdog meant for another process (WATCHDOG_PID)', () => {
    notifier = new SystemdNotifier(silentLogger, {
      NOTIFY_SOCKET: '/nonexistent',
      WATCHDOG_USEC: '1000000',
      WATCHDOG_PID: '1',
    });
    expect(notifier.watchdogMs).toBeUndefined();
  });
});
