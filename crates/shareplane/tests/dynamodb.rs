//! Two Regions' daemons on the DynamoDB store of `shareplane-aws`, against moto on 127.0.0.1
//! (`SHAREPLANE_TEST_MOTO_URL`, started by tests/run-all.sh). Their shares converge to the
//! targets of their demands, and each follows the other's records through the table.

use shareplane::clock::Clock;
use shareplane::config::{self, Config};
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::state::Shared;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

fn moto_url() -> Option<String> {
    match std::env::var("SHAREPLANE_TEST_MOTO_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ if std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() == Ok("1") => {
            panic!("SHAREPLANE_TEST_MOTO_URL is not set but SHAREPLANE_REQUIRE_SERVICES=1: start moto (tests/run-all.sh does)")
        }
        _ => None,
    }
}

fn config(url: &str, table: &str, region: &str, phase_ms: u64) -> Config {
    let text = format!(
        r#"
region = "{region}"
phase_ms = {phase_ms}
period_ms = 500
store = "dynamodb"
table = "{table}"
aws_endpoint = "{url}"
aws_region = "us-east-1"
api_token = "0123456789abcdef0123"
[[regions]]
name = "A"
health_check_id = "hc-a"
[[regions]]
name = "B"
health_check_id = "hc-b"
[[limits]]
id = "k-big"
rate = 10000
"#
    );
    config::parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"))
}

async fn start(cfg: &Config, clock: Clock, stop: &watch::Receiver<bool>) -> Arc<Shared> {
    let aws = shareplane::aws::connect(cfg)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let shared = Shared::new(
        cfg.deployment.clone(),
        cfg.me,
        clock,
        cfg.api_token.clone(),
        stop.clone(),
    );
    let opts = DaemonOptions::new(cfg.replica_id.clone(), cfg.phase_ms, cfg.period_ms);
    tokio::spawn(Daemon::new(shared.clone(), aws.store, aws.health, opts).run());
    shared
}

fn share(s: &Shared) -> f64 {
    s.rules().rates.first().map_or(0.0, |r| r.as_rps())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_regions_converge_through_dynamodb() {
    let Some(url) = moto_url() else {
        eprintln!(
            "SHAREPLANE_TEST_MOTO_URL is not set: this test did nothing (run tests/run-all.sh)"
        );
        return;
    };
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let table = format!("shareplane-daemon-{}-{nanos}", std::process::id());
    let (stop_tx, stop) = watch::channel(false);
    let clock = Clock::wall();
    let a = start(&config(&url, &table, "A", 0), clock, &stop).await;
    let b = start(&config(&url, &table, "B", 250), clock, &stop).await;
    let feeders: Vec<_> = [(a.clone(), 900u64), (b.clone(), 100u64)]
        .into_iter()
        .map(|(s, per_tick)| {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let now = s.clock.now_ms();
                    s.demand().add(now, 0, per_tick);
                }
            })
        })
        .collect();
    // Demands 9,000 and 1,000: targets 500 + 9,000 × 0.9 = 8,600 and 1,400.
    let (mut rxa, mut rxb) = (a.subscribe(), b.subscribe());
    let converged = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            if (share(&a) - 8_600.0).abs() < 1.0 && (share(&b) - 1_400.0).abs() < 1.0 {
                return;
            }
            let changed = tokio::select! {
                r = rxa.changed() => r,
                r = rxb.changed() => r,
            };
            if changed.is_err() {
                return;
            }
        }
    })
    .await;
    let (va, vb) = (a.view(), b.view());
    assert!(
        converged.is_ok(),
        "no convergence: A {} B {}; A {va:?}; B {vb:?}",
        share(&a),
        share(&b)
    );
    assert!(share(&a) + share(&b) <= 10_000.0 + 1e-9);
    assert!(a.is_ready() && b.is_ready());
    assert_eq!((va.role, vb.role), ("leader", "leader"));
    assert!(
        vb.peers.iter().any(|p| p.region == "A" && p.version > 0),
        "{vb:?}"
    );
    let _ = stop_tx.send(true);
    for f in feeders {
        f.abort();
    }
}
