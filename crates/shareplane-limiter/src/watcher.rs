//! The rule watcher: long-polls the daemon's `GET /v1/rules?after=VERSION&wait_ms=W` and installs
//! each rule set whose version is greater than the one the gateway runs.
//!
//! The daemon answers `200` with a newer set as soon as there is one, else `304` after `W` ms. The
//! watcher also sends `If-None-Match: "<version>"`. Whatever the daemon sends, the limiter installs
//! only a greater version (a late answer from a lagging daemon, or from one restored from an older
//! state, changes nothing). Failures back off exponentially from 100 ms to 5 s.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::http::{read_capped, HttpError, MAX_RULES_BODY};
use crate::limiter::{Install, Limiter};
use crate::rules::{RuleSet, RuleSetError};

/// The longest long-poll the daemon accepts.
pub const MAX_WAIT_MS: u64 = 30_000;

/// Why one fetch did not produce a rule set.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("daemon answered status {0}")]
    Status(u16),
    #[error("rule set refused: {0}")]
    RuleSet(#[from] RuleSetError),
}

/// One fetch's outcome.
#[derive(Debug)]
pub enum Fetched {
    NotModified,
    Rules(RuleSet),
}

/// Watches one daemon's rules for one limiter.
#[derive(Debug, Clone)]
pub struct RuleWatcher {
    http: reqwest::Client,
    base_url: String,
    wait_ms: u64,
}

impl RuleWatcher {
    /// `base_url` is the daemon's, e.g. `http://127.0.0.1:8080`; `wait_ms` is capped at
    /// [`MAX_WAIT_MS`].
    pub fn new(http: reqwest::Client, base_url: &str, wait_ms: u64) -> Self {
        let base_url = base_url.trim_end_matches('/').to_owned();
        Self {
            http,
            base_url,
            wait_ms: wait_ms.min(MAX_WAIT_MS),
        }
    }

    /// One request: without `after` it answers at once; with it, it may wait up to `wait_ms`.
    pub async fn fetch(
        &self,
        limiter: &Limiter,
        after: Option<u64>,
    ) -> Result<Fetched, WatchError> {
        let (url, timeout) = match after {
            Some(v) => (
                format!(
                    "{}/v1/rules?after={v}&wait_ms={}",
                    self.base_url, self.wait_ms
                ),
                Duration::from_millis(self.wait_ms) + Duration::from_secs(10),
            ),
            None => (
                format!("{}/v1/rules", self.base_url),
                Duration::from_secs(10),
            ),
        };
        let mut req = self.http.get(url).timeout(timeout);
        if let Some(v) = after.filter(|v| *v > 0) {
            req = req.header(reqwest::header::IF_NONE_MATCH, format!("\"{v}\""));
        }
        let resp = req.send().await.map_err(HttpError::from)?;
        match resp.status().as_u16() {
            304 => Ok(Fetched::NotModified),
            200 => {
                let body = read_capped(resp, MAX_RULES_BODY).await?;
                let cfg = limiter.config();
                Ok(Fetched::Rules(RuleSet::from_json(
                    &body,
                    cfg.region.as_deref(),
                    cfg.max_cost,
                )?))
            }
            s => Err(WatchError::Status(s)),
        }
    }

    /// One long poll for a version above the running one (above 0 before the first rule set, so a
    /// gateway that starts before its daemon has published waits instead of retrying), then install.
    /// Returns what happened (for tests and logs).
    pub async fn poll_once(&self, limiter: &Limiter) -> Result<Option<Install>, WatchError> {
        match self.fetch(limiter, Some(limiter.version())).await? {
            Fetched::NotModified => Ok(None),
            Fetched::Rules(set) => Ok(Some(limiter.install(set))),
        }
    }

    /// Polls until `shutdown` completes.
    pub async fn run(self, limiter: Arc<Limiter>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut backoff = Duration::from_millis(100);
        loop {
            let outcome = tokio::select! {
                () = &mut shutdown => return,
                r = self.poll_once(&limiter) => r,
            };
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
                    tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "rule fetch failed");
                    let b = backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    Some(b)
                }
            };
            if let Some(p) = pause {
                tokio::select! {
                    () = &mut shutdown => return,
                    () = tokio::time::sleep(p) => {}
                }
            }
        }
    }
}
