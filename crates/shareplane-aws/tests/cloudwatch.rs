//! The health reader and the metric publisher on moto. Moto never publishes Route 53 metrics, so
//! the tests put the `HealthCheckStatus` datapoints themselves.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

mod support;

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Metric, MetricDataQuery, MetricDatum, MetricStat};
use shareplane_aws::client::{self, CallLimits, Endpoint};
use shareplane_aws::health::{HEALTH_DIMENSION, HEALTH_METRIC, ROUTE53_NAMESPACE};
use shareplane_aws::{HealthReader, MetricsPublisher, Point};
use shareplane_core::Health;
use std::time::{Duration, SystemTime};

async fn put_status(cw: &aws_sdk_cloudwatch::Client, check: &str, value: f64, at: SystemTime) {
    let datum = MetricDatum::builder()
        .metric_name(HEALTH_METRIC)
        .dimensions(
            Dimension::builder()
                .name(HEALTH_DIMENSION)
                .value(check)
                .build(),
        )
        .value(value)
        .timestamp(DateTime::from(at))
        .build();
    cw.put_metric_data()
        .namespace(ROUTE53_NAMESPACE)
        .metric_data(datum)
        .send()
        .await
        .expect("put status");
}

#[tokio::test]
async fn health_is_healthy_unhealthy_or_unknown() {
    let Some(url) = support::moto_url("health_is_healthy_unhealthy_or_unknown") else {
        return;
    };
    let config = support::moto_config(&url).await;
    let cw = client::cloudwatch_health(&config);
    assert_eq!(
        cw.config().region().map(|r| r.as_ref()),
        Some("us-east-1"),
        "pinned to us-east-1"
    );
    let now = SystemTime::now();
    let ids: Vec<String> = (0..5).map(|i| support::unique(&format!("hc{i}"))).collect();
    put_status(&cw, &ids[0], 1.0, now - Duration::from_secs(20)).await;
    put_status(&cw, &ids[1], 1.0, now - Duration::from_secs(100)).await;
    put_status(&cw, &ids[1], 0.0, now - Duration::from_secs(20)).await;
    put_status(&cw, &ids[2], 1.0, now - Duration::from_secs(900)).await;
    let mut checks: Vec<Option<String>> = ids.iter().take(4).cloned().map(Some).collect();
    checks.push(None);
    let reader = HealthReader::new(
        cw,
        checks,
        Duration::from_secs(300),
        Duration::from_secs(10),
    );
    let got = reader.read(now).await;
    assert_eq!(
        &got.0[..5],
        &[
            Health::Healthy,
            Health::Unhealthy,
            Health::Unknown,
            Health::Unknown,
            Health::Unknown
        ],
        "healthy, newest unhealthy, only old data, no data, no check"
    );
}

#[tokio::test]
async fn health_read_failure_is_unknown() {
    // Nothing listens on port 9 of the loopback: the call fails fast, and every Region is Unknown.
    let endpoint = Endpoint::Local {
        url: "http://127.0.0.1:9".into(),
        region: "eu-west-1".into(),
    };
    let limits = CallLimits {
        max_attempts: 1,
        ..CallLimits::default()
    };
    let cw = client::cloudwatch_health(&client::sdk_config(&endpoint, limits).await);
    let reader = HealthReader::new(
        cw,
        vec![Some("hc".into())],
        Duration::from_secs(300),
        Duration::from_secs(2),
    );
    assert_eq!(reader.read(SystemTime::now()).await.0[0], Health::Unknown);
}

async fn read_back(
    cw: &aws_sdk_cloudwatch::Client,
    ns: &str,
    name: &str,
    dims: &[(&str, &str)],
    now: SystemTime,
) -> Vec<f64> {
    let mut metric = Metric::builder().namespace(ns).metric_name(name);
    for (k, v) in dims {
        metric = metric.dimensions(Dimension::builder().name(*k).value(*v).build());
    }
    // One 600-second period around `now`: moto does not align periods, and a datapoint on a
    // period boundary would be counted in both.
    let q = MetricDataQuery::builder()
        .id("q")
        .metric_stat(
            MetricStat::builder()
                .metric(metric.build())
                .period(600)
                .stat("Maximum")
                .build(),
        )
        .build();
    let out = cw
        .get_metric_data()
        .metric_data_queries(q)
        .start_time(DateTime::from(now - Duration::from_secs(299)))
        .end_time(DateTime::from(now + Duration::from_secs(301)))
        .send()
        .await
        .expect("get metric data");
    out.metric_data_results()
        .iter()
        .flat_map(|r| r.values().to_vec())
        .collect()
}

#[tokio::test]
async fn metrics_are_published_in_batches_and_read_back() {
    let Some(url) = support::moto_url("metrics_are_published_in_batches_and_read_back") else {
        return;
    };
    let cw = client::cloudwatch(&support::moto_config(&url).await);
    let ns = support::unique("Shareplane/Test");
    let publisher = MetricsPublisher::new(cw.clone(), ns.clone());
    let mut points: Vec<Point> = (0..1200)
        .map(|i| Point::share(&format!("l{i}"), "eu-west-1", i as f64 / 4.0))
        .collect();
    points.push(Point::seen_sum_of_shares("l7", "eu-west-1", 99.5));
    points.push(Point::peer_record_age("eu-west-1", "us-east-1", 4.0));
    points.push(Point::rejected_records("eu-west-1", 3));
    points.push(Point::rebalances_without_fresh_data("eu-west-1", 2));
    points.push(Point::ready("eu-west-1", true));
    points.push(Point::share("l-nan", "eu-west-1", f64::NAN));
    let now = SystemTime::now();
    let done = publisher.publish(&points, now).await.expect("publish");
    assert_eq!((done.datums, done.calls, done.dropped), (1205, 2, 1));
    let r = "eu-west-1";
    assert_eq!(
        read_back(&cw, &ns, "Share", &[("Limit", "l1001"), ("Region", r)], now).await,
        vec![250.25]
    );
    assert_eq!(
        read_back(
            &cw,
            &ns,
            "SeenSumOfShares",
            &[("Limit", "l7"), ("Region", r)],
            now
        )
        .await,
        vec![99.5]
    );
    assert_eq!(
        read_back(
            &cw,
            &ns,
            "PeerRecordAgeSeconds",
            &[("Region", r), ("Peer", "us-east-1")],
            now
        )
        .await,
        vec![4.0]
    );
    assert_eq!(
        read_back(&cw, &ns, "RejectedRecords", &[("Region", r)], now).await,
        vec![3.0]
    );
    assert_eq!(
        read_back(
            &cw,
            &ns,
            "RebalancesWithoutFreshData",
            &[("Region", r)],
            now
        )
        .await,
        vec![2.0]
    );
    assert_eq!(
        read_back(&cw, &ns, "Ready", &[("Region", r)], now).await,
        vec![1.0]
    );
}
