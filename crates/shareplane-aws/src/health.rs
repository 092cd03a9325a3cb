//! The outside health signal: Route 53 health check status, read from CloudWatch.
//!
//! Route 53 publishes `HealthCheckStatus` (namespace `AWS/Route53`, dimension `HealthCheckId`,
//! 1 = healthy, 0 = unhealthy) to CloudWatch in us-east-1 only, so the reader's client must be
//! pinned there ([`crate::client::cloudwatch_health`]) whatever the daemon's own Region.
//!
//! One `GetMetricData` call asks, for every Region with a health check, the **Minimum** over
//! 60-second periods within the freshness window; the newest period decides: `>= 1` Healthy,
//! `< 1` Unhealthy (any failed checker in that minute counts). No datapoint within the window,
//! a call that fails or outlasts its timeout: Unknown. Unknown never triggers a reclaim.

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricStat};
use aws_sdk_cloudwatch::Client;
use shareplane_core::{Health, PerRegion, RegionId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub const ROUTE53_NAMESPACE: &str = "AWS/Route53";
pub const HEALTH_METRIC: &str = "HealthCheckStatus";
pub const HEALTH_DIMENSION: &str = "HealthCheckId";
const PERIOD_S: i32 = 60;

/// Reads every Region's health verdict.
#[derive(Clone, Debug)]
pub struct HealthReader {
    client: Client,
    /// The Route 53 health check id of each Region, by [`RegionId`] index (`None`: no check).
    checks: Vec<Option<String>>,
    /// A datapoint older than this is no evidence.
    freshness: Duration,
    /// Bound on the whole call.
    timeout: Duration,
    /// Whether the last read failed: failures are logged when they start and when they end, not
    /// at every period.
    failing: Arc<AtomicBool>,
}

impl HealthReader {
    /// `client` must be a us-east-1 client ([`crate::client::cloudwatch_health`]).
    pub fn new(
        client: Client,
        checks: Vec<Option<String>>,
        freshness: Duration,
        timeout: Duration,
    ) -> Self {
        HealthReader {
            client,
            checks,
            freshness,
            timeout,
            failing: Arc::default(),
        }
    }

    /// Every Region's verdict at `now`. Never fails: what cannot be read is Unknown.
    pub async fn read(&self, now: SystemTime) -> PerRegion<Health> {
        let mut out = PerRegion([Health::Unknown; shareplane_core::MAX_REGIONS]);
        let queries: Vec<MetricDataQuery> = self
            .checks
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.as_ref()?)))
            .map(|(i, id)| query(i, id))
            .collect();
        if queries.is_empty() {
            return out;
        }
        let start = now
            .checked_sub(self.freshness)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let call = self
            .client
            .get_metric_data()
            .set_metric_data_queries(Some(queries))
            .start_time(DateTime::from(start))
            .end_time(DateTime::from(now + Duration::from_secs(PERIOD_S as u64)))
            .send();
        let response = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                self.failed(&crate::client::describe(&e));
                return out;
            }
            Err(_) => {
                self.failed(&format!("no answer within {} ms", self.timeout.as_millis()));
                return out;
            }
        };
        if self.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("health reads work again");
        }
        let start_s = DateTime::from(start).secs();
        for result in response.metric_data_results() {
            let Some(r) = result
                .id()
                .and_then(|id| id.strip_prefix('r')?.parse::<usize>().ok())
            else {
                continue;
            };
            let newest = result
                .timestamps()
                .iter()
                .zip(result.values())
                .filter(|(t, v)| t.secs() >= start_s && v.is_finite())
                .max_by_key(|(t, _)| (t.secs(), t.subsec_nanos()));
            if let (Some(region), Some((_, v))) = (RegionId::new(r), newest) {
                out[region] = if *v >= 1.0 {
                    Health::Healthy
                } else {
                    Health::Unhealthy
                };
            }
        }
        out
    }
}

impl HealthReader {
    fn failed(&self, error: &str) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error,
                "health read failed; every Region is Unknown until it works again"
            );
        }
    }
}

fn query(i: usize, check_id: &str) -> MetricDataQuery {
    let metric = Metric::builder()
        .namespace(ROUTE53_NAMESPACE)
        .metric_name(HEALTH_METRIC)
        .dimensions(
            Dimension::builder()
                .name(HEALTH_DIMENSION)
                .value(check_id)
                .build(),
        )
        .build();
    MetricDataQuery::builder()
        .id(format!("r{i}"))
        .metric_stat(
            MetricStat::builder()
                .metric(metric)
                .period(PERIOD_S)
                .stat("Minimum")
                .build(),
        )
        .return_data(true)
        .build()
}
