/**
 * The connections of one listener that have not completed CONNECT yet, oldest first, with a count per source
 * address: the budget that keeps a flood of sockets that never log in from starving clients that do.
 */
interface PendingConnection {
  readonly transport: { readonly remoteAddress: string };
}

export class PendingConnections<T extends PendingConnection = PendingConnection> {
  /** Insertion order is age order, so the oldest is the first. */
  private readonly oldestFirst = new Set<T>();
  private readonly perAddress = new Map<string, number>();

  constructor(
    /** At most this many at once on the listener; a new connection closes the oldest one. */
    readonly max: number,
    /** At most this many from one source address; more from there are refused. */
    readonly maxPerAddress: number,
  ) {}

  get size(): number {
    return this.oldestFirst.size;
  }

  fromAddress(address: string): number {
    return this.perAddress.get(address) ?? 0;
  }

  /** Oldest first; `fn` may delete the connection it is given. */
  forEach(fn: (conn: T) => void): void {
    this.oldestFirst.forEach(fn);
  }

  oldest(): T | undefined {
    return this.oldestFirst.values().next().value;
  }

  add(conn: T): void {
    this.oldestFirst.add(conn);
    const address = conn.transport.remoteAddress;
    this.perAddress.set(address, this.fromAddress(address) + 1);
  }

  /** The connection completed CONNECT or closed; a second call does nothing. */
  delete(conn: T): void {
    if (!this.oldestFirst.delete(conn)) return;
    const address = conn.transport.remoteAddress;
    const left = this.fromAddress(address) - 1;
    if (left > 0) this.perAddress.set(address, left);
    else this.perAddress.delete(address);
  }
}
