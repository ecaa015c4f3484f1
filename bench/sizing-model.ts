/**
 * The sizing model of `bench:sizing` (bench/README.md, "Sizing"): from what one site measured per value, what an
 * outage of any length costs on disk and how long its catch-up takes on a link, for a site of any size.
 *
 * - Disk: the values of the outage times the measured bytes on disk per buffered value.
 * - Catch-up: the reconnect, then the backlog drains in what the live data leaves of the link:
 *   backlog bytes / (link - live bytes/s), unless the gateway drains slower than that: then backlog values / the
 *   fastest drain measured on that link (stored values/s delivered beside the live data). Whichever is longer.
 *   The drain is taken per link because what bounds it can depend on the link: a QoS 0 confirmation waits behind
 *   the bytes queued on it (bench/README.md). Live data at or above the link never catches up.
 * A site of N tags is the measured one scaled: the same devices (tags per device, change rate per tag, poll),
 * N / measured tags of them, so every per-value cost stays and only the value rate scales.
 */

/** What a run measured per value, for one compression setting. */
export interface PerValueCosts {
  /** Bytes the LMDB data file grew by per value buffered during a cut. */
  readonly diskBytesPerValue: number;
  /** Bytes crossing the link upstream per value delivered, live. */
  readonly wireLiveBytesPerValue: number;
  /** The same during a catch-up (births, historical rewrite and live data included). */
  readonly wireReplayBytesPerValue: number;
  /**
   * The fastest drain measured on each link (Mbit/s): stored values/s the central host received in a catch-up,
   * beside the live ones.
   */
  readonly drainPerSByLink: Readonly<Record<number, number>>;
  /** From the link's return to the NBIRTH at the central broker (median). */
  readonly reconnectS: number;
}

export const diskBytes = (costs: PerValueCosts, valuesPerS: number, outageS: number): number =>
  costs.diskBytesPerValue * valuesPerS * outageS;

/** Seconds from the link's return until the backlog of `outageS` is delivered; Infinity if it never is. */
export function catchUpS(costs: PerValueCosts, valuesPerS: number, outageS: number, linkMbit: number): number {
  const backlog = valuesPerS * outageS;
  const spareLink = mbitToBytesPerS(linkMbit) - valuesPerS * costs.wireLiveBytesPerValue;
  if (spareLink <= 0) return Number.POSITIVE_INFINITY;
  const linkBoundS = (backlog * costs.wireReplayBytesPerValue) / spareLink;
  const gatewayBoundS = backlog / costs.drainPerSByLink[linkMbit];
  return costs.reconnectS + Math.max(linkBoundS, gatewayBoundS);
}

/** Mbit/s (10^6 bits, as links are sold) in bytes/s. */
export const mbitToBytesPerS = (mbit: number): number => (mbit * 1_000_000) / 8;

export function durationText(s: number): string {
  if (!Number.isFinite(s)) return 'never';
  if (s < 120) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 7200) return `${(s / 60).toFixed(s < 600 ? 1 : 0)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

export function bytesText(bytes: number): string {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(bytes >= 1e10 ? 0 : 1)} GB`;
  if (bytes >= 1e6) return `${(bytes / 1e6).toFixed(bytes >= 1e7 ? 0 : 1)} MB`;
  return `${(bytes / 1e3).toFixed(0)} kB`;
}
