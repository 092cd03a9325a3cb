//! Installing and renewing rule sets, their lease and the fence it implies, as the driver does
//! them: the decisions are [`LimiterState`](super::state::LimiterState)'s; this reads the clock
//! for them and logs what they return (a fence once each way).

use std::sync::Arc;

use super::state::{FenceChange, LeaseNotes};
use super::{Install, Limiter};
use crate::lease::Lease;
use crate::rules::{LimitKind, RuleSet};

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
        let set = Arc::new(set);
        let (install, notes) = self
            .state()
            .install(crate::clock::now(), set.clone(), lease, seq);
        match install {
            Install::Installed { version } => {
                for (id, reason) in set.rejected() {
                    tracing::error!(limit = id, reason, version, "limit held closed");
                }
                tracing::info!(version, "rule set installed");
            }
            Install::Ignored { running, offered } if offered < running => {
                tracing::warn!(running, offered, "ignored a rule set that is not newer");
            }
            Install::Ignored { .. } => {}
        }
        self.log_lease(notes);
        install
    }

    /// Renews the lease of the running rule set if it is still version `version` (a 304 answer to
    /// a poll for what comes after it). Returns whether it did.
    pub fn renew(&self, version: u64, lease: Lease, seq: Option<u64>) -> bool {
        let notes = self.state().renew(crate::clock::now(), version, lease, seq);
        notes.map(|n| self.log_lease(n)).is_some()
    }

    /// The running rule set's lease (unbounded before the first rule set).
    pub fn lease(&self) -> Lease {
        self.state().lease()
    }

    /// The renewal the running lease stands on, as the daemon numbered it.
    pub fn lease_seq(&self) -> Option<u64> {
        self.state().lease_seq()
    }

    /// Whether capacity limits are fenced now. Notes (and logs, once) a change of state.
    pub fn is_fenced(&self) -> bool {
        let (fenced, change) = self.state().fence(crate::clock::now());
        self.log_fence(change);
        fenced
    }

    /// Completes when the running lease runs out (never while it is unbounded or already out),
    /// having noted the fence: the watcher awaits it so that the fence is logged when it starts,
    /// not at the next check.
    pub async fn lease_runs_out(&self) {
        let end = self.state().lease_end();
        match end {
            Some(t) => {
                tokio::time::sleep_until(t).await;
                self.is_fenced();
            }
            None => std::future::pending().await,
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

    fn log_lease(&self, notes: LeaseNotes) {
        if notes.first_unbounded {
            tracing::warn!(
                version = notes.version,
                "the daemon sent no lease with its rule set: it is enforced until replaced"
            );
        }
        self.log_fence(notes.fence);
    }

    /// Logs a change of the fence (the state returns each exactly once).
    pub(super) fn log_fence(&self, change: Option<FenceChange>) {
        match change {
            None => {}
            Some(FenceChange::Up { version }) => tracing::warn!(
                version,
                "rule-set lease ran out: fencing capacity limits (every request refused with a \
                 Retry-After) until a rule set or a renewal with a lease arrives"
            ),
            Some(FenceChange::Down { version, fenced_ms }) => {
                tracing::info!(version, fenced_ms, "rule-set lease renewed: fencing ended");
            }
        }
    }
}
