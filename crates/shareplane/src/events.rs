//! Operator events: one structured log line per change of state, and the same events in a
//! bounded ring served at `GET /v1/events`.
//!
//! Events are derived from what the core decided and the daemon carried out (a committed
//! decision's alarms, the coordinator's peer views before and after it, the limit versions of the
//! committed record), from configuration reloads and from refused demand reports; the daemon
//! decides nothing of its own to emit them.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Events kept for `GET /v1/events`; the oldest is dropped first.
pub const MAX_EVENTS: usize = 1_000;

/// What changed. The names are stable: they are the `event` field of the log line and the
/// `kind` of `GET /v1/events`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A peer's record stopped changing for `silent_after` own rebalances.
    PeerSilent,
    /// A silent or reclaimed peer writes again (or returned in a new epoch).
    PeerLive,
    /// This Region closed a peer's estate (reclaimed it, or closed its ended epoch).
    Reclaim,
    /// This Region settled a close again against a newer record of the same epoch.
    Settlement,
    /// A silent peer reads unhealthy, but this Region does not reclaim it yet: the newest record
    /// it has of the peer may not be the peer's newest (docs/PROTOCOL.md, "Reclaim against the
    /// newest record").
    ReclaimWaiting,
    /// A Region's health verdict (the own one included: the event's `peer` names the Region)
    /// has read unknown, or could not be read, for longer than the threshold (alarm
    /// `health_unknown:<region>`): it is never reclaimed on that verdict.
    HealthUnknown,
    /// That Region's verdict reads healthy or unhealthy again.
    HealthKnown,
    /// The own health verdict reads unhealthy: capacity shares are lowered to zero.
    FenceOn,
    FenceOff,
    /// This Region started a new epoch (it may have been reclaimed).
    NewEpoch,
    /// The own record adopted a limit at a new version (or a new limit).
    LimitAdopted,
    ConfigReloaded,
    ConfigRefused,
    /// A gateway's demand report held implausible totals (first refusal of that gateway).
    DemandRefused,
    /// As an operator asked, this Region stopped waiting for the last record of a peer's ended
    /// epoch: what it would have settled of it stays with nobody.
    EstateAbandoned,
    /// An operator's request to stop waiting was refused by the coordinator.
    AbandonRefused,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::PeerSilent => "peer_silent",
            Kind::PeerLive => "peer_live",
            Kind::Reclaim => "reclaim",
            Kind::Settlement => "settlement",
            Kind::ReclaimWaiting => "reclaim_waiting",
            Kind::HealthUnknown => "health_unknown",
            Kind::HealthKnown => "health_known",
            Kind::FenceOn => "fence_on",
            Kind::FenceOff => "fence_off",
            Kind::NewEpoch => "new_epoch",
            Kind::LimitAdopted => "limit_adopted",
            Kind::ConfigReloaded => "config_reloaded",
            Kind::ConfigRefused => "config_refused",
            Kind::DemandRefused => "demand_refused",
            Kind::EstateAbandoned => "estate_abandoned",
            Kind::AbandonRefused => "abandon_refused",
        }
    }
}

/// One event as served by `GET /v1/events`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Event {
    /// Rises by one with every event of this replica (a reader asks for `?after=seq`).
    pub seq: u64,
    /// Milliseconds since the Unix epoch on the Region's clock, and the same instant in RFC 3339.
    pub at_ms: u64,
    pub at: String,
    pub region: String,
    pub kind: Kind,
    /// The peer Region it is about, if any.
    pub peer: Option<String>,
    /// The limit it is about, if any.
    pub limit: Option<String>,
    /// What happened, in words.
    pub detail: String,
}

/// The ring of the latest [`MAX_EVENTS`] events.
#[derive(Default)]
pub struct EventLog {
    inner: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    next_seq: u64,
    events: VecDeque<Event>,
}

impl EventLog {
    /// Records an event and logs it as one structured line (`event`, `region`, `peer`, `limit`,
    /// `detail`; `peer` and `limit` only when the event is about one). Returns its sequence
    /// number.
    pub fn emit(
        &self,
        at_ms: u64,
        region: &str,
        kind: Kind,
        peer: Option<&str>,
        limit: Option<&str>,
        detail: String,
    ) -> u64 {
        let warn = matches!(
            kind,
            Kind::FenceOn
                | Kind::HealthUnknown
                | Kind::NewEpoch
                | Kind::ConfigRefused
                | Kind::DemandRefused
                | Kind::EstateAbandoned
                | Kind::AbandonRefused
        );
        // An empty name is no name: the field is left out of the line rather than written empty.
        let peer = peer.filter(|p| !p.is_empty());
        let limit = limit.filter(|l| !l.is_empty());
        let (event, p, l) = (kind.name(), peer, limit);
        if warn {
            tracing::warn!(event, region, peer = p, limit = l, %detail, "operator event");
        } else {
            tracing::info!(event, region, peer = p, limit = l, %detail, "operator event");
        }
        let mut ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        ring.next_seq += 1;
        let seq = ring.next_seq;
        if ring.events.len() >= MAX_EVENTS {
            ring.events.pop_front();
        }
        ring.events.push_back(Event {
            seq,
            at_ms,
            at: rfc3339(at_ms),
            region: region.to_string(),
            kind,
            peer: peer.map(str::to_string),
            limit: limit.map(str::to_string),
            detail,
        });
        seq
    }

    /// The events with a sequence number above `after`, oldest first, and how many events with a
    /// number above `after` the ring no longer holds.
    pub fn since(&self, after: u64) -> (Vec<Event>, u64) {
        let ring = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let oldest = ring.events.front().map_or(ring.next_seq + 1, |e| e.seq);
        let dropped = oldest.saturating_sub(after.saturating_add(1));
        let events = ring
            .events
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect();
        (events, dropped)
    }
}

/// `ms` since the Unix epoch as RFC 3339 in UTC with milliseconds (`2026-11-30T12:00:00.000Z`).
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        ms % 1000
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_083_199_999), "2026-11-30T23:59:59.999Z");
        assert_eq!(rfc3339(4_107_542_400_123), "2100-03-01T00:00:00.123Z");
    }

    #[test]
    fn the_ring_is_bounded_and_says_what_it_dropped() {
        let log = EventLog::default();
        for i in 0..(MAX_EVENTS as u64 + 5) {
            log.emit(i, "A", Kind::PeerLive, Some("B"), None, format!("#{i}"));
        }
        let (all, dropped) = log.since(0);
        assert_eq!(all.len(), MAX_EVENTS);
        assert_eq!((all[0].seq, dropped), (6, 5));
        let (tail, dropped) = log.since(MAX_EVENTS as u64 + 3);
        assert_eq!(
            tail.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1_004, 1_005]
        );
        assert_eq!(dropped, 0);
    }
}
