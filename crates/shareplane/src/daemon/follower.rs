//! A replica's view: what a follower reads, serves and reports, and the view both roles publish.

use super::{Daemon, Role};
use crate::rules::RuleSet;
use crate::view::{build_view, ViewInput};
use shareplane_core::{peer_view, regions, PeerView, RegionRecord, Rule};
use shareplane_store::{Fetched, RecordStore};
use std::sync::Arc;

impl<S: RecordStore, H: crate::health::HealthSource> Daemon<S, H> {
    pub(super) async fn follow(&mut self, now: u64) {
        self.read_health().await;
        if self.read_all().await {
            self.store_works();
            self.count_silence();
            self.count_mismatch();
            if let Some(own) = self.own_seen.clone() {
                self.serve_own(&own, now);
            }
        }
        self.update_view();
    }

    /// A follower publishes the rules of the own Region's latest record and renews the
    /// gateways' lease on it: only a record newer than the last one renews, so a follower whose
    /// view is stale (the leader stopped writing, or reads fail) lets the lease run out.
    pub(super) fn serve_own(&self, own: &RegionRecord, now: u64) {
        let d = self.d.clone();
        let version = Rule::set_version(own.version());
        let rules = Rule::of_record(&d, own);
        self.shared.publish(RuleSet::build(
            &d,
            &self.shared.templates(),
            &self.shared.region,
            version,
            &rules,
        ));
        // What is published may be newer (this replica led until just now): the lease then stays
        // on the record those rules came from.
        if self.shared.rules().version <= version {
            self.shared
                .renew_lease(own.version(), own.written_at_ms(), now);
        }
    }

    /// A follower's quarter-period look at the own record, to renew the lease soon after the
    /// leader's write (one item read).
    pub(super) async fn refresh_own(&mut self, now: u64) {
        let me = self.shared.me;
        let Ok(Some(Fetched::Record(r))) = self.call("read_one", self.store.read_one(me)).await
        else {
            return;
        };
        let newer = self
            .own_seen
            .as_ref()
            .is_none_or(|o| r.version() > o.version());
        if newer {
            self.own_seen = Some(r.clone());
            self.serve_own(&r, now);
        }
    }

    /// Counts, at each phase tick, how long each peer's latest record has named other limits
    /// than this Region runs. A record without a digest (an older daemon) tells nothing and
    /// counts as agreeing.
    pub(super) fn count_mismatch(&mut self) {
        for (rec, n) in self.peer_records.iter().zip(self.mismatch.iter_mut()) {
            let differs = rec
                .as_ref()
                .and_then(|r| r.limits_digest())
                .is_some_and(|d| d != self.digest);
            *n = if differs { n.saturating_add(1) } else { 0 };
        }
    }

    /// `limits_mismatch:<peer>` for every peer past the rollout window.
    fn mismatch_alarms(&self) -> Vec<String> {
        let window = self.opts.rollout_periods;
        regions(self.d.n())
            .filter(|r| self.mismatch.get(r.index()).is_some_and(|&n| n > window))
            .map(|r| format!("limits_mismatch:{}", self.d.region_name(r)))
            .collect()
    }

    /// Counts, at a follower's phase tick, how long each peer's record has not changed.
    pub(super) fn count_silence(&mut self) {
        for (rec, slot) in self.peer_records.iter().zip(self.silence.iter_mut()) {
            slot.read(rec.as_ref().map(|r| (r.epoch(), r.version())));
        }
    }

    /// The peers as a follower sees them, by the coordinator's rule ([`peer_view`]): silence
    /// from its own count, reclaimed when the leader's record marks the peer's current epoch.
    fn follower_peers(&self, own: Option<&RegionRecord>) -> Vec<PeerView> {
        let me = self.shared.me;
        regions(self.d.n())
            .filter(|&r| r != me)
            .filter_map(|r| {
                let rec = self.peer_records.get(r.index())?.as_ref()?;
                let silence = self.silence.get(r.index()).copied().unwrap_or_default();
                Some(peer_view(&self.d, own, rec, true, silence.unchanged()))
            })
            .collect()
    }

    pub(super) fn update_view(&mut self) {
        let d = self.d.clone();
        let unknown_alarms = self.unknown.alarms(&d);
        let me = self.shared.me;
        let (role, own, peer_records, peer_views, waits) = match &self.role {
            Role::Leader(l) if l.lease_until_ms > 0 => {
                let c = &l.coord;
                let recs = regions(d.n()).map(|r| c.latest(r).cloned()).collect();
                let waits = (l.waiting_for_record.clone(), l.raise_waiting.clone());
                (
                    "leader",
                    Some(Arc::new(c.own().clone())),
                    recs,
                    Some(c.peers()),
                    waits,
                )
            }
            _ => {
                let own = self.own_seen.clone();
                let peers = self.follower_peers(own.as_deref());
                let recs = self.peer_records.clone();
                ("follower", own, recs, Some(peers), Default::default())
            }
        };
        let view = build_view(ViewInput {
            d,
            me,
            role,
            replica: &self.opts.replica,
            own,
            peer_records,
            peer_views,
            health: self.last_health,
            store_ok: self.store_ok,
            last_error: self.last_error.clone(),
            rules_version: self.shared.rules().version,
            alarms: [self.alarms.clone(), self.mismatch_alarms(), unknown_alarms].concat(),
            health_unknown_ms: self.unknown.unknown_ms(self.shared.clock.now_ms()),
            waiting_for_record: waits.0,
            raise_waiting: waits.1,
            would_refuse: Arc::new(self.shared.demand().would_refuse()),
            limits_mismatch: self.mismatch.clone(),
        });
        self.shared.set_view(view);
    }
}
