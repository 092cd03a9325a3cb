//! The Region's demand per limit, from gateways' running totals of received requests (SPEC §7).
//!
//! Each gateway reports, per limit, how many requests it has received since it started
//! (`incarnation` names that start). Only increases over the last accepted total count, so a
//! repeated or older report changes nothing. A gateway seen for the first time, or in a new
//! incarnation, sets its baseline: its history before that is not counted as received now (which
//! would make a burst of demand out of a daemon restart).
//!
//! Demand is what was received in the last [`WINDOW_MS`] divided by the window.
//!
//! Behind a load balancer each replica of a Region may get only some of a gateway's reports.
//! Because reports carry running totals, the increase between any two reports a replica gets is
//! exactly what the gateway received in between, so every replica that hears from a gateway at
//! least once per window measures the same demand (a follower that takes over needs no hand-off).

use shareplane_core::Room;
use std::collections::{BTreeMap, VecDeque};

/// The demand averaging window (SPEC §2: the last 5 s).
pub const WINDOW_MS: u64 = 5_000;
/// Samples are coalesced into buckets of this width, so a limit keeps at most ~51 samples.
const BUCKET_MS: u64 = 100;
/// At most this many gateways are tracked; the least recently seen is forgotten first.
pub const MAX_GATEWAYS: usize = 4_096;
pub const MAX_GATEWAY_ID_CHARS: usize = 128;
/// At most this many limit totals in one report.
pub const MAX_TOTALS: usize = 1_024;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DemandError {
    #[error("gateway must be 1 to {MAX_GATEWAY_ID_CHARS} printable characters")]
    BadGateway,
    #[error("too many totals in one report (at most {MAX_TOTALS})")]
    TooManyTotals,
}

/// What a report did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReportOutcome {
    /// Requests newly counted, over all limits.
    pub counted: u64,
    /// Limit ids in the report that this deployment does not have.
    pub unknown: Vec<String>,
    /// The report was from an older incarnation and was ignored.
    pub stale: bool,
}

struct Gateway {
    incarnation: u64,
    totals: Vec<Option<u64>>,
    last_seen_ms: u64,
}

#[derive(Default)]
struct Counter {
    received: u64,
    /// `(bucket start ms, received at the end of that bucket)`, oldest first.
    samples: VecDeque<(u64, u64)>,
}

/// Running totals of every gateway and the Region's demand derived from them.
pub struct DemandBook {
    limit_ids: Vec<String>,
    created_ms: u64,
    gateways: BTreeMap<String, Gateway>,
    counters: Vec<Counter>,
}

impl DemandBook {
    /// A book opened at `now_ms`: it has a full window of data from `now_ms + WINDOW_MS` on.
    pub fn new(limit_ids: Vec<String>, now_ms: u64) -> DemandBook {
        let counters = limit_ids.iter().map(|_| Counter::default()).collect();
        DemandBook {
            limit_ids,
            created_ms: now_ms,
            gateways: BTreeMap::new(),
            counters,
        }
    }

    /// Whether a whole window has passed since the book was opened. Before that the rates
    /// undercount (a restarted daemon would otherwise publish a demand near zero and give its
    /// share away), so the daemon uses the demand in its own last record instead.
    pub fn is_mature(&self, now_ms: u64) -> bool {
        now_ms >= self.created_ms.saturating_add(WINDOW_MS)
    }

    /// Applies one gateway report.
    pub fn report(
        &mut self,
        now_ms: u64,
        gateway: &str,
        incarnation: u64,
        totals: &BTreeMap<String, u64>,
    ) -> Result<ReportOutcome, DemandError> {
        if gateway.is_empty()
            || gateway.chars().count() > MAX_GATEWAY_ID_CHARS
            || gateway.chars().any(char::is_control)
        {
            return Err(DemandError::BadGateway);
        }
        if totals.len() > MAX_TOTALS {
            return Err(DemandError::TooManyTotals);
        }
        let mut out = ReportOutcome::default();
        let mut indexed = Vec::with_capacity(totals.len());
        for (id, &t) in totals {
            match self.limit_ids.iter().position(|l| l == id) {
                Some(i) => indexed.push((i, t)),
                None => out.unknown.push(id.clone()),
            }
        }
        if !self.gateways.contains_key(gateway) {
            self.make_room();
        }
        let n = self.limit_ids.len();
        let g = self
            .gateways
            .entry(gateway.to_string())
            .or_insert_with(|| Gateway {
                incarnation,
                totals: vec![None; n],
                last_seen_ms: now_ms,
            });
        if incarnation < g.incarnation {
            out.stale = true;
            return Ok(out);
        }
        if incarnation > g.incarnation {
            g.incarnation = incarnation;
            g.totals = vec![None; n];
        }
        g.last_seen_ms = now_ms;
        let mut deltas = Vec::new();
        for (i, t) in indexed {
            let Some(slot) = g.totals.get_mut(i) else {
                continue;
            };
            match *slot {
                None => *slot = Some(t),
                Some(last) if t > last => {
                    deltas.push((i, t - last));
                    *slot = Some(t);
                }
                Some(_) => {}
            }
        }
        for (i, d) in deltas {
            out.counted = out.counted.saturating_add(d);
            self.add(now_ms, i, d);
        }
        Ok(out)
    }

    /// Counts `count` requests received for the limit at `limit_index` (synthetic demand).
    pub fn add(&mut self, now_ms: u64, limit_index: usize, count: u64) {
        let Some(c) = self.counters.get_mut(limit_index) else {
            return;
        };
        c.received = c.received.saturating_add(count);
        // A sample is stamped with the END of its bucket: a count that arrived after the window's
        // start must never fall into the baseline taken at or before that start (stamping with
        // the bucket's start dropped a whole report arriving in the window's first bucket).
        let bucket = now_ms.div_ceil(BUCKET_MS).saturating_mul(BUCKET_MS);
        match c.samples.back_mut() {
            Some(last) if last.0 == bucket => last.1 = c.received,
            _ => c.samples.push_back((bucket, c.received)),
        }
        prune(c, now_ms);
    }

    /// Demand per limit (by limit index): received in the last window / window.
    pub fn rates(&mut self, now_ms: u64) -> Vec<Room> {
        self.counters
            .iter_mut()
            .map(|c| {
                prune(c, now_ms);
                let start = now_ms.saturating_sub(WINDOW_MS);
                // After pruning, only the front sample may lie at or before the window start.
                let base = c
                    .samples
                    .front()
                    .filter(|s| s.0 <= start)
                    .map_or(0, |s| s.1);
                let count = c.received.saturating_sub(base);
                // count requests / 5 s in milli-requests per second, capped at the largest rate
                // the core accepts (a gateway reporting absurd totals cannot overflow anything).
                let max = (shareplane_core::MAX_RATE_RPS as u128)
                    * shareplane_core::MILLI_PER_RPS as u128;
                Room((count as u128 * 1_000_000 / WINDOW_MS as u128).min(max) as u64)
            })
            .collect()
    }

    pub fn gateways(&self) -> usize {
        self.gateways.len()
    }

    fn make_room(&mut self) {
        while self.gateways.len() >= MAX_GATEWAYS {
            let oldest = self
                .gateways
                .iter()
                .min_by_key(|(_, g)| g.last_seen_ms)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.gateways.remove(&k),
                None => break,
            };
        }
    }
}

/// Keeps the newest sample at or before the window start (the baseline) and everything after.
/// The window is `(now − WINDOW_MS, now]` at the granularity of one bucket.
fn prune(c: &mut Counter, now_ms: u64) {
    let start = now_ms.saturating_sub(WINDOW_MS);
    while c.samples.len() >= 2 && c.samples[1].0 <= start {
        c.samples.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(v: u64) -> BTreeMap<String, u64> {
        [("k".to_string(), v)].into()
    }

    #[test]
    fn a_report_just_after_the_window_start_is_counted() {
        // Reports every second at 50 ms past the second; the window starts on the second.
        let mut b = DemandBook::new(vec!["k".into()], 0);
        let _ = b.report(50, "g1", 1, &totals(0));
        for s in 1..=9u64 {
            let _ = b.report(s * 1000 + 50, "g1", 1, &totals(s * 720));
        }
        // At 10,000 ms the window (5,000, 10,000] holds the five reports of 5.05 .. 9.05 s.
        let r = b.rates(10_000)[0];
        assert_eq!(r, Room::rps(720), "got {r}");
    }

    #[test]
    fn running_totals_give_a_five_second_average() {
        let mut b = DemandBook::new(vec!["k".into()], 0);
        let _ = b.report(0, "g1", 1, &totals(1_000));
        for s in 1..=10u64 {
            let _ = b.report(s * 1000, "g1", 1, &totals(1_000 + s * 700));
        }
        // The last 5 s held 5 × 700 requests: 700/s.
        assert_eq!(b.rates(10_000), vec![Room::rps(700)]);
    }

    #[test]
    fn repeated_older_and_reset_reports_change_nothing() {
        let mut b = DemandBook::new(vec!["k".into()], 0);
        let _ = b.report(0, "g", 5, &totals(100));
        let _ = b.report(1000, "g", 5, &totals(600));
        let again = b.report(1500, "g", 5, &totals(600));
        let older = b.report(1600, "g", 5, &totals(300));
        let stale = b.report(1700, "g", 4, &totals(9_000));
        let fresh = b.report(1800, "g", 6, &totals(50));
        assert_eq!(again.map(|o| o.counted), Ok(0));
        assert_eq!(older.map(|o| o.counted), Ok(0));
        assert_eq!(stale.map(|o| o.stale), Ok(true));
        assert_eq!(fresh.map(|o| o.counted), Ok(0));
        assert_eq!(b.rates(2000), vec![Room::rps(100)]);
    }

    #[test]
    fn absurd_totals_are_capped_at_the_largest_rate() {
        let mut b = DemandBook::new(vec!["k".into()], 0);
        let _ = b.report(0, "g", 1, &totals(0));
        let _ = b.report(1000, "g", 1, &totals(u64::MAX));
        let cap = Room::from_rps(shareplane_core::MAX_RATE_RPS).map_err(|e| e.to_string());
        assert_eq!(
            b.rates(1000).first().copied().ok_or("no rate".to_string()),
            cap
        );
    }

    #[test]
    fn unknown_limits_and_bad_gateways_are_reported() {
        let mut b = DemandBook::new(vec!["k".into()], 0);
        let o = b.report(0, "g", 1, &[("nope".to_string(), 3)].into());
        assert_eq!(o.map(|o| o.unknown), Ok(vec!["nope".to_string()]));
        assert_eq!(b.report(0, "", 1, &totals(1)), Err(DemandError::BadGateway));
    }
}
