//! The Region's demand per limit, from gateways' running totals of received requests (SPEC §7).
//!
//! # What is measured
//!
//! Each gateway reports, per limit, how many requests it has received since it started
//! (`incarnation` names that start). The book stamps every report with the daemon's own
//! monotonic clock **when it is received** and never uses any other time. When a gateway's total
//! for a limit rises from `n` (known at `a`) to `m` (received at `b`), the `m − n` requests are
//! spread evenly over `[a, b)` on a per-limit timeline of [`BUCKET_MS`] buckets. Demand is the
//! content of the last [`WINDOW_MS`] of whole buckets that every active gateway has already
//! covered (the *frontier*: the oldest receipt among gateways heard from within [`GRACE_MS`]),
//! divided by the window.
//!
//! So the window can never lose its baseline, whatever the order of reports, store calls and
//! rebalances: a report only adds counts to the buckets its own interval covers, a rebalance only
//! reads, and the window ends where every active gateway's reports already reach, never after
//! the report that is counted. For a gateway with a steady rate the count in any window is exact
//! up to how much the gateways' report delays vary.
//!
//! # What is refused
//!
//! Per gateway and limit (see [`Refusal`]): a total below the last accepted one of the same
//! incarnation, and a rise of more than [`RISE_FACTOR`] × the limit's rate over the time since
//! the total was last known plus [`RISE_SLACK_MS`]. A refused total is never adopted; the
//! gateway's later totals are measured against its last accepted one, so a counter that jumped
//! stays refused until the gateway restarts (a new incarnation), while a spike that was only
//! early is accepted once the average is plausible again. A new incarnation starts a new
//! baseline: nothing before its first report is counted.
//!
//! # Ageing
//!
//! A gateway that stops reporting stops holding the frontier after [`GRACE_MS`]; the window then
//! moves on without it and its requests leave the window within [`WINDOW_MS`] more: demand ages
//! out instead of freezing at the last rate.
//!
//! Behind a load balancer each replica of a Region may get only some of a gateway's reports.
//! Because reports carry running totals, the increase between any two reports a replica gets is
//! exactly what the gateway received in between, so every replica that hears from a gateway at
//! least once per [`GRACE_MS`] measures the same demand.
//!
//! A book younger than [`MATURE_AFTER_MS`] undercounts (it has not seen a whole window of every
//! gateway); [`DemandBook::is_mature`] says so and the daemon uses the demand of its own last
//! durable record until then.

use shareplane_core::{Deployment, LimitKind, Room, MAX_RATE_RPS, MILLI_PER_RPS};
use shareplane_limiter::demand::Incarnation;
use std::collections::BTreeMap;

/// The demand averaging window (SPEC §2: the last 5 s).
pub const WINDOW_MS: u64 = 5_000;
/// Width of one bucket of a limit's timeline; the window ends on a bucket boundary.
pub const BUCKET_MS: u64 = 100;
/// A gateway heard from within this long still holds the window's end back to its last report;
/// gateways should report at least this often (the limiter's default is every second).
pub const GRACE_MS: u64 = 2_500;
/// A book has a whole window of every gateway that reports at least every [`GRACE_MS`] this long
/// after it was opened.
pub const MATURE_AFTER_MS: u64 = WINDOW_MS + 2 * GRACE_MS;
/// A gateway not heard from for this long is forgotten (it is out of every window long before).
pub const FORGET_AFTER_MS: u64 = 60_000;
/// A total may rise by at most `RISE_FACTOR × rate × (elapsed + RISE_SLACK_MS)` between two
/// reports of one gateway: received requests can exceed the limit (refused ones count), but not
/// a few times the whole limit on one gateway.
pub const RISE_FACTOR: u64 = 4;
/// Allowance for the variation of report delays in the rise bound.
pub const RISE_SLACK_MS: u64 = 1_000;
/// At most this many gateways are tracked; the least recently seen is forgotten first.
pub const MAX_GATEWAYS: usize = 4_096;
/// At most this many (gateway, limit) totals are tracked over all gateways.
pub const MAX_SLOTS: usize = 1 << 21;
pub const MAX_GATEWAY_ID_CHARS: usize = 128;
/// At most this many limit totals in one report.
pub const MAX_TOTALS: usize = 1_024;

/// Buckets kept per limit: the oldest window start ([`GRACE_MS`] before now) and two spare.
const KEEP_BUCKETS: u64 = (WINDOW_MS + GRACE_MS) / BUCKET_MS + 2;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DemandError {
    #[error("gateway must be 1 to {MAX_GATEWAY_ID_CHARS} printable characters")]
    BadGateway,
    #[error("too many totals in one report (at most {MAX_TOTALS})")]
    TooManyTotals,
}

/// Why one total of a report was refused (and not adopted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Below the last accepted total of the same incarnation.
    WentDown { last: u64, got: u64 },
    /// A rise larger than the limit's rate allows over the time since the last known total.
    TooFast {
        rise: u64,
        allowed: u64,
        elapsed_ms: u64,
    },
}

impl Refusal {
    /// A stable name for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::WentDown { .. } => "went_down",
            Refusal::TooFast { .. } => "too_fast",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::WentDown { last, got } => write!(
                f,
                "total went down from {last} to {got} without a new incarnation"
            ),
            Refusal::TooFast {
                rise,
                allowed,
                elapsed_ms,
            } => write!(
                f,
                "total rose by {rise} in {elapsed_ms} ms, more than the {allowed} the limit's rate allows"
            ),
        }
    }
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
    /// Totals refused, by limit id; none of them was adopted (the others were).
    pub refused: Vec<(String, Refusal)>,
    /// The first refusal ever for this gateway (log it once).
    pub first_refusal: bool,
}

/// One limit as the book needs it.
#[derive(Clone, Debug)]
pub struct TrackedLimit {
    pub id: String,
    /// The rate the rise bound is taken from: the limit's rate for a capacity limit; the largest
    /// rate for a security limit, whose demand moves no room, and for a template's slot limit,
    /// whose demand is the calls of every value of the slot, each up to the rate (so no multiple
    /// of the rate bounds it: a bound would refuse a busy slot's totals and move its room away).
    pub plausible_rate: Room,
}

impl TrackedLimit {
    pub fn of(d: &Deployment) -> Vec<TrackedLimit> {
        d.limits
            .iter()
            .map(|l| TrackedLimit {
                id: l.id.clone(),
                plausible_rate: match l.kind {
                    _ if shareplane_limiter::slots::slot_parts(&l.id).is_some() => max_rate(),
                    LimitKind::Capacity => l.rate,
                    LimitKind::Security { .. } => max_rate(),
                },
            })
            .collect()
    }
}

/// One gateway's last accepted total for one limit.
#[derive(Clone, Copy, Debug)]
struct Slot {
    total: u64,
    /// The last receipt at which the total was known to be `total` (an equal total moves it).
    known_ms: u64,
}

struct Gateway {
    incarnation: Incarnation,
    last_seen_ms: u64,
    /// A refusal was logged for this gateway.
    warned: bool,
    slots: BTreeMap<usize, Slot>,
    /// The largest running count of calls a shadow limit would have refused, per limit id, this
    /// incarnation has reported.
    would_refuse: BTreeMap<String, u64>,
}

impl Gateway {
    fn new(incarnation: Incarnation, now: u64) -> Gateway {
        Gateway {
            incarnation,
            last_seen_ms: now,
            warned: false,
            slots: BTreeMap::new(),
            would_refuse: BTreeMap::new(),
        }
    }

    /// Whether a report of `incarnation` received at `now` is to be applied. One of another
    /// incarnation than the gateway's starts a new baseline: its slots leave the book's count
    /// `slots` and its `would_refuse` counts are retired into `retired`, while what the old
    /// incarnation reported stays on the timelines.
    fn follow_incarnation(
        &mut self,
        incarnation: Incarnation,
        now: u64,
        slots: &mut usize,
        retired: &mut BTreeMap<String, u64>,
    ) -> bool {
        if incarnation == self.incarnation {
            return true;
        }
        // An older incarnation is a late report of a gateway that restarted, unless the
        // newer one has gone quiet: then a gateway whose clock was once far ahead (or one
        // bogus report) cannot lock the real one out for longer than a window.
        let quiet = now.saturating_sub(self.last_seen_ms) > WINDOW_MS + GRACE_MS;
        if incarnation < self.incarnation && !quiet {
            return false;
        }
        *slots = slots.saturating_sub(self.slots.len());
        self.slots.clear();
        DemandBook::retire_would_refuse(retired, self);
        self.incarnation = incarnation;
        true
    }

    /// Judges each `(limit index, total)` of `indexed`, received at `now`, against the
    /// gateway's last accepted total: a first total is the baseline (one more of the book's
    /// `slots`), an equal one moves the time it was known, a refused one goes to `refused`.
    /// Returns the adopted rises as `(limit index, from ms, rise)`.
    fn take_totals(
        &mut self,
        limits: &[TrackedLimit],
        indexed: Vec<(usize, u64)>,
        now: u64,
        slots: &mut usize,
        refused: &mut Vec<(String, Refusal)>,
    ) -> Vec<(usize, u64, u64)> {
        let mut adopted = Vec::new();
        for (li, total) in indexed {
            let known = Slot {
                total,
                known_ms: now,
            };
            let Some(s) = self.slots.get_mut(&li) else {
                self.slots.insert(li, known);
                *slots += 1;
                continue;
            };
            let limit = limits.get(li);
            let plausible = limit.map_or(Room::ZERO, |l| l.plausible_rate);
            match judge(s, total, now, plausible) {
                Judged::Same => s.known_ms = now,
                Judged::Rise(rise) => {
                    adopted.push((li, s.known_ms, rise));
                    *s = known;
                }
                Judged::Refused(r) => {
                    refused.push((limit.map(|l| l.id.clone()).unwrap_or_default(), r));
                }
            }
        }
        adopted
    }
}

/// Refuses a report whole: a gateway id that is empty, longer than [`MAX_GATEWAY_ID_CHARS`] or
/// has control characters, or more than [`MAX_TOTALS`] totals and counts together.
fn check_report(
    gateway: &str,
    totals: &BTreeMap<String, u64>,
    would_refuse: &BTreeMap<String, u64>,
) -> Result<(), DemandError> {
    if gateway.is_empty()
        || gateway.chars().count() > MAX_GATEWAY_ID_CHARS
        || gateway.chars().any(char::is_control)
    {
        return Err(DemandError::BadGateway);
    }
    if totals.len().saturating_add(would_refuse.len()) > MAX_TOTALS {
        return Err(DemandError::TooManyTotals);
    }
    Ok(())
}

/// One limit's received requests over time, per bucket: a ring of at most [`RING`] buckets,
/// allocated at the limit's first count (a limit nobody asks for costs no buckets). A
/// `VecDeque<u64>` grown bucket by bucket to 77 took 128 (1 KB a limit, 100 MB a daemon at
/// 100,000 limits); the ring takes its 78 once, of 4 bytes each.
///
/// A bucket counts units of `2^shift` milli-requests: exact (`shift` 0) up to `u32::MAX`
/// milli-requests in a bucket, 42.9 M requests/s for one limit; above, every bucket is halved
/// and the unit doubled as often as needed, so a count stays within a relative 2^-30 of the
/// requests (each halving and each addition drops less than one unit of a bucket that holds
/// more than 2^31 of them). Nothing is dropped whole and nothing saturates below `u64::MAX`.
#[derive(Default)]
struct Timeline {
    /// Bucket number (`ms / BUCKET_MS`) of the oldest bucket held.
    first: u64,
    /// Where the bucket `first` is in `ring`.
    start: usize,
    /// Buckets held, from `first` on.
    len: usize,
    /// A bucket counts units of `2^shift` milli-requests.
    shift: u32,
    ring: Box<[u32]>,
}

/// Buckets a timeline can hold: [`Timeline::add`] writes at most `KEEP_BUCKETS` after `first`.
const RING: usize = KEEP_BUCKETS as usize + 1;
/// The coarsest unit: 2^64 milli-requests and more in one bucket saturate, as the `u64` buckets
/// did.
const MAX_SHIFT: u32 = 32;

/// Running totals of every gateway and the Region's demand derived from them.
pub struct DemandBook {
    limits: Vec<TrackedLimit>,
    /// Every limit's position in `limits`, ordered by id (then position): a report of 1,024
    /// totals against 100,000 limits finds each by a binary search instead of comparing 10^8
    /// ids, and the index holds no copy of an id (a map by id took 7 MB at 100,000 limits).
    index: Vec<usize>,
    created_ms: u64,
    /// The latest time the book was told; times told later but lower are raised to it.
    latest_ms: u64,
    gateways: BTreeMap<String, Gateway>,
    slots: usize,
    timelines: Vec<Timeline>,
    /// Synthetic demand ([`DemandBook::add`]) per limit: when it was last added.
    synthetic: Vec<Option<u64>>,
    /// What gateways' earlier incarnations (and gateways forgotten) counted of
    /// [`Gateway::would_refuse`], per limit id, so that the Region's count only rises.
    would_refuse_retired: BTreeMap<String, u64>,
}

/// Ids are unique in a configuration; were one not, the first would win, as a scan finds it.
fn index_of(limits: &[TrackedLimit]) -> Vec<usize> {
    let mut index: Vec<usize> = (0..limits.len()).collect();
    index.sort_by(|&a, &b| limits[a].id.cmp(&limits[b].id).then(a.cmp(&b)));
    index
}

impl DemandBook {
    /// A book opened at `now_ms`; it is mature from `now_ms + MATURE_AFTER_MS` on.
    pub fn new(limits: Vec<TrackedLimit>, now_ms: u64) -> DemandBook {
        let n = limits.len();
        DemandBook {
            index: index_of(&limits),
            limits,
            created_ms: now_ms,
            latest_ms: now_ms,
            gateways: BTreeMap::new(),
            slots: 0,
            timelines: (0..n).map(|_| Timeline::default()).collect(),
            synthetic: vec![None; n],
            would_refuse_retired: BTreeMap::new(),
        }
    }

    /// Calls that shadow limits would have refused, per limit id, as this Region's gateways
    /// reported them (`would_refuse` in their reports): running counts since each gateway's
    /// start, summed over gateways and their incarnations, so they only rise. For operators
    /// only: no protocol decision reads them (a gateway with the token could inflate them).
    pub fn would_refuse(&self) -> BTreeMap<String, u64> {
        let mut out = self.would_refuse_retired.clone();
        for g in self.gateways.values() {
            for (id, n) in &g.would_refuse {
                let t = out.entry(id.clone()).or_default();
                *t = t.saturating_add(*n);
            }
        }
        out
    }

    /// Takes a gateway's `would_refuse` counts, for limits the book tracks; a count below the
    /// last one of the same incarnation is ignored (it never lowers the Region's).
    fn count_would_refuse(&mut self, gateway: &str, counts: &BTreeMap<String, u64>) {
        for (id, &n) in counts {
            if self.position(id).is_none() {
                continue;
            }
            let Some(g) = self.gateways.get_mut(gateway) else {
                return;
            };
            let t = g.would_refuse.entry(id.clone()).or_default();
            *t = (*t).max(n);
        }
    }

    fn retire_would_refuse(retired: &mut BTreeMap<String, u64>, g: &mut Gateway) {
        for (id, n) in std::mem::take(&mut g.would_refuse) {
            let t = retired.entry(id).or_default();
            *t = t.saturating_add(n);
        }
    }

    /// The position of limit `id` in `limits` (the first, were ids not unique).
    fn position(&self, id: &str) -> Option<usize> {
        let id_at = |i: usize| self.limits.get(i).map_or("", |l| l.id.as_str());
        let at = self.index.partition_point(|&i| id_at(i) < id);
        self.index.get(at).copied().filter(|&i| id_at(i) == id)
    }

    /// Follows a configuration reload: `limits` lists the book's limits first, in their order
    /// (a reload never removes or reorders limits), then any added ones, which start with an
    /// empty timeline. Rise bounds follow the new rates at once.
    pub fn set_limits(&mut self, limits: Vec<TrackedLimit>) {
        let n = limits.len();
        debug_assert!(
            self.limits.iter().zip(&limits).all(|(a, b)| a.id == b.id),
            "a reload reordered the demand book's limits"
        );
        if n > self.timelines.len() {
            self.timelines.resize_with(n, Timeline::default);
            self.synthetic.resize(n, None);
        }
        self.index = index_of(&limits);
        self.limits = limits;
    }

    /// Whether every gateway that reports at least every [`GRACE_MS`] has had a whole window
    /// since the book was opened. Before that the rates undercount (a restarted daemon would
    /// publish a demand near zero and give its share away), so the daemon uses the demand in
    /// its own last record instead.
    pub fn is_mature(&self, now_ms: u64) -> bool {
        now_ms >= self.created_ms.saturating_add(MATURE_AFTER_MS)
    }

    /// Applies one gateway report received at `now_ms`. Totals are independent per limit: the
    /// refused ones are listed in the outcome and not adopted, the others are.
    pub fn report(
        &mut self,
        now_ms: u64,
        gateway: &str,
        incarnation: impl Into<Incarnation>,
        totals: &BTreeMap<String, u64>,
    ) -> Result<ReportOutcome, DemandError> {
        self.report_with(now_ms, gateway, incarnation, totals, &BTreeMap::new())
    }

    /// [`DemandBook::report`] with the report's `would_refuse` counts (see
    /// [`DemandBook::would_refuse`]); a report refused whole, or from an older incarnation,
    /// counts none.
    pub fn report_with(
        &mut self,
        now_ms: u64,
        gateway: &str,
        incarnation: impl Into<Incarnation>,
        totals: &BTreeMap<String, u64>,
        would_refuse: &BTreeMap<String, u64>,
    ) -> Result<ReportOutcome, DemandError> {
        let incarnation = incarnation.into();
        check_report(gateway, totals, would_refuse)?;
        let now = self.advance(now_ms);
        let mut out = ReportOutcome::default();
        let indexed = self.indexed(totals, &mut out.unknown);
        self.make_room(gateway, indexed.len());
        let g = self
            .gateways
            .entry(gateway.to_string())
            .or_insert_with(|| Gateway::new(incarnation, now));
        let retired = &mut self.would_refuse_retired;
        if !g.follow_incarnation(incarnation, now, &mut self.slots, retired) {
            out.stale = true;
            return Ok(out);
        }
        g.last_seen_ms = now;
        let adopted = g.take_totals(
            &self.limits,
            indexed,
            now,
            &mut self.slots,
            &mut out.refused,
        );
        if !out.refused.is_empty() && !g.warned {
            g.warned = true;
            out.first_refusal = true;
        }
        for (li, from, rise) in adopted {
            out.counted = out.counted.saturating_add(rise);
            self.spread(li, from, now, rise);
        }
        self.count_would_refuse(gateway, would_refuse);
        Ok(out)
    }

    /// The report's totals by limit index, in the report's order; ids the book does not track
    /// go to `unknown`.
    fn indexed(
        &self,
        totals: &BTreeMap<String, u64>,
        unknown: &mut Vec<String>,
    ) -> Vec<(usize, u64)> {
        let mut indexed = Vec::with_capacity(totals.len());
        for (id, &t) in totals {
            match self.position(id) {
                Some(i) => indexed.push((i, t)),
                None => unknown.push(id.clone()),
            }
        }
        indexed
    }

    /// Counts `count` requests received for the limit at `limit_index` since the previous call
    /// (synthetic demand: the demo and tests; the first call counts from the book's opening).
    pub fn add(&mut self, now_ms: u64, limit_index: usize, count: u64) {
        let now = self.advance(now_ms);
        let created = self.created_ms;
        let Some(last) = self.synthetic.get_mut(limit_index) else {
            return;
        };
        let from = last.unwrap_or(created);
        *last = Some(now);
        self.spread(limit_index, from, now, count);
    }

    /// Demand per limit (by limit index): the last whole window behind the frontier, per second.
    pub fn rates(&mut self, now_ms: u64) -> Vec<Room> {
        let now = self.advance(now_ms);
        self.forget(now);
        let active_after = now.saturating_sub(GRACE_MS);
        let mut frontier: Vec<Option<u64>> = self
            .synthetic
            .iter()
            .map(|s| s.filter(|&t| t >= active_after))
            .collect();
        for g in self.gateways.values() {
            for (&li, s) in &g.slots {
                if s.known_ms < active_after {
                    continue;
                }
                if let Some(f) = frontier.get_mut(li) {
                    *f = Some(f.map_or(s.known_ms, |x| x.min(s.known_ms)));
                }
            }
        }
        let max = max_rate().milli() as u128;
        let mut out = Vec::with_capacity(self.timelines.len());
        for (tl, f) in self.timelines.iter_mut().zip(frontier) {
            tl.prune(now);
            let end = f.unwrap_or(active_after).max(active_after) / BUCKET_MS;
            let count = tl.sum(end.saturating_sub(WINDOW_MS / BUCKET_MS), end);
            // milli-requests over the window → milli-requests per second.
            let rate = count * 1_000 / WINDOW_MS as u128;
            out.push(Room::from_milli(rate.min(max) as u64));
        }
        out
    }

    pub fn gateways(&self) -> usize {
        self.gateways.len()
    }

    /// The book's time: `now_ms`, or the latest time it was told if that is later (two reports
    /// stamped before they took the lock may arrive in either order).
    fn advance(&mut self, now_ms: u64) -> u64 {
        self.latest_ms = self.latest_ms.max(now_ms);
        self.latest_ms
    }

    /// Spreads `count` requests evenly over `[from_ms, to_ms)` of a limit's timeline (into the
    /// bucket of `to_ms` if the interval is empty). What falls before the kept buckets is
    /// outside every future window and dropped.
    fn spread(&mut self, li: usize, from_ms: u64, to_ms: u64, count: u64) {
        let Some(tl) = self.timelines.get_mut(li) else {
            return;
        };
        tl.prune(self.latest_ms);
        let milli = count as u128 * MILLI_PER_RPS as u128;
        if to_ms <= from_ms {
            tl.add(to_ms / BUCKET_MS, milli);
            return;
        }
        let span = (to_ms - from_ms) as u128;
        // Cumulative share of `milli` up to `t`, so that the parts add up exactly.
        let upto = |t: u64| milli * (t.clamp(from_ms, to_ms) - from_ms) as u128 / span;
        let start = from_ms.max(tl.first * BUCKET_MS);
        let mut b = start / BUCKET_MS;
        while b * BUCKET_MS < to_ms {
            let part = upto((b + 1) * BUCKET_MS) - upto(b * BUCKET_MS);
            tl.add(b, part);
            b += 1;
        }
    }

    /// Forgets gateways not heard from for [`FORGET_AFTER_MS`].
    fn forget(&mut self, now: u64) {
        let before = now.saturating_sub(FORGET_AFTER_MS);
        let mut dropped = 0;
        let retired = &mut self.would_refuse_retired;
        self.gateways.retain(|_, g| {
            let keep = g.last_seen_ms >= before;
            if !keep {
                dropped += g.slots.len();
                Self::retire_would_refuse(retired, g);
            }
            keep
        });
        self.slots = self.slots.saturating_sub(dropped);
    }

    /// Makes room for a report of `gateway` with `totals` totals: forgets the least recently
    /// seen other gateways while the book is full.
    fn make_room(&mut self, gateway: &str, totals: usize) {
        loop {
            let known = self.gateways.contains_key(gateway);
            let full = (!known && self.gateways.len() >= MAX_GATEWAYS)
                || self.slots.saturating_add(totals) > MAX_SLOTS;
            if !full {
                return;
            }
            let oldest = self
                .gateways
                .iter()
                .filter(|(k, _)| k.as_str() != gateway)
                .min_by_key(|(_, g)| g.last_seen_ms)
                .map(|(k, _)| k.clone());
            let Some(k) = oldest else { return };
            if let Some(mut g) = self.gateways.remove(&k) {
                self.slots = self.slots.saturating_sub(g.slots.len());
                Self::retire_would_refuse(&mut self.would_refuse_retired, &mut g);
            }
        }
    }
}

enum Judged {
    Same,
    Rise(u64),
    Refused(Refusal),
}

/// Whether `total`, received at `now`, may follow the slot's last accepted total.
fn judge(s: &Slot, total: u64, now: u64, rate: Room) -> Judged {
    if total == s.total {
        return Judged::Same;
    }
    if total < s.total {
        return Judged::Refused(Refusal::WentDown {
            last: s.total,
            got: total,
        });
    }
    let rise = total - s.total;
    let elapsed_ms = now.saturating_sub(s.known_ms);
    let allowed = allowed_rise(rate, elapsed_ms);
    if rise > allowed {
        Judged::Refused(Refusal::TooFast {
            rise,
            allowed,
            elapsed_ms,
        })
    } else {
        Judged::Rise(rise)
    }
}

/// `RISE_FACTOR × rate × (elapsed + RISE_SLACK_MS)` in whole requests, rounded up.
pub fn allowed_rise(rate: Room, elapsed_ms: u64) -> u64 {
    let ms = elapsed_ms.saturating_add(RISE_SLACK_MS) as u128;
    let milli = (rate.milli() as u128)
        .saturating_mul(RISE_FACTOR as u128)
        .saturating_mul(ms);
    // milli-requests/s × ms → requests: / 1,000 (milli) / 1,000 (ms per s).
    u64::try_from(milli.div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

fn max_rate() -> Room {
    Room::from_rps(MAX_RATE_RPS).unwrap_or(Room::from_milli(u64::MAX))
}

impl Timeline {
    /// Drops buckets before the oldest window start that can still be asked for at `now`.
    fn prune(&mut self, now: u64) {
        let keep_from = (now / BUCKET_MS).saturating_sub(KEEP_BUCKETS);
        if keep_from <= self.first {
            return;
        }
        let drop = keep_from - self.first;
        if drop >= self.len as u64 {
            self.len = 0;
            self.start = 0;
            self.shift = 0;
        } else {
            // drop < len <= RING
            let drop = drop as usize;
            self.start = (self.start + drop) % RING;
            self.len -= drop;
        }
        self.first = keep_from;
    }

    /// Adds to one bucket. The caller pruned at the book's latest time and `bucket` is not
    /// after it, so the timeline holds at most `KEEP_BUCKETS + 1` buckets.
    fn add(&mut self, bucket: u64, milli: u128) {
        let Some(i) = bucket.checked_sub(self.first) else {
            return;
        };
        if i > KEEP_BUCKETS {
            return;
        }
        let i = i as usize;
        if self.ring.is_empty() {
            self.ring = vec![0; RING].into_boxed_slice();
        }
        while self.len <= i {
            let at = (self.start + self.len) % RING;
            self.ring[at] = 0;
            self.len += 1;
        }
        let at = (self.start + i) % RING;
        let milli = milli.min(u64::MAX as u128);
        loop {
            let sum = self.ring[at] as u128 + (milli >> self.shift);
            if let Ok(v) = u32::try_from(sum) {
                self.ring[at] = v;
                return;
            }
            if self.shift >= MAX_SHIFT {
                self.ring[at] = u32::MAX;
                return;
            }
            self.shift += 1;
            for v in self.ring.iter_mut() {
                *v >>= 1;
            }
        }
    }

    /// Milli-requests in buckets `[from, to)`.
    fn sum(&self, from: u64, to: u64) -> u128 {
        let lo = from.max(self.first);
        let hi = to.min(self.first + self.len as u64);
        (lo..hi)
            .map(|b| {
                (self.ring[(self.start + (b - self.first) as usize) % RING] as u128) << self.shift
            })
            .sum()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "k";

    /// One capacity limit `k` of 10,000/s.
    fn book(now: u64) -> DemandBook {
        DemandBook::new(
            vec![TrackedLimit {
                id: K.into(),
                plausible_rate: Room::rps(10_000),
            }],
            now,
        )
    }

    fn totals(v: u64) -> BTreeMap<String, u64> {
        [(K.to_string(), v)].into()
    }

    fn rate(b: &mut DemandBook, now: u64) -> Room {
        b.rates(now)
            .first()
            .copied()
            .unwrap_or(Room::from_milli(u64::MAX))
    }

    /// `gw` reports `rps` steadily every `every_ms` from `from` to `to` (inclusive), with its
    /// total starting at `base`.
    fn steady(
        b: &mut DemandBook,
        gw: &str,
        rps: u64,
        every_ms: u64,
        from: u64,
        to: u64,
        base: u64,
    ) {
        together(b, &[(gw, rps, every_ms, from, to, base)]);
    }

    /// Several gateways as [`steady`], their reports applied in time order.
    fn together(b: &mut DemandBook, gws: &[(&str, u64, u64, u64, u64, u64)]) {
        let mut events = Vec::new();
        for &(gw, rps, every, from, to, base) in gws {
            let mut t = from;
            while t <= to {
                events.push((t, gw, base + rps * (t - from) / 1_000));
                t += every;
            }
        }
        events.sort();
        for (t, gw, total) in events {
            let _ = b.report(t, gw, 1, &totals(total));
        }
    }

    #[test]
    fn a_steady_gateway_is_measured_exactly() {
        let mut b = book(0);
        steady(&mut b, "g", 720, 1_000, 50, 20_050, 1_000);
        assert_eq!(rate(&mut b, 20_060), Room::rps(720));
        // Whenever asked between its reports.
        steady(&mut b, "g", 720, 1_000, 21_050, 21_050, 1_000 + 720 * 21);
        assert_eq!(rate(&mut b, 21_900), Room::rps(720));
    }

    #[test]
    fn gateways_on_different_phases_and_intervals_add_up_exactly() {
        let mut b = book(0);
        together(
            &mut b,
            &[
                ("a", 500, 1_000, 130, 30_130, 0),
                ("b", 300, 100, 70, 30_070, 77),
                ("c", 200, 700, 610, 30_010, 5),
            ],
        );
        for now in [30_200, 30_300, 30_800] {
            assert_eq!(rate(&mut b, now), Room::rps(1_000), "at {now}");
        }
    }

    #[test]
    fn a_report_between_taking_now_and_asking_cannot_remove_the_baseline() {
        // Issue 13 case 1: the daemon took `now` before its store calls and a report arrived
        // meanwhile. Whatever time the book is asked at, the window is the same.
        let mut b = book(0);
        steady(&mut b, "g", 1_200, 100, 0, 30_000, 0);
        let taken = 30_000;
        let _ = b.report(30_040, "g", 1, &totals(1_200 * 30_040 / 1_000));
        let r = rate(&mut b, taken);
        assert!(
            r.milli().abs_diff(Room::rps(1_200).milli()) <= Room::rps(1_200).milli() / 100,
            "{r}"
        );
    }

    #[test]
    fn duplicated_and_reordered_reports_change_nothing() {
        let mut b = book(0);
        steady(&mut b, "g", 400, 500, 0, 10_000, 0);
        let before = rate(&mut b, 10_000);
        let dup = b.report(10_000, "g", 1, &totals(4_000));
        let older = b.report(10_001, "g", 1, &totals(3_800));
        assert_eq!(dup.as_ref().map(|o| o.refused.len()), Ok(0));
        assert_eq!(
            older.map(|o| o.refused),
            Ok(vec![(
                K.to_string(),
                Refusal::WentDown {
                    last: 4_000,
                    got: 3_800
                }
            )])
        );
        assert_eq!(rate(&mut b, 10_001), before);
        assert_eq!(before, Room::rps(400));
    }

    #[test]
    fn hostile_totals_are_refused_and_do_not_move_demand() {
        // Issue 13 case 2: 0, then u64::MAX, then 0 again from a gateway `evil`.
        let mut b = book(0);
        steady(&mut b, "real", 7_200, 100, 0, 20_000, 0);
        let first = b.report(20_000, "evil", 1, &totals(0));
        let max = b.report(20_010, "evil", 1, &totals(u64::MAX));
        assert_eq!(first.map(|o| o.refused.len()), Ok(0));
        let max = max.unwrap_or_default();
        assert_eq!(max.refused.first().map(|r| r.1.reason()), Some("too_fast"));
        assert!(max.first_refusal);
        let again = b.report(20_020, "evil", 1, &totals(u64::MAX - 1));
        assert_eq!(again.as_ref().map(|o| o.first_refusal), Ok(false));
        assert_eq!(again.map(|o| o.refused.len()), Ok(1));
        // A high total and then 0 (the other order).
        let _ = b.report(20_030, "evil2", 1, &totals(1 << 40));
        let zero = b.report(20_040, "evil2", 1, &totals(0));
        assert_eq!(
            zero.map(|o| o.refused.first().map(|r| r.1.reason())),
            Ok(Some("went_down"))
        );
        steady(
            &mut b,
            "real",
            7_200,
            100,
            20_100,
            40_000,
            7_200 * 20_100 / 1_000,
        );
        for now in [20_100, 25_000, 40_000] {
            let r = rate(&mut b, now);
            assert!(
                r.milli().abs_diff(Room::rps(7_200).milli()) <= Room::rps(72).milli(),
                "{r} at {now}"
            );
        }
    }

    #[test]
    fn the_rise_bound_is_four_times_the_rate_over_the_elapsed_time_plus_a_second() {
        // 10,000/s over 1 s + 1 s slack: 80,000.
        assert_eq!(allowed_rise(Room::rps(10_000), 1_000), 80_000);
        assert_eq!(allowed_rise(Room::rps(10_000), 0), 40_000);
        assert_eq!(allowed_rise(Room::from_milli(u64::MAX), u64::MAX), u64::MAX);
        let mut b = book(0);
        let _ = b.report(0, "g", 1, &totals(0));
        let ok = b.report(1_000, "g", 1, &totals(80_000));
        let no = b.report(2_000, "g", 1, &totals(80_000 + 80_001));
        assert_eq!(ok.map(|o| (o.counted, o.refused.len())), Ok((80_000, 0)));
        assert_eq!(no.map(|o| o.refused.len()), Ok(1));
        // Measured from the last accepted total: plausible again once the average is.
        let later = b.report(3_000, "g", 1, &totals(80_000 + 80_001));
        assert_eq!(later.map(|o| o.counted), Ok(80_001));
    }

    #[test]
    fn would_refuse_counts_only_rise_across_gateways_restarts_and_forgetting() {
        let mut b = book(0);
        let w = |v: u64| BTreeMap::from([(K.to_string(), v), ("nope".to_string(), 5)]);
        let count = |b: &DemandBook| b.would_refuse().get(K).copied();
        assert_eq!(
            b.report_with(0, "g1", 1, &totals(0), &w(10)).map(|_| ()),
            Ok(())
        );
        assert_eq!(
            b.report_with(0, "g2", 1, &totals(0), &w(3)).map(|_| ()),
            Ok(())
        );
        assert_eq!(count(&b), Some(13));
        assert!(
            !b.would_refuse().contains_key("nope"),
            "unknown limits are not kept"
        );
        // Lower within an incarnation: ignored (a late report).
        let _ = b.report_with(1_000, "g1", 1, &totals(10), &w(4));
        assert_eq!(count(&b), Some(13));
        // g1 restarts: its old count stays, the new one adds.
        let _ = b.report_with(2_000, "g1", 2, &totals(0), &w(2));
        assert_eq!(count(&b), Some(15));
        // A late report of g1's old incarnation counts nothing.
        let _ = b.report_with(2_100, "g1", 1, &totals(20), &w(50));
        assert_eq!(count(&b), Some(15));
        // g2 is forgotten after a minute of silence: what it counted stays.
        let later = 2_000 + FORGET_AFTER_MS + 1;
        let _ = b.report_with(later, "g1", 2, &totals(0), &w(2));
        let _ = b.rates(later);
        assert_eq!(b.gateways(), 1);
        assert_eq!(count(&b), Some(15));
        // Totals and counts together are bounded like totals alone.
        let many: BTreeMap<String, u64> = (0..MAX_TOTALS).map(|i| (format!("x{i}"), 1)).collect();
        let r = b.report_with(70_000, "g1", 2, &totals(0), &many);
        assert_eq!(r.map(|_| ()), Err(DemandError::TooManyTotals));
    }

    #[test]
    fn a_security_limit_is_bounded_by_the_largest_rate_only() {
        let d = crate::demo::deployment(5_000).unwrap_or_else(|e| panic!("{e}"));
        let mut limits = TrackedLimit::of(&d);
        limits.push(TrackedLimit {
            id: "login".into(),
            plausible_rate: max_rate(),
        });
        let mut b = DemandBook::new(limits, 0);
        let t = |v: u64| BTreeMap::from([("login".to_string(), v)]);
        let _ = b.report(0, "g", 1, &t(0));
        let o = b.report(1_000, "g", 1, &t(1_000_000_000));
        assert_eq!(o.map(|o| o.refused.len()), Ok(0));
    }

    #[test]
    fn a_slots_demand_sums_its_values_and_is_not_bounded_by_its_rate() {
        let mut d = crate::demo::deployment(5_000).unwrap_or_else(|e| panic!("{e}"));
        let mut slot = d.limits[0].clone();
        slot.id = shareplane_limiter::slots::slot_id("per_api_key", 3);
        slot.rate = Room::rps(100);
        d.limits.push(slot.clone());
        let mut b = DemandBook::new(TrackedLimit::of(&d), 0);
        // 1,000 busy values of one slot: 100,000 calls in a second, 1,000 × the slot's rate;
        // the same of the listed limit k-big (10,000/s) is refused, as more than 4 × its rate.
        for (id, refused) in [(slot.id.as_str(), 0), ("k-big", 1)] {
            let t = |v: u64| BTreeMap::from([(id.to_string(), v)]);
            let _ = b.report(0, id, 1, &t(0));
            let o = b.report(1_000, id, 1, &t(100_000));
            assert_eq!(o.map(|o| o.refused.len()), Ok(refused), "{id}");
        }
    }

    #[test]
    fn a_new_incarnation_starts_a_new_baseline_and_keeps_what_the_old_one_counted() {
        let mut b = book(0);
        steady(&mut b, "g", 600, 200, 0, 20_000, 0);
        // Restarts at 20 s: its totals start again near zero; nothing of its first total counts.
        let first = b.report(20_200, "g", 2, &totals(120));
        assert_eq!(first.map(|o| o.counted), Ok(0));
        steady_inc(&mut b, 2, 600, 200, 20_400, 22_000, 240);
        // The window still holds the old incarnation's requests up to 20 s; only the restart's
        // 0.2 s gap (120 requests) is missing from it.
        let r = rate(&mut b, 22_000);
        assert!(
            r.milli().abs_diff(Room::rps(576).milli()) <= Room::rps(6).milli(),
            "{r}"
        );
        let stale = b.report(22_001, "g", 1, &totals(99_999));
        assert_eq!(stale.map(|o| o.stale), Ok(true));
    }

    fn steady_inc(
        b: &mut DemandBook,
        inc: u64,
        rps: u64,
        every: u64,
        from: u64,
        to: u64,
        base: u64,
    ) {
        let mut t = from;
        while t <= to {
            let _ = b.report(t, "g", inc, &totals(base + rps * (t - from) / 1_000));
            t += every;
        }
    }

    #[test]
    fn a_bogus_high_incarnation_locks_a_gateway_out_for_a_window_at_most() {
        let mut b = book(0);
        let _ = b.report(0, "g", u64::MAX, &totals(0));
        let locked = b.report(1_000, "g", 7, &totals(0));
        assert_eq!(locked.map(|o| o.stale), Ok(true));
        let back = b.report(WINDOW_MS + GRACE_MS + 1, "g", 7, &totals(0));
        assert_eq!(back.map(|o| o.stale), Ok(false));
    }

    #[test]
    fn a_gateway_that_stops_reporting_ages_out_instead_of_freezing() {
        let mut b = book(0);
        steady(&mut b, "g", 1_000, 100, 0, 20_000, 0);
        let mut last = rate(&mut b, 20_000);
        assert_eq!(last, Room::rps(1_000));
        for now in (20_000..=20_000 + GRACE_MS + WINDOW_MS + 200).step_by(100) {
            let r = rate(&mut b, now);
            assert!(r <= last, "rose at {now}: {r} after {last}");
            last = r;
        }
        assert_eq!(last, Room::ZERO);
        // Forgotten a while later.
        let _ = rate(&mut b, 20_000 + FORGET_AFTER_MS + 1);
        assert_eq!(b.gateways(), 0);
    }

    #[test]
    fn one_active_gateway_does_not_keep_a_silent_one_counted() {
        let mut b = book(0);
        together(
            &mut b,
            &[("a", 500, 100, 0, 20_000, 0), ("b", 500, 100, 0, 10_000, 0)],
        );
        assert_eq!(rate(&mut b, 20_000), Room::rps(500));
    }

    #[test]
    fn synthetic_demand_counts_from_the_opening_of_the_book() {
        let mut b = book(1_000);
        for k in 1..=60u64 {
            b.add(1_000 + k * 100, 0, 72);
        }
        assert_eq!(rate(&mut b, 7_000), Room::rps(720));
        // Half a window after the opening: half the window's worth.
        let mut b = book(1_000);
        for k in 1..=25u64 {
            b.add(1_000 + k * 100, 0, 72);
        }
        assert_eq!(rate(&mut b, 3_500), Room::rps(360));
    }

    #[test]
    fn maturity_comes_a_window_and_two_graces_after_opening() {
        let b = book(1_000);
        assert!(!b.is_mature(1_000 + MATURE_AFTER_MS - 1));
        assert!(b.is_mature(1_000 + MATURE_AFTER_MS));
    }

    #[test]
    fn memory_stays_bounded() {
        let mut b = book(0);
        steady(&mut b, "g", 100, 100, 0, 100_000, 0);
        let _ = b.rates(100_000);
        assert!(b
            .timelines
            .iter()
            .all(|t| t.len() as u64 <= KEEP_BUCKETS + 1));
        for i in 0..(MAX_GATEWAYS + 10) {
            let _ = b.report(200_000 + i as u64, &format!("gw-{i}"), 1, &totals(0));
        }
        assert_eq!(b.gateways(), MAX_GATEWAYS);
        assert!(b.slots <= MAX_GATEWAYS);
    }

    #[test]
    fn a_demand_past_what_a_bucket_counts_exactly_is_measured_within_its_bound() {
        // 10^9 requests/s: 10^11 milli-requests a bucket, past u32::MAX (shift 5).
        for rps in [1_000_000_000u64, 40_000_000, 7] {
            let mut b = book(0);
            for s in 1..=12u64 {
                b.add(s * 1_000, 0, rps);
            }
            let got = rate(&mut b, 12_000).milli() as f64;
            let want = (rps * MILLI_PER_RPS) as f64;
            assert!(
                (got - want).abs() <= want * 1e-8,
                "{rps}/s measured as {got} milli-requests/s"
            );
        }
    }

    #[test]
    fn unknown_limits_and_bad_gateways_are_reported() {
        let mut b = book(0);
        let o = b.report(0, "g", 1, &[("nope".to_string(), 3)].into());
        assert_eq!(o.map(|o| o.unknown), Ok(vec!["nope".to_string()]));
        assert_eq!(b.report(0, "", 1, &totals(1)), Err(DemandError::BadGateway));
        assert_eq!(
            b.report(0, "a\nb", 1, &totals(1)),
            Err(DemandError::BadGateway)
        );
    }
}
