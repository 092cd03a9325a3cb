//! Demand that tells the truth, end to end (issue 13, case 1): three `shareplane run` daemons on
//! the local DynamoDB server (moto), each with `test_store_delay_ms = 40` (every store call waits
//! 40 ms first, so reports arrive while rebalances wait for the store), a `redis-server` and one
//! `shareplane-loadgen` gateway each that reports its running totals every 100 ms.
//!
//! Demands (requests/s): A 720, B 360, C 120 then 720 from second [`JUMP_S`]; period 1 s (as in
//! `three_regions`), demand window 5 s. The record table is read every 100 ms (as a peer reads
//! it) and every record written is kept.
//!
//! Asserted: after the first window (and, for C, after the jump's window), every published
//! demand is within 2% of the gateway's true demand, the rate it was sent, unless the machine
//! stalled during that record's window (the test watches its own timer): a stalled gateway sends
//! what it owes in a burst afterwards, so what it really received in that window differs from its
//! rate; those records are counted apart and held to 25% (case 1 was 17× to 40×). The load
//! generators really sent their pattern; the sum of published shares never exceeds L.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane_core::{
    Deployment, Design, Fence, LimitKind, LimitSpec, RegionId, Room, SilentPolicy,
};
use shareplane_e2e::figures::{parse_seconds, Second};
use shareplane_e2e::procs::{binary, free_port, wait_for_port, ProcError, Procs};
use shareplane_e2e::{
    append_report, built, cluster, local_aws, moto_url, redis_server, rules, unique,
};
use shareplane_limiter::loadgen::unix_ms_now;
use shareplane_store::{Fetched, RecordStore};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const LIMIT: &str = "k-big";
const L_RPS: f64 = 1_000.0;
const PERIOD_MS: u64 = 1_000;
const STORE_DELAY_MS: u64 = 40;
const REPORT_EVERY_MS: u64 = 100;
const REGIONS: [&str; 3] = ["A", "B", "C"];
const PHASES_MS: [u64; 3] = [0, 333, 667];
const PATTERNS: [&str; 3] = ["0:720", "0:360", "0:120,20:720"];
const JUMP_S: u64 = 20;
const DURATION_S: u64 = 40;
/// The daemons' demand window.
const WINDOW_MS: u64 = 5_000;
/// A record this long after a change of demand has a window of the new demand only: the window,
/// where it ends behind the latest reports (up to a report interval and a bucket), and slack.
const SETTLED_MS: u64 = WINDOW_MS + 1_000;
const TOLERANCE: f64 = 0.02;
/// A record stamped this little before a change of demand may already count some of the new
/// demand: it is stamped when its rebalance starts, and the demand is read after the rebalance's
/// store calls (slowed by `STORE_DELAY_MS` each, longer on a busy machine). Seen in CI: a record
/// stamped 100 ms before C's jump read 124.7/s for 120/s.
const BEFORE_CHANGE_MS: u64 = 500;
const TOKEN: &str = "e2e-token-0123456789abcdef";

fn true_rps(region: usize, at_s: f64) -> f64 {
    match region {
        0 => 720.0,
        1 => 360.0,
        _ if at_s < JUMP_S as f64 => 120.0,
        _ => 720.0,
    }
}

/// Whether a record written `ms` after the load started has a window of one steady demand.
fn settled(region: usize, ms: u64) -> bool {
    let jump_ms = JUMP_S * 1_000;
    let after_start = ms >= SETTLED_MS;
    let clear_of_jump =
        region != 2 || ms + BEFORE_CHANGE_MS < jump_ms || ms >= jump_ms + SETTLED_MS;
    after_start && clear_of_jump && ms + BEFORE_CHANGE_MS < DURATION_S * 1_000
}

fn config(me: usize, table: &str, moto: &str, listen: &str, health_ids: &[String]) -> String {
    let mut c = format!(
        "region = \"{}\"\nphase_ms = {}\nperiod_ms = {PERIOD_MS}\nstore = \"dynamodb\"\n\
         table = \"{table}\"\naws_endpoint = \"{moto}\"\naws_region = \"{aws_region}\"\n\
         listen = \"{listen}\"\nmetrics_namespace = \"ShareplaneE2E\"\n\
         test_store_delay_ms = {STORE_DELAY_MS}\n",
        REGIONS[me],
        PHASES_MS[me],
        aws_region = local_aws::LOCAL_AWS_REGION,
    );
    for (name, id) in REGIONS.iter().zip(health_ids) {
        c.push_str(&format!(
            "\n[[regions]]\nname = \"{name}\"\nhealth_check_id = \"{id}\"\n"
        ));
    }
    c.push_str(&format!(
        "\n[[limits]]\nid = \"{LIMIT}\"\nrate = {L_RPS}\nburst_s = 2\nfloor = 50\nstep_cap = 100\n"
    ));
    c
}

fn start_redis(procs: &mut Procs, redis_bin: &Path, name: &str) -> Result<String, ProcError> {
    let port = free_port()?;
    let args: Vec<String> = [
        "--bind",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let i = procs.spawn(&format!("redis-{name}"), redis_bin, &args, &[])?;
    wait_for_port(procs, i, name, port, Duration::from_secs(10))?;
    Ok(format!("redis://127.0.0.1:{port}/"))
}

fn start_daemon(
    procs: &mut Procs,
    me: usize,
    cfg: &dyn Fn(&str) -> String,
) -> Result<String, ProcError> {
    let name = REGIONS[me];
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let file = procs.dir().join(format!("daemon-{name}.toml"));
    std::fs::write(&file, cfg(&listen)).map_err(|source| ProcError::Log {
        path: file.clone(),
        source,
    })?;
    let args = vec![
        "run".to_string(),
        "--config".to_string(),
        file.display().to_string(),
    ];
    let env = vec![
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        ("AWS_REGION", local_aws::LOCAL_AWS_REGION),
        ("SHAREPLANE_API_TOKEN", TOKEN),
    ];
    let i = procs.spawn(
        &format!("daemon-{name}"),
        &binary("shareplane")?,
        &args,
        &env,
    )?;
    wait_for_port(
        procs,
        i,
        &format!("daemon {name}"),
        port,
        Duration::from_secs(20),
    )?;
    Ok(format!("http://{listen}"))
}

fn start_loadgen(
    procs: &mut Procs,
    me: usize,
    daemon: &str,
    redis: &str,
    start_at: u64,
) -> Result<usize, ProcError> {
    let name = REGIONS[me];
    let args: Vec<String> = [
        "--daemon",
        daemon,
        "--redis",
        redis,
        "--token",
        TOKEN,
        "--gateway",
        &format!("gw-{name}"),
        "--region",
        name,
        "--limit",
        LIMIT,
        "--pattern",
        PATTERNS[me],
        "--duration-s",
        &DURATION_S.to_string(),
        "--report-every-ms",
        &REPORT_EVERY_MS.to_string(),
        "--redis-timeout-ms",
        cluster::LOADGEN_REDIS_TIMEOUT_MS,
        "--ready-timeout-s",
        "20",
        "--start-at-unix-ms",
        &start_at.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    procs.spawn(
        &format!("loadgen-{name}"),
        &binary("shareplane-loadgen")?,
        &args,
        &[],
    )
}

/// Puts healthy datapoints for every Region every 10 s until `until` (Unix ms).
async fn keep_healthy(moto: String, ids: Vec<String>, until: u64) {
    while unix_ms_now() < until {
        if let Err(e) = local_aws::put_healthy(&moto, &ids, SystemTime::now()).await {
            eprintln!("health datapoints: {e}");
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// One record as it was in the table.
#[derive(Clone, Copy, Debug)]
struct Seen {
    written_at_ms: u64,
    demand: f64,
}

/// The deployment every daemon's configuration gives (to read the table as they do).
fn deployment() -> Arc<Deployment> {
    let d = Deployment {
        regions: REGIONS.iter().map(|s| s.to_string()).collect(),
        limits: vec![LimitSpec {
            id: LIMIT.into(),
            version: 1,
            rate: Room::rps(L_RPS as u64),
            burst_ms: 2_000,
            floor: Room::rps(50),
            step_cap: Room::rps(100),
            kind: LimitKind::Capacity,
            shadow: false,
        }],
        design: Design::NamedGrants,
        policy: SilentPolicy::TwoSignals,
        fence: Fence::OwnUnhealthy,
        silent_after: 3,
        period_ms: PERIOD_MS,
    };
    Arc::new(Deployment::try_new(d).unwrap_or_else(|e| panic!("{e:?}")))
}

/// Reads every record in the table every 100 ms until `until` (Unix ms): every record the
/// daemons wrote, by Region and `(epoch, version)`. What a peer reads is what was published.
async fn watch(moto: &str, table: &str, until: u64) -> Vec<BTreeMap<(u64, u64), Seen>> {
    let me = RegionId::new(0).unwrap_or_else(|| panic!("region 0"));
    let store = local_aws::store(moto, table, deployment(), me).await;
    let mut out = vec![BTreeMap::new(); REGIONS.len()];
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while unix_ms_now() < until {
        tick.tick().await;
        let Ok(items) = store.read_all().await else {
            continue;
        };
        for f in items {
            let Fetched::Record(r) = f else { continue };
            let Some(l) = r.limits().first() else {
                continue;
            };
            if let Some(m) = out.get_mut(r.region().index()) {
                m.insert(
                    (r.epoch(), r.version()),
                    Seen {
                        written_at_ms: r.written_at_ms(),
                        demand: l.demand().as_rps(),
                    },
                );
            }
        }
    }
    out
}

/// A pause of this test's own timer this long means the machine stalled: a gateway that stalls
/// sends what it owes in a burst afterwards, so the requests it really received in a 5 s window
/// differ from its rate by up to the stall (50 ms is 1% of the window).
const STALL_MS: u64 = 50;
/// Bound on records whose window held a stall: still far below issue 13's case 1 (17× to 40×).
const LOOSE_TOLERANCE: f64 = 0.25;

/// Watches this process's 10 ms timer until `until` (Unix ms): `(start, length)` in ms of every
/// pause of at least [`STALL_MS`].
async fn stalls(until: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    while unix_ms_now() < until {
        let due = tokio::time::Instant::now() + Duration::from_millis(10);
        tokio::time::sleep_until(due).await;
        let late = tokio::time::Instant::now()
            .saturating_duration_since(due)
            .as_millis() as u64;
        if late >= STALL_MS {
            out.push((unix_ms_now().saturating_sub(late), late));
        }
    }
    out
}

/// The figures of one Region.
#[derive(Debug, Default)]
struct RegionFigures {
    records: usize,
    /// Settled records whose window held no stall: within [`TOLERANCE`].
    checked: usize,
    outside: usize,
    worst: f64,
    worst_at_s: f64,
    worst_demand: f64,
    /// Settled records whose window held a stall: within [`LOOSE_TOLERANCE`].
    stalled: usize,
    stalled_outside: usize,
    stalled_worst: f64,
    sent_rps_steady: Vec<(f64, f64)>,
}

fn region_figures(
    me: usize,
    seen: &BTreeMap<(u64, u64), Seen>,
    start_at: u64,
    run: &[Second],
    stalls: &[(u64, u64)],
) -> RegionFigures {
    let mut f = RegionFigures {
        records: seen.len(),
        ..RegionFigures::default()
    };
    for s in seen.values() {
        let Some(ms) = s.written_at_ms.checked_sub(start_at) else {
            continue;
        };
        if !settled(me, ms) {
            continue;
        }
        let at_s = ms as f64 / 1000.0;
        let truth = true_rps(me, at_s);
        let err = (s.demand - truth).abs() / truth;
        let from = s.written_at_ms.saturating_sub(SETTLED_MS);
        let stalled = stalls
            .iter()
            .any(|&(at, len)| at <= s.written_at_ms && at + len >= from);
        if stalled {
            f.stalled += 1;
            f.stalled_worst = f.stalled_worst.max(err);
            if err > LOOSE_TOLERANCE {
                f.stalled_outside += 1;
            }
            continue;
        }
        f.checked += 1;
        if err > TOLERANCE {
            f.outside += 1;
        }
        if err >= f.worst {
            (f.worst, f.worst_at_s, f.worst_demand) = (err, at_s, s.demand);
        }
    }
    // What the gateway really sent in its steady seconds (the premise of "true").
    for (from, to) in [(1, JUMP_S), (JUMP_S + 1, DURATION_S)] {
        let secs: Vec<&Second> = run
            .iter()
            .filter(|s| s.second >= from && s.second < to)
            .collect();
        if !secs.is_empty() {
            let sent: u64 = secs.iter().map(|s| s.sent).sum();
            let rps = sent as f64 / secs.len() as f64;
            f.sent_rps_steady.push((true_rps(me, from as f64), rps));
        }
    }
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_demand_stays_within_two_percent_with_slow_store_calls() {
    let test = "published_demand_stays_within_two_percent_with_slow_store_calls";
    let Some(moto) = moto_url(test) else { return };
    let Some(redis_bin) = redis_server(test) else {
        return;
    };
    if built(test, "shareplane")
        .and_then(|_| built(test, "shareplane-loadgen"))
        .is_none()
    {
        return;
    }
    let run = unique("e2e-demand");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&run);
    let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
    let table = unique("shareplane-e2e-demand");
    if let Err(e) = local_aws::create_table(&moto, &table).await {
        panic!("{e}");
    }
    let health_ids: Vec<String> = REGIONS.iter().map(|r| format!("{run}-hc-{r}")).collect();
    let healthy = tokio::spawn(keep_healthy(
        moto.clone(),
        health_ids.clone(),
        unix_ms_now() + (DURATION_S + 60) * 1000,
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut redis = Vec::new();
    let mut bases = Vec::new();
    for (me, name) in REGIONS.iter().enumerate() {
        let cfg = |listen: &str| config(me, &table, &moto, listen, &health_ids);
        let started = start_redis(&mut procs, &redis_bin, name)
            .and_then(|r| Ok((r, start_daemon(&mut procs, me, &cfg)?)));
        match started {
            Ok((r, b)) => {
                redis.push(r);
                bases.push(b);
            }
            Err(e) => panic!("{e}\n{}", procs.log_tails(30)),
        }
    }
    let client = rules::client().unwrap_or_else(|e| panic!("HTTP client: {e}"));
    let missing = rules::wait_published(&client, &bases, Duration::from_secs(30)).await;
    assert_eq!(
        missing,
        0,
        "daemons without a rule set\n{}",
        procs.log_tails(30)
    );

    let start_at = unix_ms_now() + 3_000;
    let mut gens = Vec::new();
    for me in 0..REGIONS.len() {
        match start_loadgen(&mut procs, me, &bases[me], &redis[me], start_at) {
            Ok(i) => gens.push(i),
            Err(e) => panic!("{e}\n{}", procs.log_tails(30)),
        }
    }
    let end = start_at + DURATION_S * 1000;
    let (seen, shares, stalled) = tokio::join!(
        watch(&moto, &table, end),
        rules::poll(&client, &bases, LIMIT, Duration::from_millis(100), end),
        stalls(end)
    );
    let mut runs: Vec<Vec<Second>> = Vec::new();
    for (me, i) in gens.iter().enumerate() {
        let ok = tokio::task::block_in_place(|| procs.wait(*i, Duration::from_secs(30)));
        assert_eq!(
            ok,
            Some(true),
            "loadgen {} failed\n{}",
            REGIONS[me],
            procs.log_tails(30)
        );
        let out = std::fs::read_to_string(dir.join(format!("loadgen-{}.out", REGIONS[me])))
            .unwrap_or_default();
        runs.push(parse_seconds(&out).unwrap_or_else(|e| panic!("loadgen output: {e}")));
    }
    healthy.abort();

    let figures: Vec<RegionFigures> = (0..REGIONS.len())
        .map(|me| region_figures(me, &seen[me], start_at, &runs[me], &stalled))
        .collect();
    let max_sum = shares
        .iter()
        .filter_map(|s| s.sum_rps())
        .fold(0.0f64, f64::max);
    let mut report = format!(
        "truthful demand end to end (L {L_RPS}/s, period {PERIOD_MS} ms, store calls +{STORE_DELAY_MS} ms, \
         reports every {REPORT_EVERY_MS} ms, patterns {PATTERNS:?}; records after the first window, \
         C's also after its jump's window, compared with the rate sent)\n"
    );
    for (me, f) in figures.iter().enumerate() {
        let sent: Vec<String> = f
            .sent_rps_steady
            .iter()
            .map(|(want, got)| format!("{got:.1}/s sent for {want}/s"))
            .collect();
        report.push_str(&format!(
            "  {}: {} records seen, {} checked, {} outside ±{:.0}%, worst {:.2}% ({:.1}/s at {:.1} s); \
             {} with a stall in the window, {} outside ±{:.0}%, worst {:.2}%; {}\n",
            REGIONS[me],
            f.records,
            f.checked,
            f.outside,
            TOLERANCE * 100.0,
            f.worst * 100.0,
            f.worst_demand,
            f.worst_at_s,
            f.stalled,
            f.stalled_outside,
            LOOSE_TOLERANCE * 100.0,
            f.stalled_worst * 100.0,
            sent.join(", ")
        ));
    }
    let longest = stalled.iter().map(|s| s.1).max().unwrap_or(0);
    report.push_str(&format!(
        "  machine stalls of {STALL_MS} ms or more seen by the test: {} (longest {longest} ms)\n  \
         highest sum of published shares {max_sum:.1}/s over {} samples\n  logs: {}\n",
        stalled.len(),
        shares.len(),
        dir.display()
    ));
    println!("{report}");
    append_report(&report);
    // Every record seen, for a look afterwards.
    let mut lines = String::from("region epoch.version ms_after_start demand_rps\n");
    for (me, m) in seen.iter().enumerate() {
        for ((e, v), s) in m {
            let ms = s.written_at_ms as i64 - start_at as i64;
            lines.push_str(&format!("{} {e}.{v} {ms} {:.3}\n", REGIONS[me], s.demand));
        }
    }
    if let Err(e) = std::fs::write(dir.join("records.txt"), lines) {
        eprintln!("cannot write records.txt: {e}");
    }

    for (me, f) in figures.iter().enumerate() {
        for &(want, got) in &f.sent_rps_steady {
            assert!(
                (got - want).abs() <= want * 0.005,
                "loadgen {} sent {got}/s for {want}/s: the premise fails",
                REGIONS[me]
            );
        }
        assert_eq!(
            f.stalled_outside, 0,
            "{}: published demand off by more than 25%\n{report}",
            REGIONS[me]
        );
        assert!(
            f.checked >= 5,
            "{}: only {} records without a machine stall in their window: too busy a machine to judge\n{report}",
            REGIONS[me],
            f.checked
        );
        assert_eq!(
            f.outside,
            0,
            "{}: published demand off by more than 2%\n{report}\n{}",
            REGIONS[me],
            procs.log_tails(20)
        );
    }
    assert!(
        max_sum <= L_RPS + 1e-6,
        "published shares summed to {max_sum}"
    );
}
