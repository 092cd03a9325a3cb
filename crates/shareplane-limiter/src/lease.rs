//! The rule-set lease (SPEC.md §7): how long a gateway may enforce the rule set it runs without
//! hearing from its daemon, after which it **fences**.
//!
//! The daemon sends with every rules answer the lease left (`lease_ms` in a 200's body, and the
//! [`LEASE_MS_HEADER`] on 200 and 304 alike), how long it held the request before answering
//! ([`HELD_MS_HEADER`]) and the renewal the lease stands on ([`LEASE_SEQ_HEADER`]). The daemon
//! renews once a period, at each durable write of its Region's record, and stops renewing when it
//! cannot write; the lease it gives runs out before any other Region can reclaim this one.
//!
//! The gateway counts the lease on its own monotonic clock from when it **sent** the request plus
//! the time the daemon held it, and never from later than when it received the answer: a slow
//! delivery, or a gateway that stalls before it reads the answer, shortens the lease rather than
//! lengthening it. No two clocks are compared; only the held time crosses, as a duration.
//!
//! While fenced, capacity limits refuse every request with a Retry-After and security limits keep
//! their static split (their numbers never move); the next rule set or renewal with a lease left
//! lifts the fence.

use std::time::Duration;

use tokio::time::Instant;

/// On every rules answer: milliseconds the rule set may still be enforced, counted from the answer.
pub const LEASE_MS_HEADER: &str = "shareplane-lease-ms";
/// On every rules answer: milliseconds the daemon held the request before it answered.
pub const HELD_MS_HEADER: &str = "shareplane-held-ms";
/// On every rules answer: the renewal the lease stands on; it rises with every renewal.
pub const LEASE_SEQ_HEADER: &str = "shareplane-lease-seq";
/// The longest lease accepted: a larger number is taken as this (a daemon's lease is a few
/// periods, and periods are at most ten minutes).
pub const MAX_LEASE: Duration = Duration::from_secs(3_600);

/// Until when the running rule set may be enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// The daemon sent no lease (it predates leases): enforced until replaced, as before.
    Unbounded,
    /// Enforced until this instant of the gateway's monotonic clock (tokio's, so tests can pause
    /// it); fenced from then on.
    Until(Instant),
}

impl Lease {
    /// Whether the lease has run out at `now`.
    pub fn ran_out(&self, now: Instant) -> bool {
        matches!(self, Lease::Until(t) if now >= *t)
    }

    /// What is left of it at `now` (`None` when unbounded).
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        match self {
            Lease::Unbounded => None,
            Lease::Until(t) => Some(t.saturating_duration_since(now)),
        }
    }
}

/// What one answer said about the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaseTerms {
    pub lease_ms: u64,
    /// How long the daemon held the request (absent from daemons that do not say).
    pub held_ms: Option<u64>,
    pub seq: Option<u64>,
}

impl LeaseTerms {
    /// The terms in an answer's headers; `None` without a (valid) lease header.
    pub fn from_headers(h: &reqwest::header::HeaderMap) -> Option<LeaseTerms> {
        let num = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Some(LeaseTerms {
            lease_ms: num(LEASE_MS_HEADER)?,
            held_ms: num(HELD_MS_HEADER),
            seq: num(LEASE_SEQ_HEADER),
        })
    }

    /// When the lease runs out for a request sent at `sent` whose answer arrived at `received`:
    /// counted from `sent` plus the time held, or from `received` if that is earlier (or the
    /// daemon did not say how long it held the request).
    pub fn ends(&self, sent: Instant, received: Instant) -> Lease {
        let start = self
            .held_ms
            .and_then(|h| sent.checked_add(Duration::from_millis(h)))
            .map_or(received, |s| s.min(received));
        let lease = Duration::from_millis(self.lease_ms).min(MAX_LEASE);
        Lease::Until(start.checked_add(lease).unwrap_or(start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_lease_counts_from_the_send_plus_the_hold_never_from_later_than_receipt() {
        let sent = crate::clock::now();
        let received = sent + Duration::from_millis(5_000);
        let t = |lease_ms, held_ms| LeaseTerms {
            lease_ms,
            held_ms,
            seq: None,
        };
        // Held 4 s, delivered 1 s later: counted from 4 s after the send.
        let ends = |l: Lease| match l {
            Lease::Until(i) => i.duration_since(sent).as_millis(),
            Lease::Unbounded => u128::MAX,
        };
        assert_eq!(ends(t(2_000, Some(4_000)).ends(sent, received)), 6_000);
        // A daemon that says it held longer than the round trip is not believed past receipt.
        assert_eq!(ends(t(2_000, Some(9_000)).ends(sent, received)), 7_000);
        // Without the held time: from receipt.
        assert_eq!(ends(t(2_000, None).ends(sent, received)), 7_000);
        // Absurd leases are capped, and zero has run out at once.
        assert_eq!(
            ends(t(u64::MAX, Some(0)).ends(sent, received)),
            MAX_LEASE.as_millis()
        );
        assert!(t(0, Some(0)).ends(sent, received).ran_out(sent));
        assert!(!Lease::Unbounded.ran_out(received));
    }

    #[test]
    fn terms_come_from_the_headers() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(LeaseTerms::from_headers(&h), None);
        h.insert(
            LEASE_MS_HEADER,
            "1768".parse().unwrap_or_else(|e| panic!("{e}")),
        );
        h.insert(
            HELD_MS_HEADER,
            "12".parse().unwrap_or_else(|e| panic!("{e}")),
        );
        h.insert(
            LEASE_SEQ_HEADER,
            "x".parse().unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(
            LeaseTerms::from_headers(&h),
            Some(LeaseTerms {
                lease_ms: 1_768,
                held_ms: Some(12),
                seq: None
            })
        );
        h.insert(
            LEASE_MS_HEADER,
            "-1".parse().unwrap_or_else(|e| panic!("{e}")),
        );
        assert_eq!(LeaseTerms::from_headers(&h), None);
    }
}
