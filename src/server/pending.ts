/**
 * The connections of one listener that have not completed CONNECT yet, oldest first, with a count per source
 * address: the budget that keeps a flood of sockets that never log in from starving clients that do.
 */
interface PendingConnection {
  readonly transport: { readonly remoteAddress: string };
}

export class PendingConnections<T extends PendingConnection = PendingConnection> {
  /** Insertion order is age order, so the oldest is the first; the same per source address. */
  private readonly oldestFirst = new Set<T>();
  private readonly perAddress = new Map<string, Set<T>>();

  constructor(
    /** At most this many at once on the listener; a new connection closes the oldest one. */
    readonly max: number,
    /** At most this many from one source address; a new one from there closes that address's oldest. */
    readonly maxPerAddress: number,
  ) {}

  get size(): number {
    return this.oldestFirst.size;
  }

  fromAddress(address: string): number {
    return this.perAddress.get(address)?.size ?? 0;
  }

  /** Oldest first; `fn` may delete the connection it is given. */
  forEach(fn: (conn: T) => void): void {
    this.oldestFirst.forEach(fn);
  }

  /** The oldest of all, or of those from `address`. */
  oldest(address?: string): T | undefined {
    const set = address === undefined ? this.oldestFirst : this.perAddress.get(address);
    return set?.values().next().value;
  }

  add(conn: T): void {
    this.oldestFirst.add(conn);
    const address = conn.transport.remoteAddress;
    const set = this.perAddress.get(address);
    if (set === undefined) this.perAddress.set(address, new Set([conn]));
    else set.add(conn);
  }

  /** The connection completed CONNECT or closed; a second call does nothing. */
  delete(conn: T): void {
    if (!this.oldestFirst.delete(conn)) return;
    const address = conn.transport.remoteAddress;
    const set = this.perAddress.get(address);
    set?.delete(conn);
    if (set?.size === 0) this.perAddress.delete(address);
  }
}
