//! The daemon's metrics in Prometheus text format. Every metric is defined once, in
//! [`Metrics::render`], with its name, help and type; the loop and the API only bump fields.

use crate::view::{LimitJson, PeerJson, StateView};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
}

/// A counter with one label; the label values come from a small fixed set of causes.
#[derive(Default)]
pub struct Labeled(Mutex<BTreeMap<&'static str, u64>>);

impl Labeled {
    pub fn inc(&self, label: &'static str) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(label).or_default() += 1;
    }
    pub fn get(&self, label: &str) -> u64 {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(label).copied().unwrap_or(0)
    }
    pub fn total(&self) -> u64 {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.values().sum()
    }
    fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.iter().map(|(k, v)| (*k, *v)).collect()
    }
}

/// Bucket bounds of every duration histogram, in milliseconds (rendered in seconds).
const BUCKETS_MS: [u64; 13] = [
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000,
];

/// A duration histogram with the fixed [`BUCKETS_MS`] (Prometheus `histogram`, base unit
/// seconds).
#[derive(Default)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative; summed when rendered).
    buckets: [AtomicU64; BUCKETS_MS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
    /// The longest observation (not rendered: for benches and logs).
    max_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: std::time::Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        if let Some(i) = BUCKETS_MS.iter().position(|b| us <= b * 1000) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The sum of every observation.
    pub fn sum(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.sum_us.load(Ordering::Relaxed))
    }

    /// The longest observation.
    pub fn max(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.max_us.load(Ordering::Relaxed))
    }

    /// `_bucket`, `_sum` and `_count` lines with `labels` (already formatted, no braces).
    fn render(&self, o: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (b, n) in BUCKETS_MS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let le = *b as f64 / 1000.0;
            let _ = writeln!(o, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let count = self.count();
        let _ = writeln!(o, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(o, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(o, "{name}_count{{{labels}}} {count}");
    }
}

/// Histograms by one label from a small fixed set (the store operations).
#[derive(Default)]
pub struct LabeledHistogram(Mutex<BTreeMap<&'static str, std::sync::Arc<Histogram>>>);

impl LabeledHistogram {
    pub fn observe(&self, label: &'static str, d: std::time::Duration) {
        let h = {
            let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
            m.entry(label).or_default().clone()
        };
        h.observe(d);
    }

    pub fn count(&self, label: &str) -> u64 {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.get(label).map_or(0, |h| h.count())
    }
}

/// A per-limit gauge: name, help and how to read it from the state view.
type LimitGauge = (&'static str, &'static str, fn(&LimitJson) -> f64);
/// A replica-wide value: name, type, help and how to read it.
type Scalar = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Metrics, &Extra) -> u64,
);
/// A counter with one label: name, label, help and which field holds it.
type ByLabel = (
    &'static str,
    &'static str,
    &'static str,
    fn(&Metrics) -> &Labeled,
);

/// Values that live outside [`Metrics`].
#[derive(Default)]
pub struct Extra {
    pub ready: bool,
    pub store_ok: bool,
    pub watchers: usize,
    pub rules_lease_remaining_ms: u64,
    pub config_generation: u64,
}

/// Limits with series of their own in `/metrics` (besides those whose shares add up above their
/// rate): at 100,000 limits, series for all would be a million and a 47 MB scrape.
pub const PER_LIMIT_SERIES: usize = 1_000;

/// Every replica-wide metric, defined here and nowhere else.
const SCALARS: [Scalar; 20] = [
    (
        "shareplane_config_generation",
        "gauge",
        "1 for the configuration the daemon started with, one more for every reload that changed the limits.",
        |_, x| x.config_generation,
    ),
    (
        "shareplane_rebalances_total",
        "counter",
        "Rebalances decided by this replica as leader.",
        |m, _| m.rebalances.get(),
    ),
    (
        "shareplane_record_writes_total",
        "counter",
        "Own records durably written.",
        |m, _| m.writes.get(),
    ),
    (
        "shareplane_store_reads_failed_total",
        "counter",
        "Reads of all records that failed; the rebalance was skipped and the last shares kept.",
        |m, _| m.reads_failed.get(),
    ),
    (
        "shareplane_rules_published_total",
        "counter",
        "Rule sets published to gateways.",
        |m, _| m.rules_published.get(),
    ),
    (
        "shareplane_rules_deltas_total",
        "counter",
        "Rule-set answers sent as deltas (only the limits changed since the set the gateway runs).",
        |m, _| m.rules_deltas.get(),
    ),
    (
        "shareplane_rules_version",
        "gauge",
        "Version of the published rule set.",
        |m, _| m.rules_version.get(),
    ),
    (
        "shareplane_leader",
        "gauge",
        "1 while this replica holds the writer lease.",
        |m, _| m.leader.get(),
    ),
    (
        "shareplane_lease_taken_total",
        "counter",
        "Times this replica became the writer.",
        |m, _| m.lease_taken.get(),
    ),
    (
        "shareplane_stepped_down_total",
        "counter",
        "Times this replica lost the writer role.",
        |m, _| m.stepped_down.get(),
    ),
    (
        "shareplane_demand_reports_total",
        "counter",
        "Demand reports accepted.",
        |m, _| m.demand_reports.get(),
    ),
    (
        "shareplane_rebalances_without_fresh_data_total",
        "counter",
        "Rebalances at which no peer had written since the previous one.",
        |m, _| m.stale_rebalances.get(),
    ),
    (
        "shareplane_health_reads_timed_out_total",
        "counter",
        "Health reads that outlasted the call bound (every Region read as unknown for that rebalance).",
        |m, _| m.health_reads_timed_out.get(),
    ),
    (
        "shareplane_metric_publish_failed_total",
        "counter",
        "CloudWatch metric publishes that failed.",
        |m, _| m.metric_publish_failed.get(),
    ),
    (
        "shareplane_rule_watchers",
        "gauge",
        "Requests waiting for a newer rule set (long-polls).",
        |_, x| x.watchers as u64,
    ),
    (
        "shareplane_rules_lease_renewals_total",
        "counter",
        "Renewals of the rule-set lease (one per own record durably written or, as follower, seen).",
        |m, _| m.rules_lease_renewals.get(),
    ),
    (
        "shareplane_ready",
        "gauge",
        "1 once all records were read successfully.",
        |_, x| u64::from(x.ready),
    ),
    (
        "shareplane_store_ok",
        "gauge",
        "1 if the last store call succeeded.",
        |_, x| u64::from(x.store_ok),
    ),
    (
        "shareplane_demand_window_full",
        "gauge",
        "1 once the demand book has a whole window; before, the leader uses the demand of its last durable record.",
        |m, _| m.demand_window_full.get(),
    ),
    (
        "shareplane_demand_gateways",
        "gauge",
        "Gateways whose demand reports are tracked.",
        |m, _| m.gateways.get(),
    ),
];

const BY_LABEL: [ByLabel; 6] = [
    (
        "shareplane_config_reloads_total",
        "result",
        "Configuration reloads (SIGHUP or a changed file): applied, unchanged, refused (the running configuration stayed).",
        |m| &m.config_reloads,
    ),
    (
        "shareplane_record_writes_failed_total",
        "reason",
        "Own record writes that failed; the decision was not committed and nothing was raised.",
        |m| &m.writes_failed,
    ),
    (
        "shareplane_records_rejected_total",
        "cause",
        "Peer records rejected and never adopted.",
        |m| &m.records_rejected,
    ),
    (
        "shareplane_rebalances_skipped_total",
        "reason",
        "Phase ticks at which no rebalance was made.",
        |m| &m.rebalances_skipped,
    ),
    (
        "shareplane_demand_reports_rejected_total",
        "reason",
        "Demand reports refused.",
        |m| &m.demand_rejected,
    ),
    (
        "shareplane_demand_totals_refused_total",
        "reason",
        "Running totals in demand reports refused as implausible and never adopted (went_down, too_fast).",
        |m| &m.demand_totals_refused,
    ),
];

const LIMIT_GAUGES: [LimitGauge; 6] = [
    (
        "shareplane_share_rps",
        "This Region's share (requests/s).",
        |l| l.share,
    ),
    (
        "shareplane_target_rps",
        "This Region's target (requests/s).",
        |l| l.target,
    ),
    (
        "shareplane_demand_rps",
        "This Region's demand, received requests/s over 5 s.",
        |l| l.demand,
    ),
    (
        "shareplane_pool_rps",
        "Room held in the pool (requests/s).",
        |l| l.pool,
    ),
    (
        "shareplane_unmet_rps",
        "Unmet need published (requests/s).",
        |l| l.unmet,
    ),
    (
        "shareplane_seen_sum_of_shares_rps",
        "This Region's share plus the shares it sees of peers not reclaimed (requests/s).",
        |l| l.seen_sum_of_shares,
    ),
];

/// The values of `shareplane_health_verdict`'s `verdict` label, as [`crate::view::health_name`]
/// names them; every Region has a series for each.
const HEALTH_VERDICTS: [&str; 3] = ["healthy", "unhealthy", "unknown"];

/// A gauge per peer: name, help, and the value (none: not known to this replica, no series).
type PeerGauge = (&'static str, &'static str, fn(&PeerJson) -> Option<u32>);

const PEER_GAUGES: [PeerGauge; 4] = [
    (
        "shareplane_peer_unchanged_rebalances",
        "Own rebalances in a row with the peer's record unchanged.",
        |p| p.unchanged,
    ),
    (
        "shareplane_peer_waiting_for_record_rebalances",
        "Own rebalances in a row that could not close the peer's ended epoch for want of its last record (its room is frozen meanwhile).",
        |p| p.waiting_for_record,
    ),
    (
        "shareplane_peer_raise_waiting_rebalances",
        "Own rebalances in a row at which a raise of some limit waited for the peer's record to account with this Region's current epoch (the raise's room is unused meanwhile; alarm raise_waiting:<peer>).",
        |p| p.raise_waiting,
    ),
    (
        "shareplane_peer_limits_mismatch_rebalances",
        "Phase ticks in a row at which the peer's record named other limits than this Region runs (alarm limits_mismatch:<peer> past the rollout window).",
        |p| p.limits_mismatch,
    ),
];

#[derive(Default)]
pub struct Metrics {
    pub rebalances: Counter,
    pub writes: Counter,
    pub writes_failed: Labeled,
    pub reads_failed: Counter,
    pub records_rejected: Labeled,
    pub rebalances_skipped: Labeled,
    pub rules_published: Counter,
    pub rules_deltas: Counter,
    pub rules_version: Counter,
    pub leader: Counter,
    pub lease_taken: Counter,
    pub stepped_down: Counter,
    pub demand_reports: Counter,
    pub demand_rejected: Labeled,
    pub demand_totals_refused: Labeled,
    pub demand_window_full: Counter,
    pub gateways: Counter,
    pub metric_publish_failed: Counter,
    pub stale_rebalances: Counter,
    pub rules_lease_renewals: Counter,
    pub health_reads_timed_out: Counter,
    pub config_reloads: Labeled,
    /// How long each rebalance took as leader, store calls included.
    pub rebalance_duration: Histogram,
    /// How long each store call took (or until it timed out), by operation.
    pub store_call_duration: LabeledHistogram,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// The whole exposition, with per-limit and per-peer gauges from the latest state view.
    /// Per-limit series go out for the first [`PER_LIMIT_SERIES`] limits and for any whose shares
    /// add up above its rate; `shareplane_limits` and `shareplane_limits_above_rate` count all.
    pub fn render(&self, view: &StateView, extra: &Extra) -> String {
        let mut o = String::with_capacity(4096);
        let region = esc(&view.region);
        let limits = view.reported_limits(PER_LIMIT_SERIES);
        self.render_scalars(&mut o, &region, view, extra);
        render_limits_and_peers(&mut o, &region, view, &limits);
        render_health(&mut o, &region, view, extra);
        render_labelled(&mut o, &region, view, &limits);
        self.render_histograms(&mut o, &region);
        o
    }

    /// The replica-wide values and the counters by label.
    fn render_scalars(&self, o: &mut String, region: &str, view: &StateView, extra: &Extra) {
        for (name, help, v) in [
            (
                "shareplane_limits",
                "Limits this Region runs (per-limit series go out for the first 1,000 and those above their rate).",
                view.limits.count(),
            ),
            (
                "shareplane_limits_above_rate",
                "Limits whose shares, as this Region sees them, add up to more than the limit's rate.",
                view.limits_above_rate().len(),
            ),
        ] {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{region=\"{region}\"}} {v}"
            );
        }
        for (name, kind, help, get) in SCALARS {
            let _ = writeln!(
                o,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{region=\"{region}\"}} {}",
                get(self, extra)
            );
        }
        for (name, label, help, get) in BY_LABEL {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
            for (k, v) in get(self).snapshot() {
                let _ = writeln!(o, "{name}{{region=\"{region}\",{label}=\"{k}\"}} {v}");
            }
        }
    }

    /// The duration histograms.
    fn render_histograms(&self, o: &mut String, region: &str) {
        let name = "shareplane_rebalance_duration_seconds";
        let _ = writeln!(o, "# HELP {name} How long each rebalance took as leader, store calls included.\n# TYPE {name} histogram");
        (self.rebalance_duration).render(o, name, &format!("region=\"{region}\""));
        let name = "shareplane_store_call_duration_seconds";
        let _ = writeln!(o, "# HELP {name} How long each store call took (or until it timed out), by operation.\n# TYPE {name} histogram");
        let ops: Vec<(&'static str, std::sync::Arc<Histogram>)> = {
            let m = (self.store_call_duration.0)
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            m.iter().map(|(k, v)| (*k, v.clone())).collect()
        };
        for (op, h) in ops {
            h.render(o, name, &format!("region=\"{region}\",op=\"{op}\""));
        }
    }
}

/// The gauges per limit and per peer.
fn render_limits_and_peers(o: &mut String, region: &str, view: &StateView, limits: &[LimitJson]) {
    for (name, help, get) in LIMIT_GAUGES {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for l in limits {
            let _ = writeln!(
                o,
                "{name}{{region=\"{region}\",limit=\"{}\"}} {}",
                esc(&l.id),
                get(l)
            );
        }
    }
    for (name, help, get) in PEER_GAUGES {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
        for p in &view.peers {
            if let Some(v) = get(p) {
                let _ = writeln!(
                    o,
                    "{name}{{region=\"{region}\",peer=\"{}\"}} {v}",
                    esc(&p.region)
                );
            }
        }
    }
}

/// The rule-set lease and what this replica reads of every Region's health.
fn render_health(o: &mut String, region: &str, view: &StateView, extra: &Extra) {
    let name = "shareplane_rules_lease_remaining_seconds";
    let _ = writeln!(o, "# HELP {name} Seconds gateways may still enforce the published rule set without a renewal (0: they fence).\n# TYPE {name} gauge");
    let secs = extra.rules_lease_remaining_ms as f64 / 1000.0;
    let _ = writeln!(o, "{name}{{region=\"{region}\"}} {secs}");
    let name = "shareplane_health_unknown_seconds";
    let _ = writeln!(o, "# HELP {name} Seconds the health verdict of the Region `of` (this Region's own included) has read unknown, or could not be read, without a break; 0 when it reads known. Past the threshold: alarm health_unknown:<of>.\n# TYPE {name} gauge");
    for (of, secs) in &view.health_unknown_seconds {
        let _ = writeln!(o, "{name}{{region=\"{region}\",of=\"{}\"}} {secs}", esc(of));
    }
    let name = "shareplane_health_verdict";
    let _ = writeln!(o, "# HELP {name} The health verdict this replica last read for the Region `of` (this Region's own included): 1 for the verdict it reads (healthy, unhealthy or unknown), 0 for the other two.\n# TYPE {name} gauge");
    for (of, verdict) in &view.health {
        for v in HEALTH_VERDICTS {
            let on = u8::from(*verdict == v);
            let _ = writeln!(
                o,
                "{name}{{region=\"{region}\",of=\"{}\",verdict=\"{v}\"}} {on}",
                esc(of)
            );
        }
    }
}

/// Shadow refusals, alarms, each limit's why and the build.
fn render_labelled(o: &mut String, region: &str, view: &StateView, limits: &[LimitJson]) {
    let name = "shareplane_limit_shadow_would_refuse_total";
    let _ = writeln!(o, "# HELP {name} Calls a shadow limit would have refused, as this Region's gateways reported them (limits with a count only).\n# TYPE {name} counter");
    for (id, n) in view.would_refuse.iter() {
        let _ = writeln!(o, "{name}{{region=\"{region}\",limit=\"{}\"}} {n}", esc(id));
    }
    let name = "shareplane_alarm";
    let _ = writeln!(o, "# HELP {name} Alarms raised by the last rebalance (1 per active alarm).\n# TYPE {name} gauge");
    for a in &view.alarms {
        let _ = writeln!(o, "{name}{{region=\"{region}\",alarm=\"{}\"}} 1", esc(a));
    }
    let name = "shareplane_limit_why";
    let _ = writeln!(o, "# HELP {name} What holds each limit's share where it is (1 for the current reason: at_target, at_floor, step_cap, waiting_for_grants, fenced, in_debt, above_target, static_split, jump_to_target, not_adopted).\n# TYPE {name} gauge");
    for l in limits {
        let _ = writeln!(
            o,
            "{name}{{region=\"{region}\",limit=\"{}\",why=\"{}\"}} 1",
            esc(&l.id),
            l.why
        );
    }
    let name = "shareplane_build_info";
    let _ = writeln!(
        o,
        "# HELP {name} The running build (always 1).\n# TYPE {name} gauge"
    );
    let _ = writeln!(
        o,
        "{name}{{region=\"{region}\",version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
