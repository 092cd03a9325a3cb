//! A health verdict that stays unknown is an alarm, one event each way and a gauge (issue 34),
//! `shareplane_health_verdict` says which verdict each Region reads, and unknown is still never
//! a reason to reclaim: three daemons on paused tokio time over the simulated
//! table, with a health source the test sets.

use shareplane::clock::Clock;
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::health::SimHealth;
use shareplane::health_watch::default_unknown_after_ms;
use shareplane::state::Shared;
use shareplane_core::{Health, PerRegion, RegionId, MAX_REGIONS};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

const PERIOD_MS: u64 = 5_000;
const PHASES_MS: [u64; 3] = [0, 1_700, 3_300];

fn rid(i: usize) -> RegionId {
    RegionId::new(i).unwrap_or_else(|| panic!("region index {i}"))
}

struct Replica {
    shared: Arc<Shared>,
    _stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Three Regions, one replica each, all verdicts healthy at first.
fn start_three(health: &SimHealth) -> Vec<Replica> {
    let d = Arc::new(shareplane::demo::deployment(PERIOD_MS).unwrap_or_else(|e| panic!("{e}")));
    let clock = Clock::starting_at(1_000_000);
    let table = shareplane::table::on_clock(clock, d.n(), 1_000);
    (0..3)
        .map(|r| {
            let (stop, rx) = watch::channel(false);
            let shared = Shared::new(d.clone(), rid(r), clock, Some("t".repeat(16)), rx);
            let opts = DaemonOptions::new(format!("r{r}"), PHASES_MS[r], PERIOD_MS);
            let daemon = Daemon::new(shared.clone(), table.view(rid(r)), health.clone(), opts);
            let task = tokio::spawn(daemon.run());
            Replica {
                shared,
                _stop: stop,
                task,
            }
        })
        .collect()
}

async fn settle(secs: u64) {
    tokio::time::sleep(Duration::from_secs(secs)).await;
}

fn events(s: &Shared, kind: &str, peer: &str) -> usize {
    (s.events.since(0).0.iter())
        .filter(|e| e.kind.name() == kind && e.peer.as_deref() == Some(peer))
        .count()
}

fn peer_state(s: &Shared, peer: &str) -> &'static str {
    (s.view().peers.iter())
        .find(|p| p.region == peer)
        .map_or("none", |p| p.state)
}

fn unknown_s(s: &Shared, region: &str) -> f64 {
    s.view()
        .health_unknown_seconds
        .get(region)
        .copied()
        .unwrap_or(f64::NAN)
}

/// The verdict `shareplane_health_verdict` says this replica reads for `of`: the one `verdict`
/// label at 1, and checked that the other two are there at 0.
fn verdict_metric(s: &Shared, of: &str) -> String {
    let text = s.render_metrics();
    let prefix = format!(
        "shareplane_health_verdict{{region=\"{}\",of=\"{of}\",verdict=\"",
        s.view().region
    );
    let series: Vec<(&str, &str)> = (text.lines())
        .filter_map(|l| l.strip_prefix(&prefix)?.split_once("\"} "))
        .collect();
    let mut names: Vec<&str> = series.iter().map(|(v, _)| *v).collect();
    names.sort_unstable();
    assert_eq!(names, ["healthy", "unhealthy", "unknown"], "{text}");
    let on: Vec<&str> = (series.iter())
        .filter(|(_, x)| *x == "1")
        .map(|(v, _)| *v)
        .collect();
    assert_eq!(on.len(), 1, "one verdict at 1: {series:?}");
    assert_eq!(
        series.iter().filter(|(_, x)| *x == "0").count(),
        2,
        "{series:?}"
    );
    on[0].to_string()
}

fn has_alarm(s: &Shared, alarm: &str) -> bool {
    s.view().alarms.iter().any(|a| a == alarm)
}

#[tokio::test(start_paused = true)]
async fn a_verdict_unknown_past_the_threshold_is_an_alarm_an_event_and_a_gauge_and_never_a_reclaim()
{
    let health = SimHealth::new(PerRegion([Health::Healthy; MAX_REGIONS]));
    let mut rs = start_three(&health);
    settle(30).await;
    let (a, c) = (rs[0].shared.clone(), rs[2].shared.clone());
    assert_eq!(peer_state(&a, "B"), "live");
    assert_eq!(unknown_s(&a, "B"), 0.0);
    assert_eq!(verdict_metric(&a, "B"), "healthy");

    // B dies with -9 and its health source answers nothing but unknown (moto, a wrong id).
    rs.remove(1).task.abort();
    health.set(rid(1), Health::Unknown);
    let after_s = default_unknown_after_ms(PERIOD_MS) / 1000;
    assert_eq!(after_s, 60, "the default for a 5 s period is a minute");
    settle(after_s - 10).await;
    for s in [&a, &c] {
        assert!(!has_alarm(s, "health_unknown:B"), "{:?}", s.view().alarms);
        assert_eq!(events(s, "health_unknown", "B"), 0);
        let g = unknown_s(s, "B");
        assert!((40.0..=after_s as f64).contains(&g), "{g}");
    }
    settle(20).await;
    for s in [&a, &c] {
        assert!(has_alarm(s, "health_unknown:B"), "{:?}", s.view().alarms);
        assert_eq!(events(s, "health_unknown", "B"), 1);
        assert!(unknown_s(s, "B") >= after_s as f64, "{}", unknown_s(s, "B"));
        // Only B's verdict is unknown: no alarm for the Regions whose verdicts are known.
        assert!(!has_alarm(s, "health_unknown:A") && !has_alarm(s, "health_unknown:C"));
        assert_eq!(unknown_s(s, "A"), 0.0);
        assert_eq!(verdict_metric(s, "B"), "unknown");
        assert_eq!(verdict_metric(s, "A"), "healthy");
        assert_eq!(verdict_metric(s, "C"), "healthy");
    }
    // The alarm stays, one event, the gauge rising; and B, silent, is never reclaimed.
    let before = unknown_s(&a, "B");
    settle(120).await;
    for s in [&a, &c] {
        assert!(has_alarm(s, "health_unknown:B"));
        assert_eq!(events(s, "health_unknown", "B"), 1);
        assert_eq!(peer_state(s, "B"), "silent");
        assert_eq!(events(s, "reclaim", "B"), 0);
    }
    assert!(
        unknown_s(&a, "B") >= before + 119.0,
        "{}",
        unknown_s(&a, "B")
    );

    // The verdict is known again (unhealthy): the alarm clears with one event, the gauge is 0,
    // and B is reclaimed on two signals as usual.
    health.set(rid(1), Health::Unhealthy);
    settle(15).await;
    for s in [&a, &c] {
        assert!(!has_alarm(s, "health_unknown:B"), "{:?}", s.view().alarms);
        assert_eq!(events(s, "health_known", "B"), 1);
        assert_eq!(events(s, "health_unknown", "B"), 1);
        assert_eq!(unknown_s(s, "B"), 0.0);
        assert_eq!(peer_state(s, "B"), "reclaimed");
        assert_eq!(verdict_metric(s, "B"), "unhealthy");
    }
}

#[tokio::test(start_paused = true)]
async fn the_own_verdict_unknown_is_an_alarm_too_and_a_short_gap_is_none() {
    let health = SimHealth::new(PerRegion([Health::Healthy; MAX_REGIONS]));
    let rs = start_three(&health);
    settle(30).await;
    let a = rs[0].shared.clone();
    // Unknown for less than the threshold, then known: nothing raised, nothing logged.
    health.set(rid(0), Health::Unknown);
    settle(40).await;
    health.set(rid(0), Health::Healthy);
    settle(10).await;
    assert!(!has_alarm(&a, "health_unknown:A"));
    assert_eq!(
        events(&a, "health_unknown", "A") + events(&a, "health_known", "A"),
        0
    );
    // Unknown for longer: A's own replica raises the alarm on itself.
    health.set(rid(0), Health::Unknown);
    settle(70).await;
    assert!(has_alarm(&a, "health_unknown:A"), "{:?}", a.view().alarms);
    assert_eq!(events(&a, "health_unknown", "A"), 1);
    // Unknown is not unhealthy: A is not fenced.
    assert!(!has_alarm(&a, "fenced"), "{:?}", a.view().alarms);
}
