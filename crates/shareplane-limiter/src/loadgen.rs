//! A load generator that drives one gateway's [`Limiter`] with a demand pattern and counts, per
//! second, what it sent and what was admitted. The end-to-end test runs one per Region (binary
//! `shareplane-loadgen`); the parts here are also usable from a test in-process.
//!
//! Requests are paced from one clock: at every tick the generator sends as many checks as the pattern
//! owes since the start (`⌊∫ rate dt⌋ − sent`), each in its own task, so a slow answer never slows
//! the offered load. At most [`MAX_IN_FLIGHT`] checks are outstanding; requests beyond that are
//! counted as `dropped` (the generator could not offer them), never silently skipped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::limiter::{DecisionPath, Limiter};

/// The most checks outstanding at once.
pub const MAX_IN_FLIGHT: usize = 4096;
/// The longest run, in seconds.
pub const MAX_DURATION_S: u64 = 24 * 3600;
/// The highest rate a pattern may ask for (requests/s).
pub const MAX_PATTERN_RPS: f64 = 1e6;

/// A piecewise-constant demand: from `at_s` on, `rps` requests per second.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    steps: Vec<(f64, f64)>,
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid pattern {input:?}: {reason} (expected \"AT_S:RPS,AT_S:RPS,...\", times rising from 0)"
)]
pub struct PatternError {
    pub input: String,
    pub reason: String,
}

impl Pattern {
    /// Parses `"0:120,10:720"`: 120/s from second 0, 720/s from second 10. Times must start at 0 and
    /// rise; rates must be finite and in [0, [`MAX_PATTERN_RPS`]].
    pub fn parse(input: &str) -> Result<Self, PatternError> {
        let err = |reason: String| PatternError {
            input: input.to_owned(),
            reason,
        };
        let mut steps: Vec<(f64, f64)> = Vec::new();
        for part in input.split(',') {
            let (at, rps) = part
                .split_once(':')
                .ok_or_else(|| err(format!("{part:?} has no ':'")))?;
            let at: f64 = at
                .trim()
                .parse()
                .map_err(|_| err(format!("bad time {at:?}")))?;
            let rps: f64 = rps
                .trim()
                .parse()
                .map_err(|_| err(format!("bad rate {rps:?}")))?;
            if !at.is_finite() || !(0.0..=MAX_PATTERN_RPS).contains(&rps) {
                return Err(err(format!("{part:?} is out of range")));
            }
            if steps.last().is_some_and(|&(prev, _)| at <= prev) || (steps.is_empty() && at != 0.0)
            {
                return Err(err(format!("time {at} does not rise from 0")));
            }
            steps.push((at, rps));
        }
        Ok(Self { steps })
    }

    /// The rate at second `t`.
    pub fn rate_at(&self, t: f64) -> f64 {
        self.steps
            .iter()
            .rev()
            .find(|&&(at, _)| at <= t)
            .map_or(0.0, |&(_, r)| r)
    }

    /// Requests owed from 0 to `t`: the integral of the rate.
    pub fn owed(&self, t: f64) -> f64 {
        let mut total = 0.0;
        for (i, &(at, rps)) in self.steps.iter().enumerate() {
            let end = self
                .steps
                .get(i + 1)
                .map_or(f64::INFINITY, |&(next, _)| next)
                .min(t);
            if end > at {
                total += (end - at) * rps;
            }
        }
        total
    }
}

/// One second of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecondStats {
    pub second: u64,
    /// Wall-clock start of this second, in milliseconds since the Unix epoch (to line up the
    /// generators of several Regions; start them with the same [`Run::start_unix_ms`]).
    pub unix_ms: u64,
    /// Checks sent (the gateway's received requests).
    pub sent: u64,
    pub admitted: u64,
    /// Of the admitted, those the local fallback admitted.
    pub admitted_fallback: u64,
    /// Checks that failed before a decision (no rules yet, unknown limit).
    pub errors: u64,
    /// Requests the generator owed but could not offer (too many in flight).
    pub dropped: u64,
    /// The rule-set version running at the end of the second.
    pub rule_version: u64,
    /// The limit's rate (the share) in that version, in milli-requests/s.
    pub share_milli_rps: u64,
    /// Of the refused, those refused because the rule set's lease had run out (fenced).
    #[serde(default)]
    pub fenced: u64,
    /// What the gateway enforced for the limit in each tenth of the second (the highest value
    /// in it), milli-requests/s: the share, or 0 while fenced.
    #[serde(default)]
    pub enforced_milli_rps: [u64; SAMPLES_PER_S],
}

/// Samples of the enforced share per second.
pub const SAMPLES_PER_S: usize = 10;

/// What to run.
#[derive(Debug, Clone)]
pub struct Run {
    pub limit: String,
    pub pattern: Pattern,
    pub duration: Duration,
    pub tick: Duration,
    /// Start at this wall-clock time (milliseconds since the Unix epoch) rather than at once, so
    /// that several generators share second boundaries. A time in the past starts at once; one more
    /// than [`MAX_START_DELAY`] ahead is refused.
    pub start_unix_ms: Option<u64>,
}

/// How far ahead a start time may be.
pub const MAX_START_DELAY: Duration = Duration::from_secs(600);

/// Why a run did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("start time {0} ms is more than {MAX_START_DELAY:?} ahead")]
pub struct StartTooFar(pub u64);

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms_now() -> u64 {
    crate::clock::unix_ms()
}

/// The largest excess of admissions over `burst + rate × t` over every window of whole seconds of
/// `admitted` (admissions per second), with the window `[from, to)` where it happens. The contract
/// (SPEC.md §5, with burst = 2 s of the limit) holds when the excess is at most zero.
pub fn worst_window(admitted: &[u64], rate: f64, burst: f64) -> (f64, usize, usize) {
    let mut worst = (f64::NEG_INFINITY, 0, 0);
    for from in 0..admitted.len() {
        let mut sum = 0u64;
        for (i, a) in admitted[from..].iter().enumerate() {
            sum += a;
            let excess = sum as f64 - burst - rate * (i + 1) as f64;
            if excess > worst.0 {
                worst = (excess, from, from + i + 1);
            }
        }
    }
    worst
}

/// Drives `limiter` with `run.pattern` for `run.duration`, then waits (at most 5 s) for the checks
/// still in flight, and returns one entry per second. Requests are counted in the second they were
/// sent.
pub async fn drive(limiter: Arc<Limiter>, run: Run) -> Result<Vec<SecondStats>, StartTooFar> {
    drive_until(limiter, run, std::future::pending()).await
}

/// [`drive`], stopping early when `stop` completes: then only the seconds begun are returned (the
/// last one partly), so that a gateway stopped in the middle of a run still reports what it
/// admitted until then (the end-to-end fault schedules stop whole Regions).
pub async fn drive_until(
    limiter: Arc<Limiter>,
    run: Run,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Vec<SecondStats>, StartTooFar> {
    let seconds = run.duration.as_secs().clamp(1, MAX_DURATION_S) as usize;
    wait_for_start(run.start_unix_ms).await?;
    let counts = Counts::new(seconds, unix_ms_now());
    let limit: Arc<str> = Arc::from(run.limit.as_str());
    let start = crate::clock::now();
    let mut tick = tokio::time::interval(run.tick.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut offered = 0u64;
    let mut last_slot = None;
    let mut tasks = tokio::task::JoinSet::new();
    let mut begun = seconds;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = &mut stop => {
                begun = (crate::clock::since(start).as_secs() as usize + 1).min(seconds);
                break;
            }
        }
        let t = crate::clock::since(start).as_secs_f64();
        let second = t as usize;
        if second >= seconds {
            break;
        }
        let slot = (((t - second as f64) * SAMPLES_PER_S as f64) as usize).min(SAMPLES_PER_S - 1);
        let at = (second, slot);
        record_rules(
            &limiter,
            &limit,
            at,
            &mut last_slot,
            &mut lock(&counts.stats),
        );
        let due = (run.pattern.owed(t).floor() as u64).saturating_sub(offered);
        offered += due;
        counts.offer(due, second, (&limiter, &limit), &mut tasks);
        while tasks.try_join_next().is_some() {}
    }
    Ok(counts.finish(tasks, begun).await)
}

/// Sleeps until `start_unix_ms` (at once for none or a time in the past).
async fn wait_for_start(start_unix_ms: Option<u64>) -> Result<(), StartTooFar> {
    if let Some(at) = start_unix_ms {
        let ahead = Duration::from_millis(at.saturating_sub(unix_ms_now()));
        if ahead > MAX_START_DELAY {
            return Err(StartTooFar(at));
        }
        tokio::time::sleep(ahead).await;
    }
    Ok(())
}

/// What a run has counted so far, shared with the checks in flight.
struct Counts {
    stats: Arc<Mutex<Vec<SecondStats>>>,
    in_flight: Arc<AtomicUsize>,
}

impl Counts {
    /// `seconds` empty seconds, the first starting at `start_unix_ms`.
    fn new(seconds: usize, start_unix_ms: u64) -> Self {
        let stats = (0..seconds as u64)
            .map(|second| SecondStats {
                second,
                unix_ms: start_unix_ms + second * 1000,
                ..SecondStats::default()
            })
            .collect();
        Self {
            stats: Arc::new(Mutex::new(stats)),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Sends `due` checks in `second`, each in its own task in `tasks`; those beyond
    /// [`MAX_IN_FLIGHT`] outstanding are counted as dropped.
    fn offer(
        &self,
        due: u64,
        second: usize,
        (limiter, limit): (&Arc<Limiter>, &Arc<str>),
        tasks: &mut tokio::task::JoinSet<()>,
    ) {
        for _ in 0..due {
            if self.in_flight.load(Ordering::Relaxed) >= MAX_IN_FLIGHT {
                lock(&self.stats)[second].dropped += 1;
                continue;
            }
            lock(&self.stats)[second].sent += 1;
            self.in_flight.fetch_add(1, Ordering::Relaxed);
            let (limiter, limit) = (limiter.clone(), limit.clone());
            let (stats, in_flight) = (self.stats.clone(), self.in_flight.clone());
            tasks.spawn(async move {
                let decision = limiter.check(&[&limit], 1).await;
                count(&mut lock(&stats)[second], decision);
                in_flight.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }

    /// Waits (at most 5 s) for the checks still in `tasks`, then returns the first `begun`
    /// seconds.
    async fn finish(self, mut tasks: tokio::task::JoinSet<()>, begun: usize) -> Vec<SecondStats> {
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        let mut out = lock(&self.stats).clone();
        out.truncate(begun);
        out
    }
}

/// Counts one check's decision in its second.
fn count(s: &mut SecondStats, decision: Result<crate::Decision, crate::CheckError>) {
    match decision {
        Ok(d) if d.allowed => {
            s.admitted += 1;
            s.admitted_fallback += u64::from(matches!(d.path, DecisionPath::Fallback(_)));
        }
        Ok(d) => s.fenced += u64::from(d.path == DecisionPath::Fenced),
        Err(_) => s.errors += 1,
    }
}

/// Notes the running rules in `at`'s second and the enforced share in its tenth (the highest
/// seen in it). Tenths the ticks skipped (a stalled runtime) get the higher of the values on
/// either side, so that a sum over Regions never misses a high one.
fn record_rules(
    limiter: &Limiter,
    limit: &str,
    at: (usize, usize),
    last: &mut Option<(usize, u64)>,
    stats: &mut [SecondStats],
) {
    let milli = |rps: f64| (rps * 1000.0).round() as u64;
    let enforced = limiter.enforced_rate(limit).map_or(0, milli);
    if let (Some(rules), Some(s)) = (limiter.rules(), stats.get_mut(at.0)) {
        s.rule_version = rules.version();
        s.share_milli_rps = rules.get(limit).map_or(0, |l| milli(l.rate));
    }
    let cur = at.0 * SAMPLES_PER_S + at.1;
    let (start, before) = match *last {
        Some((i, v)) if i < cur => (i + 1, v),
        _ => (cur, enforced),
    };
    for i in start..=cur {
        let v = if i == cur {
            enforced
        } else {
            enforced.max(before)
        };
        let slot = stats
            .get_mut(i / SAMPLES_PER_S)
            .and_then(|s| s.enforced_milli_rps.get_mut(i % SAMPLES_PER_S));
        if let Some(x) = slot {
            *x = (*x).max(v);
        }
    }
    *last = Some((cur, enforced));
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_and_integrate() {
        let p = Pattern::parse("0:120, 10:720").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.rate_at(9.9), p.rate_at(10.0)), (120.0, 720.0));
        assert_eq!(p.owed(5.0), 600.0);
        assert_eq!(p.owed(12.0), 1200.0 + 1440.0);
        for bad in ["", "5:10", "0:10,0:20", "0:-1", "0:nan", "0:10,x:1", "0"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn enforced_samples_keep_the_highest_value_and_fill_skipped_tenths() {
        use crate::lease::Lease;
        use crate::rules::{LimitKind, LimitWire, RuleSet, RulesWire};
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_or(1, |a| a.port());
        let cfg = crate::LimiterConfig::new(format!("redis://127.0.0.1:{port}/"));
        let l = Limiter::new(cfg).unwrap_or_else(|e| panic!("{e}"));
        let wire = |version, rate| RulesWire {
            version,
            region: "A".into(),
            limits: vec![LimitWire {
                id: "k".into(),
                rate,
                burst: 2.0 * rate,
                shadow: false,
                kind: LimitKind::Capacity,
            }],
            lease_ms: None,
            digest: None,
            base: None,
            templates: Vec::new(),
        };
        let set = |v, r| RuleSet::from_wire(wire(v, r), None, 1).unwrap_or_else(|e| panic!("{e}"));
        let until = |ms| Lease::Until(crate::clock::now() + Duration::from_millis(ms));
        let mut stats = vec![SecondStats::default(); 2];
        let mut last = None;
        l.install_leased(set(1, 5.0), until(1_000), None);
        record_rules(&l, "k", (0, 0), &mut last, &mut stats);
        l.install_leased(set(2, 3.0), until(1_000), None);
        record_rules(&l, "k", (0, 0), &mut last, &mut stats);
        // Tenths 1 and 2 were skipped: they get the higher of 3 and what follows.
        l.install_leased(set(3, 4.0), until(0), None);
        record_rules(&l, "k", (0, 3), &mut last, &mut stats);
        record_rules(&l, "k", (1, 1), &mut last, &mut stats);
        assert_eq!(stats[0].enforced_milli_rps[..4], [5_000, 3_000, 3_000, 0]);
        assert_eq!(stats[0].enforced_milli_rps[9], 0);
        assert_eq!(stats[1].enforced_milli_rps[..2], [0, 0]);
        assert_eq!(
            (stats[1].rule_version, stats[1].share_milli_rps),
            (3, 4_000)
        );
    }

    #[test]
    fn the_worst_window_finds_the_largest_excess() {
        // L = 10 with a burst of 20: 30 in the first second is 0 over, 30 + 25 is 15 over in 2 s.
        assert_eq!(worst_window(&[30, 25, 0, 10], 10.0, 20.0), (15.0, 0, 2));
        assert_eq!(worst_window(&[5, 5], 10.0, 20.0), (-25.0, 0, 1));
    }
}
