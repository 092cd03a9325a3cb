//! The load generator in-process against the fake daemon and a real redis-server: one Region's
//! admissions stay within its bucket's contract (burst + rate × t) and follow the share.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{limit, redis_url, rules, unique, FakeDaemon, TOKEN};
use shareplane_limiter::loadgen::{drive, unix_ms_now, worst_window, Pattern, Run};
use shareplane_limiter::{http, DemandReporter, Limiter, LimiterConfig, RuleWatcher};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admissions_stay_within_burst_plus_rate_times_t() {
    let Some(url) = redis_url("admissions_stay_within_burst_plus_rate_times_t") else {
        return;
    };
    let (rate, burst) = (50.0, 100.0);
    let id = unique("k-big");
    let d = FakeDaemon::start(rules(1, vec![limit(&id, rate, burst)])).await;
    let l = Arc::new(Limiter::new(LimiterConfig::new(url)).unwrap_or_else(|e| panic!("{e}")));
    let client = http::client().unwrap_or_else(|e| panic!("{e}"));
    RuleWatcher::new(client.clone(), &d.url, 100)
        .poll_once(&l)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pattern = Pattern::parse("0:200").unwrap_or_else(|e| panic!("{e}"));
    let run = Run {
        limit: id.clone(),
        pattern,
        duration: Duration::from_secs(3),
        tick: Duration::from_millis(10),
        start_unix_ms: None,
    };
    let seconds = drive(l.clone(), run)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(seconds.len(), 3);
    let admitted: Vec<u64> = seconds.iter().map(|s| s.admitted).collect();
    for s in &seconds {
        assert_eq!((s.errors, s.dropped), (0, 0), "{s:?}");
    }
    // A loaded machine may make Redis answer later than the limiter's timeout: those calls are
    // decided by the local fallback, which spends the same budget (it is charged to the Redis
    // bucket), so the contract below counts them in `admitted` and needs no quiet machine.
    let fallback: u64 = seconds.iter().map(|s| s.admitted_fallback).sum();
    // Every window of whole seconds: at most the burst plus the refill (100 ms of slack for the
    // time between sending and deciding).
    let (excess, from, to) = worst_window(&admitted, rate, burst + rate * 0.1);
    assert!(
        excess <= 0.0,
        "seconds {from}..{to}: {excess} over the contract: {admitted:?}"
    );
    // The full bucket serves the first second when Redis decided it; a second the fallback
    // entered starts from an empty local bucket (too little rather than too much), so it only
    // has to admit something.
    let first_floor = if seconds[0].admitted_fallback == 0 {
        burst as u64
    } else {
        1
    };
    assert!(
        admitted[0] >= first_floor,
        "the first second serves at least {first_floor} ({fallback} by the fallback): {admitted:?}"
    );
    // Demand is what was sent, reported as a running total.
    let sent: u64 = seconds.iter().map(|s| s.sent).sum();
    assert!(sent >= 590, "the generator offered the pattern: {sent}");
    let reporter =
        DemandReporter::new(client, &d.url, TOKEN, "gw", 1).unwrap_or_else(|e| panic!("{e}"));
    reporter
        .report_once(&l)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.demand(&id), sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loadgen_binary_prints_one_line_per_second_and_reports_its_demand() {
    let Some(url) =
        redis_url("the_loadgen_binary_prints_one_line_per_second_and_reports_its_demand")
    else {
        return;
    };
    let id = unique("bin");
    let d = FakeDaemon::start(rules(1, vec![limit(&id, 20.0, 40.0)])).await;
    let start_at = unix_ms_now() + 1_500;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_shareplane-loadgen"))
        .args([
            "--daemon", &d.url, "--redis", &url, "--token", TOKEN, "--region", "A",
        ])
        .args([
            "--limit",
            &id,
            "--pattern",
            "0:50,1:100",
            "--duration-s",
            "2",
            "--wait-ms",
            "200",
        ])
        .args(["--start-at-unix-ms", &start_at.to_string()])
        .args(["--log-format", "json"])
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .unwrap_or_else(|_| panic!("the load generator did not finish"))
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let field = |i: usize, f: &str| {
        lines[i][f]
            .as_u64()
            .unwrap_or_else(|| panic!("{f} in {:?}", lines[i]))
    };
    assert_eq!(field(0, "rule_version"), 1);
    assert!(
        field(0, "unix_ms") >= start_at,
        "started at the given time: {lines:?}"
    );
    assert_eq!(field(1, "unix_ms"), field(0, "unix_ms") + 1000);
    assert_eq!(field(0, "share_milli_rps"), 20_000);
    let sent = field(0, "sent") + field(1, "sent");
    assert!(sent >= 140, "{lines:?}");
    assert!(
        field(0, "admitted") + field(1, "admitted") <= 40 + 20 * 2 + 2,
        "{lines:?}"
    );
    // The last report on shutdown carries the whole total.
    assert_eq!(d.demand(&id), sent);
    // Every stderr line is JSON; the summary is one of them, with its figures as fields.
    let logs = json_lines(&stderr);
    let summary = (logs.iter())
        .find(|v| {
            v["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("done"))
        })
        .unwrap_or_else(|| panic!("no summary line in {stderr}"));
    assert_eq!(summary["level"], "INFO", "{summary}");
    assert_eq!(summary["fields"]["sent"].as_u64(), Some(sent), "{summary}");
    assert_eq!(summary["fields"]["seconds"].as_u64(), Some(2), "{summary}");
}

/// Each line of `stderr` as JSON: an object with a level and a message (panics otherwise).
fn json_lines(stderr: &str) -> Vec<serde_json::Value> {
    let lines: Vec<serde_json::Value> = (stderr.lines())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    for v in &lines {
        assert!(v["level"].is_string(), "no level: {v}");
        assert!(v["fields"]["message"].is_string(), "no message: {v}");
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loadgen_logs_json_and_says_why_it_stops_with_the_cause() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let daemon = format!("http://127.0.0.1:{closed}");
    let redis = format!("redis://127.0.0.1:{closed}/");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_shareplane-loadgen"))
        .args(["--daemon", &daemon, "--redis", &redis, "--token", TOKEN])
        .args([
            "--limit",
            "k",
            "--pattern",
            "0:10",
            "--ready-timeout-s",
            "1",
        ])
        .args(["--log-format", "json"])
        .env_remove("RUST_LOG")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .unwrap_or_else(|_| panic!("the load generator did not stop"))
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let logs = json_lines(&stderr);
    let fetch = (logs.iter())
        .find(|v| v["fields"]["message"] == "rule fetch failed")
        .unwrap_or_else(|| panic!("no failed fetch logged: {stderr}"));
    let error = fetch["fields"]["error"].as_str().unwrap_or("");
    assert!(
        error.to_ascii_lowercase().contains("connection refused"),
        "{fetch}"
    );
    // The reason it stops is its one error (a demand report still failing in the background
    // may log a warning after it).
    let errors: Vec<_> = logs.iter().filter(|v| v["level"] == "ERROR").collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        (errors[0]["fields"]["message"].as_str())
            .is_some_and(|m| m.contains("no rule set from") && m.contains("within 1 s")),
        "{}",
        errors[0]
    );
}
