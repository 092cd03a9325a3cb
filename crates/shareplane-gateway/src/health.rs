//! The gateway's health, as orchestrators, load balancers and proxies act on it.
//!
//! - **Liveness** (`GET /healthz`): the process works. 503 only when the gateway is wedged (its
//!   rule watcher stopped, which nothing but a restart mends); otherwise 200, whatever the daemon
//!   or Redis do, because restarting a gateway brings back neither.
//! - **Readiness** (`GET /readyz`): whether this gateway limits. 503 with a one-line reason while
//!   no rule set is loaded, while Redis was never reached, and while fenced (the rule set's lease
//!   ran out: capacity limits refuse every request); 200 otherwise, in fallback too (Redis
//!   failing after it was reached once: the failure policies decide, as configured).
//! - **The rules deadline**: a gateway that has loaded no rule set `rules_timeout` after its
//!   start logs an error, once, with the cause of the last failed fetch (the same line
//!   `/readyz` answers), so that a mis-wired gateway never runs without saying so.
//!
//! `shareplane_gateway_ready` and `shareplane_gateway_rules_loaded` ([`crate::metrics`]) export
//! the same states.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shareplane_limiter::{clock, Limiter, RuleWatcher};
use tokio::time::Instant;

/// The default of `rules_timeout_ms`.
pub const DEFAULT_RULES_TIMEOUT: Duration = Duration::from_secs(30);

/// What the probes read.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    rules_timeout: Duration,
    watcher: RuleWatcher,
    watcher_stopped: AtomicBool,
}

impl Health {
    /// Counts the rules deadline from now.
    pub fn new(watcher: RuleWatcher, rules_timeout: Duration) -> Self {
        Self {
            started: clock::now(),
            rules_timeout,
            watcher,
            watcher_stopped: AtomicBool::new(false),
        }
    }

    /// `Ok(line)` when the gateway limits; `Err(reason)` (one line) when it does not.
    pub fn readiness(&self, l: &Limiter) -> Result<String, String> {
        let Some(set) = l.rules() else {
            return Err(self.no_rule_set());
        };
        l.redis_reached_once()
            .map_err(|e| format!("Redis not reached yet: {e}"))?;
        if l.is_fenced() {
            return Err(format!(
                "fenced: the lease of rule set version {} ran out without word from the daemon \
                 at {}; capacity limits refuse every request{}",
                set.version(),
                self.watcher.base_url(),
                self.last_failure()
            ));
        }
        let lease = l
            .stats()
            .lease_remaining
            .map_or("unbounded".to_owned(), |d| format!("{} ms", d.as_millis()));
        Ok(format!(
            "ok: rules version {}, lease {lease}, fallback {}",
            set.version(),
            l.in_fallback()
        ))
    }

    /// `Ok` unless the gateway is wedged.
    pub fn liveness(&self) -> Result<(), &'static str> {
        if self.watcher_stopped.load(Ordering::Acquire) {
            Err("the rule watcher stopped: restart the gateway")
        } else {
            Ok(())
        }
    }

    /// Whether the rules deadline passed with no rule set loaded.
    pub fn rules_overdue(&self, l: &Limiter) -> bool {
        l.rules().is_none() && clock::since(self.started) >= self.rules_timeout
    }

    /// Failed rule fetches since the start.
    pub fn fetch_failures(&self) -> u64 {
        self.watcher.failures()
    }

    fn no_rule_set(&self) -> String {
        let waited = clock::since(self.started);
        if waited >= self.rules_timeout {
            format!(
                "no rule set loaded within {} s from the daemon at {}{}",
                self.rules_timeout.as_secs_f64(),
                self.watcher.base_url(),
                self.last_failure()
            )
        } else {
            format!(
                "no rule set loaded yet ({} s of the {} s allowed) from the daemon at {}{}",
                waited.as_secs(),
                self.rules_timeout.as_secs_f64(),
                self.watcher.base_url(),
                self.last_failure()
            )
        }
    }

    fn last_failure(&self) -> String {
        self.watcher
            .last_error()
            .map_or(String::new(), |e| format!("; last fetch failed: {e}"))
    }

    /// Waits for the rules deadline; if no rule set is loaded by then, logs an error, once.
    pub async fn rules_deadline(self: Arc<Self>, limiter: Arc<Limiter>) {
        tokio::time::sleep_until(self.started + self.rules_timeout).await;
        if limiter.rules().is_none() {
            tracing::error!(
                rules = %self.watcher.base_url(),
                timeout_ms = self.rules_timeout.as_millis() as u64,
                "{}. This gateway does not limit (checks answer UNAVAILABLE / 503) until one \
                 loads; /readyz answers 503",
                self.no_rule_set()
            );
        }
    }

    /// Marks the watcher stopped when dropped: hold it in the watcher's task, so that a task
    /// that ends (or panics) before the shutdown makes the liveness probe fail.
    pub fn watcher_guard(self: &Arc<Self>) -> WatcherGuard {
        WatcherGuard(self.clone())
    }
}

/// See [`Health::watcher_guard`].
#[derive(Debug)]
pub struct WatcherGuard(Arc<Health>);

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        self.0.watcher_stopped.store(true, Ordering::Release);
    }
}
