//! The demand reporter: sends the running totals of received cost per limit to the daemon's
//! `POST /v1/demand`, with a bearer token.
//!
//! Totals are cumulative since the gateway's start (its `incarnation`), so a report that is lost,
//! duplicated or reordered changes nothing: the daemon keeps the largest total per (gateway,
//! incarnation) and derives the rate from successive totals. A restarted gateway has a new, greater
//! incarnation and starts again from zero.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::http::{read_capped, HttpError, MAX_ANSWER_BODY};
use crate::limiter::Limiter;
use crate::rules::MAX_ID_LEN;

/// The body of `POST /v1/demand`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandReport {
    pub gateway: String,
    pub incarnation: u64,
    pub totals: BTreeMap<String, u64>,
}

/// Why a report was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("daemon refused the report: status {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("invalid reporter setting: {0}")]
    Setting(&'static str),
}

/// The most totals in one post (the daemon accepts 1,024).
pub const MAX_TOTALS_PER_POST: usize = 1_000;
/// The most bytes of limit ids in one post (the daemon accepts bodies up to 64 KiB).
pub const MAX_ID_BYTES_PER_POST: usize = 32 << 10;

/// Splits a report into posts within [`MAX_TOTALS_PER_POST`] and [`MAX_ID_BYTES_PER_POST`]. An
/// empty report stays one (empty) post.
pub fn split(report: DemandReport) -> Vec<DemandReport> {
    let DemandReport {
        gateway,
        incarnation,
        totals,
    } = report;
    let mut parts = vec![BTreeMap::new()];
    let mut bytes = 0;
    for (id, total) in totals {
        let full = parts.last().is_some_and(|p: &BTreeMap<String, u64>| {
            p.len() >= MAX_TOTALS_PER_POST || bytes + id.len() > MAX_ID_BYTES_PER_POST
        });
        if full {
            parts.push(BTreeMap::new());
            bytes = 0;
        }
        bytes += id.len();
        if let Some(p) = parts.last_mut() {
            p.insert(id, total);
        }
    }
    parts
        .into_iter()
        .map(|totals| DemandReport {
            gateway: gateway.clone(),
            incarnation,
            totals,
        })
        .collect()
}

/// An incarnation for a gateway starting now: microseconds since the Unix epoch, so a restart on a
/// sane clock gets a greater one.
pub fn incarnation_from_clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64)
}

/// Reports one limiter's demand to one daemon.
#[derive(Debug, Clone)]
pub struct DemandReporter {
    http: reqwest::Client,
    url: String,
    token: String,
    gateway: String,
    incarnation: u64,
}

impl DemandReporter {
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        token: &str,
        gateway: &str,
        incarnation: u64,
    ) -> Result<Self, ReportError> {
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ReportError::Setting(
                "the token must be non-empty printable ASCII",
            ));
        }
        if gateway.is_empty() || gateway.len() > MAX_ID_LEN {
            return Err(ReportError::Setting(
                "the gateway id must be 1 to 128 bytes",
            ));
        }
        Ok(Self {
            http,
            url: format!("{}/v1/demand", base_url.trim_end_matches('/')),
            token: token.to_owned(),
            gateway: gateway.to_owned(),
            incarnation,
        })
    }

    /// The report that would be sent now.
    pub fn report(&self, limiter: &Limiter) -> DemandReport {
        DemandReport {
            gateway: self.gateway.clone(),
            incarnation: self.incarnation,
            totals: limiter.demand_totals(),
        }
    }

    /// Sends the current totals once, split into several posts when they would not fit one body
    /// (running totals per limit are independent, so a split report means the same). Stops at the
    /// first refusal.
    pub async fn report_once(&self, limiter: &Limiter) -> Result<(), ReportError> {
        for part in split(self.report(limiter)) {
            self.send(&part).await?;
        }
        Ok(())
    }

    /// Sends `report` as is (tests use it to send duplicates).
    pub async fn send(&self, report: &DemandReport) -> Result<(), ReportError> {
        let resp = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(5))
            .json(report)
            .send()
            .await
            .map_err(HttpError::from)?;
        let status = resp.status().as_u16();
        let body = read_capped(resp, MAX_ANSWER_BODY).await?;
        if status == 200 {
            return Ok(());
        }
        let body = String::from_utf8_lossy(&body).chars().take(512).collect();
        Err(ReportError::Refused { status, body })
    }

    /// Reports every `interval` until `shutdown` completes, then once more (bounded by the request
    /// timeout) so the last totals are not lost.
    pub async fn run(
        self,
        limiter: Arc<Limiter>,
        interval: Duration,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.report_once(&limiter).await {
                tracing::warn!(error = %e, "demand report failed; the next one carries the totals");
            }
        }
        if let Err(e) = self.report_once(&limiter).await {
            tracing::warn!(error = %e, "last demand report failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_reports_split_into_posts_that_fit_and_keep_every_total() {
        let id = |i: usize| format!("{i:0>128}");
        let totals: BTreeMap<String, u64> = (0..2_500).map(|i| (id(i), i as u64)).collect();
        let report = DemandReport {
            gateway: "g".into(),
            incarnation: 3,
            totals: totals.clone(),
        };
        let parts = split(report);
        assert!(parts.len() > 1);
        let mut merged = BTreeMap::new();
        for p in &parts {
            assert!(p.totals.len() <= MAX_TOTALS_PER_POST);
            assert!(p.totals.keys().map(String::len).sum::<usize>() <= MAX_ID_BYTES_PER_POST);
            assert!(serde_json::to_vec(p).map_or(0, |b| b.len()) < 64 << 10);
            assert_eq!((p.gateway.as_str(), p.incarnation), ("g", 3));
            merged.extend(p.totals.clone());
        }
        assert_eq!(merged, totals);
        let empty = DemandReport {
            gateway: "g".into(),
            incarnation: 3,
            totals: BTreeMap::new(),
        };
        assert_eq!(split(empty).len(), 1);
    }
}
