/**
 * The metrics the daemon publishes, defined once for the alarms and the dashboard. The daemon's
 * own definitions must match these names and dimensions (see infra/README.md, "Metrics").
 */
export const METRICS = {
  /** This Region's share of a limit (requests/s). Dimensions: Region, Limit. */
  share: { name: 'Share', dimensions: ['Region', 'Limit'] },
  /** Sum of every Region's share of a limit as this Region sees it. Dimensions: Region, Limit. */
  seenSumOfShares: { name: 'SeenSumOfShares', dimensions: ['Region', 'Limit'] },
  /** Age of the newest record seen from a peer (seconds). Dimensions: Region, Peer. */
  peerRecordAgeSeconds: { name: 'PeerRecordAgeSeconds', dimensions: ['Region', 'Peer'] },
  /** Peer records rejected by validation (count). Dimensions: Region. */
  rejectedRecords: { name: 'RejectedRecords', dimensions: ['Region'] },
  /** Rebalances decided while some peer was not fresh (count). Dimensions: Region. */
  rebalancesWithoutFreshData: { name: 'RebalancesWithoutFreshData', dimensions: ['Region'] },
  /** 1 when the daemon is ready (it has read the global records), else 0. Dimensions: Region. */
  ready: { name: 'Ready', dimensions: ['Region'] },
  /**
   * How long the leader has been unable to close some peer's ended epoch for want of its last
   * record (seconds; 0 when it waits for none): that epoch's room is frozen meanwhile. Dimensions:
   * Region.
   */
  longestWaitForRecordSeconds: { name: 'LongestWaitForRecordSeconds', dimensions: ['Region'] },
  /**
   * How long a raise of some limit has waited for a peer to account with the leader's current
   * epoch (seconds; 0 when no raise waits): the raise's room is unused, under the limit,
   * meanwhile. Dimensions: Region.
   */
  longestRaiseWaitSeconds: { name: 'LongestRaiseWaitSeconds', dimensions: ['Region'] },
  /**
   * How long the health verdict of some Region (the own one included) has read unknown, or could
   * not be read, without a break, the longest of them (seconds; 0 when every verdict is known).
   * Unknown never counts as unhealthy, so meanwhile a lost Region would never be reclaimed.
   * Every replica publishes it. Dimensions: Region.
   */
  longestHealthUnknownSeconds: { name: 'LongestHealthUnknownSeconds', dimensions: ['Region'] },
  /**
   * Peers whose records have named other limits than this Region runs (another digest of ids,
   * kinds, versions and rates) for longer than the daemon's rollout window
   * (`limits_rollout_periods`, default 10 periods); 0 when none. Dimensions: Region.
   */
  limitsMismatchPeers: { name: 'LimitsMismatchPeers', dimensions: ['Region'] },
  /**
   * Limits whose shares, as this Region sees them, add up to more than the limit's rate (the
   * daemon's `sum_above_limit` alarm), all limits counted, however many (per-limit metrics go out
   * for the first 100 limits and for these only). Dimensions: Region.
   */
  limitsAboveRate: { name: 'LimitsAboveRate', dimensions: ['Region'] },
} as const;

/** Frozen room lasting longer than this (seconds) is stranded: the StrandedRoom alarm. */
export const STRANDED_AFTER_SECONDS = 300;

/** CloudWatch's smallest period for standard-resolution metrics. */
export const ALARM_PERIOD_SECONDS = 60;

/** A peer record is stale when older than this many rebalance periods (SPEC §6: 3 own rebalances). */
export const STALE_AFTER_PERIODS = 3;
