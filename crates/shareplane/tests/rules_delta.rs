//! Rule-set deltas over real HTTP: the gateways' own `RuleWatcher` (reqwest) long-polls a daemon's
//! `GET /v1/rules` served on loopback. A gateway that runs a set this replica published gets
//! only the limits changed since, and what it installs is exactly the whole set of that version;
//! one that runs another replica's set of the same version gets the whole set.

use shareplane::clock::Clock;
use shareplane::config;
use shareplane::rules::RuleSet;
use shareplane::state::Shared;
use shareplane_core::{Deployment, Room, Rule};
use shareplane_limiter::{Install, Limiter, LimiterConfig, RuleWatcher};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const LIMITS: usize = 40;

fn deployment() -> Arc<Deployment> {
    let mut text = String::from(
        "region = \"A\"\nstore = \"memory\"\napi_token = \"0123456789abcdef\"\n\
         [[regions]]\nname = \"A\"\n[[regions]]\nname = \"B\"\n",
    );
    for i in 0..LIMITS {
        text.push_str(&format!("[[limits]]\nid = \"p-{i}\"\nrate = 1000\n"));
    }
    let cfg = config::parse(&text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
    cfg.deployment
}

/// Rules at `rps[i]` requests/s for limit `i`.
fn rules(d: &Deployment, rps: &[u64]) -> Vec<Rule> {
    d.limits
        .iter()
        .zip(rps)
        .map(|(spec, &r)| Rule::at(spec, Room::rps(r)))
        .collect()
}

fn limiter() -> Limiter {
    let mut cfg = LimiterConfig::new("redis://127.0.0.1:1/");
    cfg.region = Some("A".into());
    Limiter::new(cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// The set a gateway would install from the whole answer of `shared` now.
fn whole(shared: &Shared) -> shareplane_limiter::RuleSet {
    let body = shared.rules().body_with_lease(1_000);
    shareplane_limiter::RuleSet::from_json(&body, Some("A"), 1).unwrap_or_else(|e| panic!("{e}"))
}

async fn serve(shared: Arc<Shared>, stop: watch::Receiver<bool>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let url = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let router = shareplane::api::router(shared);
    tokio::spawn(shareplane::api::serve(
        listener,
        router,
        stop,
        Duration::from_millis(100),
    ));
    url
}

async fn poll(w: &RuleWatcher, l: &Limiter) -> Option<Install> {
    tokio::time::timeout(Duration::from_secs(10), w.poll_once(l))
        .await
        .unwrap_or_else(|_| panic!("no answer within 10 s"))
        .unwrap_or_else(|e| panic!("poll: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_gets_only_what_changed_and_installs_exactly_the_whole_set() {
    let d = deployment();
    let me = d.region_id("A").unwrap_or_else(|| panic!("A"));
    let (stop_tx, stop) = watch::channel(false);
    let shared = Shared::new(d.clone(), me, Clock::wall(), None, stop.clone());
    let mut rps: Vec<u64> = (0..LIMITS as u64).map(|i| 100 + i).collect();
    assert!(shared.publish(RuleSet::build(
        &d,
        &Default::default(),
        "A",
        2,
        &rules(&d, &rps)
    )));
    let url = serve(shared.clone(), stop.clone()).await;
    let http = reqwest::Client::new();
    let gw = limiter();
    let watcher = RuleWatcher::new(http.clone(), &url, 2_000);

    // The first answer is whole.
    assert_eq!(
        poll(&watcher, &gw).await,
        Some(Install::Installed { version: 2 })
    );
    assert_eq!(
        *gw.rules().unwrap_or_else(|| panic!("none")),
        whole(&shared)
    );
    assert_eq!(shared.metrics.rules_deltas.get(), 0);

    // One limit lowered, then two raised: each answer is a delta, and the result is the set
    // the whole answer would have given.
    for (version, changes) in [(4, vec![(7, 50)]), (6, vec![(0, 300), (39, 301)])] {
        for (i, r) in changes {
            rps[i] = r;
        }
        assert!(shared.publish(RuleSet::build(
            &d,
            &Default::default(),
            "A",
            version,
            &rules(&d, &rps)
        )));
        let deltas = shared.metrics.rules_deltas.get();
        assert_eq!(
            poll(&watcher, &gw).await,
            Some(Install::Installed { version })
        );
        assert_eq!(shared.metrics.rules_deltas.get(), deltas + 1, "not a delta");
        assert_eq!(
            *gw.rules().unwrap_or_else(|| panic!("none")),
            whole(&shared)
        );
    }
    let body = shared.rules().delta_body(
        4,
        &shareplane_limiter::digest_hex(digest_at(&d, 4, &rps)),
        0,
    );
    assert!(
        body.is_none(),
        "a delta from a set this replica never published"
    );

    // A gateway that runs another replica's version 6 (other numbers) gets the whole set.
    let other = Shared::new(d.clone(), me, Clock::wall(), None, stop.clone());
    let mut theirs = rps.clone();
    theirs[3] = 999;
    assert!(other.publish(RuleSet::build(
        &d,
        &Default::default(),
        "A",
        6,
        &rules(&d, &theirs)
    )));
    let gw2 = limiter();
    gw2.install(whole(&other));
    assert!(shared.publish(RuleSet::build(
        &d,
        &Default::default(),
        "A",
        8,
        &rules(&d, &rps.iter().map(|r| r + 1).collect::<Vec<_>>())
    )));
    let deltas = shared.metrics.rules_deltas.get();
    let watcher2 = RuleWatcher::new(http, &url, 2_000);
    assert_eq!(
        poll(&watcher2, &gw2).await,
        Some(Install::Installed { version: 8 })
    );
    assert_eq!(
        shared.metrics.rules_deltas.get(),
        deltas,
        "a delta for a set it did not publish"
    );
    assert_eq!(
        *gw2.rules().unwrap_or_else(|| panic!("none")),
        whole(&shared)
    );
    let _ = stop_tx.send(true);
}

/// The digest of the set of `version` with rules at `rps` (as another replica would have it).
fn digest_at(d: &Deployment, version: u64, rps: &[u64]) -> u64 {
    let mut other = rps.to_vec();
    other[5] += 1;
    RuleSet::build(d, &Default::default(), "A", version, &rules(d, &other)).digest
}
