//! What a gateway embeds to enforce its Region's shares (SPEC.md §7).
//!
//! - [`store`]: the token-bucket script for Redis/Valkey (`bucket.lua`) and [`RedisBuckets`], which
//!   loads it once, calls it by hash and loads it again on `NOSCRIPT`, within a time bound;
//!   [`store::batch`]: the checks that arrive while a call is in flight go together in the next.
//! - [`keys`]: each limit's bucket key and hash tag (its key group), so that one check is one
//!   call on a cluster-mode Redis/Valkey too.
//! - [`rules`]: rule sets as the daemon publishes them, validated when loaded; [`limit`]: one
//!   limit of them (its wire form, its kind, its checks), shared with [`templates`]; [`slots`]:
//!   a template's coordination slots (their limit ids and the value-to-slot mapping).
//! - [`Limiter`]: runs the newest rule set, answers [`Limiter::check`] (several limits, all or
//!   nothing; shadow limits evaluated but never refusing), counts demand, and falls back to the
//!   local policy of [`fallback`] when Redis does not answer.
//! - [`RuleWatcher`]: long-polls `GET /v1/rules`, installs only newer versions and renews their
//!   lease on every answer.
//! - [`lease`]: the rule-set lease; when it runs out the limiter **fences**: capacity limits refuse
//!   every request with a Retry-After, security limits keep their static split.
//! - [`DemandReporter`]: posts running demand totals to `POST /v1/demand`.
//! - [`loadgen`]: drives a limiter with a demand pattern (the `shareplane-loadgen` binary).
//! - [`clock`]: every clock the limiter, the gateway and the load generator read.
//! - [`logging`]: `--log-format text|json` and the log set-up of every long-running binary
//!   (`shareplane`'s subcommands and `shareplane-loadgen`).
//!
//! Typical wiring in a gateway:
//!
//! ```no_run
//! # async fn wire() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use shareplane_limiter::{http, DemandReporter, Limiter, LimiterConfig, RuleWatcher};
//! let limiter = Arc::new(Limiter::new(LimiterConfig::new("redis://127.0.0.1:6379/"))?);
//! let client = http::client()?;
//! let watcher = RuleWatcher::new(client.clone(), "http://127.0.0.1:8080", 25_000);
//! tokio::spawn(watcher.run(limiter.clone(), std::future::pending()));
//! let incarnation = shareplane_limiter::demand::Incarnation::now();
//! let reporter = DemandReporter::new(client, "http://127.0.0.1:8080", "token", "gw-1", incarnation)?;
//! let every = std::time::Duration::from_secs(1);
//! tokio::spawn(reporter.run(limiter.clone(), every, std::future::pending()));
//! let decision = limiter.check(&["k-big"], 1).await?;
//! # let _ = decision; Ok(()) }
//! ```

pub mod clock;
pub mod demand;
pub mod fallback;
pub mod http;
pub mod keys;
pub mod lease;
pub mod limit;
pub mod limiter;
pub mod loadgen;
pub mod logging;
pub mod rules;
pub mod slots;
pub mod store;
pub mod templates;
pub mod watcher;

pub use demand::{DemandReport, DemandReporter};
pub use fallback::FailurePolicy;
pub use keys::KeyPlan;
pub use lease::{Lease, LeaseTerms};
pub use limiter::{
    CheckError, Decision, DecisionPath, Install, LimitDecision, Limiter, LimiterConfig,
    LimiterStats, Verdict,
};
pub use rules::{
    digest_hex, limits_digest, set_digest, wire_digest, LimitKind, LimitWire, RuleSet, RulesWire,
};
pub use store::{KeyScheme, RedisBuckets, RedisMode};
pub use templates::{OverrideWire, TemplateWire};
pub use watcher::RuleWatcher;
