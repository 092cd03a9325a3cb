//! Issue 12's "done when", with real processes: `shareplane demo` runs as a process, a gateway
//! (the `shareplane-limiter` client that gateways embed: rule watcher and limiter over a real
//! `redis-server`) watches Region A's rules, and the demo is killed with SIGKILL. The gateway must
//! refuse every request within `lease_ms` plus one period of the kill. The waits are readiness
//! signals (the limiter's own lease, the first admitted request); the assertion is on the measured
//! time, with no sleep standing in for it.

use shareplane_e2e::procs::{binary, free_port, wait_for_port, Procs};
use shareplane_e2e::{cluster, needed, redis_server, rules, unique};
use shareplane_limiter::{http, DecisionPath, Limiter, LimiterConfig, RuleWatcher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The demo's default period.
const PERIOD_MS: u64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_the_demo_refuses_everything_within_the_lease_and_a_period_of_its_death() {
    let test =
        "a_gateway_on_the_demo_refuses_everything_within_the_lease_and_a_period_of_its_death";
    let Some(redis_bin) = redis_server(test) else {
        return;
    };
    let bin = binary("shareplane");
    let why = bin
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    let Some(bin) = needed(test, bin.ok(), &why) else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("e2e-demo-gateway"));
    let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
    let redis = cluster::start_redis(&mut procs, &redis_bin, "A")
        .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
    let port = free_port().unwrap_or_else(|e| panic!("{e}"));
    let args = vec![
        "demo".to_string(),
        "--listen".to_string(),
        format!("127.0.0.1:{port}"),
    ];
    let demo = procs
        .spawn("demo", &bin, &args, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::task::block_in_place(|| {
        wait_for_port(&mut procs, demo, "demo", port, Duration::from_secs(20))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
    let base = format!("http://127.0.0.1:{port}/regions/A");

    let limiter = Arc::new(
        Limiter::new(LimiterConfig {
            region: Some("A".into()),
            ..LimiterConfig::new(redis)
        })
        .unwrap_or_else(|e| panic!("{e}")),
    );
    let client = http::client().unwrap_or_else(|e| panic!("{e}"));
    let watcher = RuleWatcher::new(client, &base, 25_000);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let watching = tokio::spawn(watcher.run(limiter.clone(), async move {
        let mut s = stopped;
        let _ = s.wait_for(|v| *v).await;
    }));

    // Ready: the gateway runs a leased rule set and admits a request through Redis.
    let ready = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(d) = limiter.check(&["k-big"], 1).await {
                if d.allowed && d.path == DecisionPath::Redis {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        ready.is_ok(),
        "the gateway never admitted\n{}",
        procs.log_tails(20)
    );
    let lease_ms = rules::lease_ms(&rules::client().unwrap_or_else(|e| panic!("{e}")), &base)
        .await
        .unwrap_or(0);
    assert!(
        lease_ms > 0 && lease_ms < 3 * PERIOD_MS,
        "the demo serves lease_ms {lease_ms}"
    );
    assert!(limiter.stats().lease_remaining.is_some());

    let killed = tokio::time::Instant::now();
    tokio::task::block_in_place(|| procs.kill(demo));
    // The limiter's own signal: it completes when the lease it holds runs out.
    let bound = Duration::from_millis(lease_ms + PERIOD_MS);
    let ran_out =
        tokio::time::timeout(bound + Duration::from_secs(5), limiter.lease_runs_out()).await;
    let fenced_after = killed.elapsed();
    let _ = stop.send(true);
    let _ = watching.await;
    assert!(
        ran_out.is_ok(),
        "still not fenced {fenced_after:?} after the kill"
    );
    assert!(
        fenced_after <= bound,
        "fenced {fenced_after:?} after the kill; lease {lease_ms} ms + one period"
    );
    let line = format!(
        "demo killed -9: a gateway on Region A fenced {} ms later (lease_ms {lease_ms}, bound lease + one period = {} ms)\n",
        fenced_after.as_millis(),
        bound.as_millis()
    );
    print!("{line}");
    shareplane_e2e::append_report(line.trim_end());
    for _ in 0..100 {
        let d = limiter
            .check(&["k-big"], 1)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (d.allowed, d.path.clone(), d.retry_after_s),
            (false, DecisionPath::Fenced, Some(1))
        );
    }
    let stats = limiter.stats();
    assert_eq!(
        (stats.fenced, stats.fences, stats.fenced_refusals),
        (true, 1, 100)
    );
}
