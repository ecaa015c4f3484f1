/**
 * The MQTT 5 user properties a bridge adds to what it sends from its outbox (docs/architecture.md#message-ids):
 * - `<property>: <gateway id>:<outbox seq>`, the message id: the seq of an outbox entry never changes, so every
 *   re-send (after a reconnect, a restart, a crash) carries the id of the first send, and a consumer can drop
 *   what it already has;
 * - `edgeferry-historical: true` on backlog entries replayed live-first, so consumers can tell them from live
 *   values that overtook them.
 * Encoded straight into the PUBLISH (codec `PropertyTail`): the bytes that never change are built once.
 */
import type { PropertyTail } from '../protocol/codec.js';

export const HISTORICAL_PROPERTY = 'edgeferry-historical';
const USER_PROPERTY = 0x26;

export class UplinkStamp implements PropertyTail {
  /** Identifier, name length, name, (value length follows), and the value's `<gateway id>:` prefix; empty without ids. */
  private readonly idName: Buffer;
  private readonly idPrefix: Buffer;
  /** The whole historical property, or empty. */
  private readonly historical: Buffer;

  /** `idProperty` undefined: no message id. */
  constructor(idProperty: string | undefined, gatewayId: string, historical: boolean) {
    this.idName = idProperty === undefined ? Buffer.alloc(0) : userPropertyName(idProperty);
    this.idPrefix = idProperty === undefined ? Buffer.alloc(0) : Buffer.from(`${gatewayId}:`);
    this.historical = historical
      ? Buffer.concat([userPropertyName(HISTORICAL_PROPERTY), utf8String('true')])
      : Buffer.alloc(0);
  }

  /** Whether it adds anything at all. */
  get empty(): boolean {
    return this.idName.length === 0 && this.historical.length === 0;
  }

  measure(seq: number): number {
    const id = this.idName.length === 0 ? 0 : this.idName.length + 2 + this.idPrefix.length + decimalDigits(seq);
    return id + this.historical.length;
  }

  write(buf: Buffer, offset: number, seq: number): number {
    let o = offset;
    if (this.idName.length > 0) {
      const digits = decimalDigits(seq);
      o += this.idName.copy(buf, o);
      buf.writeUInt16BE(this.idPrefix.length + digits, o);
      o += 2;
      o += this.idPrefix.copy(buf, o);
      // The seq's digits, last first: no string per message.
      for (let i = o + digits - 1, n = seq; i >= o; i--, n = Math.floor(n / 10)) buf[i] = 0x30 + (n % 10);
      o += digits;
    }
    return o + this.historical.copy(buf, o);
  }
}

function userPropertyName(name: string): Buffer {
  return Buffer.concat([Buffer.from([USER_PROPERTY]), utf8String(name)]);
}

function utf8String(s: string): Buffer {
  const bytes = Buffer.from(s);
  const out = Buffer.alloc(2 + bytes.length);
  out.writeUInt16BE(bytes.length);
  bytes.copy(out, 2);
  return out;
}

function decimalDigits(n: number): number {
  let digits = 1;
  for (let v = n; v >= 10; v = Math.floor(v / 10)) digits++;
  return digits;
}
