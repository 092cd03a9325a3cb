//! `store = "dynamodb"`: the record store, health reader and metric publisher of
//! `shareplane-aws`, wired into the daemon.

use crate::config::Config;
use crate::health::HealthSource;
use crate::state::Shared;
use crate::view::{PeerJson, StateView};
use shareplane_aws::client::{cloudwatch, cloudwatch_health, dynamodb, sdk_config};
use shareplane_aws::{CallLimits, DynamoStore, Endpoint, HealthReader, MetricsPublisher, Point};
use shareplane_core::{Health, PerRegion};
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// A health datapoint older than this is no evidence (Route 53 publishes every minute).
const HEALTH_FRESHNESS: Duration = Duration::from_secs(180);
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// Route 53 health checks read from CloudWatch in us-east-1.
pub struct AwsHealth(pub HealthReader);

impl HealthSource for AwsHealth {
    async fn read(&self) -> PerRegion<Health> {
        self.0.read(crate::clock::wall_now()).await
    }
}

/// The AWS side of one daemon.
pub struct Aws {
    pub store: DynamoStore,
    pub health: AwsHealth,
    pub publisher: MetricsPublisher,
}

/// Builds the clients. With `aws_endpoint` set (local runs against moto) it uses fixed test
/// credentials and creates the table if it is missing; without it, the default credential chain
/// and a table that the infrastructure code made.
pub async fn connect(cfg: &Config) -> Result<Aws, shareplane_store::StoreError> {
    let (sdk, store) = table(cfg).await?;
    // Route 53 health lives in us-east-1 only: with one local server per Region, tests name the
    // one that plays us-east-1 apart (`health_endpoint`, validated to be local like the table).
    let health_sdk = match &cfg.health_endpoint {
        Some(url) => {
            let at = Endpoint::Local {
                url: url.clone(),
                region: shareplane_aws::client::HEALTH_METRICS_REGION.to_string(),
            };
            sdk_config(&at, CallLimits::default()).await
        }
        None => sdk.clone(),
    };
    let reader = HealthReader::new(
        cloudwatch_health(&health_sdk),
        cfg.health_check_ids.clone(),
        HEALTH_FRESHNESS,
        HEALTH_TIMEOUT,
    );
    let publisher = MetricsPublisher::new(cloudwatch(&sdk), cfg.metrics_namespace.clone());
    Ok(Aws {
        store,
        health: AwsHealth(reader),
        publisher,
    })
}

/// The record store on this Region's replica of the table alone (`shareplane limits`), with
/// the SDK configuration it was built from.
pub async fn table(
    cfg: &Config,
) -> Result<(shareplane_aws::client::SdkConfig, DynamoStore), shareplane_store::StoreError> {
    let endpoint = match &cfg.aws_endpoint {
        Some(url) => Endpoint::Local {
            url: url.clone(),
            region: cfg.aws_region.clone(),
        },
        None => Endpoint::Default {
            region: Some(cfg.aws_region.clone()),
        },
    };
    let sdk = sdk_config(&endpoint, CallLimits::default()).await;
    let db = dynamodb(&sdk);
    if cfg.aws_endpoint.is_some() {
        shareplane_aws::create_table(&db, &cfg.table).await?;
    }
    let store = DynamoStore::new(db, cfg.table.clone(), cfg.deployment.clone(), cfg.me);
    Ok((sdk, store))
}

/// Limits with per-limit CloudWatch points (`Share`, `SeenSumOfShares`) every period: the first
/// ones in the configuration's order, plus any whose shares add up to more than its rate. The
/// others are covered by `LimitsAboveRate`, one point for all of them: at 100,000 limits,
/// per-limit points would be 200,000 datums (200 calls) a period and as many custom metrics.
pub const CLOUDWATCH_PER_LIMIT: usize = 100;

/// The CloudWatch points for one period, from the latest state view.
pub fn points(
    view: &StateView,
    ready: bool,
    rejected_since_last: u64,
    stale_since_last: u64,
) -> Vec<Point> {
    let per_limit = view.reported_limits(CLOUDWATCH_PER_LIMIT);
    let mut out = Vec::with_capacity(2 * per_limit.len() + view.peers.len() + 8);
    let above = view.limits_above_rate().len() as u64;
    out.push(Point::limits_above_rate(&view.region, above));
    for l in &per_limit {
        out.push(Point::share(&l.id, &view.region, l.share));
        out.push(Point::seen_sum_of_shares(
            &l.id,
            &view.region,
            l.seen_sum_of_shares,
        ));
    }
    for p in &view.peers {
        if let Some(u) = p.unchanged {
            let secs = u as f64 * view.period_ms as f64 / 1000.0;
            out.push(Point::peer_record_age(&view.region, &p.region, secs));
        }
    }
    if view.role == "leader" {
        let longest = |of: fn(&PeerJson) -> Option<u32>| {
            let rounds = view.peers.iter().filter_map(of).max().unwrap_or(0);
            f64::from(rounds) * view.period_ms as f64 / 1000.0
        };
        out.push(Point::longest_wait_for_record(
            &view.region,
            longest(|p| p.waiting_for_record),
        ));
        out.push(Point::longest_raise_wait(
            &view.region,
            longest(|p| p.raise_waiting),
        ));
    }
    if view.role != "starting" {
        let longest = (view.health_unknown_seconds.values()).fold(0.0, |a: f64, &b| a.max(b));
        out.push(Point::longest_health_unknown(&view.region, longest));
    }
    let mismatched = view
        .alarms
        .iter()
        .filter(|a| a.starts_with("limits_mismatch:"))
        .count();
    out.push(Point::limits_mismatch_peers(
        &view.region,
        mismatched as u64,
    ));
    out.push(Point::rejected_records(&view.region, rejected_since_last));
    out.push(Point::rebalances_without_fresh_data(
        &view.region,
        stale_since_last,
    ));
    out.push(Point::ready(&view.region, ready));
    out
}

/// Publishes the alarm metrics once a period until shutdown. Failures are logged and counted,
/// never fatal.
pub async fn publish_metrics(publisher: MetricsPublisher, shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown_signal();
    let mut tick = tokio::time::interval(Duration::from_millis(shared.d().period_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut rejected_before = shared.metrics.records_rejected.total();
    let mut stale_before = shared.metrics.stale_rebalances.get();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.wait_for(|v| *v) => return,
        }
        let rejected = shared.metrics.records_rejected.total();
        let stale = shared.metrics.stale_rebalances.get();
        let pts = points(
            &shared.view(),
            shared.is_ready(),
            rejected.saturating_sub(rejected_before),
            stale.saturating_sub(stale_before),
        );
        (rejected_before, stale_before) = (rejected, stale);
        if let Err(e) = publisher.publish(&pts, crate::clock::wall_now()).await {
            shared.metrics.metric_publish_failed.inc();
            warn!(error = %e, "publishing metrics to CloudWatch failed");
        }
    }
}
