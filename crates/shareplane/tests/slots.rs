//! A template's coordination slots run by three daemons on paused tokio time over the simulated
//! table: a value busy in one Region only moves its slot's room there by named grants (the
//! slot's share rises above the static part in that Region while the others' fall, their sum
//! never above the rate), and the room moves back when the value cools. The slot limits come
//! from a configuration's `[[templates]]` with `slots`, as `shareplane run` reads it, and the
//! published rule sets are read back as a gateway parses them.

use shareplane::clock::Clock;
use shareplane::daemon::{Daemon, DaemonOptions};
use shareplane::health::SimHealth;
use shareplane::state::Shared;
use shareplane_core::{Health, PerRegion, RegionId, MAX_REGIONS};
use shareplane_limiter::slots::{slot_id, slot_of};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

const PERIOD_MS: u64 = 5_000;
const PHASES_MS: [u64; 3] = [0, 1_700, 3_300];
const SLOTS: u32 = 8;
/// Each value's rate across the three Regions: a static part of 100 each.
const RATE: f64 = 300.0;

fn config(region: &str) -> shareplane::config::Config {
    let text = format!(
        "region = \"{region}\"\nstore = \"memory\"\napi_token = \"{}\"\nperiod_ms = {PERIOD_MS}\n\
         [[regions]]\nname = \"A\"\n[[regions]]\nname = \"B\"\n[[regions]]\nname = \"C\"\n\
         [[templates]]\nid = \"per_key\"\nentry = \"api_key\"\nrate = {RATE}\nslots = {SLOTS}\n",
        "t".repeat(16)
    );
    shareplane::config::parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"))
}

/// Starts the three Regions' daemons; returns their shared states and shutdown switches.
fn start(clock: Clock) -> (Vec<Arc<Shared>>, Vec<watch::Sender<bool>>) {
    let table = shareplane::table::on_clock(clock, 3, 1_000);
    let health = SimHealth::new(PerRegion([Health::Healthy; MAX_REGIONS]));
    let (mut shareds, mut stops) = (Vec::new(), Vec::new());
    for (i, name) in ["A", "B", "C"].into_iter().enumerate() {
        let cfg = config(name);
        let me = RegionId::new(i).unwrap_or_else(|| panic!("{i}"));
        let (stop, rx) = watch::channel(false);
        let shared = Shared::new(cfg.deployment.clone(), me, clock, Some("t".repeat(16)), rx);
        let n = cfg.deployment.n();
        shared.set_templates(shareplane::templates::wire(&cfg.templates, n, me));
        let opts = DaemonOptions::new(format!("r{i}"), PHASES_MS[i], PERIOD_MS);
        let daemon = Daemon::new(shared.clone(), table.view(me), health.clone(), opts);
        tokio::spawn(daemon.run());
        shareds.push(shared);
        stops.push(stop);
    }
    (shareds, stops)
}

/// Each Region's published share of limit `index` (req/s).
fn shares(shareds: &[Arc<Shared>], index: usize) -> Vec<f64> {
    shareds
        .iter()
        .map(|s| s.rules().rates.get(index).map_or(0.0, |r| r.as_rps()))
        .collect()
}

/// The rate a gateway of Region `s` gives `value` of `per_key`, from the rule set's body.
fn value_rate(s: &Shared, value: &str) -> f64 {
    let body = s.rules().body_with_lease(60_000);
    let set =
        shareplane_limiter::RuleSet::from_json(&body, None, 1).unwrap_or_else(|e| panic!("{e}"));
    let t = set.template("per_key").unwrap_or_else(|| panic!("per_key"));
    set.instance(t, value).rate
}

#[tokio::test(start_paused = true)]
async fn a_slot_busy_in_one_region_gets_room_there_within_the_rate_and_gives_it_back() {
    let clock = Clock::starting_at(1_000_000);
    let (shareds, _stops) = start(clock);
    let d = shareds[0].d();
    let busy = slot_of("alice", SLOTS).unwrap_or_else(|| panic!("a slot"));
    let slot = slot_id("per_key", busy);
    let index = d.limit_index(&slot).unwrap_or_else(|| panic!("{slot}"));
    let quiet = d
        .limit_index(&slot_id("per_key", (busy + 1) % SLOTS))
        .unwrap_or_else(|| panic!("another slot"));

    // Gateway A reports alice's calls (250/s) as demand of her slot, every 100 ms; B and C
    // see none.
    let busy_rps = Arc::new(Mutex::new(250u64));
    let feed = {
        let (a, rps, slot) = (shareds[0].clone(), busy_rps.clone(), slot.clone());
        tokio::spawn(async move {
            let mut total = 0u64;
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                total += *rps.lock().unwrap_or_else(|e| e.into_inner()) / 10;
                let report = BTreeMap::from([(slot.clone(), total)]);
                let _ = a.demand().report(clock.now_ms(), "gw-a", 1, &report);
            }
        })
    };
    // Every second: the sum of the slot's shares never exceeds the rate.
    let mut max_sum = 0.0f64;
    let mut tick = |shareds: &[Arc<Shared>]| {
        let sum: f64 = shares(shareds, index).iter().sum();
        max_sum = max_sum.max(sum);
    };
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick(&shareds);
    }
    let hot = shares(&shareds, index);
    assert!(hot[0] > 200.0, "A's share of the busy slot rose: {hot:?}");
    assert!(
        hot[1] < 100.0 && hot[2] < 100.0,
        "B's and C's fell: {hot:?}"
    );
    // A gateway in A gives alice her slot's share; another slot keeps the static split.
    assert_eq!(value_rate(&shareds[0], "alice"), hot[0]);
    let other = shares(&shareds, quiet);
    assert!(
        other.iter().all(|s| (s - 100.0).abs() < 1.0),
        "a slot without demand: {other:?}"
    );

    // Alice cools: the room goes back to the even split.
    *busy_rps.lock().unwrap_or_else(|e| e.into_inner()) = 0;
    for _ in 0..240 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick(&shareds);
    }
    let cooled = shares(&shareds, index);
    assert!(
        cooled.iter().all(|s| (s - 100.0).abs() < 1.0),
        "back to the static split: {cooled:?}"
    );
    assert!(
        max_sum <= RATE + 1e-9,
        "the slot's shares reached {max_sum}"
    );
    feed.abort();
}
