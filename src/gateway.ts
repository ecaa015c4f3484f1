/**
 * The composition root: the only place that constructs and wires the parts. start → reload → stop.
 * Shutdown order (ARCHITECTURE §9): stop accepting and disconnect clients → stop bridges (outboxes stay on disk)
 * → close the broker (pending wills) → close the store.
 */
import { readFileSync } from 'node:fs';
import type { Config } from './config/schema.js';
import type { Logger } from './util/logger.js';
import { Broker } from './broker/broker.js';
import { defaultAuth } from './broker/auth.js';
import { createMessage } from './protocol/message.js';
import { MqttServer } from './server/listeners.js';
import type { BoundListener } from './server/listeners.js';
import { SysTopics } from './ops/sys-topics.js';
import { openLmdbStore } from './store/lmdb.js';
import type { Store } from './store/types.js';
import { Bridge } from './bridge/bridge.js';

export interface Gateway {
  readonly listeners: readonly BoundListener[];
  stop(): Promise<void>;
  reload(next: Config): Promise<void>;
}

const { version: VERSION } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

export async function startGateway(config: Config, log: Logger): Promise<Gateway> {
  const b = config.broker;
  const store: Store = await openLmdbStore({ path: config.storage.path, sync: config.storage.sync, maxBytes: config.storage.maxBytes, log: log.child({ mod: 'store' }) });
  const broker = new Broker({
    limits: { maxInflight: b.maxInflight, maxQueuedMessages: b.maxQueuedMessages, maxQueuedBytes: b.maxQueuedBytes },
    store,
    log: log.child({ mod: 'broker' }),
  });

  const bridges = config.bridges.map(
    (bc) =>
      new Bridge({
        config: bc,
        broker,
        outbox: store.outbox(bc.name, bc.queue),
        log: log.child({ mod: 'bridge', bridge: bc.name }),
      }),
  );
  for (const bridge of bridges) await bridge.start();

  const server = new MqttServer(broker, defaultAuth, { ...b }, log.child({ mod: 'server' }));
  let listeners: BoundListener[];
  try {
    listeners = await server.start(config.listeners);
  } catch (err) {
    await Promise.all(bridges.map((bridge) => bridge.stop()));
    await store.close();
    throw err;
  }
  for (const l of listeners) log.info({ listener: l.type, host: l.host, port: l.port }, 'listening');

  const sys = new SysTopics(
    {
      stats: broker.stats,
      version: VERSION,
      retainedCount: () => broker.retained.count,
      subscriptionCount: () => broker.subscriptionCount.normal + broker.subscriptionCount.shared,
      sessionCount: () => broker.sessions.size,
    },
    (topic, value) => {
      broker
        .publish(createMessage({ topic, payload: Buffer.from(value), retain: true, origin: '$SYS' }))
        .catch((err: unknown) => log.warn({ err, topic }, '$SYS update not stored'));
    },
  );
  sys.start(b.sysIntervalS);
  log.info({ version: VERSION, listeners: listeners.length, bridges: bridges.length }, 'edgeferry started');

  let stopping: Promise<void> | undefined;
  return {
    listeners,
    stop: () =>
      (stopping ??= (async () => {
        log.info('stopping');
        sys.stop();
        await server.stop();
        broker.close();
        await Promise.all(bridges.map((bridge) => bridge.stop()));
        await store.close();
        log.info('stopped');
      })()),
    reload: async () => {
      // Live reconfiguration (bridges, auth, TLS files) is issue 6; listeners and limits need a restart.
      log.warn('configuration reload is not supported yet: restart edgeferry to apply changes');
    },
  };
}
