//! A daemon that dies while its gateway lives (issue 12), end to end: three `shareplane run`
//! daemons on one moto table, a `redis-server` and a `shareplane-loadgen` gateway each, as in
//! `three_regions` (L = 1,000/s, period 1 s). After [`KILL_S`] seconds B's daemon is killed with
//! SIGKILL while B's gateway keeps running, and B's Route 53 health check reads unhealthy at once
//! (the worst case: no detection time to spare). A and C reclaim B's room on the two signals; B's
//! gateway must have fenced first, since its lease runs out before any peer can reclaim. At
//! [`RESTART_S`] B's daemon starts again (health back to healthy): it comes back in a new epoch.
//!
//! At [`FREEZE_S`] C's daemon is frozen with SIGSTOP for [`FREEZE_MS`] (health healthy: nobody
//! reclaims it) and continued with SIGCONT: it cannot tell that nobody did, so it comes back in a
//! new epoch too.
//!
//! Asserted: at every tenth of a second the shares the gateways enforce (0 while fenced) sum to at
//! most L; admissions of all Regions within 2L + L × t over every window of whole seconds; B's
//! gateway fenced within `lease_ms` plus one period of the kill and admitted nothing while
//! fenced; A and C did reclaim (their enforced shares rose); B's daemon came back in a new epoch;
//! C's gateway fenced while C was frozen, and C came back in a new epoch.

use shareplane_e2e::cluster::{keep_health, Region, Setup, Verdicts};
use shareplane_e2e::figures::{self, add_up, parse_seconds, Second};
use shareplane_e2e::procs::Procs;
use shareplane_e2e::{built, local_aws, moto_url, redis_server, rules, unique};
use shareplane_limiter::loadgen::{unix_ms_now, SAMPLES_PER_S};
use std::path::PathBuf;
use std::time::Duration;

const LIMIT: &str = "k-big";
const L_RPS: f64 = 1_000.0;
const PERIOD_MS: u64 = 1_000;
const REGIONS: [&str; 3] = ["A", "B", "C"];
const PHASES_MS: [u64; 3] = [0, 333, 667];
/// B has the most demand, so that its room matters to the others.
const PATTERNS: [&str; 3] = ["0:500", "0:600", "0:300"];
const DURATION_S: u64 = 40;
/// The second of the run at which B's daemon is killed, and the one at which it is restarted.
const KILL_S: u64 = 14;
const RESTART_S: u64 = 26;
/// C's daemon is frozen (SIGSTOP) at this second for this long, then continued.
const FREEZE_S: u64 = 32;
const FREEZE_MS: u64 = 2_500;
const C: usize = 2;
const B: usize = 1;

/// Unix ms of tenth `k` of second `i` of a Region's run.
fn slot_ms(s: &Second, k: usize) -> u64 {
    s.unix_ms + (k as u64) * 1000 / SAMPLES_PER_S as u64
}

/// What the run showed about B's gateway and the survivors.
struct Death {
    /// Milliseconds from the kill to the first tenth in which B's gateway enforced nothing.
    fenced_after_ms: Option<u64>,
    /// Milliseconds from the kill to the first tenth in which A or C enforced more than before it.
    raised_after_ms: Option<u64>,
    /// B's admissions in the seconds it was fenced throughout.
    admitted_while_fenced: u64,
    fenced_seconds: usize,
    /// Highest enforced A + C after the kill, against before it.
    survivors_before_rps: f64,
    survivors_max_rps: f64,
}

fn death(runs: &[Vec<Second>], kill_ms: u64, restart_ms: u64) -> Death {
    let mut d = Death {
        fenced_after_ms: None,
        raised_after_ms: None,
        admitted_while_fenced: 0,
        fenced_seconds: 0,
        survivors_before_rps: 0.0,
        survivors_max_rps: 0.0,
    };
    let b = &runs[B];
    for s in b {
        for (k, x) in s.enforced_milli_rps.iter().enumerate() {
            let at = slot_ms(s, k);
            if at >= kill_ms && *x == 0 && d.fenced_after_ms.is_none() {
                d.fenced_after_ms = Some(at - kill_ms);
            }
        }
        let fenced_all = s.enforced_milli_rps.iter().all(|x| *x == 0);
        if fenced_all && s.unix_ms >= kill_ms && s.unix_ms + 1000 <= restart_ms {
            d.fenced_seconds += 1;
            d.admitted_while_fenced += s.admitted;
        }
    }
    for (a, c) in runs[0].iter().zip(&runs[C]) {
        for k in 0..SAMPLES_PER_S {
            let at = slot_ms(a, k);
            let v = (a.enforced_milli_rps[k] + c.enforced_milli_rps[k]) as f64 / 1000.0;
            if at + 1000 < kill_ms {
                d.survivors_before_rps = d.survivors_before_rps.max(v);
            } else if at >= kill_ms && at < restart_ms {
                d.survivors_max_rps = d.survivors_max_rps.max(v);
                if v > d.survivors_before_rps + 0.5 && d.raised_after_ms.is_none() {
                    d.raised_after_ms = Some(at - kill_ms);
                }
            }
        }
    }
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_daemons_gateway_fences_before_its_room_is_reclaimed() {
    let test = "a_dead_daemons_gateway_fences_before_its_room_is_reclaimed";
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
    let run = unique("e2e-death");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&run);
    let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
    let table = unique("shareplane-e2e-death");
    if let Err(e) = local_aws::create_table(&moto, &table).await {
        panic!("{e}");
    }
    let setup = Setup {
        regions: REGIONS,
        phases_ms: PHASES_MS,
        period_ms: PERIOD_MS,
        limit: LIMIT,
        limit_rps: L_RPS,
        floor_rps: 50.0,
        step_cap_rps: 100.0,
        table,
        moto: moto.clone(),
        stores: Vec::new(),
        health_ids: REGIONS.iter().map(|r| format!("{run}-hc-{r}")).collect(),
        region_limits: Vec::new(),
    };
    let verdicts = Verdicts::all_healthy(REGIONS.len());
    let health = tokio::spawn(keep_health(
        moto.clone(),
        setup.health_ids.clone(),
        verdicts.clone(),
        Duration::from_secs(5),
        unix_ms_now() + (DURATION_S + 60) * 1000,
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let regions: Vec<Region> = match setup.start_regions(&mut procs, &redis_bin) {
        Ok(r) => r,
        Err(e) => panic!("{e}\n{}", procs.log_tails(30)),
    };
    let client = rules::client().unwrap_or_else(|e| panic!("HTTP client: {e}"));
    let bases: Vec<String> = regions.iter().map(|r| r.daemon.clone()).collect();
    let missing = rules::wait_published(&client, &bases, Duration::from_secs(30)).await;
    assert_eq!(
        missing,
        0,
        "no rule set after 30 s\n{}",
        procs.log_tails(30)
    );

    let start_at = unix_ms_now() + 3_000;
    let mut gens = Vec::new();
    for (r, pattern) in regions.iter().zip(PATTERNS) {
        match setup.start_loadgen(&mut procs, r, pattern, DURATION_S, start_at) {
            Ok(i) => gens.push(i),
            Err(e) => panic!("{e}\n{}", procs.log_tails(30)),
        }
    }
    let kill_at = start_at + KILL_S * 1000;
    let restart_at = start_at + RESTART_S * 1000;
    let end = start_at + DURATION_S * 1000;
    let poll = tokio::spawn({
        let (client, bases) = (client.clone(), bases.clone());
        async move { rules::poll(&client, &bases, LIMIT, Duration::from_millis(100), end).await }
    });

    // The lease B's gateway holds at the kill is at most the one B serves.
    wait_until(kill_at - 200).await;
    let lease_ms = rules::lease_ms(&client, &regions[B].daemon).await;
    let epoch_before = rules::state(&client, &regions[B].daemon)
        .await
        .map_or(0, |s| s.epoch);
    wait_until(kill_at).await;
    let killed_ms = unix_ms_now();
    tokio::task::block_in_place(|| procs.kill(regions[B].daemon_proc));
    verdicts.set(B, false);

    wait_until(restart_at).await;
    verdicts.set(B, true);
    let restarted =
        tokio::task::block_in_place(|| setup.start_daemon(&mut procs, B, Some(regions[B].port)));
    if let Err(e) = &restarted {
        panic!("restarting B's daemon: {e}\n{}", procs.log_tails(30));
    }
    let restarted_ms = unix_ms_now();
    let freeze_at = start_at + FREEZE_S * 1000;
    wait_until(freeze_at).await;
    let c_epoch_before = rules::state(&client, &regions[C].daemon)
        .await
        .map_or(0, |s| s.epoch);
    let frozen_ms = unix_ms_now();
    procs.signal(regions[C].daemon_proc, "STOP");
    wait_until(frozen_ms + FREEZE_MS).await;
    procs.signal(regions[C].daemon_proc, "CONT");
    let shares = poll.await.unwrap_or_default();
    let mut states = Vec::new();
    for b in &bases {
        states.push(rules::state(&client, b).await);
    }
    let mut runs: Vec<Vec<Second>> = Vec::new();
    for (i, r) in gens.iter().zip(&regions) {
        let ok = tokio::task::block_in_place(|| procs.wait(*i, Duration::from_secs(30)));
        assert_eq!(
            ok,
            Some(true),
            "loadgen {} failed\n{}",
            r.name,
            procs.log_tails(30)
        );
        let out = std::fs::read_to_string(dir.join(format!("loadgen-{}.out", r.name)))
            .unwrap_or_default();
        match parse_seconds(&out) {
            Ok(s) => runs.push(s),
            Err(e) => panic!("loadgen {} printed something else: {e}", r.name),
        }
    }
    health.abort();

    let total = add_up(&runs);
    let f = figures::figures(L_RPS, &total, &shares, &[]);
    let d = death(&runs, killed_ms, restarted_ms);
    let c_fenced = fenced_between(&runs[C], frozen_ms, frozen_ms + FREEZE_MS);
    let c_epoch_after = states[C].as_ref().map_or(0, |s| s.epoch);
    let lease = lease_ms.unwrap_or(0);
    let epoch_after = states[B].as_ref().map_or(0, |s| s.epoch);
    let fmt_ms = |x: Option<u64>| x.map_or("never".to_string(), |v| format!("{v} ms"));
    let mut report = format!(
        "daemon death end to end (L {L_RPS}/s, period {PERIOD_MS} ms, patterns {PATTERNS:?}; \
         B's daemon killed -9 at second {KILL_S}, health unhealthy at once; restarted at second {RESTART_S})\n{}{f}\n",
        figures::table(&REGIONS, &runs, &total)
    );
    report.push_str(&format!(
        "B's lease at the kill: {lease} ms; B's gateway fenced {} after the kill (bound: lease + one period = {} ms); \
         A and C first enforced more than before {} after the kill ({:.1} -> {:.1}/s); \
         B admitted {} in its {} fully fenced seconds; B's epoch {epoch_before} -> {epoch_after}\n",
        fmt_ms(d.fenced_after_ms),
        lease + PERIOD_MS,
        fmt_ms(d.raised_after_ms),
        d.survivors_before_rps,
        d.survivors_max_rps,
        d.admitted_while_fenced,
        d.fenced_seconds,
    ));
    report.push_str(&format!(
        "C's daemon frozen (SIGSTOP) {FREEZE_MS} ms at second {FREEZE_S}: C's gateway fenced {} after the freeze; C's epoch {c_epoch_before} -> {c_epoch_after}\n",
        fmt_ms(c_fenced)
    ));
    report.push_str(&format!("logs: {}\n", dir.display()));
    println!("{report}");
    shareplane_e2e::append_report(&report);
    let tails = || procs.log_tails(20);
    assert_eq!(total.len(), DURATION_S as usize, "seconds measured");
    assert!(
        lease > 0 && lease < 3 * PERIOD_MS,
        "B served lease_ms {lease}"
    );
    assert!(
        f.max_enforced_sum_rps <= L_RPS + 1e-6,
        "enforced shares summed above L: {f}\n{}",
        tails()
    );
    assert!(
        f.worst_excess <= 0.0,
        "admissions above 2L + L*t: {f}\n{}",
        tails()
    );
    let fenced = d.fenced_after_ms.unwrap_or(u64::MAX);
    assert!(
        fenced <= lease + PERIOD_MS,
        "B's gateway fenced {fenced} ms after the kill, lease {lease} ms\n{report}"
    );
    assert!(
        d.raised_after_ms.is_some_and(|r| r > fenced),
        "A and C did not reclaim after B fenced: {}\n{report}",
        fmt_ms(d.raised_after_ms)
    );
    assert!(d.fenced_seconds >= 5, "{report}");
    assert_eq!(d.admitted_while_fenced, 0, "{report}");
    assert!(
        epoch_after > epoch_before,
        "B did not come back in a new epoch\n{report}"
    );
    assert!(
        c_fenced.is_some_and(|ms| ms <= lease + PERIOD_MS),
        "C's gateway did not fence while C was frozen\n{report}"
    );
    assert!(
        c_epoch_after > c_epoch_before,
        "C did not come back in a new epoch\n{report}"
    );
}

/// Milliseconds from `from` to the first tenth before `to` in which `run`'s gateway enforced
/// nothing.
fn fenced_between(run: &[Second], from: u64, to: u64) -> Option<u64> {
    run.iter()
        .flat_map(|s| (0..SAMPLES_PER_S).map(move |k| (slot_ms(s, k), s.enforced_milli_rps[k])))
        .find(|&(at, x)| at >= from && at < to && x == 0)
        .map(|(at, _)| at - from)
}

async fn wait_until(unix_ms: u64) {
    let now = unix_ms_now();
    if unix_ms > now {
        tokio::time::sleep(Duration::from_millis(unix_ms - now)).await;
    }
}
