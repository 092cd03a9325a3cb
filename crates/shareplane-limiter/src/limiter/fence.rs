//! The running rule set's lease and the fence it implies: installing and renewing rule sets,
//! and noting (once each way) when capacity limits are fenced.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::{Install, Limiter};
use crate::lease::Lease;
use crate::rules::{LimitKind, RuleSet};

/// The running rule set's lease and the fence it implies.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseState {
    lease: Lease,
    seq: Option<u64>,
    /// Since when capacity limits are fenced (`None`: not fenced).
    fenced_since: Option<tokio::time::Instant>,
}

impl Default for LeaseState {
    fn default() -> Self {
        LeaseState {
            lease: Lease::Unbounded,
            seq: None,
            fenced_since: None,
        }
    }
}

impl Limiter {
    /// Runs `set` if its version is greater than the one running; otherwise ignores it. A set
    /// installed this way has no lease (it is enforced until replaced), as from a daemon that
    /// predates leases; the watcher uses [`Limiter::install_leased`].
    pub fn install(&self, set: RuleSet) -> Install {
        self.install_leased(set, Lease::Unbounded, None)
    }

    /// Runs `set` under `lease` (renewal `seq`) if its version is greater than the one running.
    /// An equal version renews the running set's lease instead; an older one changes nothing.
    pub fn install_leased(&self, set: RuleSet, lease: Lease, seq: Option<u64>) -> Install {
        let mut slot = self.rules.write().unwrap_or_else(PoisonError::into_inner);
        let running = slot.as_ref().map_or(0, |r| r.version());
        if set.version() <= running {
            self.ignored.fetch_add(1, Ordering::Relaxed);
            if set.version() == running {
                self.set_lease(lease, seq, running);
            } else {
                tracing::warn!(
                    running,
                    offered = set.version(),
                    "ignored a rule set that is not newer"
                );
            }
            return Install::Ignored {
                running,
                offered: set.version(),
            };
        }
        for (id, reason) in set.rejected() {
            tracing::error!(
                limit = id,
                reason,
                version = set.version(),
                "limit held closed"
            );
        }
        let version = set.version();
        *slot = Some(Arc::new(set));
        self.installed.fetch_add(1, Ordering::Relaxed);
        tracing::info!(version, "rule set installed");
        self.set_lease(lease, seq, version);
        Install::Installed { version }
    }

    /// Renews the lease of the running rule set if it is still version `version` (a 304 answer to
    /// a poll for what comes after it). Returns whether it did.
    pub fn renew(&self, version: u64, lease: Lease, seq: Option<u64>) -> bool {
        let renewed = self.version() == version && version > 0;
        if renewed {
            self.set_lease(lease, seq, version);
        }
        renewed
    }

    /// The running rule set's lease (unbounded before the first rule set).
    pub fn lease(&self) -> Lease {
        self.lease_state().lease
    }

    /// The renewal the running lease stands on, as the daemon numbered it.
    pub fn lease_seq(&self) -> Option<u64> {
        self.lease_state().seq
    }

    /// Whether capacity limits are fenced now. Notes (and logs, once) a change of state.
    pub fn is_fenced(&self) -> bool {
        let ran_out = self.lease().ran_out(crate::clock::now());
        self.note_fence(ran_out, self.version());
        ran_out
    }

    /// Completes when the running lease runs out (never while it is unbounded or already out),
    /// having noted the fence: the watcher awaits it so that the fence is logged when it starts,
    /// not at the next check.
    pub async fn lease_runs_out(&self) {
        match self.lease() {
            Lease::Until(t) if !self.fenced.load(Ordering::Acquire) => {
                tokio::time::sleep_until(t).await;
                self.is_fenced();
            }
            _ => std::future::pending().await,
        }
    }

    /// The rate the limiter enforces now for `limit` in requests/s: the rule's, or 0 for a
    /// capacity limit while fenced. `None` without that limit.
    pub fn enforced_rate(&self, limit: &str) -> Option<f64> {
        let rules = self.rules()?;
        let rule = rules.get(limit)?;
        let fenced = rule.kind == LimitKind::Capacity && self.is_fenced();
        Some(if fenced || rule.rejected.is_some() {
            0.0
        } else {
            rule.rate
        })
    }

    fn lease_state(&self) -> LeaseState {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_lease(&self, lease: Lease, seq: Option<u64>, version: u64) {
        {
            let mut st = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
            st.lease = lease;
            st.seq = seq.or(st.seq);
        }
        if lease == Lease::Unbounded && !self.warned_unbounded.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                version,
                "the daemon sent no lease with its rule set: it is enforced until replaced"
            );
        }
        self.note_fence(lease.ran_out(crate::clock::now()), version);
    }

    /// Records whether the fence is up; a change is counted and logged exactly once.
    fn note_fence(&self, fenced: bool, version: u64) {
        if self.fenced.load(Ordering::Acquire) == fenced {
            return;
        }
        let mut st = self.lease.lock().unwrap_or_else(PoisonError::into_inner);
        if st.fenced_since.is_some() == fenced {
            return; // another caller noted it first
        }
        let now = crate::clock::now();
        if fenced {
            st.fenced_since = Some(now);
            self.fences.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                version,
                "rule-set lease ran out: fencing capacity limits (every request refused with a \
                 Retry-After) until a rule set or a renewal with a lease arrives"
            );
        } else {
            let fenced_ms = st
                .fenced_since
                .take()
                .map_or(0, |s| now.saturating_duration_since(s).as_millis() as u64);
            tracing::info!(version, fenced_ms, "rule-set lease renewed: fencing ended");
        }
        self.fenced.store(fenced, Ordering::Release);
    }
}
