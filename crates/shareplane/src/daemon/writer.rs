//! The writer lease (HA): which replica leads, how it resumes from the own durable record, and
//! how it steps down.

use super::{Daemon, Leader, Resumed, Role};
use crate::events::Kind;
use crate::health::HealthSource;
use crate::rules::RuleSet;
use shareplane_core::{Coordinator, Rule};
use shareplane_store::{Fetched, Lease, RecordStore, StoreError};
use tracing::{debug, info, warn};

impl<S: RecordStore, H: HealthSource> Daemon<S, H> {
    /// Hands the lease back on a clean stop (renewed to expire now), so that a follower takes
    /// over within a quarter period instead of waiting for it to run out. Nothing is written.
    pub(super) async fn release(&mut self, now: u64) -> bool {
        let me = self.shared.me;
        let released = self
            .call(
                "lease",
                self.store.acquire_lease(me, &self.opts.replica, now, 0),
            )
            .await;
        self.role = Role::Follower;
        self.shared.metrics.leader.set(0);
        released.is_ok()
    }

    /// Holds, renews or takes the lease. Returns whether this replica may write now.
    pub(super) async fn ensure_leader(&mut self, now: u64) -> bool {
        if self.is_leader(now) {
            return true;
        }
        match self.acquire(now).await {
            Ok(l) => {
                match &mut self.role {
                    Role::Leader(leader) if leader.token == l.token => {
                        leader.lease_until_ms = l.expires_at_ms;
                    }
                    _ => {
                        let Some(resumed) = self.resume_from_durable(now).await else {
                            return false;
                        };
                        self.role =
                            Role::Leader(Box::new(Leader::new(resumed, l.token, l.expires_at_ms)));
                        self.shared.metrics.lease_taken.inc();
                        info!(region = %self.shared.region, replica = %self.opts.replica, token = l.token.0,
                              "took the writer lease");
                    }
                }
                self.shared.metrics.leader.set(1);
                true
            }
            Err(StoreError::Conflict(why)) => {
                debug!(region = %self.shared.region, %why, "lease held by another replica");
                self.step_down("lease held by another replica");
                false
            }
            Err(e) => {
                self.fail("lease", &e);
                false
            }
        }
    }

    /// Rebuilds the coordinator from the own record in the store (SPEC §6: a restart resumes
    /// from the own durable record, or starts a new epoch when it may have been reclaimed).
    pub(super) async fn resume_from_durable(&mut self, now: u64) -> Option<Resumed> {
        let me = self.shared.me;
        let d = self.d.clone();
        match self.call("read_one", self.store.read_one(me)).await {
            Ok(fetched) => {
                let durable = match fetched {
                    Some(Fetched::Record(r)) => Some((*r).clone()),
                    Some(Fetched::Rejected { reason, .. }) => {
                        // Our own record is unreadable: resuming from nothing would duplicate
                        // room, so refuse to lead until an operator looks.
                        warn!(region = %self.shared.region, %reason, "own record in the store is unreadable; not writing");
                        self.shared.metrics.records_rejected.inc(reason.cause());
                        return None;
                    }
                    None => None,
                };
                let down_ms = durable
                    .as_ref()
                    .map_or(0, |r| now.saturating_sub(r.written_at_ms()));
                let durable_demand = durable
                    .as_ref()
                    .map(|r| r.limits().iter().map(|l| l.demand()).collect());
                let durable_epoch = durable.as_ref().map(|r| r.epoch());
                let c = Coordinator::restart(d.clone(), me, durable, down_ms);
                info!(region = %self.shared.region, epoch = c.own().epoch(), version = c.own().version(),
                      down_ms, "resumed from the own durable record");
                let unwritten_epoch = durable_epoch.is_some_and(|e| e != c.own().epoch());
                if unwritten_epoch {
                    // It may have been reclaimed: zero before anything else, at the version of
                    // the early push of its next write (see `crate::rules`).
                    let version = Rule::early_set_version(c.own().version() + 1);
                    let zero = RuleSet::build(
                        &d,
                        &self.shared.templates(),
                        &self.shared.region,
                        version,
                        &Rule::zeroed(&d, me),
                    );
                    if self.shared.publish(zero) {
                        info!(region = %self.shared.region, version, "new epoch: pushed zero to the gateways");
                    }
                    self.shared.event(
                        Kind::NewEpoch,
                        None,
                        None,
                        format!(
                            "resumed {down_ms} ms after the last own write, too late to be sure nobody reclaimed it: epoch {} at share 0 (zero pushed to the gateways); raises only by grants named to it",
                            c.own().epoch()
                        ),
                    );
                }
                Some(Resumed {
                    coord: c,
                    unwritten_epoch,
                    durable_demand,
                })
            }
            Err(e) => {
                self.fail("read_own", &e);
                None
            }
        }
    }

    pub(super) fn step_down(&mut self, why: &str) {
        if let Role::Leader(_) = self.role {
            warn!(region = %self.shared.region, replica = %self.opts.replica, why, "stepped down: no longer the writer");
            self.shared.metrics.stepped_down.inc();
        }
        self.role = Role::Follower;
        self.shared.metrics.leader.set(0);
    }

    /// Whether this Region cannot prove that it still holds its room: its last committed write is
    /// as old as [`Coordinator::restart`]'s resume window, so peers may have counted it silent,
    /// and its process stalled meanwhile, so its health check may have failed too. (A daemon that
    /// ran all along answered its health check, so its peers had no unhealthy verdict to reclaim
    /// on, however long its writes failed: it only let its gateways' lease run out.)
    pub(super) fn last_write_too_old(&self, now: u64) -> Option<u64> {
        let leader = self.leader()?;
        let own = leader.coord.own();
        if leader.unwritten_epoch || !self.stalled {
            return None;
        }
        let window = Coordinator::resume_window_ms(&self.d);
        let age = now.saturating_sub(own.written_at_ms());
        (own.version() > 0 && age >= window).then_some(age)
    }

    pub(super) async fn on_conflict(&mut self, now: u64) {
        let Some(resumed) = self.resume_from_durable(now).await else {
            self.step_down("the own record could not be read again after a refused write");
            return;
        };
        if let Role::Leader(l) = &mut self.role {
            l.resume(resumed);
            l.lease_until_ms = 0;
        }
        // The coordinator now stands on the durable record, so a token that changed hands to
        // this replica may be adopted.
        self.renew(now, true).await;
    }

    pub(super) async fn acquire(&self, now: u64) -> Result<Lease, StoreError> {
        let me = self.shared.me;
        self.call(
            "lease",
            self.store
                .acquire_lease(me, &self.opts.replica, now, self.ttl_ms()),
        )
        .await
    }

    pub(super) async fn renew(&mut self, now: u64, adopt_new_token: bool) {
        match self.acquire(now).await {
            Ok(l) => match &mut self.role {
                Role::Leader(leader) if adopt_new_token || leader.token == l.token => {
                    leader.token = l.token;
                    leader.lease_until_ms = l.expires_at_ms;
                }
                Role::Leader(_) => self.step_down("the lease changed hands"),
                // Renewed only as a leader.
                Role::Follower => {}
            },
            Err(StoreError::Conflict(_)) => self.step_down("a newer writer holds the lease"),
            // Keep the lease we believe in until it runs out on our clock; the store's token
            // check refuses our writes if someone else took it meanwhile.
            Err(e) => self.fail("lease", &e),
        }
    }
}
