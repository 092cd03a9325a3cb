//! How a gateway's limiter is set up: [`LimiterConfig`] and its validation.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fallback::FailurePolicy;
use crate::keys::KeyPlan;
use crate::rules::{valid_limit_id, LimitKind};
use crate::store::{KeyScheme, RedisMode, StoreError};

/// The longest Redis bound accepted.
pub const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(10);

/// How a gateway's limiter is set up.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// `redis://host:port/` of the Region's Redis/Valkey (on a cluster: one seed node).
    pub redis_url: String,
    /// Standalone (default) or a cluster-mode-enabled cluster.
    pub redis_mode: RedisMode,
    /// The Region this gateway runs in; rule sets for another Region are refused. `None` accepts any.
    pub region: Option<String>,
    /// How many gateways share the Region's share when Redis is away (see [`crate::fallback`]).
    pub gateways_per_region: u32,
    /// The largest cost one call may charge; rules whose burst is below it are held closed.
    pub max_cost: u32,
    /// The bound on one Redis call, connection set-up included.
    pub redis_timeout: Duration,
    /// After Redis fails, calls go straight to the fallback for this long before Redis is tried again.
    pub probe_after: Duration,
    pub key_scheme: KeyScheme,
    /// Per limit id: its key group (hash tag), overriding `key_scheme` (see [`crate::keys`]).
    pub key_groups: BTreeMap<String, String>,
    /// The Retry-After given while fenced (the lease ran out); whole seconds, at least 1.
    pub fence_retry_after: Duration,
    /// What a limit does while Redis does not answer, by limit id; a limit not named here gets
    /// [`FailurePolicy::default_for`] its kind (local share for capacity, closed for security).
    pub failure: BTreeMap<String, FailurePolicy>,
    /// PEM certificates of the CAs that sign a `rediss://` server's certificate (`None`: the
    /// system's roots).
    pub redis_ca_pem: Option<Vec<u8>>,
}

impl LimiterConfig {
    /// Defaults: any Region, one gateway, cost 1, a 50 ms bound, a probe every second, per-limit keys,
    /// a Retry-After of 1 s while fenced.
    pub fn new(redis_url: impl Into<String>) -> Self {
        Self {
            redis_url: redis_url.into(),
            redis_mode: RedisMode::Standalone,
            region: None,
            gateways_per_region: 1,
            max_cost: 1,
            redis_timeout: Duration::from_millis(50),
            probe_after: Duration::from_secs(1),
            key_scheme: KeyScheme::PerLimit,
            key_groups: BTreeMap::new(),
            fence_retry_after: Duration::from_secs(1),
            failure: BTreeMap::new(),
            redis_ca_pem: None,
        }
    }

    /// The failure policy of limit `id` of kind `kind`.
    pub fn failure_policy(&self, id: &str, kind: LimitKind) -> FailurePolicy {
        self.failure
            .get(id)
            .copied()
            .unwrap_or(FailurePolicy::default_for(kind))
    }

    /// Every problem with the configuration, with its field.
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.gateways_per_region == 0 {
            errors.push("gateways_per_region: must be at least 1".to_owned());
        }
        if self.max_cost == 0 {
            errors.push("max_cost: must be at least 1".to_owned());
        }
        if self.redis_timeout.is_zero() || self.redis_timeout > MAX_REDIS_TIMEOUT {
            errors.push(format!(
                "redis_timeout: must be in (0, {MAX_REDIS_TIMEOUT:?}]"
            ));
        }
        if self.probe_after > Duration::from_secs(60) {
            errors.push("probe_after: at most 60 s".to_owned());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3_600)).contains(&self.fence_retry_after)
        {
            errors.push("fence_retry_after: 1 s to 1 h".to_owned());
        }
        if let KeyScheme::SharedTag(tag) = &self.key_scheme {
            if !valid_limit_id(tag) {
                errors.push(
                    "key_scheme: the shared tag must be printable ASCII without braces".into(),
                );
            }
        }
        errors.extend(self.key_plan().problems());
        errors
    }

    /// Where each limit's bucket lives (see [`crate::keys`]).
    pub fn key_plan(&self) -> KeyPlan {
        KeyPlan {
            scheme: self.key_scheme.clone(),
            groups: self.key_groups.clone(),
            mode: self.redis_mode,
        }
    }
}

/// The configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid limiter configuration: {}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error("invalid Redis URL: {0}")]
    Redis(#[from] StoreError),
}
