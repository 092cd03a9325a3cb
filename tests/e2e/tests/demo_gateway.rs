//! Issue 12's "done when", with real processes: `shareplane demo` runs as a process, `shareplane
//! gateway` (rule watcher and limiter over a real `redis-server`, the HTTP check NGINX's
//! `auth_request` calls) watches Region A's rules, and the demo is killed with SIGKILL. The gateway
//! must refuse every request within `lease_ms` plus one period of the kill. The waits are
//! readiness signals (the port, the first admitted check); the assertion is on the measured time,
//! with no sleep standing in for it.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane_e2e::procs::{free_port, wait_for_port, Procs};
use shareplane_e2e::{built, cluster, redis_server, rules, unique};
use std::path::PathBuf;
use std::time::Duration;

/// The demo's default period.
const PERIOD_MS: u64 = 1_000;

/// The HTTP check's status for one request on `k-big`, or `None` when the gateway did not answer.
async fn check(client: &reqwest::Client, url: &str) -> Option<(u16, Option<String>)> {
    let r = client.get(url).send().await.ok()?;
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Some((r.status().as_u16(), retry))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_the_demo_refuses_everything_within_the_lease_and_a_period_of_its_death() {
    let test =
        "a_gateway_on_the_demo_refuses_everything_within_the_lease_and_a_period_of_its_death";
    let Some(redis_bin) = redis_server(test) else {
        return;
    };
    let Some(bin) = built(test, "shareplane") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("e2e-demo-gateway"));
    let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
    let redis = cluster::start_redis(&mut procs, &redis_bin, "A")
        .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
    let port = || free_port().unwrap_or_else(|e| panic!("{e}"));
    let (demo_port, http_port) = (port(), port());
    let demo_args = vec![
        "demo".to_string(),
        "--listen".to_string(),
        format!("127.0.0.1:{demo_port}"),
    ];
    let demo = procs
        .spawn("demo", &bin, &demo_args, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::task::block_in_place(|| {
        wait_for_port(&mut procs, demo, "demo", demo_port, Duration::from_secs(20))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
    let base = format!("http://127.0.0.1:{demo_port}/regions/A");
    let gateway_args: Vec<String> = [
        "gateway",
        "--rules",
        &base,
        "--redis",
        &redis,
        "--http-listen",
        &format!("127.0.0.1:{http_port}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let gw = procs
        .spawn("gateway", &bin, &gateway_args, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::task::block_in_place(|| {
        wait_for_port(
            &mut procs,
            gw,
            "gateway",
            http_port,
            Duration::from_secs(20),
        )
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));

    // Ready: the gateway runs a leased rule set and admits a request.
    let client = rules::client().unwrap_or_else(|e| panic!("{e}"));
    let url = format!("http://127.0.0.1:{http_port}/v1/auth_request?limit=k-big");
    let ready = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some((200, _)) = check(&client, &url).await {
                return;
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
    let lease_ms = rules::lease_ms(&client, &base).await.unwrap_or(0);
    assert!(
        lease_ms > 0 && lease_ms < 3 * PERIOD_MS,
        "the demo serves lease_ms {lease_ms}"
    );

    let killed = tokio::time::Instant::now();
    tokio::task::block_in_place(|| procs.kill(demo));
    // Ask every 10 ms until the gateway refuses, then every request after it must be refused too.
    let bound = Duration::from_millis(lease_ms + PERIOD_MS);
    let mut admitted_after_kill = 0u32;
    let refused_after = loop {
        match check(&client, &url).await {
            Some((403, retry)) => {
                assert_eq!(
                    retry.as_deref(),
                    Some("1"),
                    "a fenced refusal's Retry-After"
                );
                break killed.elapsed();
            }
            Some((200, _)) => admitted_after_kill += 1,
            other => panic!("the gateway answered {other:?}\n{}", procs.log_tails(20)),
        }
        assert!(
            killed.elapsed() <= bound + Duration::from_secs(5),
            "still admitting {:?} after the kill\n{}",
            killed.elapsed(),
            procs.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        refused_after <= bound,
        "refused {refused_after:?} after the kill; lease {lease_ms} ms + one period"
    );
    let line = format!(
        "demo killed -9: shareplane gateway on Region A refused everything {} ms later, after \
         admitting {admitted_after_kill} (lease_ms {lease_ms}, bound lease + one period = {} ms)\n",
        refused_after.as_millis(),
        bound.as_millis()
    );
    print!("{line}");
    shareplane_e2e::append_report(line.trim_end());
    for _ in 0..100 {
        let answer = check(&client, &url).await;
        assert_eq!(answer, Some((403, Some("1".to_owned()))), "after the fence");
    }
    let metrics = client
        .get(format!("http://127.0.0.1:{http_port}/metrics"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .text()
        .await
        .unwrap_or_default();
    assert!(
        metrics
            .lines()
            .any(|l| (l.starts_with("shareplane_gateway_fenced ")
                || l.starts_with("shareplane_gateway_fenced{"))
                && l.ends_with(" 1")),
        "the gateway's metrics say it is fenced: {metrics}"
    );
}
