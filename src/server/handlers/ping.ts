/** PINGREQ → PINGRESP [MQTT-3.12.4-1]. Any packet already refreshed the keep-alive clock. */
import type { ClientConnection } from '../context.js';

export function handlePingreq(conn: ClientConnection): void {
  conn.send({ cmd: 'pingresp' });
}
