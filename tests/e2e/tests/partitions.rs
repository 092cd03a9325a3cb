//! Partitions on the real path (issue 18): three `shareplane run` daemons, each talking only to its
//! own moto server (its replica of the global table), a replicator between the replicas that
//! delivers each write about 1 s later and can be cut and healed one way or both
//! (`shareplane_e2e::replicator`), Route 53 health in the moto server of A playing CloudWatch in
//! us-east-1, and per Region a `redis-server` and a `shareplane-loadgen` gateway with demand high
//! everywhere. Fault schedules (`shareplane_e2e::faults`) kill daemons (their gateways live on),
//! lose and restore whole Regions, cut and heal replication, flip health verdicts (true and false),
//! freeze daemons, restart Redis and roll limit changes out Region by Region (a new file and
//! SIGHUP, the live reload of `shareplane run`); the checker (`shareplane_e2e::checker`) judges
//! what the gateways enforced and admitted.
//!
//! Always run: the restore race (a fixed schedule), then `SHAREPLANE_FAULT_SCHEDULES` random
//! schedules (default 1) of `SHAREPLANE_FAULT_COUNT` faults (default 4) with seeds
//! `SHAREPLANE_FAULT_SEED` (default [`DEFAULT_SEED`]), `+1`, `+2`…; each prints its seed and steps,
//! and a failure prints the command that replays it. The default seed's schedule holds a limit
//! change (a test below checks it), so that every CI run rolls one out.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane_e2e::checker::{
    self, Allowance, AllowanceKind, Bounds, History, Judgement, LimitChange,
};
use shareplane_e2e::cluster::{self, keep_health_ahead, Region, Setup, Verdicts};
use shareplane_e2e::faults::{self, Action, Draw, Schedule};
use shareplane_e2e::figures::parse_seconds;
use shareplane_e2e::procs::Procs;
use shareplane_e2e::replicator::{Links, ReplicationStats, Replicator};
use shareplane_e2e::{built, local_aws, needed, redis_server, rules, unique};
use shareplane_limiter::loadgen::{unix_ms_now, SAMPLES_PER_S};
use std::path::{Path, PathBuf};
use std::time::Duration;

const LIMIT: &str = "k-big";
const L_RPS: f64 = 1_000.0;
const STEP_CAP_RPS: f64 = 100.0;
const PERIOD_MS: u64 = 1_000;
const SILENT_AFTER: u64 = 3;
const REGIONS: [&str; 3] = ["A", "B", "C"];
const PHASES_MS: [u64; 3] = [0, 333, 667];
/// Demand high everywhere: every Region wants more than it can have.
const PATTERN: &str = "0:700";
const REPLICATION_DELAY: Duration = Duration::from_secs(1);
const SCAN_EVERY: Duration = Duration::from_millis(200);
/// Load before the first fault: the first demand window and the grants that follow.
const WARM_MS: u64 = 15_000;
/// The seed of the first random schedule when `SHAREPLANE_FAULT_SEED` is not set.
const DEFAULT_SEED: u64 = 29;
/// How long the restore race waits for A and C to mark B reclaimed.
const RECLAIM_WAIT: Duration = Duration::from_secs(30);
/// The demand window of the daemon (SPEC §2).
const DEMAND_WINDOW_MS: u64 = 5_000;

/// The bounds the checker enforces for a schedule whose largest limit is `largest_rps`, derived
/// from the settings:
/// - a false verdict: its Region reads it at its next rebalance and fences then; its gateways
///   hear of the zero at once (long-poll). Three periods, one more for a busy machine.
/// - convergence after the last heal: a returning Region starts at 0 and raises by the step cap
///   per period, after its demand window fills, survivors count silence for `silent_after`
///   periods, and the liveness bound of docs/PROTOCOL.md is `ceil(L / step cap) + 4` rounds; plus
///   a replication delay each way for grants and takes.
fn bounds(largest_rps: f64) -> Bounds {
    let rounds = (largest_rps.max(L_RPS) / STEP_CAP_RPS).ceil() as u64 + 4 + SILENT_AFTER;
    Bounds {
        false_verdict_ms: 4 * PERIOD_MS,
        converge_ms: rounds * PERIOD_MS
            + 2 * REPLICATION_DELAY.as_millis() as u64
            + DEMAND_WINDOW_MS,
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// What the tools the test needs are, or `None` (the test says why it did nothing).
struct Tools {
    moto: PathBuf,
    redis: PathBuf,
}

fn tools(test: &str) -> Option<Tools> {
    let moto = needed(
        test,
        local_aws::moto_server_program(),
        "no moto_server (SHAREPLANE_TEST_MOTO_SERVER, .venv-moto or PATH)",
    )?;
    let redis = redis_server(test)?;
    built(test, "shareplane")?;
    built(test, "shareplane-loadgen")?;
    Some(Tools { moto, redis })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_and_faults_on_the_real_path() {
    let test = "partitions_and_faults_on_the_real_path";
    let Some(tools) = tools(test) else { return };
    let seed = env_u64("SHAREPLANE_FAULT_SEED").unwrap_or(DEFAULT_SEED);
    let count = env_u64("SHAREPLANE_FAULT_SCHEDULES").unwrap_or(1);
    let faults_each = env_u64("SHAREPLANE_FAULT_COUNT").unwrap_or(4) as usize;
    let draw = draw(faults_each);
    let mut schedules = vec![faults::restore_race(WARM_MS)];
    schedules.extend((0..count).map(|k| faults::random(seed.wrapping_add(k), draw)));
    let mut outcomes = Vec::new();
    for s in &schedules {
        println!("{s}");
        let o = run_schedule(&tools, s).await;
        println!("{}", o.report);
        shareplane_e2e::append_report(&o.report);
        outcomes.push(o);
    }
    let summary = summary(&outcomes);
    println!("{summary}");
    shareplane_e2e::append_report(&summary);
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.judgement.failures.is_empty())
        .map(|o| format!("{}\n{}", o.replay, o.judgement.failures.join("\n")))
        .collect();
    assert!(
        failed.is_empty(),
        "failed schedules:\n{}",
        failed.join("\n\n")
    );
}

fn draw(faults: usize) -> Draw {
    Draw {
        faults,
        warm_ms: WARM_MS,
        span_ms: (faults as u64 * 6_000).max(10_000),
        verdict_after_kill_ms: 2_000,
        limit_rps: L_RPS as u64,
    }
}

/// The largest limit a schedule rolls out (`L_RPS` when it changes none).
fn largest_limit(s: &Schedule) -> f64 {
    s.steps
        .iter()
        .filter_map(|st| match st.action {
            Action::SetLimit { rps, .. } => Some(rps as f64),
            _ => None,
        })
        .fold(L_RPS, f64::max)
}

#[test]
fn the_default_schedule_rolls_a_limit_change_out() {
    let s = faults::random(DEFAULT_SEED, draw(4));
    assert!(
        s.steps
            .iter()
            .any(|st| matches!(st.action, Action::SetLimit { .. })),
        "{s}"
    );
}

/// What one schedule gave.
struct Outcome {
    faults: usize,
    limit_changes: usize,
    converge_bound_ms: u64,
    judgement: Judgement,
    report: String,
    replay: String,
}

fn summary(outcomes: &[Outcome]) -> String {
    let worst = |f: fn(&Judgement) -> f64| {
        outcomes
            .iter()
            .map(|o| f(&o.judgement))
            .fold(f64::NEG_INFINITY, f64::max)
    };
    let converge = outcomes
        .iter()
        .filter_map(|o| o.judgement.converged_after_ms)
        .max();
    let bound = outcomes
        .iter()
        .map(|o| o.converge_bound_ms)
        .max()
        .unwrap_or(0);
    let changes: usize = outcomes.iter().map(|o| o.limit_changes).sum();
    format!(
        "partitions: {} schedules, {} faults injected ({changes} limit rollouts), {} failed; worst \
         Σ enforced − L {:.3}/s (outside allowances {:.3}/s); worst admissions over 2L + L·t {:.0}; \
         slowest return to L after the last heal {} (largest bound {bound} ms)",
        outcomes.len(),
        outcomes.iter().map(|o| o.faults).sum::<usize>(),
        outcomes
            .iter()
            .filter(|o| !o.judgement.failures.is_empty())
            .count(),
        worst(|j| j.worst_enforced_excess_rps),
        worst(|j| j.worst_unallowed_excess_rps),
        worst(|j| j.worst_window_excess),
        converge.map_or("never".into(), |ms| format!("{ms} ms")),
    )
}

/// One Region's processes while a schedule runs.
struct Live {
    region: Region,
    daemon_up: bool,
    paused: bool,
    /// The running load generator, if any, and every one started (their output is read at the
    /// end).
    loadgen: Option<usize>,
    loadgens: Vec<usize>,
}

/// A schedule being run.
struct Run<'a> {
    tools: &'a Tools,
    procs: Procs,
    dir: PathBuf,
    setup: Setup,
    live: Vec<Live>,
    verdicts: Verdicts,
    links: Links,
    client: reqwest::Client,
    start_at: u64,
    /// Unix ms until which every load generator runs unless stopped.
    end_at: u64,
    allowances: Vec<Allowance>,
    problems: Vec<String>,
    /// The health datapoints' task, stopped with the run (its moto server stops with `procs`).
    health: tokio::task::JoinHandle<()>,
    bounds: Bounds,
    /// The limit changes rolled out so far, in order.
    rollouts: Vec<Rollout>,
}

/// One limit change as it reached the Regions (every Region gets each change once, in order, so
/// one version is one change everywhere).
struct Rollout {
    version: u64,
    at_ms: u64,
    old_rps: f64,
    new_rps: f64,
    regions: [Adoption; 3],
}

/// How one Region took a limit change.
#[derive(Clone, Copy, Default)]
struct Adoption {
    /// Its file says the new rate.
    written: bool,
    /// When its daemon could first act on it: at once if it was running, else when it restarted
    /// or resumed.
    adopted_ms: Option<u64>,
    /// Its daemon was down or stopped between the change's start and two periods after it
    /// adopted: its heirs may hold its room at the old version until it returns and repays.
    disturbed: bool,
}

impl Rollout {
    /// From when only the new rate counts: every Region adopted it, plus three periods (its next
    /// rebalance, one more on a busy machine, the long-poll to its gateways) or, for a disturbed
    /// Region, the convergence bound.
    fn settled_ms(&self, b: Bounds) -> u64 {
        self.regions
            .iter()
            .map(|a| match a.adopted_ms {
                Some(t) if a.disturbed => t + b.converge_ms,
                Some(t) => t + 3 * PERIOD_MS,
                None => u64::MAX,
            })
            .max()
            .unwrap_or(u64::MAX)
    }
}

async fn run_schedule(tools: &Tools, schedule: &Schedule) -> Outcome {
    let replay = match schedule.seed {
        Some(s) => format!(
            "replay: SHAREPLANE_FAULT_SEED={s} SHAREPLANE_FAULT_SCHEDULES=1 cargo test -p shareplane-e2e --test partitions -- --nocapture"
        ),
        None => format!(
            "replay: {} runs first in every `cargo test -p shareplane-e2e --test partitions`",
            schedule.name
        ),
    };
    let b = bounds(largest_limit(schedule));
    let (mut run, replicator) = start(tools, schedule, b).await;
    let stats = replicator.stats();
    let replicating = tokio::spawn(replicator.run(run.end_at + 10_000));
    let mut last_heal_ms = 0;
    for step in &schedule.steps {
        tokio::time::sleep(Duration::from_millis(step.after_ms)).await;
        run.act(&step.action).await;
        last_heal_ms = unix_ms_now().saturating_sub(run.start_at);
    }
    let tail = b.converge_ms + 3_000;
    tokio::time::sleep(Duration::from_millis(tail)).await;
    run.keep_views().await;
    let history = run.stop(last_heal_ms).await;
    replicating.abort();
    let judgement = checker::judge(&history, b);
    let mut judgement = judgement;
    judgement.failures.extend(run.problems.iter().cloned());
    let replication = *stats.lock().unwrap_or_else(|e| e.into_inner());
    let mut report = report(schedule, &judgement, &replication, &run.dir, last_heal_ms);
    for c in &history.limit_changes {
        let settled = match c.settled_ms {
            u64::MAX => "never settled".to_string(),
            ms => format!("settled at {:.1} s", ms as f64 / 1000.0),
        };
        report.push_str(&format!(
            "\nlimit {} → {}/s from {:.1} s, {settled}",
            c.old_rps,
            c.new_rps,
            c.at_ms as f64 / 1000.0
        ));
    }
    if !judgement.failures.is_empty() {
        eprintln!("{}", run.procs.log_tails(15));
    }
    Outcome {
        faults: schedule.faults,
        limit_changes: history.limit_changes.len(),
        converge_bound_ms: b.converge_ms,
        judgement,
        report,
        replay,
    }
}

fn report(
    s: &Schedule,
    j: &Judgement,
    r: &ReplicationStats,
    dir: &Path,
    last_heal_ms: u64,
) -> String {
    format!(
        "{} ({} faults, last heal at {:.1} s): Σ enforced − L at most {:.3}/s (at {:.1} s; outside \
         allowances {:.3}/s), admissions over 2L + L·t at most {:.0} (seconds {}..{}), back at L \
         {} after the last heal; replication: {} scans, {} local writes, {} delivered, {} \
         superseded, largest backlog {}, {} failed calls; {}\nlogs: {}",
        s.name,
        s.faults,
        last_heal_ms as f64 / 1000.0,
        j.worst_enforced_excess_rps,
        j.worst_enforced_at_tenth as f64 / 10.0,
        j.worst_unallowed_excess_rps,
        j.worst_window_excess,
        j.worst_window.0,
        j.worst_window.1,
        j.converged_after_ms
            .map_or("never".into(), |ms| format!("{ms} ms")),
        r.scans,
        r.local_writes,
        r.delivered,
        r.superseded,
        r.max_backlog,
        r.failed_calls,
        if j.failures.is_empty() {
            "PASS".to_string()
        } else {
            format!("FAIL:\n  {}", j.failures.join("\n  "))
        },
        dir.display()
    )
}

impl Run<'_> {
    /// Keeps each running daemon's own account of the end (`/v1/state` and `/v1/events`) in the
    /// run's directory, for whoever reads a failure: the checker judges only what the gateways
    /// did, never what the daemons say of themselves.
    async fn keep_views(&self) {
        for l in self.live.iter().filter(|l| l.daemon_up) {
            for (path, file) in [("/v1/state", "state"), ("/v1/events", "events")] {
                let url = format!("{}{path}", l.region.daemon);
                let text = match self.client.get(&url).send().await {
                    Ok(r) => r
                        .text()
                        .await
                        .unwrap_or_else(|e| format!("unreadable: {e}")),
                    Err(e) => format!("GET {url}: {e}"),
                };
                let name = self.dir.join(format!("{file}-{}.json", l.region.name));
                if let Err(e) = std::fs::write(&name, text) {
                    eprintln!("cannot keep {}: {e}", name.display());
                }
            }
        }
    }
}

/// Starts one moto server per Region, the table on each, the replicator, the health datapoints,
/// the Regions and their load.
async fn start<'a>(tools: &'a Tools, schedule: &Schedule, b: Bounds) -> (Run<'a>, Replicator) {
    let run_id = unique(&format!("e2e-part-{}", schedule.name));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&run_id);
    let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
    let table = unique("shareplane-e2e-part");
    let mut stores = Vec::new();
    for name in REGIONS {
        let url =
            tokio::task::block_in_place(|| local_aws::start_moto(&mut procs, &tools.moto, name))
                .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
        if let Err(e) = local_aws::create_table(&url, &table).await {
            panic!("{e}");
        }
        stores.push(url);
    }
    let replicator = Replicator::new(&stores, &table, REPLICATION_DELAY, SCAN_EVERY).await;
    let setup = Setup {
        regions: REGIONS,
        phases_ms: PHASES_MS,
        period_ms: PERIOD_MS,
        limit: LIMIT,
        limit_rps: L_RPS,
        floor_rps: 50.0,
        step_cap_rps: STEP_CAP_RPS,
        table,
        moto: stores[0].clone(),
        stores,
        health_ids: REGIONS.iter().map(|r| format!("{run_id}-hc-{r}")).collect(),
        region_limits: Vec::new(),
    };
    let planned: u64 = schedule.steps.iter().map(|s| s.after_ms).sum::<u64>()
        + RECLAIM_WAIT.as_millis() as u64
        + b.converge_ms
        + 20_000;
    let verdicts = Verdicts::all_healthy(REGIONS.len());
    let health = tokio::spawn(keep_health_ahead(
        setup.moto.clone(),
        setup.health_ids.clone(),
        verdicts.clone(),
        unix_ms_now() + planned + 60_000,
    ));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let regions = tokio::task::block_in_place(|| setup.start_regions(&mut procs, &tools.redis))
        .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(30)));
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
    let mut run = Run {
        tools,
        links: replicator.links(),
        procs,
        dir,
        setup,
        live: regions
            .into_iter()
            .map(|region| Live {
                region,
                daemon_up: true,
                paused: false,
                loadgen: None,
                loadgens: Vec::new(),
            })
            .collect(),
        verdicts,
        client,
        start_at,
        end_at: start_at + planned,
        allowances: Vec::new(),
        problems: Vec::new(),
        health,
        bounds: b,
        rollouts: Vec::new(),
    };
    for r in 0..REGIONS.len() {
        run.start_load(r, start_at);
    }
    wait_until(start_at).await;
    (run, replicator)
}

impl Run<'_> {
    fn now_ms(&self) -> u64 {
        unix_ms_now().saturating_sub(self.start_at)
    }

    /// Starts Region `r`'s load generator at `at` (Unix ms, a whole second of the run) until the
    /// planned end.
    fn start_load(&mut self, r: usize, at: u64) {
        let secs = self.end_at.saturating_sub(at) / 1000;
        let region = self.live[r].region.clone();
        match self
            .setup
            .start_loadgen(&mut self.procs, &region, PATTERN, secs.max(1), at)
        {
            Ok(i) => {
                self.live[r].loadgen = Some(i);
                self.live[r].loadgens.push(i);
            }
            Err(e) => panic!("{e}\n{}", self.procs.log_tails(30)),
        }
    }

    /// Region `r`'s daemon stops (killed or SIGSTOP) now: a limit change it has not adopted for
    /// two periods yet is disturbed.
    fn disturb(&mut self, r: usize) {
        let now = self.now_ms();
        for ro in &mut self.rollouts {
            let a = &mut ro.regions[r];
            if !a.written || a.adopted_ms.is_none_or(|t| now < t + 2 * PERIOD_MS) {
                a.disturbed = true;
            }
        }
    }

    /// Region `r`'s daemon runs again now: it reads the limit its file says.
    fn undisturb(&mut self, r: usize) {
        let now = self.now_ms();
        for ro in &mut self.rollouts {
            let a = &mut ro.regions[r];
            if a.written && a.adopted_ms.is_none() {
                a.adopted_ms = Some(now);
            }
        }
    }

    /// Region `r`'s file says `rps` at `version` from now on; a running daemon (or a stopped one,
    /// when it resumes) reloads it on SIGHUP, a dead one reads it when it restarts.
    fn set_limit(&mut self, r: usize, rps: u64, version: u64) {
        let now = self.now_ms();
        let k = match self.rollouts.iter().position(|ro| ro.version == version) {
            Some(k) => k,
            None => {
                let old_rps = self.rollouts.last().map_or(L_RPS, |ro| ro.new_rps);
                self.rollouts.push(Rollout {
                    version,
                    at_ms: now,
                    old_rps,
                    new_rps: rps as f64,
                    regions: [Adoption::default(); 3],
                });
                self.rollouts.len() - 1
            }
        };
        self.setup.set_limit(r, rps as f64, version);
        let port = self.live[r].region.port;
        if let Err(e) = self.setup.write_config(self.procs.dir(), r, port) {
            self.problems
                .push(format!("writing the file of {}: {e}", REGIONS[r]));
        }
        let (up, paused) = (self.live[r].daemon_up, self.live[r].paused);
        if up {
            (self.procs).signal_program(self.live[r].region.daemon_proc, "HUP");
        }
        let a = &mut self.rollouts[k].regions[r];
        a.written = true;
        if up && !paused {
            a.adopted_ms = Some(now);
        } else {
            a.disturbed = true;
        }
    }

    fn kill_daemon(&mut self, r: usize) {
        self.disturb(r);
        let i = self.live[r].region.daemon_proc;
        tokio::task::block_in_place(|| self.procs.kill(i));
        self.live[r].daemon_up = false;
        self.live[r].paused = false;
    }

    fn restart_daemon(&mut self, r: usize) {
        let port = self.live[r].region.port;
        let started =
            tokio::task::block_in_place(|| self.setup.start_daemon(&mut self.procs, r, Some(port)));
        match started {
            Ok((_, _, i)) => {
                self.live[r].region.daemon_proc = i;
                self.live[r].daemon_up = true;
                self.undisturb(r);
            }
            Err(e) => self
                .problems
                .push(format!("restarting daemon {}: {e}", REGIONS[r])),
        }
    }

    /// Stops Region `r`'s gateway (SIGINT: it stops admitting at once and prints the seconds it
    /// ran, which a SIGKILL would lose).
    fn stop_load(&mut self, r: usize) {
        if let Some(i) = self.live[r].loadgen.take() {
            self.procs.signal(i, "INT");
        }
    }

    async fn act(&mut self, action: &Action) {
        match *action {
            Action::KillDaemon(r) => self.kill_daemon(r),
            Action::RestartDaemon(r) => self.restart_daemon(r),
            Action::KillRegion(r) => {
                self.stop_load(r);
                self.kill_daemon(r);
            }
            Action::RestartRegion(r) => {
                self.restart_daemon(r);
                let next_second = (self.now_ms() / 1000 + 1) * 1000;
                self.start_load(r, self.start_at + next_second);
            }
            Action::Cut { from, to, both } | Action::Heal { from, to, both } => {
                let up = matches!(action, Action::Heal { .. });
                if both {
                    self.links.set_both(from, to, up);
                } else {
                    self.links.set(from, to, up);
                }
            }
            Action::Health(r, healthy) => {
                self.verdicts.set(r, healthy);
                if !healthy && self.live[r].daemon_up && !self.live[r].paused {
                    self.allowances.push(Allowance {
                        region: r,
                        kind: AllowanceKind::FalseVerdict,
                        at_ms: self.now_ms(),
                    });
                }
            }
            Action::Pause(r) => {
                self.disturb(r);
                self.procs.signal(self.live[r].region.daemon_proc, "STOP");
                self.live[r].paused = true;
            }
            Action::Resume(r) => {
                self.procs.signal(self.live[r].region.daemon_proc, "CONT");
                self.live[r].paused = false;
                self.undisturb(r);
            }
            Action::SetLimit {
                region,
                rps,
                version,
            } => self.set_limit(region, rps, version),
            Action::RestartRedis(r) => self.restart_redis(r),
            Action::WaitReclaimed { lost, ref by } => self.wait_reclaimed(lost, by).await,
        }
    }

    fn restart_redis(&mut self, r: usize) {
        let (i, port) = (
            self.live[r].region.redis_proc,
            self.live[r].region.redis_port,
        );
        tokio::task::block_in_place(|| self.procs.kill(i));
        self.allowances.push(Allowance {
            region: r,
            kind: AllowanceKind::RedisRestart,
            at_ms: self.now_ms(),
        });
        let started = tokio::task::block_in_place(|| {
            cluster::start_redis_on(&mut self.procs, &self.tools.redis, REGIONS[r], port)
        });
        match started {
            Ok((_, i)) => self.live[r].region.redis_proc = i,
            Err(e) => self
                .problems
                .push(format!("restarting Redis {}: {e}", REGIONS[r])),
        }
    }

    async fn wait_reclaimed(&mut self, lost: usize, by: &[usize]) {
        let end = tokio::time::Instant::now() + RECLAIM_WAIT;
        loop {
            let mut all = true;
            for &b in by {
                let st = rules::state(&self.client, &self.live[b].region.daemon).await;
                let marked = st.is_some_and(|s| {
                    s.peers
                        .iter()
                        .any(|p| p.region == REGIONS[lost] && p.state == "reclaimed")
                });
                all &= marked;
            }
            if all {
                return;
            }
            if tokio::time::Instant::now() >= end {
                self.problems.push(format!(
                    "premise: {:?} did not all mark {} reclaimed within {RECLAIM_WAIT:?}",
                    by.iter().map(|b| REGIONS[*b]).collect::<Vec<_>>(),
                    REGIONS[lost]
                ));
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops every gateway, reads what each printed and lays it out on the run's tenths.
    async fn stop(&mut self, last_heal_ms: u64) -> History {
        for r in 0..self.live.len() {
            self.stop_load(r);
        }
        self.health.abort();
        let tenths = (self.now_ms() / 100) as usize + 1;
        let mut h = History {
            limit_rps: L_RPS,
            enforced: vec![vec![0; tenths]; self.live.len()],
            admitted: vec![vec![0; tenths / SAMPLES_PER_S + 1]; self.live.len()],
            allowances: self.allowances.clone(),
            last_heal_ms,
            limit_changes: (self.rollouts.iter())
                .map(|ro| LimitChange {
                    at_ms: ro.at_ms,
                    settled_ms: ro.settled_ms(self.bounds),
                    old_rps: ro.old_rps,
                    new_rps: ro.new_rps,
                })
                .collect(),
        };
        let gens: Vec<(usize, usize)> = (self.live.iter().enumerate())
            .flat_map(|(r, l)| l.loadgens.iter().map(move |i| (r, *i)))
            .collect();
        for (r, i) in gens {
            let exited =
                tokio::task::block_in_place(|| self.procs.wait(i, Duration::from_secs(30)));
            if exited != Some(true) {
                self.problems
                    .push(format!("loadgen {} (process {i}) failed", REGIONS[r]));
            }
            match parse_seconds(&self.procs.stdout(i)) {
                Ok(secs) => lay_out(&mut h, r, &secs, self.start_at),
                Err(e) => self.problems.push(format!("loadgen {}: {e}", REGIONS[r])),
            }
        }
        h
    }
}

/// Puts one load generator's seconds on the run's timeline (by their wall-clock start).
fn lay_out(h: &mut History, r: usize, secs: &[shareplane_e2e::figures::Second], start_at: u64) {
    for s in secs {
        let tenth0 = ((s.unix_ms as f64 - start_at as f64) / 100.0)
            .round()
            .max(0.0) as usize;
        for (k, x) in s.enforced_milli_rps.iter().enumerate() {
            if let Some(slot) = h.enforced[r].get_mut(tenth0 + k) {
                *slot = (*slot).max(*x);
            }
        }
        let sec = (tenth0 + SAMPLES_PER_S / 2) / SAMPLES_PER_S;
        if let Some(slot) = h.admitted[r].get_mut(sec) {
            *slot += s.admitted;
        }
    }
}

async fn wait_until(unix_ms: u64) {
    let now = unix_ms_now();
    if unix_ms > now {
        tokio::time::sleep(Duration::from_millis(unix_ms - now)).await;
    }
}
