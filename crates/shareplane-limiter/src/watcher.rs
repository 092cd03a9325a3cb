//! The rule watcher: long-polls the daemon's `GET /v1/rules?after=VERSION&wait_ms=W&lease_seq=S`,
//! installs each rule set whose version is greater than the one the gateway runs, and renews the
//! running set's lease with every answer that carries one (see [`crate::lease`]).
//!
//! The daemon answers `200` with a newer set as soon as there is one, `304` at each renewal of the
//! lease (once a period) or after `W` ms. The watcher also sends `If-None-Match: "<version>"`.
//!
//! Once it runs a set, the watcher asks for a **delta** (`&delta=<digest of the running set>`):
//! a daemon that published that very set answers with only the limits changed since, and the
//! watcher installs the result only if its digest is the one the daemon sent for the whole new
//! set ([`RuleSet::apply_delta`]). Anything else (another replica's set, a change of which limits
//! exist, a daemon that predates deltas) comes whole; a delta that cannot be applied is dropped
//! and the next request asks for the whole set.
//!
//! Whatever the daemon sends, the limiter installs only a greater version (a late answer from a
//! lagging daemon, or from one restored from an older state, changes nothing). Failures back off
//! exponentially from 100 ms to 5 s, each pause drawn from the upper half of the backoff
//! ([`jittered`]) so that many gateways do not retry in step; meanwhile the lease runs out and the limiter fences, which
//! the watcher notes (and logs) at the moment it happens.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::http::{read_capped, HttpError, MAX_RULES_BODY};
use crate::lease::{Lease, LeaseTerms};
use crate::limiter::{Install, Limiter};
use crate::rules::{digest_hex, RuleSet, RuleSetError, RulesWire};

/// The longest long-poll the daemon accepts.
pub const MAX_WAIT_MS: u64 = 30_000;

/// Why one fetch did not produce a rule set.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("daemon answered status {status}{hint}", status = .0, hint = status_hint(*.0))]
    Status(u16),
    #[error("rule set refused: {0}")]
    RuleSet(#[from] RuleSetError),
}

fn status_hint(status: u16) -> &'static str {
    match status {
        404 => " (no rules endpoint there: is the rules URL the daemon's base URL?)",
        _ => "",
    }
}

/// What the watcher's fetches did lately, for a gateway's readiness and metrics.
#[derive(Debug, Default)]
pub struct WatchStatus {
    /// The last failed fetch's reason, with its causes; cleared by a fetch that succeeds.
    last_error: Mutex<Option<String>>,
    failures: AtomicU64,
}

/// One fetch's outcome.
#[derive(Debug)]
pub enum Fetched {
    /// Nothing newer; the lease of the running set, renewed, when the daemon sent one.
    NotModified(Option<(Lease, Option<u64>)>),
    /// A rule set, its lease ([`Lease::Unbounded`] from a daemon that sends none) and renewal.
    Rules(RuleSet, Lease, Option<u64>),
}

/// Watches one daemon's rules for one limiter.
#[derive(Debug, Clone)]
pub struct RuleWatcher {
    http: reqwest::Client,
    base_url: String,
    wait_ms: u64,
    /// The last delta could not be applied: ask for the whole set next.
    whole_next: Arc<AtomicBool>,
    /// The daemon refused a request for a delta (`400`: a daemon that predates deltas refuses
    /// query fields it does not know): never ask it for one again.
    no_deltas: Arc<AtomicBool>,
    status: Arc<WatchStatus>,
}

impl RuleWatcher {
    /// `base_url` is the daemon's, e.g. `http://127.0.0.1:8080`, or its rules endpoint
    /// (`…/v1/rules`, see [`crate::http::daemon_base_url`]); `wait_ms` is capped at
    /// [`MAX_WAIT_MS`].
    pub fn new(http: reqwest::Client, base_url: &str, wait_ms: u64) -> Self {
        let base_url = crate::http::lenient_base_url(base_url);
        Self {
            http,
            base_url,
            wait_ms: wait_ms.min(MAX_WAIT_MS),
            whole_next: Arc::new(AtomicBool::new(false)),
            no_deltas: Arc::new(AtomicBool::new(false)),
            status: Arc::default(),
        }
    }

    /// The daemon's base URL this watcher polls.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Why the last fetch failed (with its causes, e.g. "… tcp connect error: Connection
    /// refused"), unless one succeeded since. Clones of this watcher share it.
    pub fn last_error(&self) -> Option<String> {
        self.status
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Fetches that failed since the start.
    pub fn failures(&self) -> u64 {
        self.status.failures.load(Ordering::Relaxed)
    }

    fn note(&self, outcome: Result<(), &WatchError>) {
        let mut last = self
            .status
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(()) => *last = None,
            Err(e) => {
                self.status.failures.fetch_add(1, Ordering::Relaxed);
                *last = Some(e.to_string());
            }
        }
    }

    /// The URL and timeout of one request, and whether it asks for a delta: without `after` the
    /// whole rule set at once; with it, a long poll for a version above `after` (a delta against
    /// the running set when it is that version and deltas are not off).
    fn request_for(&self, limiter: &Limiter, after: Option<u64>) -> (String, Duration, bool) {
        let Some(v) = after else {
            return (
                format!("{}/v1/rules", self.base_url),
                Duration::from_secs(10),
                false,
            );
        };
        let seq = limiter
            .lease_seq()
            .map_or(String::new(), |s| format!("&lease_seq={s}"));
        let whole =
            self.whole_next.load(Ordering::Relaxed) || self.no_deltas.load(Ordering::Relaxed);
        let delta = match limiter.rules() {
            Some(r) if r.version() == v && !whole => format!("&delta={}", digest_hex(r.digest())),
            _ => String::new(),
        };
        let asked_delta = !delta.is_empty();
        (
            format!(
                "{}/v1/rules?after={v}&wait_ms={}{seq}{delta}",
                self.base_url, self.wait_ms
            ),
            Duration::from_millis(self.wait_ms) + Duration::from_secs(10),
            asked_delta,
        )
    }

    /// A 200's body: the rule set it carries (whole, or a delta applied to the running one; a
    /// delta that does not apply asks for a whole set next time) and its lease.
    fn install_body(
        &self,
        limiter: &Limiter,
        body: &[u8],
        terms: Option<LeaseTerms>,
        sent: tokio::time::Instant,
        received: tokio::time::Instant,
    ) -> Result<(RuleSet, Lease, Option<u64>), WatchError> {
        let wire: RulesWire =
            serde_json::from_slice(body).map_err(|e| RuleSetError::Malformed(e.to_string()))?;
        // The body's lease is the one the issue of the rule set names; the headers carry the
        // same number with the time held.
        let terms = match (wire.lease_ms, terms) {
            (Some(ms), t) => Some(LeaseTerms {
                lease_ms: ms,
                ..t.unwrap_or_default()
            }),
            (None, t) => t,
        };
        let cfg = limiter.config();
        let set = if wire.base.is_some() {
            let applied = match limiter.rules() {
                Some(running) => running.apply_delta(wire, cfg.max_cost),
                None => Err(RuleSetError::Delta("no rule set runs yet".into())),
            };
            if applied.is_err() {
                self.whole_next.store(true, Ordering::Relaxed);
            }
            applied?
        } else {
            self.whole_next.store(false, Ordering::Relaxed);
            RuleSet::from_wire(wire, cfg.region.as_deref(), cfg.max_cost)?
        };
        let (lease, seq) = terms.map_or((Lease::Unbounded, None), |t| {
            (t.ends(sent, received), t.seq)
        });
        Ok((set, lease, seq))
    }

    /// One request: without `after` it answers at once; with it, it may wait up to `wait_ms`.
    pub async fn fetch(
        &self,
        limiter: &Limiter,
        after: Option<u64>,
    ) -> Result<Fetched, WatchError> {
        let (url, timeout, asked_delta) = self.request_for(limiter, after);
        let mut req = self.http.get(url).timeout(timeout);
        if let Some(v) = after.filter(|v| *v > 0) {
            req = req.header(reqwest::header::IF_NONE_MATCH, format!("\"{v}\""));
        }
        let sent = crate::clock::now();
        let resp = req.send().await.map_err(HttpError::from)?;
        let received = crate::clock::now();
        let terms = LeaseTerms::from_headers(resp.headers());
        match resp.status().as_u16() {
            304 => Ok(Fetched::NotModified(
                terms.map(|t| (t.ends(sent, received), t.seq)),
            )),
            200 => {
                let body = read_capped(resp, MAX_RULES_BODY).await?;
                let (set, lease, seq) = self.install_body(limiter, &body, terms, sent, received)?;
                Ok(Fetched::Rules(set, lease, seq))
            }
            400 if asked_delta => {
                tracing::warn!("the daemon refused a request for a delta (it predates them): asking for whole rule sets from now on");
                self.no_deltas.store(true, Ordering::Relaxed);
                Err(WatchError::Status(400))
            }
            s => Err(WatchError::Status(s)),
        }
    }

    /// One long poll for a version above the running one (above 0 before the first rule set, so a
    /// gateway that starts before its daemon has published waits instead of retrying), then install
    /// or renew. Returns what happened (for tests and logs).
    pub async fn poll_once(&self, limiter: &Limiter) -> Result<Option<Install>, WatchError> {
        let running = limiter.version();
        match self.fetch(limiter, Some(running)).await? {
            Fetched::NotModified(lease) => {
                if let Some((lease, seq)) = lease {
                    limiter.renew(running, lease, seq);
                }
                Ok(None)
            }
            Fetched::Rules(set, lease, seq) => Ok(Some(limiter.install_leased(set, lease, seq))),
        }
    }

    /// Polls until `shutdown` completes. While it waits for an answer or a retry, it also notes
    /// the moment the lease runs out (the limiter logs the fence then).
    pub async fn run(self, limiter: Arc<Limiter>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = Duration::from_millis(100);
        loop {
            let poll = self.poll_once(&limiter);
            let Some(outcome) = watching_the_lease(&limiter, &mut shutdown, poll).await else {
                return;
            };
            self.note(outcome.as_ref().map(|_| ()));
            let pause = match outcome {
                Ok(Some(Install::Ignored { .. })) => {
                    // A daemon that keeps answering with an old set would otherwise be polled in a
                    // tight loop.
                    backoff = Duration::from_millis(100);
                    Some(Duration::from_secs(1))
                }
                Ok(_) => {
                    backoff = Duration::from_millis(100);
                    None
                }
                Err(e) => {
                    let b = jittered(backoff, random_u64());
                    tracing::warn!(error = %e, retry_in_ms = b.as_millis() as u64, "rule fetch failed");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    Some(b)
                }
            };
            if let Some(p) = pause {
                let slept =
                    watching_the_lease(&limiter, &mut shutdown, tokio::time::sleep(p)).await;
                if slept.is_none() {
                    return;
                }
            }
        }
    }
}

/// The longest pause between failed fetches (before jitter).
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A pause drawn uniformly from [`backoff` / 2, `backoff`] by `random` ("equal jitter"): the
/// gateways of a Region whose daemon restarted do not all come back in the same millisecond, and
/// none waits less than half its backoff.
pub fn jittered(backoff: Duration, random: u64) -> Duration {
    let half = backoff / 2;
    let span_us = u64::try_from((backoff - half).as_micros()).unwrap_or(u64::MAX);
    half + Duration::from_micros(random % span_us.saturating_add(1))
}

/// A random number from the standard library's per-process keyed hasher (no dependency for a
/// number that needs no quality beyond "different per gateway and per retry").
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        crate::clock::system_now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Runs `work` to completion unless `shutdown` completes first (then `None`), noting the fence
/// if the lease runs out meanwhile.
async fn watching_the_lease<T>(
    limiter: &Limiter,
    shutdown: &mut std::pin::Pin<&mut impl Future<Output = ()>>,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    loop {
        tokio::select! {
            () = shutdown.as_mut() => return None,
            r = &mut work => return Some(r),
            () = limiter.lease_runs_out() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_the_upper_half_of_the_backoff_and_spreads() {
        let b = Duration::from_millis(800);
        assert_eq!(jittered(b, 0), Duration::from_millis(400));
        assert_eq!(jittered(b, 400_000), b);
        assert_eq!(jittered(Duration::ZERO, 12345), Duration::ZERO);
        let draws: std::collections::BTreeSet<Duration> =
            (0..64).map(|_| jittered(b, random_u64())).collect();
        assert!(draws
            .iter()
            .all(|d| (Duration::from_millis(400)..=b).contains(d)));
        // 64 draws from 400,001 values: a repeat-only result means no randomness at all.
        assert!(draws.len() > 32, "{draws:?}");
    }
}
