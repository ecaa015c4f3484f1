/** PINGREQ → PINGRESP [MQTT-3.12.4-1]. Any packet already refreshed the keep-alive clock. */
import type { Connection } from '../connection.js';

export function handlePingreq(conn: Connection): void {
  conn.send({ cmd: 'pingresp' });
}
