//! The gateway's settings: command-line flags over an optional TOML file, validated at once with
//! every problem reported with its field.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shareplane_limiter::rules::valid_limit_id;
use shareplane_limiter::{FailurePolicy, KeyScheme, LimiterConfig, RedisMode};

use crate::mapping::{DescriptorMapping, UnmappedPolicy, ValuePolicy};

/// The most descriptor mappings a configuration may hold.
pub const MAX_MAPPINGS: usize = 10_000;

/// `shareplane gateway`'s flags; each overrides the same setting of `--config`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Flags {
    /// A TOML file with more settings (see docs/gateways.md); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The daemon's Region API base, e.g. http://127.0.0.1:8080 for `shareplane run`, or
    /// http://127.0.0.1:8080/regions/A for one Region of the demo; its rules endpoint
    /// (…/v1/rules, the infra's published rulesUrl) is taken as that base. Any other endpoint
    /// (…/v1/demand, …/healthz) is refused at start-up.
    #[arg(long)]
    pub rules: Option<String>,
    /// The Region's Redis/Valkey: redis://host:port/ or rediss://host:port/ (TLS).
    #[arg(long)]
    pub redis: Option<String>,
    /// PEM file of the CA that signs the rediss:// server's certificate (default: system roots).
    #[arg(long)]
    pub redis_ca: Option<PathBuf>,
    /// `cluster` for a cluster-mode-enabled Redis/Valkey (ElastiCache Serverless); --redis then
    /// names one seed node. Default: standalone.
    #[arg(long, value_enum)]
    pub redis_mode: Option<RedisMode>,
    /// Envoy's rate limit service (gRPC), e.g. 127.0.0.1:8081.
    #[arg(long)]
    pub grpc_listen: Option<SocketAddr>,
    /// The HTTP check (NGINX auth_request, Traefik ForwardAuth), /metrics, /healthz and /readyz.
    #[arg(long)]
    pub http_listen: Option<SocketAddr>,
    /// The bearer token of the daemon's POST /v1/demand (or SHAREPLANE_DEMAND_TOKEN); without it
    /// no demand is reported.
    #[arg(long, env = "SHAREPLANE_DEMAND_TOKEN", hide_env_values = true)]
    pub demand_token: Option<String>,
    /// This gateway's name in demand reports (default: gateway-<pid>).
    #[arg(long)]
    pub gateway_id: Option<String>,
    /// The largest cost (hits_addend) one call may charge; larger ones are refused.
    #[arg(long)]
    pub max_cost: Option<u32>,
    /// Add the RateLimit and RateLimit-Policy fields of draft-ietf-httpapi-ratelimit-headers.
    #[arg(long)]
    pub ratelimit_headers: bool,
    /// How long after the start a gateway may run without a rule set before it logs an error
    /// (default 30000; it is not ready until one loads either way).
    #[arg(long)]
    pub rules_timeout_ms: Option<u64>,
}

/// The TOML file. Every field is optional; flags override.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub rules: Option<String>,
    pub redis: Option<String>,
    pub redis_ca: Option<PathBuf>,
    /// `standalone` (default) or `cluster` (cluster mode enabled; ElastiCache Serverless).
    pub redis_mode: Option<RedisMode>,
    pub grpc_listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    /// The Region this gateway runs in: rule sets for another Region are refused.
    pub region: Option<String>,
    pub gateway_id: Option<String>,
    pub demand_token: Option<String>,
    pub demand_every_ms: Option<u64>,
    /// See [`Flags::rules_timeout_ms`].
    pub rules_timeout_ms: Option<u64>,
    pub gateways_per_region: Option<u32>,
    pub max_cost: Option<u32>,
    pub redis_timeout_ms: Option<u64>,
    /// The hash tag of limits without a `key_group`: `rl:{<tag>}:<limit>` keys, so that any set
    /// of them can be checked in one call on a cluster; `"{limit}"`: each limit its own tag,
    /// `rl:{<limit>}:global`. Default: `{limit}` standalone, `shareplane` on a cluster.
    pub key_tag: Option<String>,
    pub ratelimit_headers: Option<bool>,
    /// What a descriptor that maps to no limit gets: `allow` (default), `deny` or `error`.
    pub unmapped: Option<UnmappedPolicy>,
    /// What a descriptor that names a template without a usable value gets (no entry for the
    /// template's key, an empty value, or one longer than 256 bytes): `deny` (default) or
    /// `error`. Never a bucket shared by every caller.
    pub template_value: Option<ValuePolicy>,
    /// Per limit id: `failure = "local_share" | "fail_open" | "fail_closed"`, and its
    /// `key_group` (hash tag).
    #[serde(default)]
    pub limits: BTreeMap<String, LimitSettings>,
    /// (domain, descriptor entry) → limit mappings, tried in order before `shareplane_limit`.
    #[serde(default)]
    pub descriptors: Vec<DescriptorMapping>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    /// Default: the kind's ([`FailurePolicy::default_for`]).
    pub failure: Option<FailurePolicy>,
    /// The limit's key group: its bucket is `rl:{<group>}:<limit>`. Limits checked together
    /// must share one group on a cluster; different groups spread over its masters.
    pub key_group: Option<String>,
}

/// The value of `key_tag` that gives each limit its own hash tag.
pub const KEY_TAG_PER_LIMIT: &str = "{limit}";

/// A validated gateway configuration.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub rules_url: String,
    pub limiter: LimiterConfig,
    pub grpc_listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    pub demand_token: Option<String>,
    pub gateway_id: String,
    pub demand_every: Duration,
    /// No rule set this long after the start: an error is logged (see [`crate::health`]).
    pub rules_timeout: Duration,
    pub ratelimit_headers: bool,
    pub unmapped: UnmappedPolicy,
    pub template_value: ValuePolicy,
    pub descriptors: Vec<DescriptorMapping>,
}

/// The configuration was refused: every problem, each with its field.
#[derive(Debug, thiserror::Error)]
#[error("invalid gateway configuration:\n  {}", .0.join("\n  "))]
pub struct ConfigError(pub Vec<String>);

/// Reads `--config` (if any) and applies the flags over it.
pub fn load(flags: Flags) -> Result<GatewayConfig, ConfigError> {
    let file = match &flags.config {
        None => FileConfig::default(),
        Some(path) => read_file(path)?,
    };
    resolve(file, flags)
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(vec![format!("config: cannot read {}: {e}", path.display())]))?;
    toml::from_str(&text).map_err(|e| ConfigError(vec![format!("config: {}: {e}", path.display())]))
}

/// Applies `flags` over `file` and validates the result.
pub fn resolve(file: FileConfig, flags: Flags) -> Result<GatewayConfig, ConfigError> {
    let mut errors = Vec::new();
    let rules_url = rules_url(flags.rules.or(file.rules), &mut errors);
    let mut limiter = redis(
        flags.redis.or(file.redis),
        flags.redis_ca.or(file.redis_ca),
        &mut errors,
    );
    let grpc_listen = flags.grpc_listen.or(file.grpc_listen);
    let http_listen = flags.http_listen.or(file.http_listen);
    if grpc_listen.is_none() && http_listen.is_none() {
        errors.push("grpc_listen, http_listen: at least one listener is required".to_owned());
    }
    limiter.region = file.region;
    limiter.gateways_per_region = file.gateways_per_region.unwrap_or(1);
    limiter.max_cost = flags.max_cost.or(file.max_cost).unwrap_or(1);
    limiter.redis_timeout = Duration::from_millis(file.redis_timeout_ms.unwrap_or(50));
    limiter.redis_mode = flags.redis_mode.or(file.redis_mode).unwrap_or_default();
    limiter.key_scheme = key_scheme(file.key_tag, limiter.redis_mode);
    errors.extend(per_limit(file.limits, &mut limiter));
    errors.extend(limiter.validate());
    let gateway_id = flags
        .gateway_id
        .or(file.gateway_id)
        .unwrap_or_else(|| format!("gateway-{}", std::process::id()));
    if gateway_id.is_empty() || gateway_id.len() > 128 {
        errors.push("gateway_id: 1 to 128 bytes".to_owned());
    }
    let demand_token = flags.demand_token.or(file.demand_token);
    if demand_token
        .as_deref()
        .is_some_and(|t| t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()))
    {
        errors.push("demand_token: non-empty printable ASCII".to_owned());
    }
    let demand_every_ms = file.demand_every_ms.unwrap_or(1_000);
    if !(100..=60_000).contains(&demand_every_ms) {
        errors.push("demand_every_ms: 100 to 60000".to_owned());
    }
    let rules_timeout_ms = flags
        .rules_timeout_ms
        .or(file.rules_timeout_ms)
        .unwrap_or(crate::health::DEFAULT_RULES_TIMEOUT.as_millis() as u64);
    if !(1_000..=3_600_000).contains(&rules_timeout_ms) {
        errors.push("rules_timeout_ms (--rules-timeout-ms): 1000 to 3600000".to_owned());
    }
    errors.extend(descriptor_problems(&file.descriptors));
    if !errors.is_empty() {
        return Err(ConfigError(errors));
    }
    Ok(GatewayConfig {
        rules_url,
        limiter,
        grpc_listen,
        http_listen,
        demand_token,
        gateway_id,
        demand_every: Duration::from_millis(demand_every_ms),
        rules_timeout: Duration::from_millis(rules_timeout_ms),
        ratelimit_headers: flags.ratelimit_headers || file.ratelimit_headers.unwrap_or(false),
        unmapped: file.unmapped.unwrap_or_default(),
        template_value: file.template_value.unwrap_or_default(),
        descriptors: file.descriptors,
    })
}

/// The daemon's base URL (`rules`, `--rules`).
fn rules_url(given: Option<String>, errors: &mut Vec<String>) -> String {
    match given {
        None => {
            errors.push(
                "rules (--rules): the daemon's base URL is required, e.g. \
                 http://shareplane.internal:8080 (or its …/v1/rules)"
                    .to_owned(),
            );
            String::new()
        }
        Some(given) => shareplane_limiter::http::daemon_base_url(&given).unwrap_or_else(|e| {
            errors.push(format!("rules (--rules): {e}"));
            String::new()
        }),
    }
}

/// The limiter's configuration with its Redis URL (`redis`, `--redis`) and CA (`redis_ca`).
fn redis(
    redis: Option<String>,
    redis_ca: Option<PathBuf>,
    errors: &mut Vec<String>,
) -> LimiterConfig {
    let redis_url = redis.unwrap_or_default();
    if !(redis_url.starts_with("redis://") || redis_url.starts_with("rediss://")) {
        errors.push(format!(
            "redis: a redis:// or rediss:// URL is required, got {redis_url:?}"
        ));
    }
    let mut limiter = LimiterConfig::new(redis_url.clone());
    if let Some(ca) = redis_ca {
        match std::fs::read(&ca) {
            Ok(_) if !redis_url.starts_with("rediss://") => {
                errors.push("redis_ca: given, but the Redis URL is not rediss://".to_owned());
            }
            Ok(pem) => limiter.redis_ca_pem = Some(pem),
            Err(e) => errors.push(format!("redis_ca: cannot read {}: {e}", ca.display())),
        }
    }
    limiter
}

/// The problems of the descriptor mappings, each naming its `descriptors[i]`.
fn descriptor_problems(descriptors: &[DescriptorMapping]) -> Vec<String> {
    let mut errors = Vec::new();
    if descriptors.len() > MAX_MAPPINGS {
        errors.push(format!("descriptors: at most {MAX_MAPPINGS} mappings"));
    }
    for (i, m) in descriptors.iter().enumerate() {
        errors.extend(
            m.problems()
                .into_iter()
                .map(|p| format!("descriptors[{i}].{p}")),
        );
    }
    errors
}

/// Applies the `[limits.<id>]` settings to `limiter`; returns their problems.
fn per_limit(limits: BTreeMap<String, LimitSettings>, limiter: &mut LimiterConfig) -> Vec<String> {
    let mut errors = Vec::new();
    for (id, s) in limits {
        if !valid_limit_id(&id) {
            errors.push(format!("limits.{id:?}: not a valid limit id"));
        }
        if let Some(failure) = s.failure {
            limiter.failure.insert(id.clone(), failure);
        }
        match s.key_group {
            Some(group) if !valid_limit_id(&group) => errors.push(format!(
                "limits.{id:?}.key_group: 1 to 128 printable ASCII characters without braces"
            )),
            Some(group) => {
                limiter.key_groups.insert(id, group);
            }
            None => {}
        }
    }
    errors
}

/// The key scheme of limits without a key group: `key_tag` as given, else per limit on a
/// standalone server and one shared tag on a cluster (so that any set of limits is one call).
fn key_scheme(key_tag: Option<String>, mode: RedisMode) -> KeyScheme {
    match (key_tag, mode) {
        (Some(tag), _) if tag == KEY_TAG_PER_LIMIT => KeyScheme::PerLimit,
        (Some(tag), _) => KeyScheme::SharedTag(tag),
        (None, RedisMode::Standalone) => KeyScheme::PerLimit,
        (None, RedisMode::Cluster) => KeyScheme::SharedTag("shareplane".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> Flags {
        Flags {
            rules: Some("http://127.0.0.1:8080/regions/A".into()),
            redis: Some("redis://127.0.0.1:6379/".into()),
            http_listen: Some(([127, 0, 0, 1], 0).into()),
            ..Flags::default()
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let file: FileConfig = toml::from_str(
            r#"
            gateways_per_region = 0
            demand_every_ms = 5
            rules_timeout_ms = 10
            [limits."a b"]
            failure = "fail_open"
            [[descriptors]]
            key = ""
            limit = "k{x}"
            "#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let Err(ConfigError(errors)) = resolve(file, Flags::default()) else {
            panic!("accepted");
        };
        let fields: Vec<&str> = errors
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            [
                "rules (--rules)",
                "redis",
                "grpc_listen, http_listen",
                "limits.\"a b\"",
                "gateways_per_region",
                "demand_every_ms",
                "rules_timeout_ms (--rules-timeout-ms)",
                "descriptors[0].key",
                "descriptors[0].limit",
            ],
            "{errors:#?}"
        );
    }

    #[test]
    fn unknown_fields_and_policies_are_refused() {
        assert!(toml::from_str::<FileConfig>("redis_url = \"x\"").is_err());
        assert!(toml::from_str::<FileConfig>("[limits.a]\nfailure = \"maybe\"").is_err());
        assert!(toml::from_str::<FileConfig>("unmapped = \"sometimes\"").is_err());
    }

    #[test]
    fn flags_override_the_file_and_failure_policies_reach_the_limiter() {
        let file: FileConfig = toml::from_str(
            r#"
            redis = "redis://10.0.0.1:6379/"
            max_cost = 5
            unmapped = "deny"
            [limits.login]
            failure = "local_share"
            "#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let c = resolve(file, flags()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.limiter.redis_url, "redis://127.0.0.1:6379/");
        assert_eq!(c.limiter.max_cost, 5);
        assert_eq!(c.unmapped, UnmappedPolicy::Deny);
        assert_eq!(
            c.limiter.failure.get("login"),
            Some(&FailurePolicy::LocalShare)
        );
    }

    #[test]
    fn the_config_file_in_docs_gateways_md_is_valid() {
        let docs = include_str!("../../../docs/gateways.md");
        let start = docs.find("```toml\n").map_or(0, |i| i + 8);
        let len = docs[start..].find("```").unwrap_or(0);
        let mut file: FileConfig =
            toml::from_str(&docs[start..start + len]).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            file.redis_ca.take().is_some(),
            "the example names a CA file"
        );
        let c = resolve(file, Flags::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.limiter.failure.get("login"),
            Some(&FailurePolicy::FailClosed)
        );
        assert_eq!(c.descriptors.len(), 1);
        assert_eq!(c.limiter.gateways_per_region, 4);
    }

    #[test]
    fn the_published_rules_url_is_taken_as_the_base_and_other_endpoints_are_refused() {
        for given in [
            "http://api.a.example.com:8080",
            "http://api.a.example.com:8080/",
            "http://api.a.example.com:8080/v1/rules",
            "http://api.a.example.com:8080/v1/rules/",
        ] {
            let f = Flags {
                rules: Some(given.into()),
                ..flags()
            };
            let c = resolve(FileConfig::default(), f).unwrap_or_else(|e| panic!("{given}: {e}"));
            assert_eq!(c.rules_url, "http://api.a.example.com:8080", "{given}");
        }
        // From the file too.
        let file = FileConfig {
            rules: Some("https://api.b.example.com/v1/rules".into()),
            ..FileConfig::default()
        };
        let f = Flags {
            rules: None,
            ..flags()
        };
        let c = resolve(file, f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.rules_url, "https://api.b.example.com");
        for given in ["http://h:8080/v1/demand", "http://h:8080/readyz", "h:8080"] {
            let f = Flags {
                rules: Some(given.into()),
                ..flags()
            };
            let Err(ConfigError(errors)) = resolve(FileConfig::default(), f) else {
                panic!("{given} accepted");
            };
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(errors[0].starts_with("rules (--rules): "), "{errors:?}");
            assert!(errors[0].contains(given), "{errors:?}");
        }
    }

    #[test]
    fn cluster_mode_shares_one_tag_unless_groups_or_key_tag_say_otherwise() {
        let file: FileConfig = toml::from_str(
            r#"
            redis = "rediss://sp-abc.serverless.use1.cache.amazonaws.com:6379/"
            redis_mode = "cluster"
            [limits.partner-a]
            key_group = "partner-a"
            [limits.partner-a-login]
            key_group = "partner-a"
            failure = "fail_closed"
            "#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let c = resolve(file.clone(), Flags::default().with_listener())
            .unwrap_or_else(|e| panic!("{e}"));
        let keys = c.limiter.key_plan();
        assert_eq!(c.limiter.redis_mode, RedisMode::Cluster);
        assert_eq!(
            keys.key("partner-a-login"),
            "rl:{partner-a}:partner-a-login"
        );
        assert_eq!(keys.key("k-big"), "rl:{shareplane}:k-big");
        assert!(keys.split(["partner-a", "partner-a-login"]).is_none());
        assert!(keys.split(["partner-a", "k-big"]).is_some());
        assert!(!c.limiter.failure.contains_key("partner-a"), "kind default");
        let per_limit = FileConfig {
            key_tag: Some(KEY_TAG_PER_LIMIT.into()),
            ..file.clone()
        };
        let c =
            resolve(per_limit, Flags::default().with_listener()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.limiter.key_plan().key("k-big"), "rl:{k-big}:global");
        // The flag overrides the file; standalone keeps the external specification's keys.
        let mut f = Flags::default().with_listener();
        f.redis_mode = Some(RedisMode::Standalone);
        let c = resolve(file, f).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.limiter.key_plan().key("k-big"), "rl:{k-big}:global");
        let bad: FileConfig =
            toml::from_str("redis = \"redis://h:1/\"\n[limits.a]\nkey_group = \"x{y}\"")
                .unwrap_or_else(|e| panic!("{e}"));
        let Err(ConfigError(errors)) = resolve(bad, Flags::default().with_listener()) else {
            panic!("accepted");
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("limits.\"a\".key_group:"),
            "{errors:?}"
        );
    }

    impl Flags {
        fn with_listener(mut self) -> Self {
            self.rules = Some("http://127.0.0.1:8080".into());
            self.http_listen = Some(([127, 0, 0, 1], 0).into());
            self
        }
    }

    #[test]
    fn a_ca_needs_a_tls_url() {
        let dir = std::env::temp_dir().join(format!("sp-gw-ca-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "not checked here").unwrap_or_else(|e| panic!("{e}"));
        let mut f = flags();
        f.redis_ca = Some(ca);
        let Err(ConfigError(errors)) = resolve(FileConfig::default(), f) else {
            panic!("accepted");
        };
        assert!(errors[0].starts_with("redis_ca: given"), "{errors:?}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
