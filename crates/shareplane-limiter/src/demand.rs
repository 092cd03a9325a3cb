//! The demand reporter: sends the running totals of received cost per limit to the daemon's
//! `POST /v1/demand`, with a bearer token.
//!
//! Totals are cumulative since the gateway's start (its `incarnation`), so a report that is lost,
//! duplicated or reordered changes nothing: the daemon keeps the largest total per (gateway,
//! incarnation) and derives the rate from successive totals. A restarted gateway has a new, greater
//! incarnation and starts again from zero. Incarnations are UUIDs of version 7 ([`Incarnation`]):
//! ordered by their start time, and random below the millisecond, so two gateways that start at
//! once never share one.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::http::{read_capped, HttpError, MAX_ANSWER_BODY};
use crate::limiter::Limiter;
use crate::rules::MAX_ID_LEN;

/// The body of `POST /v1/demand`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DemandReport {
    pub gateway: String,
    pub incarnation: Incarnation,
    pub totals: BTreeMap<String, u64>,
    /// Calls each shadow limit would have refused, running since the gateway's start (absent:
    /// none; daemons before this field refuse it, see [`DemandReporter`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub would_refuse: BTreeMap<String, u64>,
}

/// A gateway's start, as its demand reports name it: a UUID of version 7 (its first 48 bits are
/// the start's Unix time in milliseconds, the rest is random), ordered as the 128-bit number it
/// is, so a gateway restarted on a sane clock has a greater one. On the wire, the UUID's
/// hyphenated text; a JSON number (0 to 2^64 − 1, what gateways sent before, and what a gateway
/// without a UUID library may send: microseconds since the Unix epoch) is accepted too, and is
/// older than every UUID. A UUID of another version is refused: it would not be ordered by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Incarnation(u128);

impl Incarnation {
    /// The incarnation of a gateway starting now.
    pub fn now() -> Incarnation {
        Incarnation(crate::clock::time_ordered_id())
    }

    /// Parses the wire's text form: a UUID of version 7.
    pub fn parse(text: &str) -> Result<Incarnation, String> {
        let u = uuid::Uuid::try_parse(text)
            .map_err(|e| format!("incarnation {text:?} is not a UUID: {e}"))?;
        match u.get_version_num() {
            7 => Ok(Incarnation(u.as_u128())),
            v => Err(format!(
                "incarnation {text:?} is a UUID of version {v}; it must be version 7 (ordered by time)"
            )),
        }
    }
}

impl From<u64> for Incarnation {
    fn from(n: u64) -> Incarnation {
        Incarnation(u128::from(n))
    }
}

impl std::fmt::Display for Incarnation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match u64::try_from(self.0) {
            Ok(n) => n.fmt(f),
            Err(_) => uuid::Uuid::from_u128(self.0).hyphenated().fmt(f),
        }
    }
}

impl Serialize for Incarnation {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match u64::try_from(self.0) {
            Ok(n) => s.serialize_u64(n),
            Err(_) => s.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Incarnation {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Incarnation, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Number(u64),
            Text(String),
        }
        match Wire::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "incarnation: expected a UUID of version 7 or a number from 0 to 2^64 - 1",
            )
        })? {
            Wire::Number(n) => Ok(Incarnation::from(n)),
            Wire::Text(t) => Incarnation::parse(&t).map_err(serde::de::Error::custom),
        }
    }
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

/// Splits a report into posts within [`MAX_TOTALS_PER_POST`] and [`MAX_ID_BYTES_PER_POST`]
/// (totals and would-refuse counts together). An empty report stays one (empty) post.
pub fn split(report: DemandReport) -> Vec<DemandReport> {
    let DemandReport {
        gateway,
        incarnation,
        totals,
        would_refuse,
    } = report;
    let empty = || DemandReport {
        gateway: gateway.clone(),
        incarnation,
        totals: BTreeMap::new(),
        would_refuse: BTreeMap::new(),
    };
    let mut parts = vec![empty()];
    let mut bytes = 0;
    let entries = (totals.into_iter().map(|(id, n)| (false, id, n)))
        .chain(would_refuse.into_iter().map(|(id, n)| (true, id, n)));
    for (refusals, id, n) in entries {
        let full = parts.last().is_some_and(|p| {
            p.totals.len() + p.would_refuse.len() >= MAX_TOTALS_PER_POST
                || bytes + id.len() > MAX_ID_BYTES_PER_POST
        });
        if full {
            parts.push(empty());
            bytes = 0;
        }
        bytes += id.len();
        if let Some(p) = parts.last_mut() {
            if refusals {
                p.would_refuse.insert(id, n);
            } else {
                p.totals.insert(id, n);
            }
        }
    }
    parts
}

/// Reports one limiter's demand to one daemon.
#[derive(Debug, Clone)]
pub struct DemandReporter {
    http: reqwest::Client,
    url: String,
    token: String,
    gateway: String,
    incarnation: Incarnation,
    /// The daemon refused a report's `would_refuse` field (a daemon that predates it): the
    /// counts are no longer sent to it, the totals still are.
    no_would_refuse: Arc<std::sync::atomic::AtomicBool>,
}

impl DemandReporter {
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        token: &str,
        gateway: &str,
        incarnation: impl Into<Incarnation>,
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
            url: format!("{}/v1/demand", crate::http::lenient_base_url(base_url)),
            token: token.to_owned(),
            gateway: gateway.to_owned(),
            incarnation: incarnation.into(),
            no_would_refuse: Arc::default(),
        })
    }

    /// The report that would be sent now.
    pub fn report(&self, limiter: &Limiter) -> DemandReport {
        DemandReport {
            gateway: self.gateway.clone(),
            incarnation: self.incarnation,
            totals: limiter.demand_totals(),
            would_refuse: if self
                .no_would_refuse
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                BTreeMap::new()
            } else {
                limiter.would_refuse_totals()
            },
        }
    }

    /// Sends the current totals once, split into several posts when they would not fit one body
    /// (running totals per limit are independent, so a split report means the same). Stops at the
    /// first refusal.
    pub async fn report_once(&self, limiter: &Limiter) -> Result<(), ReportError> {
        for mut part in split(self.report(limiter)) {
            match self.send(&part).await {
                Err(ReportError::Refused { status: 400, body })
                    if !part.would_refuse.is_empty() && body.contains("would_refuse") =>
                {
                    tracing::warn!("the daemon does not take would-refuse counts (an older version): sending demand only");
                    self.no_would_refuse
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    part.would_refuse.clear();
                    self.send(&part).await?;
                }
                r => r?,
            }
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
        let refusals: BTreeMap<String, u64> = (0..700).map(|i| (id(i), 1)).collect();
        let report = DemandReport {
            gateway: "g".into(),
            incarnation: Incarnation::now(),
            totals: totals.clone(),
            would_refuse: refusals.clone(),
        };
        let (report_gateway, incarnation) = (report.gateway.clone(), report.incarnation);
        let parts = split(report);
        assert!(parts.len() > 1);
        let (mut merged, mut merged_refusals) = (BTreeMap::new(), BTreeMap::new());
        for p in &parts {
            let ids = p.totals.keys().chain(p.would_refuse.keys());
            assert!(p.totals.len() + p.would_refuse.len() <= MAX_TOTALS_PER_POST);
            assert!(ids.map(String::len).sum::<usize>() <= MAX_ID_BYTES_PER_POST);
            merged_refusals.extend(p.would_refuse.clone());
            assert!(serde_json::to_vec(p).map_or(0, |b| b.len()) < 64 << 10);
            assert_eq!((&p.gateway, p.incarnation), (&report_gateway, incarnation));
            merged.extend(p.totals.clone());
        }
        assert_eq!(merged, totals);
        assert_eq!(merged_refusals, refusals);
        let empty = DemandReport {
            gateway: "g".into(),
            incarnation: Incarnation::from(3),
            totals: BTreeMap::new(),
            would_refuse: BTreeMap::new(),
        };
        assert_eq!(split(empty).len(), 1);
    }

    #[test]
    fn incarnations_are_uuids_of_version_7_ordered_by_time_and_numbers_are_older() {
        let now = Incarnation::now();
        let text = serde_json::to_string(&now).unwrap_or_default();
        let u = uuid::Uuid::try_parse(text.trim_matches('"'));
        assert_eq!(u.map(|u| u.get_version_num()).ok(), Some(7), "{text}");
        let back: Incarnation = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back, now);
        // Two starts a millisecond apart, whatever their random bits.
        let at = |ms: u64, rand: u128| {
            let ts = uuid::Timestamp::from_unix(
                uuid::NoContext,
                ms / 1_000,
                (ms % 1_000) as u32 * 1_000_000,
            );
            let u = uuid::Uuid::new_v7(ts).as_u128() & !((1u128 << 62) - 1) | rand;
            Incarnation::parse(&uuid::Uuid::from_u128(u).to_string()).unwrap_or_default()
        };
        assert!(at(1_700_000_000_001, 0) > at(1_700_000_000_000, (1 << 62) - 1));
        // A number (an older gateway's microseconds) stays a number and is older than any UUID.
        let n: Incarnation = serde_json::from_str("1700000000000000").unwrap_or_default();
        assert_eq!(
            serde_json::to_string(&n).ok().as_deref(),
            Some("1700000000000000")
        );
        assert!(n < at(0, 0));
        for bad in [
            "\"6f1c2a4e-8b7d-4c1e-9f00-0a1b2c3d4e5f\"",
            "\"not a uuid\"",
            "-1",
            "1.5",
            "null",
        ] {
            let e = serde_json::from_str::<Incarnation>(bad)
                .map(|_| ())
                .map_err(|e| e.to_string());
            assert!(
                e.as_ref().is_err_and(|e| e.contains("incarnation")),
                "{bad}: {e:?}"
            );
        }
        let v4 = serde_json::from_str::<Incarnation>("\"6f1c2a4e-8b7d-4c1e-9f00-0a1b2c3d4e5f\"");
        assert!(v4.is_err_and(|e| e.to_string().contains("version 4")));
    }
}
