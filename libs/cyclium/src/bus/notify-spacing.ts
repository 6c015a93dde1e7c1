const SPACING_MS = 10;

/**
 * How far apart, under load, one node's NOTIFYs (wake-ups and dispatch signals) are kept in a
 * cluster of `nodes` on one channel. Every NOTIFY costs each listening connection a transaction,
 * and under load every node publishes, so the cluster's NOTIFYs cost about n × n / spacing: growing
 * the spacing with (n − 1)² keeps that bill roughly flat as the cluster grows, while one or two
 * nodes keep the 10 ms a lone publisher needs for latency. 10 ms for 1–2 nodes, 40 for 3, 250 for
 * 6, 1 210 for 12. Idle, nothing waits (see SpacedTrigger).
 */
export function notifySpacingMs(nodes: number): number {
  return SPACING_MS * Math.max(1, (nodes - 1) ** 2);
}
