//! What a written decision tells the operator: alarm names and events, read from what the core
//! returned.

use crate::events::Kind;
use shareplane_core::{Alarms, Decision, Deployment, PeerState, PeerView, RegionId, RegionRecord};

/// Counts, by Region index, the rebalances in a row that named each Region in `named`.
pub(super) fn count_in_a_row(counts: &mut [u32], named: &[RegionId]) {
    for (i, c) in counts.iter_mut().enumerate() {
        let now = named.iter().any(|r| r.index() == i);
        *c = if now { c.saturating_add(1) } else { 0 };
    }
}

pub(super) fn alarm_names(a: &Alarms, d: &Deployment) -> Vec<String> {
    let mut out = Vec::new();
    for &li in &a.sum_above_limit {
        let id = d.limits.get(li).map_or("?", |l| l.id.as_str());
        out.push(format!("sum_above_limit:{id}"));
    }
    if a.stale_view {
        out.push("stale_view".into());
    }
    if a.new_epoch {
        out.push("new_epoch".into());
    }
    if a.fenced {
        out.push("fenced".into());
    }
    for r in &a.reclaimed {
        out.push(format!("reclaimed:{}", d.region_name(*r)));
    }
    for r in &a.waiting_for_record {
        out.push(format!("waiting_for_record:{}", d.region_name(*r)));
    }
    for r in &a.reclaim_waiting {
        out.push(format!("reclaim_waiting:{}", d.region_name(*r)));
    }
    for r in &a.raise_waits_for {
        out.push(format!("raise_waiting:{}", d.region_name(*r)));
    }
    for (li, step) in &a.not_conserved {
        let id = d.limits.get(*li).map_or("?", |l| l.id.as_str());
        out.push(format!("room_not_conserved:{id}:{step}"));
    }
    out
}

/// One operator event: kind, peer, limit, detail.
pub(super) type Ev = (Kind, Option<String>, Option<String>, String);

/// The events of a decision that was durably written, read from what the core returned: its
/// alarms (closes, settlements, a new epoch, fencing) and the limit versions of its record
/// against `old`, the record it follows.
pub(super) fn decision_events(
    d: &Deployment,
    old: &RegionRecord,
    decision: &Decision,
    was_fenced: bool,
) -> Vec<Ev> {
    let (a, rec) = (&decision.alarms, &decision.record);
    let mut out: Vec<Ev> = Vec::new();
    if a.new_epoch {
        out.push((Kind::NewEpoch, None, None, format!(
            "started epoch {} at share 0 (epoch {} may have been reclaimed); raises only by grants named to it",
            rec.epoch(), old.epoch())));
    }
    if a.fenced != was_fenced {
        let (kind, what) = if a.fenced {
            (Kind::FenceOn, "the own health check reads unhealthy: every capacity share lowered to zero, nothing raised, granted or reclaimed")
        } else {
            (
                Kind::FenceOff,
                "the own health check no longer reads unhealthy: shares may rise again",
            )
        };
        out.push((kind, None, None, what.to_string()));
    }
    for (list, kind, what) in [
        (&a.reclaimed, Kind::Reclaim, "closed the estate of"),
        (&a.settled, Kind::Settlement, "settled again the estate of"),
    ] {
        for &r in list {
            let mark = rec.reclaims()[r];
            let detail = match mark {
                Some(m) => format!(
                    "{what} {}'s epoch {} against its record version {}",
                    d.region_name(r),
                    m.epoch(),
                    m.version()
                ),
                None => format!("{what} {}", d.region_name(r)),
            };
            out.push((kind, Some(d.region_name(r).to_string()), None, detail));
        }
    }
    for &r in &a.abandoned {
        let name = d.region_name(r);
        out.push((Kind::EstateAbandoned, Some(name.to_string()), None, format!(
            "stopped waiting for the last record of {name}'s epoch {}, as an operator asked: what \
             this Region would have settled of that epoch (its portion, grants in flight either way) \
             stays with nobody, under the limit; it now accounts with epoch {}",
            old.peer_epochs()[r], rec.peer_epochs()[r])));
    }
    for (li, (spec, new)) in d.limits.iter().zip(rec.limits()).enumerate() {
        let was = old.limits().get(li).copied().unwrap_or_default();
        if new.limit_version() != was.limit_version() {
            out.push((Kind::LimitAdopted, None, Some(spec.id.clone()), format!(
                "adopted version {} (rate {}) after version {} (rate {}), in this Region's static part",
                new.limit_version(), new.rate(), was.limit_version(), was.rate())));
        }
    }
    out
}

/// Peers whose state the core reports differently after a committed rebalance: silent, or
/// live again. (That a peer's estate was closed is a [`Kind::Reclaim`] of the decision.)
pub(super) fn peer_events(d: &Deployment, before: &[PeerView], after: &[PeerView]) -> Vec<Ev> {
    let mut out = Vec::new();
    for p in after {
        let was = before
            .iter()
            .find(|b| b.region == p.region)
            .map(|b| b.state);
        let name = d.region_name(p.region).to_string();
        match (was, p.state) {
            // A peer reclaimed straight from live was counted silent by the same rebalance.
            (Some(PeerState::Live), PeerState::Silent | PeerState::Reclaimed) => out.push((
                Kind::PeerSilent,
                Some(name.clone()),
                None,
                format!(
                    "{name}'s record (epoch {}, version {}) has not changed for {} own rebalances",
                    p.epoch, p.version, p.unchanged
                ),
            )),
            (Some(PeerState::Silent | PeerState::Reclaimed), PeerState::Live) => out.push((
                Kind::PeerLive,
                Some(name.clone()),
                None,
                format!(
                    "{name} writes again (epoch {}, version {})",
                    p.epoch, p.version
                ),
            )),
            _ => {}
        }
    }
    out
}
