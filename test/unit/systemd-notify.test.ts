import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SystemdNotifier } from '../../src/ops/systemd.js';
import { silentLogger } from '../../src/util/logger.js';
import { openNotifySocket, type NotifySocket } from '../helpers/notify-socket.js';
import { waitFor } from '../helpers/wait.js';

let socket: NotifySocket | undefined;
let notifier: SystemdNotifier | undefined;
let dir: string | undefined;
afterEach(() => {
  notifier?.close();
  socket?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  socket = notifier = dir = undefined;
});

describe('systemd notify protocol (sd_notify)', () => {
  it('is a no-op without NOTIFY_SOCKET', async () => {
    notifier = new SystemdNotifier(silentLogger, {});
    expect(notifier.isActive).toBe(false);
    await notifier.ready('up');
    expect(notifier.watchdogMs).toBeUndefined();
  });

  it('sends READY with a STATUS line, then STOPPING, to a real datagram socket', async () => {
    dir = mkdtempSync(join(tmpdir(), 'edgeferry-notify-'));
    socket = openNotifySocket(dir);
    notifier = new SystemdNotifier(silentLogger, { NOTIFY_SOCKET: socket.path });
    await notifier.ready('listening on 1 listener');
    await notifier.stopping();
    await waitFor(() => socket!.messages.length >= 2, 2000);
    expect(socket.messages).toEqual(['READY=1\nSTATUS=listening on 1 listener', 'STOPPING=1']);
  });

  it('pings WATCHDOG=1 at half of WATCHDOG_USEC while healthy, and stops when a health check fails', async () => {
    dir = mkdtempSync(join(tmpdir(), 'edgeferry-notify-'));
    socket = openNotifySocket(dir);
    notifier = new SystemdNotifier(silentLogger, {
      NOTIFY_SOCKET: socket.path,
      WATCHDOG_USEC: '200000',
      WATCHDOG_PID: String(process.pid),
    });
    expect(notifier.watchdogMs).toBe(200);
    let healthy = true;
    const started = performance.now();
    notifier.startWatchdog(() => healthy);
    await waitFor(() => socket!.messages.filter((m) => m === 'WATCHDOG=1').length >= 3, 3000);
    // Three pings at a 100 ms period take at least ~300 ms.
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);
    healthy = false;
    await new Promise((r) => setTimeout(r, 150));
    const count = socket.messages.length;
    await new Promise((r) => setTimeout(r, 400));
    expect(socket.messages.length).toBe(count);
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
