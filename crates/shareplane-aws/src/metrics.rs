//! Metrics for alarms, published with `PutMetricData`.
//!
//! Every metric is defined here, once: its name, its dimensions and its unit.
//!
//! | name                          | dimensions      | unit    |
//! |-------------------------------|-----------------|---------|
//! | `Share`                       | Limit, Region   | None (requests per second) |
//! | `SeenSumOfShares`             | Limit, Region   | None (requests per second) |
//! | `PeerRecordAgeSeconds`        | Region, Peer    | Seconds |
//! | `RejectedRecords`             | Region          | Count   |
//! | `RebalancesWithoutFreshData`  | Region          | Count   |
//! | `Ready`                       | Region          | None (1 or 0) |
//! | `LongestWaitForRecordSeconds` | Region          | Seconds (leader only) |
//! | `LongestRaiseWaitSeconds`     | Region          | Seconds (leader only) |
//! | `LongestHealthUnknownSeconds` | Region          | Seconds |
//! | `LimitsMismatchPeers`         | Region          | Count   |
//! | `LimitsAboveRate`             | Region          | Count   |
//!
//! Datums go out in batches of at most [`MAX_DATUMS_PER_CALL`] and about 800 KB of request, below
//! CloudWatch's limits of 1000 datums and 1 MB. Non-finite values, which CloudWatch refuses, are
//! dropped and counted rather than failing the whole batch.

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};
use aws_sdk_cloudwatch::Client;
use std::time::SystemTime;

/// CloudWatch's limit of datums per `PutMetricData` call.
pub const MAX_DATUMS_PER_CALL: usize = 1000;
/// Request bytes per call (CloudWatch allows 1 MB; keep a margin for encoding overhead).
const MAX_BYTES_PER_CALL: usize = 800_000;
/// Datums per `publish`: bounds the calls one publish may make.
pub const MAX_DATUMS_PER_PUBLISH: usize = 200_000;

/// One value to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub name: &'static str,
    pub dimensions: Vec<(&'static str, String)>,
    pub value: f64,
    unit: Unit,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Unit {
    None,
    Seconds,
    Count,
}

impl Point {
    /// This Region's share of a limit, in requests per second.
    pub fn share(limit: &str, region: &str, rps: f64) -> Point {
        Point::new(
            "Share",
            vec![("Limit", limit.into()), ("Region", region.into())],
            rps,
            Unit::None,
        )
    }

    /// The sum of all Regions' shares of a limit as this Region sees them.
    pub fn seen_sum_of_shares(limit: &str, region: &str, rps: f64) -> Point {
        let dims = vec![("Limit", limit.into()), ("Region", region.into())];
        Point::new("SeenSumOfShares", dims, rps, Unit::None)
    }

    /// How long ago (by this Region's reading) a peer's record last changed.
    pub fn peer_record_age(region: &str, peer: &str, seconds: f64) -> Point {
        let dims = vec![("Region", region.into()), ("Peer", peer.into())];
        Point::new("PeerRecordAgeSeconds", dims, seconds, Unit::Seconds)
    }

    /// Records rejected by validation since the last publish.
    pub fn rejected_records(region: &str, count: u64) -> Point {
        Point::new(
            "RejectedRecords",
            vec![("Region", region.into())],
            count as f64,
            Unit::Count,
        )
    }

    /// Rebalances decided without fresh data since the last publish.
    pub fn rebalances_without_fresh_data(region: &str, count: u64) -> Point {
        let dims = vec![("Region", region.into())];
        Point::new(
            "RebalancesWithoutFreshData",
            dims,
            count as f64,
            Unit::Count,
        )
    }

    /// How long (by own rebalances) the leader has been unable to close some peer's ended epoch
    /// for want of its last record: that epoch's room is frozen, held by nobody, meanwhile. 0 when
    /// it waits for none. Lasting, the room is stranded.
    pub fn longest_wait_for_record(region: &str, seconds: f64) -> Point {
        Point::new(
            "LongestWaitForRecordSeconds",
            vec![("Region", region.into())],
            seconds,
            Unit::Seconds,
        )
    }

    /// How long (by own rebalances) a raise of some limit has waited for a peer's record to
    /// account with this Region's current epoch: the raise's room is unused, under the limit,
    /// meanwhile. 0 when no raise waits. Lasting, that peer is down or cut off.
    pub fn longest_raise_wait(region: &str, seconds: f64) -> Point {
        Point::new(
            "LongestRaiseWaitSeconds",
            vec![("Region", region.into())],
            seconds,
            Unit::Seconds,
        )
    }

    /// How long the health verdict of some Region (the own one included) has read unknown, or
    /// could not be read, without a break, the longest of them: 0 when every verdict is known.
    /// Lasting, a lost Region would never be reclaimed (two-signals never reads unknown as
    /// unhealthy) and nothing else would say so.
    pub fn longest_health_unknown(region: &str, seconds: f64) -> Point {
        Point::new(
            "LongestHealthUnknownSeconds",
            vec![("Region", region.into())],
            seconds,
            Unit::Seconds,
        )
    }

    /// Peers whose records have named limits other than this Region's for longer than the
    /// rollout window (`limits_rollout_periods`): the Regions run different limits. 0 when none.
    /// Limits whose shares, as this Region sees them, add up to more than the limit's rate (the
    /// core's `sum_above_limit` alarm): one alarm for every limit, however many there are.
    pub fn limits_above_rate(region: &str, count: u64) -> Point {
        Point::new(
            "LimitsAboveRate",
            vec![("Region", region.into())],
            count as f64,
            Unit::Count,
        )
    }

    pub fn limits_mismatch_peers(region: &str, count: u64) -> Point {
        Point::new(
            "LimitsMismatchPeers",
            vec![("Region", region.into())],
            count as f64,
            Unit::Count,
        )
    }

    /// 1 while the daemon is ready, 0 otherwise.
    pub fn ready(region: &str, ready: bool) -> Point {
        Point::new(
            "Ready",
            vec![("Region", region.into())],
            f64::from(u8::from(ready)),
            Unit::None,
        )
    }

    fn new(
        name: &'static str,
        dimensions: Vec<(&'static str, String)>,
        value: f64,
        unit: Unit,
    ) -> Point {
        Point {
            name,
            dimensions,
            value,
            unit,
        }
    }

    /// A generous estimate of this datum's share of a query-protocol request.
    fn request_bytes(&self) -> usize {
        let dims: usize = self
            .dimensions
            .iter()
            .map(|(k, v)| 80 + k.len() + 3 * v.len())
            .sum();
        200 + self.name.len() + dims
    }

    fn datum(&self, at: DateTime) -> MetricDatum {
        let unit = match self.unit {
            Unit::None => StandardUnit::None,
            Unit::Seconds => StandardUnit::Seconds,
            Unit::Count => StandardUnit::Count,
        };
        let mut b = MetricDatum::builder()
            .metric_name(self.name)
            .value(self.value)
            .unit(unit)
            .timestamp(at);
        for (k, v) in &self.dimensions {
            b = b.dimensions(Dimension::builder().name(*k).value(v).build());
        }
        b.build()
    }
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MetricsError {
    /// `sent` datums went out before the failure.
    #[error("PutMetricData failed after {sent} datums: {message}")]
    Failed {
        sent: usize,
        retryable: bool,
        message: String,
    },
    #[error("{0} datums in one publish, more than {MAX_DATUMS_PER_PUBLISH}")]
    TooMany(usize),
}

/// What one publish did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    pub datums: usize,
    pub calls: usize,
    /// Non-finite values left out.
    pub dropped: usize,
}

/// Publishes [`Point`]s to one namespace.
#[derive(Clone, Debug)]
pub struct MetricsPublisher {
    client: Client,
    namespace: String,
}

impl MetricsPublisher {
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        MetricsPublisher {
            client,
            namespace: namespace.into(),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Sends `points` stamped with `at`, in as few calls as the limits allow.
    pub async fn publish(
        &self,
        points: &[Point],
        at: SystemTime,
    ) -> Result<Published, MetricsError> {
        if points.len() > MAX_DATUMS_PER_PUBLISH {
            return Err(MetricsError::TooMany(points.len()));
        }
        let at = DateTime::from(at);
        let mut done = Published::default();
        for batch in batches(points) {
            let mut call = self.client.put_metric_data().namespace(&self.namespace);
            let mut n = 0;
            for p in batch {
                if p.value.is_finite() {
                    call = call.metric_data(p.datum(at));
                    n += 1;
                } else {
                    done.dropped += 1;
                }
            }
            if n == 0 {
                continue;
            }
            call.send().await.map_err(|e| MetricsError::Failed {
                sent: done.datums,
                retryable: crate::client::is_retryable(&e),
                message: crate::client::describe(&e),
            })?;
            done.datums += n;
            done.calls += 1;
        }
        Ok(done)
    }
}

/// Splits `points` into runs that respect the per-call datum and byte limits.
fn batches(points: &[Point]) -> Vec<&[Point]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, p) in points.iter().enumerate() {
        let size = p.request_bytes();
        if i > start && (i - start >= MAX_DATUMS_PER_CALL || bytes + size > MAX_BYTES_PER_CALL) {
            out.push(&points[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < points.len() {
        out.push(&points[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_the_datum_limit_and_keep_every_point() {
        let points: Vec<Point> = (0..2501)
            .map(|i| Point::share(&format!("l{i}"), "eu-west-1", 1.0))
            .collect();
        let b = batches(&points);
        assert_eq!(
            b.iter().map(|b| b.len()).collect::<Vec<_>>(),
            vec![1000, 1000, 501]
        );
        let long = "x".repeat(250);
        let big: Vec<Point> = (0..900).map(|_| Point::share(&long, &long, 1.0)).collect();
        let b = batches(&big);
        assert!(b.len() > 1, "900 datums of ~1.8 KB must not fit one call");
        assert!(b
            .iter()
            .all(|b| b.iter().map(Point::request_bytes).sum::<usize>() <= MAX_BYTES_PER_CALL));
        assert_eq!(b.iter().map(|b| b.len()).sum::<usize>(), 900);
    }
}
