//! `store_timeout_ms` and `health_timeout_ms` reach the daemon: on paused tokio time, a store and
//! a health source that answer in 120 ms fail a 50 ms bound (store calls count as failed, health
//! reads as unknown) and pass the default bound of half the 500 ms period.

use shareplane::config;
use shareplane::health::HealthSource;
use shareplane::reload::ConfigSource;
use shareplane::slow_store::SlowStore;
use shareplane::RegionDaemon;
use shareplane_core::{Health, PerRegion};
use shareplane_store::memory::MemoryStore;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

const LATE: Duration = Duration::from_millis(120);

/// Every verdict healthy, 120 ms late.
struct SlowHealth;

impl HealthSource for SlowHealth {
    async fn read(&self) -> PerRegion<Health> {
        tokio::time::sleep(LATE).await;
        PerRegion([Health::Healthy; shareplane_core::MAX_REGIONS])
    }
}

/// Runs a Region with `settings` for 5 s of paused time on a store and a health source that
/// answer 120 ms late; returns whether its store calls succeed, its last error and how many
/// health reads timed out.
async fn run_with(settings: &str) -> (bool, Option<String>, u64) {
    let text = format!(
        "{settings}region = \"A\"\nperiod_ms = 500\nstore = \"memory\"\nlisten = \"127.0.0.1:0\"\n\
         api_token = \"0123456789abcdef\"\n[[regions]]\nname = \"A\"\n[[limits]]\nid = \"k\"\nrate = 100\n"
    );
    let cfg = config::parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    let source = ConfigSource {
        path: None,
        env: BTreeMap::from([(config::ENV_CONFIG_TOML.to_string(), text)]),
    };
    let (stop, shutdown) = watch::channel(false);
    let region = RegionDaemon::new(cfg, source, shutdown);
    let shared = region.shared().clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let store = SlowStore::new(MemoryStore::new(), LATE);
    let served = tokio::spawn(region.serve(listener, store, SlowHealth));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let view = shared.view();
    let out = (
        view.store_ok,
        view.last_error.clone(),
        shared.metrics.health_reads_timed_out.get(),
    );
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), served).await;
    out
}

#[tokio::test(start_paused = true)]
async fn calls_slower_than_the_configured_timeouts_fail_and_the_defaults_allow_them() {
    let (store_ok, error, timed_out) =
        run_with("store_timeout_ms = 50\nhealth_timeout_ms = 50\n").await;
    assert!(!store_ok, "{error:?}");
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("no answer within store_timeout_ms (50 ms)")),
        "{error:?}"
    );
    assert!(timed_out > 0, "health reads timed out: {timed_out}");
    let (store_ok, error, timed_out) = run_with("").await;
    assert!(store_ok, "{error:?}");
    assert_eq!(timed_out, 0);
}
