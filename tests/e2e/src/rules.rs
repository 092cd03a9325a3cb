//! Reading the rule sets the daemons publish (`GET /v1/rules`), to see their shares.

use crate::figures::ShareSample;
use shareplane_limiter::loadgen::unix_ms_now;
use std::time::Duration;

/// The parts of a published rule set this harness reads.
#[derive(Debug, serde::Deserialize)]
pub struct RuleSetWire {
    pub version: u64,
    pub region: String,
    pub limits: Vec<RuleWire>,
}

#[derive(Debug, serde::Deserialize)]
pub struct RuleWire {
    pub id: String,
    pub rate: f64,
}

/// Bound on one read.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// An HTTP client for the daemons on 127.0.0.1.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .timeout(READ_TIMEOUT)
        .no_proxy()
        .build()
}

/// The rule set `base` publishes now, or `None` before its first one or on any failure.
pub async fn read(client: &reqwest::Client, base: &str) -> Option<RuleSetWire> {
    let resp = client.get(format!("{base}/v1/rules")).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}

/// The `lease_ms` `base` serves with its rule set now, or `None` on any failure.
pub async fn lease_ms(client: &reqwest::Client, base: &str) -> Option<u64> {
    let resp = client.get(format!("{base}/v1/rules")).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let v: serde_json::Value = resp.json().await.ok()?;
    v["lease_ms"].as_u64()
}

/// The rate of `limit` in every daemon's rule set, read concurrently.
pub async fn sample(client: &reqwest::Client, bases: &[String], limit: &str) -> ShareSample {
    let unix_ms = unix_ms_now();
    let tasks: Vec<_> = bases
        .iter()
        .map(|b| {
            let (client, base, limit) = (client.clone(), b.clone(), limit.to_string());
            tokio::spawn(async move {
                let set = read(&client, &base).await?;
                set.limits
                    .into_iter()
                    .find(|l| l.id == limit)
                    .map(|l| l.rate)
            })
        })
        .collect();
    let mut rates_rps = Vec::with_capacity(tasks.len());
    for t in tasks {
        rates_rps.push(t.await.ok().flatten());
    }
    ShareSample { unix_ms, rates_rps }
}

/// Samples every `every` until `until` (Unix ms).
pub async fn poll(
    client: &reqwest::Client,
    bases: &[String],
    limit: &str,
    every: Duration,
    until_unix_ms: u64,
) -> Vec<ShareSample> {
    let mut out = Vec::new();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while unix_ms_now() < until_unix_ms {
        tick.tick().await;
        out.push(sample(client, bases, limit).await);
    }
    out
}

/// Waits until every daemon publishes a rule set; returns how many still had none at the end.
pub async fn wait_published(client: &reqwest::Client, bases: &[String], limit: Duration) -> usize {
    let end = tokio::time::Instant::now() + limit;
    loop {
        let mut missing = 0;
        for b in bases {
            if read(client, b).await.is_none() {
                missing += 1;
            }
        }
        if missing == 0 || tokio::time::Instant::now() >= end {
            return missing;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The parts of `GET /v1/state` this harness reads.
#[derive(Debug, serde::Deserialize)]
pub struct StateWire {
    pub region: String,
    pub role: String,
    pub epoch: u64,
    pub store_ok: bool,
    pub health: std::collections::BTreeMap<String, String>,
    pub limits: Vec<LimitStateWire>,
    pub alarms: Vec<String>,
    #[serde(default)]
    pub peers: Vec<PeerStateWire>,
}

/// A daemon's view of one peer.
#[derive(Debug, serde::Deserialize)]
pub struct PeerStateWire {
    pub region: String,
    pub epoch: u64,
    /// `live`, `silent` or `reclaimed` (leader only).
    pub state: String,
}

#[derive(Debug, serde::Deserialize)]
pub struct LimitStateWire {
    pub id: String,
    pub demand: f64,
    pub target: f64,
    pub share: f64,
    pub pool: f64,
}

/// What `base` says about itself now, or `None` on any failure.
pub async fn state(client: &reqwest::Client, base: &str) -> Option<StateWire> {
    let resp = client.get(format!("{base}/v1/state")).send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}
