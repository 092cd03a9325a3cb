//! `--plot FILE.svg`: three stacked panels over time, written by hand as SVG.
//!
//! 1. the sum of shares against the limit, 2. each Region's share (solid) and target (dashed),
//! 3. total admissions per second against the limit. Events are marked across all panels.

use crate::engine::{EventLog, Row};
use crate::scenario::Scenario;
use std::fmt::Write as _;

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 160.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf",
];

/// Collects what the plot needs while the run goes.
pub struct PlotData {
    from: i64,
    to: i64,
    tick_ms: u64,
    bin_ticks: i64,
    sum: Vec<(i64, f64)>,
    shares: Vec<Vec<(i64, f64)>>,
    targets: Vec<Vec<(i64, f64)>>,
    alive: Vec<Vec<(i64, bool)>>,
    bins: Vec<(i64, u128)>,
}

fn push_change<T: PartialEq + Copy>(v: &mut Vec<(i64, T)>, t: i64, x: T) {
    // `x != x` only for NaN (a gap): keep one gap point, not one per tick.
    #[allow(clippy::eq_op)]
    let same = |y: T| y == x || (y != y && x != x);
    if v.last().is_none_or(|&(_, y)| !same(y)) {
        v.push((t, x));
    }
}

impl PlotData {
    pub fn new(sc: &Scenario) -> PlotData {
        let n = sc.regions.len();
        let span_ticks = (sc.plot_to_tick - sc.plot_from_tick).max(1);
        let tps = sc.ticks_per_second() as i64;
        // One-second bins, or wider ones so that there are at most about 600 of them.
        let bin_ticks = tps * ((span_ticks / tps) / 600 + 1).max(1);
        PlotData {
            from: sc.plot_from_tick,
            to: sc.plot_to_tick,
            tick_ms: sc.tick_ms,
            bin_ticks,
            sum: Vec::new(),
            shares: vec![Vec::new(); n],
            targets: vec![Vec::new(); n],
            alive: vec![Vec::new(); n],
            bins: Vec::new(),
        }
    }

    pub fn row(&mut self, row: &Row<'_>) {
        if row.tick < self.from || row.tick >= self.to {
            return;
        }
        let t = row.tick;
        push_change(&mut self.sum, t, row.sum_shares.as_rps());
        for (i, r) in row.regions.iter().enumerate() {
            push_change(&mut self.shares[i], t, r.share.as_rps());
            push_change(
                &mut self.targets[i],
                t,
                if r.alive { r.target.as_rps() } else { f64::NAN },
            );
            push_change(&mut self.alive[i], t, r.alive);
        }
        let bin = self.from + (t - self.from) / self.bin_ticks * self.bin_ticks;
        match self.bins.last_mut() {
            Some((b, v)) if *b == bin => *v += row.admitted_micro as u128,
            _ => self.bins.push((bin, row.admitted_micro as u128)),
        }
    }

    fn secs(&self, t: i64) -> f64 {
        (t as i128 * self.tick_ms as i128) as f64 / 1000.0
    }

    /// Renders the SVG document: the sum of shares, each Region's share and target, and what was
    /// admitted, one panel under the other, with the events marked across them.
    pub fn svg(&self, sc: &Scenario, events: &[EventLog]) -> String {
        let limit = sc.limit.as_rps();
        let (x0, x1) = (self.secs(self.from), self.secs(self.to));
        let xs = Scale {
            d0: x0,
            d1: x1,
            p0: LEFT,
            p1: WIDTH - RIGHT,
        };
        let labels = self.label_rows(events, &xs);
        let rows = labels.iter().map(|l| l.2).max().map_or(0, |m| m + 1);
        let top = 66.0 + rows as f64 * 16.0;
        let panel_h = [190.0, 230.0, 170.0];
        let gap = 46.0;
        let height = top + panel_h.iter().sum::<f64>() + gap * 3.0 + 20.0;
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" \
             viewBox=\"0 0 {WIDTH} {height:.0}\" font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\" font-size=\"12\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"{LEFT}\" y=\"24\" font-size=\"17\" font-weight=\"bold\">{}</text>\n",
            esc(&sc.name)
        );
        let mut y = top;
        self.sum_panel(&mut s, &xs, (y, panel_h[0]), limit);
        y += panel_h[0] + gap;
        self.shares_panel(&mut s, sc, &xs, (y, panel_h[1]));
        y += panel_h[1] + gap;
        self.admitted_panel(&mut s, &xs, (y, panel_h[2]), limit);
        let bottom = y + panel_h[2];
        x_axis(&mut s, &xs, bottom);
        for (t, text, row) in &labels {
            let x = xs.at(*t);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{bottom:.1}\" stroke=\"#888\" stroke-dasharray=\"2,3\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#333\">{}</text>",
                top - 34.0 - 16.0 * *row as f64,
                x + 3.0,
                top - 26.0 - 16.0 * *row as f64,
                esc(text)
            );
        }
        s.push_str("</svg>\n");
        s
    }

    /// The sum of shares against the limit, in the panel at `(top, height)`.
    fn sum_panel(&self, s: &mut String, xs: &Scale, (y, h): (f64, f64), limit: f64) {
        let x1 = xs.d1;
        let max_sum = self.sum.iter().map(|p| p.1).fold(limit, f64::max);
        let min_sum = self.sum.iter().map(|p| p.1).fold(limit, f64::min);
        let ys = Scale {
            d0: (min_sum - 0.08 * limit).max(0.0),
            d1: max_sum + 0.05 * limit,
            p0: y + h,
            p1: y,
        };
        panel(
            s,
            xs,
            &ys,
            "Sum of shares (Regions not lost) against the limit, per second",
        );
        self.shade(s, xs, &ys, limit, x1);
        hline(
            s,
            xs,
            &ys,
            limit,
            "#000",
            "6,4",
            &format!("limit {}", limit),
        );
        let sum = self.sum_points(&self.sum);
        step_line(s, xs, &ys, &sum, x1, "#111", 2.2, None);
    }

    /// Each Region's share (solid) and target (dashed), its lost spans as bars, and the legend.
    fn shares_panel(&self, s: &mut String, sc: &Scenario, xs: &Scale, (y, h): (f64, f64)) {
        let x1 = xs.d1;
        let max_share = (self.shares.iter().chain(&self.targets))
            .flatten()
            .map(|p| p.1)
            .fold(0.0, f64::max);
        let ys = Scale {
            d0: 0.0,
            d1: max_share * 1.08 + 1.0,
            p0: y + h,
            p1: y,
        };
        panel(
            s,
            xs,
            &ys,
            "Each Region: share (solid) and target (dashed), per second",
        );
        for (i, r) in sc.regions.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let target = self.sum_points(&self.targets[i]);
            step_line(s, xs, &ys, &target, x1, c, 1.3, Some("5,3"));
            let share = self.sum_points(&self.shares[i]);
            step_line(s, xs, &ys, &share, x1, c, 2.2, None);
            for w in self.lost_spans(i) {
                let (a, b) = (xs.at(w.0), xs.at(w.1));
                let _ = writeln!(
                    s,
                    "<rect x=\"{a:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"6\" fill=\"{c}\" opacity=\"0.5\"/>",
                    ys.p0 - 8.0 - 7.0 * i as f64,
                    (b - a).max(1.0)
                );
            }
            let ly = y + 16.0 + 18.0 * i as f64;
            let lx = WIDTH - RIGHT + 14.0;
            let _ = writeln!(
                s,
                "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"2.5\"/>\
                 <text x=\"{}\" y=\"{}\">{}</text>",
                lx + 22.0,
                lx + 28.0,
                ly + 4.0,
                esc(&r.name)
            );
        }
        let ly = y + 16.0 + 18.0 * sc.regions.len() as f64 + 6.0;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{ly}\" font-size=\"10\" fill=\"#555\">bars at bottom: lost</text>",
            WIDTH - RIGHT + 14.0
        );
    }

    /// What all Regions admitted per second (or per bin) against the limit.
    fn admitted_panel(&self, s: &mut String, xs: &Scale, (y, h): (f64, f64), limit: f64) {
        let per_bin = self.bin_ticks as f64 * self.tick_ms as f64 / 1000.0;
        let adm: Vec<(f64, f64)> = self
            .bins
            .iter()
            .map(|&(b, v)| (self.secs(b), v as f64 / 1e6 / per_bin))
            .collect();
        let max_adm = adm.iter().map(|p| p.1).fold(limit, f64::max);
        let ys = Scale {
            d0: 0.0,
            d1: max_adm * 1.1,
            p0: y + h,
            p1: y,
        };
        let title = if per_bin == 1.0 {
            "Admitted in each second (all Regions)".to_string()
        } else {
            format!("Admitted per second, averaged over {per_bin} s (all Regions)")
        };
        panel(s, xs, &ys, &title);
        hline(s, xs, &ys, limit, "#000", "6,4", "L");
        step_line(s, xs, &ys, &adm, xs.d1, "#e07b00", 1.8, None);
    }

    /// Red where the sum of shares is above the limit, blue where it is below; the extremes labelled.
    fn shade(&self, s: &mut String, xs: &Scale, ys: &Scale, limit: f64, x_end: f64) {
        let pts = self.sum_points(&self.sum);
        for (i, &(x, v)) in pts.iter().enumerate() {
            let next = pts.get(i + 1).map_or(x_end, |p| p.0);
            if v == limit {
                continue;
            }
            let color = if v > limit { "#d62728" } else { "#1f77b4" };
            let (a, b) = (xs.at(x), xs.at(next));
            let (y0, y1) = (ys.at(v.max(limit)), ys.at(v.min(limit)));
            let _ = writeln!(
                s,
                "<rect x=\"{a:.1}\" y=\"{y0:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\" opacity=\"0.22\"/>",
                (b - a).max(0.5),
                (y1 - y0).max(0.5)
            );
        }
        let max = pts
            .iter()
            .copied()
            .fold(None, |m: Option<(f64, f64)>, p| match m {
                Some(q) if q.1 >= p.1 => Some(q),
                _ => Some(p),
            });
        let min = pts
            .iter()
            .copied()
            .fold(None, |m: Option<(f64, f64)>, p| match m {
                Some(q) if q.1 <= p.1 => Some(q),
                _ => Some(p),
            });
        if let Some((x, v)) = max.filter(|m| m.1 > limit) {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#b00\" font-weight=\"bold\">max {} at {} s</text>",
                xs.at(x) + 4.0,
                if ys.at(v) - 4.0 < ys.p1 + 16.0 { ys.at(v) + 16.0 } else { ys.at(v) - 4.0 },
                num(v.round()),
                trim(x)
            );
        }
        if let Some((x, v)) = min.filter(|m| m.1 < limit) {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#14a\" font-weight=\"bold\">min {} at {} s</text>",
                xs.at(x) + 4.0,
                ys.at(v) + 14.0,
                num(v.round()),
                trim(x)
            );
        }
    }

    /// Events in the window, merged per instant, each given a text row so labels do not overlap.
    fn label_rows(&self, events: &[EventLog], xs: &Scale) -> Vec<(f64, String, usize)> {
        let mut merged: Vec<(i64, String)> = Vec::new();
        for e in events
            .iter()
            .filter(|e| e.tick >= self.from && e.tick < self.to)
        {
            match merged.last_mut() {
                Some((t, l)) if *t == e.tick => {
                    l.push_str("; ");
                    l.push_str(&e.label);
                }
                _ => merged.push((e.tick, e.label.clone())),
            }
        }
        let mut ends: Vec<f64> = Vec::new();
        let mut out = Vec::new();
        for (t, l) in merged.into_iter().take(40) {
            let secs = self.secs(t);
            let text = format!("{} s: {l}", trim(secs));
            let x = xs.at(secs);
            let w = 6.8 * text.chars().count() as f64 + 10.0;
            let row = ends.iter().position(|&e| e < x).unwrap_or(ends.len());
            if row == ends.len() {
                ends.push(x + w);
            } else {
                ends[row] = x + w;
            }
            out.push((secs, text, row));
        }
        out
    }

    fn sum_points(&self, v: &[(i64, f64)]) -> Vec<(f64, f64)> {
        v.iter().map(|&(t, x)| (self.secs(t), x)).collect()
    }

    fn lost_spans(&self, i: usize) -> Vec<(f64, f64)> {
        let mut out = Vec::new();
        let mut start = None;
        for &(t, alive) in &self.alive[i] {
            match (alive, start) {
                (false, None) => start = Some(self.secs(t)),
                (true, Some(s)) => {
                    out.push((s, self.secs(t)));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            out.push((s, self.secs(self.to)));
        }
        out
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A linear map from data to pixels.
struct Scale {
    d0: f64,
    d1: f64,
    p0: f64,
    p1: f64,
}

impl Scale {
    fn at(&self, d: f64) -> f64 {
        let span = if self.d1 == self.d0 {
            1.0
        } else {
            self.d1 - self.d0
        };
        self.p0 + (d - self.d0) / span * (self.p1 - self.p0)
    }
}

/// Round tick positions: 1, 2 or 5 times a power of ten, about `want` of them.
fn nice_ticks(lo: f64, hi: f64, want: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / want;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= want)
        .unwrap_or(10.0 * mag);
    let mut out = Vec::new();
    let mut k = (lo / step).ceil();
    while k * step <= hi + 1e-9 && out.len() < 100 {
        out.push(k * step);
        k += 1.0;
    }
    out
}

fn num(v: f64) -> String {
    if v.abs() >= 1000.0 && v.fract() == 0.0 {
        let s = format!("{}", v.abs() as u64);
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        if v < 0.0 {
            format!("-{out}")
        } else {
            out
        }
    } else {
        trim(v)
    }
}

fn panel(s: &mut String, xs: &Scale, ys: &Scale, title: &str) {
    let _ = writeln!(
        s,
        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#fafafa\" stroke=\"#bbb\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
        xs.p0,
        ys.p1,
        xs.p1 - xs.p0,
        ys.p0 - ys.p1,
        xs.p0,
        ys.p1 - 7.0,
        esc(title)
    );
    for v in nice_ticks(ys.d0, ys.d1, 5.0) {
        let y = ys.at(v);
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#333\">{}</text>",
            xs.p0,
            xs.p1,
            xs.p0 - 6.0,
            y + 4.0,
            num(v)
        );
    }
    for v in nice_ticks(xs.d0, xs.d1, 12.0) {
        let x = xs.at(v);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/>",
            ys.p1, ys.p0
        );
    }
}

fn x_axis(s: &mut String, xs: &Scale, y: f64) {
    for v in nice_ticks(xs.d0, xs.d1, 12.0) {
        let x = xs.at(v);
        let _ = writeln!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#333\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y + 5.0,
            y + 18.0,
            num(v)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#333\">time (s)</text>",
        (xs.p0 + xs.p1) / 2.0,
        y + 34.0
    );
}

fn hline(s: &mut String, xs: &Scale, ys: &Scale, v: f64, color: &str, dash: &str, label: &str) {
    let y = ys.at(v);
    let _ = writeln!(
        s,
        "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-width=\"1.2\" stroke-dasharray=\"{dash}\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{}</text>",
        xs.p0,
        xs.p1,
        xs.p1 + 6.0,
        y + 4.0,
        esc(label)
    );
}

/// A step function through `(x, y)` change points, held until `x_end`.
#[allow(clippy::too_many_arguments)]
fn step_line(
    s: &mut String,
    xs: &Scale,
    ys: &Scale,
    pts: &[(f64, f64)],
    x_end: f64,
    color: &str,
    width: f64,
    dash: Option<&str>,
) {
    if pts.is_empty() {
        return;
    }
    // NaN values are gaps (a lost Region has no target).
    let mut d = String::new();
    let mut pen_down = false;
    for &(x, y) in pts {
        let (px, py) = (xs.at(x), ys.at(y));
        if y.is_nan() {
            if pen_down {
                let _ = write!(d, "H{px:.1}");
            }
            pen_down = false;
        } else if pen_down {
            let _ = write!(d, "H{px:.1}V{py:.1}");
        } else {
            let _ = write!(d, "M{px:.1},{py:.1}");
            pen_down = true;
        }
    }
    if pen_down {
        let _ = write!(d, "H{:.1}", xs.at(x_end));
    }
    let dash = dash.map_or(String::new(), |d| format!(" stroke-dasharray=\"{d}\""));
    let _ = writeln!(
        s,
        "<path d=\"{d}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"{width}\"{dash} stroke-linejoin=\"round\"/>"
    );
}
