//! The per-tick CSV trace (SIMULATOR.md, "Trace").

use crate::engine::Row;
use crate::scenario::Scenario;
use std::io::{self, Write};

/// `value / 10^digits` written exactly, without trailing zeros.
pub fn fixed(value: u128, digits: u32) -> String {
    let scale = 10u128.pow(digits);
    let whole = value / scale;
    let frac = value % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let f = format!("{frac:0width$}", width = digits as usize);
    format!("{whole}.{}", f.trim_end_matches('0'))
}

pub struct TraceWriter<W: Write> {
    out: W,
    tick_ms: u64,
    per_second: u128,
    error: Option<io::Error>,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(mut out: W, sc: &Scenario) -> io::Result<TraceWriter<W>> {
        let mut header = String::from("t_s,sum_shares,admitted_total");
        for r in &sc.regions {
            let n = &r.name;
            header.push_str(&format!(
                ",{n}_share,{n}_pool,{n}_target,{n}_demand,{n}_admitted,{n}_tokens,{n}_alive"
            ));
        }
        writeln!(out, "{header}")?;
        Ok(TraceWriter {
            out,
            tick_ms: sc.tick_ms,
            per_second: 1000 / sc.tick_ms as u128,
            error: None,
        })
    }

    /// Writes one row; the first error is kept and reported by [`TraceWriter::finish`].
    pub fn row(&mut self, row: &Row<'_>) {
        if self.error.is_some() {
            return;
        }
        let t_ms = row.tick as i128 * self.tick_ms as i128;
        let sign = if t_ms < 0 { "-" } else { "" };
        let mut line = format!(
            "{sign}{},{},{}",
            fixed(t_ms.unsigned_abs(), 3),
            fixed(row.sum_shares.milli() as u128, 3),
            fixed(row.admitted_micro as u128 * self.per_second, 6)
        );
        for r in row.regions {
            line.push_str(&format!(
                ",{},{},{},{},{},{},{}",
                fixed(r.share.milli() as u128, 3),
                fixed(r.pool.milli() as u128, 3),
                fixed(r.target.milli() as u128, 3),
                fixed(r.received.milli() as u128, 3),
                fixed(r.admitted_micro as u128 * self.per_second, 6),
                fixed(r.tokens_micro as u128, 6),
                u8::from(r.alive)
            ));
        }
        if let Err(e) = writeln!(self.out, "{line}") {
            self.error = Some(e);
        }
    }

    pub fn finish(mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }
}
