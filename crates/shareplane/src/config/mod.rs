//! The daemon's configuration: a TOML file (or the whole TOML text in `SHAREPLANE_CONFIG_TOML`)
//! plus a few `SHAREPLANE_*` overrides, checked all at once.
//!
//! [`load`] never touches the network. It returns either a [`Config`] that `run` can use as it is,
//! or every problem found, each naming its field, so that `shareplane validate` and `shareplane
//! run` refuse an invalid file the same way.

mod limits_check;
pub mod read;
pub mod timeouts;

pub use read::{RawConfig, RawLimit, RawRegion};
pub use timeouts::Timeouts;

use limits_check::check_limits;
use shareplane_core::{
    ConfigError, Deployment, Design, Fence, LimitSpec, RegionId, Room, SilentPolicy,
};
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// Environment variables that override the file (documented in `shareplane run --help`).
pub const ENV_CONFIG_TOML: &str = "SHAREPLANE_CONFIG_TOML";
pub const ENV_REGION: &str = "SHAREPLANE_REGION";
pub const ENV_LISTEN: &str = "SHAREPLANE_LISTEN";
pub const ENV_API_TOKEN: &str = "SHAREPLANE_API_TOKEN";
pub const ENV_ADMIN_TOKEN: &str = "SHAREPLANE_ADMIN_TOKEN";
pub const ENV_PHASE_MS: &str = "SHAREPLANE_PHASE_MS";
pub const ENV_AWS_ENDPOINT: &str = "SHAREPLANE_AWS_ENDPOINT";
pub const ENV_REPLICA_ID: &str = "SHAREPLANE_REPLICA_ID";

/// The longest configuration text accepted (a file or the environment variable): 100,000 limits
/// take about 6 MB.
pub const MAX_CONFIG_BYTES: usize = 16 << 20;
/// The shortest API or admin token accepted: anything shorter is guessable.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Where records are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    DynamoDb,
    Memory,
}

/// Where a daemon's limits come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitsSource {
    /// The `[[limits]]` of its own configuration file (each Region's file lists them).
    File,
    /// The shared limits document in the global table, written once for every Region by
    /// `shareplane limits apply` (see [`parse_limits`] and `crate::table_limits`).
    Table,
}

impl LimitsSource {
    pub const NAMES: &'static [(&'static str, LimitsSource)] =
        &[("file", LimitsSource::File), ("table", LimitsSource::Table)];

    pub fn name(self) -> &'static str {
        match self {
            LimitsSource::File => "file",
            LimitsSource::Table => "table",
        }
    }
}

/// A checked configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub region: String,
    pub me: RegionId,
    pub phase_ms: u64,
    pub period_ms: u64,
    pub deployment: Arc<Deployment>,
    /// Route 53 health check id by Region index (`None` where not configured).
    pub health_check_ids: Vec<Option<String>>,
    pub table: String,
    pub store: StoreKind,
    pub aws_endpoint: Option<String>,
    /// Where health is read when not at `aws_endpoint` (tests only; needs `aws_endpoint`).
    pub health_endpoint: Option<String>,
    pub aws_region: String,
    pub metrics_namespace: String,
    pub listen: SocketAddr,
    pub api_token: Option<String>,
    /// The operator's token: `None` refuses the operator endpoints (see [`crate::tokens`]).
    pub admin_token: Option<String>,
    pub replica_id: String,
    /// Phase ticks a peer may run other limits before the `limits_mismatch:<peer>` alarm.
    pub limits_rollout_periods: u32,
    /// Tests only: the delay before every store call (zero in production).
    pub test_store_delay: std::time::Duration,
    /// The bounds on store calls and health reads ([`timeouts`]).
    pub timeouts: Timeouts,
    pub limits_source: LimitsSource,
    /// With [`LimitsSource::Table`]: the version of the shared limits document the limits come
    /// from (`None` until one is adopted; always `None` with [`LimitsSource::File`]).
    pub limits_version: Option<u64>,
}

pub const DEFAULT_PERIOD_MS: u64 = 5_000;
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// How many phase ticks a rollout of new limits may take to reach every Region before the
/// Regions that disagree raise `limits_mismatch` (50 s at the default period).
pub const DEFAULT_ROLLOUT_PERIODS: u32 = 10;
const MAX_ROLLOUT_PERIODS: u32 = 100_000;
pub const MIN_PERIOD_MS: u64 = 100;
pub const MAX_PERIOD_MS: u64 = 600_000;
const MAX_BURST_S: f64 = 3_600.0;

/// Every problem with a configuration, one per line, each naming its field.
#[derive(Debug, thiserror::Error)]
#[error("{}", render(.0))]
pub struct ConfigErrors(pub Vec<ConfigError>);

fn render(errors: &[ConfigError]) -> String {
    let lines: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    let n = errors.len();
    let noun = if n == 1 { "problem" } else { "problems" };
    format!("invalid configuration ({n} {noun}):\n{}", lines.join("\n"))
}

pub(crate) fn problem(field: impl Into<String>, what: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        problem: what.into(),
    }
}

/// Reads the configuration from `path`, or from `SHAREPLANE_CONFIG_TOML` when `path` is `None`,
/// then applies the environment overrides from `env` and checks everything.
pub fn load(path: Option<&Path>, env: &BTreeMap<String, String>) -> Result<Config, ConfigErrors> {
    let text = match (path, env.get(ENV_CONFIG_TOML)) {
        (Some(p), _) => read_file(p)?,
        (None, Some(t)) => t.clone(),
        (None, None) => {
            return Err(ConfigErrors(vec![problem(
                "config",
                format!("give --config FILE or put the TOML text in {ENV_CONFIG_TOML}"),
            )]))
        }
    };
    parse(&text, env)
}

/// The process environment's `SHAREPLANE_*` variables.
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("SHAREPLANE_"))
        .collect()
}

fn read_file(p: &Path) -> Result<String, ConfigErrors> {
    let fail = |what: String| ConfigErrors(vec![problem("config", what)]);
    let meta =
        std::fs::metadata(p).map_err(|e| fail(format!("cannot read {}: {e}", p.display())))?;
    if meta.len() > MAX_CONFIG_BYTES as u64 {
        return Err(fail(format!(
            "{} is larger than {MAX_CONFIG_BYTES} bytes",
            p.display()
        )));
    }
    std::fs::read_to_string(p).map_err(|e| fail(format!("cannot read {}: {e}", p.display())))
}

/// Parses TOML text, applies overrides and checks it, reporting every problem at once (each
/// with its line when its field was written in the file; a syntax error stops the reading).
/// A missing API token is no problem here: `run` refuses to start without one
/// ([`require_api_token`]), and `validate` says that it will.
pub fn parse(text: &str, env: &BTreeMap<String, String>) -> Result<Config, ConfigErrors> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigErrors(vec![problem("config", "larger than 16 MiB")]));
    }
    let (mut raw, mut located) = read::read_config(text)?;
    let misread = located.misread();
    let mut errors = Vec::new();
    apply_env(&mut raw, env, &mut located, &mut errors);
    let cfg = check(raw, &mut errors);
    // A field of the wrong type reads as unset: what `check` says of it only repeats that.
    errors.retain(|e| !misread.contains(&e.field));
    let mut all = std::mem::take(&mut located.errors);
    all.append(&mut errors);
    located.annotate(&mut all);
    match cfg {
        Some(c) if all.is_empty() => Ok(c),
        _ => Err(ConfigErrors(all)),
    }
}

/// `run`'s own check: it serves gateways' demand reports, so it does not start without an API
/// token (fail closed), while `validate` and `limits` need none.
pub fn require_api_token(cfg: &Config) -> Result<(), ConfigErrors> {
    match cfg.api_token {
        Some(_) => Ok(()),
        None => Err(ConfigErrors(vec![problem(
            "api_token",
            format!(
                "required to run (gateways' demand reports need it); set {ENV_API_TOKEN} \
                 (preferred) or api_token, at least {MIN_TOKEN_CHARS} characters"
            ),
        )])),
    }
}

fn apply_env(
    raw: &mut RawConfig,
    env: &BTreeMap<String, String>,
    located: &mut read::Located,
    errors: &mut Vec<ConfigError>,
) {
    // What the environment sets is not where the file wrote it.
    for (var, field) in [
        (ENV_REGION, "region"),
        (ENV_LISTEN, "listen"),
        (ENV_API_TOKEN, "api_token"),
        (ENV_ADMIN_TOKEN, "admin_token"),
        (ENV_AWS_ENDPOINT, "aws_endpoint"),
        (ENV_REPLICA_ID, "replica_id"),
        (ENV_PHASE_MS, "phase_ms"),
    ] {
        if env.contains_key(var) {
            located.forget(field);
        }
    }
    if let Some(v) = env.get(ENV_REGION) {
        raw.region = Some(v.clone());
    }
    if let Some(v) = env.get(ENV_LISTEN) {
        raw.listen = Some(v.clone());
    }
    if let Some(v) = env.get(ENV_API_TOKEN) {
        raw.api_token = Some(v.clone());
    }
    if let Some(v) = env.get(ENV_ADMIN_TOKEN) {
        raw.admin_token = Some(v.clone());
    }
    if let Some(v) = env.get(ENV_AWS_ENDPOINT) {
        raw.aws_endpoint = Some(v.clone());
    }
    if let Some(v) = env.get(ENV_REPLICA_ID) {
        raw.replica_id = Some(v.clone());
    }
    if let Some(v) = env.get(ENV_PHASE_MS) {
        match v.parse() {
            Ok(p) => raw.phase_ms = p,
            Err(_) => errors.push(problem(ENV_PHASE_MS, "not a whole number of milliseconds")),
        }
    }
}

fn check(raw: RawConfig, errors: &mut Vec<ConfigError>) -> Option<Config> {
    let period_ms = raw.period_ms.unwrap_or(DEFAULT_PERIOD_MS);
    let period_ok = timeouts::check_period(period_ms, errors);
    if period_ok.is_some() && raw.phase_ms >= period_ms {
        errors.push(problem(
            "phase_ms",
            format!("{} must be below period_ms ({period_ms})", raw.phase_ms),
        ));
    }
    let names: Vec<String> = raw.regions.iter().map(|r| r.name.clone()).collect();
    let region = raw.region.clone().unwrap_or_default();
    let me = names
        .iter()
        .position(|n| *n == region)
        .and_then(RegionId::new);
    if region.is_empty() {
        errors.push(problem(
            "region",
            format!("missing (set it in the file or {ENV_REGION})"),
        ));
    } else if me.is_none() {
        errors.push(problem("region", format!("{region:?} is not in regions")));
    }
    let store = choice(
        errors,
        "store",
        &raw.store,
        &[
            ("dynamodb", StoreKind::DynamoDb),
            ("memory", StoreKind::Memory),
        ],
    );
    let policy = choice(errors, "policy", &raw.policy, SilentPolicy::NAMES);
    let fence = choice(errors, "fence", &raw.fence, Fence::NAMES);
    check_aws(&raw, store, policy, errors);
    let listen = check_listen(raw.listen.as_deref(), errors);
    let api_token = crate::tokens::check_api_token(raw.api_token.as_deref(), errors);
    let admin_token = crate::tokens::check_admin_token(
        raw.admin_token.as_deref(),
        raw.api_token.as_deref(),
        errors,
    );
    let limits_source = choice(
        errors,
        "limits_source",
        &raw.limits_source,
        LimitsSource::NAMES,
    );
    if limits_source == LimitsSource::Table {
        if !raw.limits.is_empty() {
            errors.push(problem(
                "limits",
                "limits_source = \"table\" takes the limits from the table: move these \
                 [[limits]] to a limits file and write it with `shareplane limits apply`",
            ));
        }
        if store == StoreKind::Memory {
            errors.push(problem(
                "limits_source",
                "\"table\" needs store = \"dynamodb\" (the memory store lives in this process \
                 only, where `shareplane limits apply` cannot reach it)",
            ));
        }
    }
    if let Some(i) = names.iter().position(|n| n.starts_with('#')) {
        errors.push(problem(
            format!("regions[{i}].name"),
            "must not start with '#' (the table keeps the shared limits under \"#limits\")",
        ));
    }
    let limits = check_limits(&raw.limits, &names, errors);
    let d = check_deployment(names, limits, policy, fence, period_ms, errors);
    let timeouts = timeouts::check_timeouts(&raw, period_ok, errors);
    let test_store_delay_ms =
        timeouts::check_test_delay(&raw, timeouts, period_ok.is_some(), errors);
    let limits_rollout_periods = raw
        .limits_rollout_periods
        .unwrap_or(DEFAULT_ROLLOUT_PERIODS);
    if !(1..=MAX_ROLLOUT_PERIODS).contains(&limits_rollout_periods) {
        errors.push(problem(
            "limits_rollout_periods",
            format!("must be 1 to {MAX_ROLLOUT_PERIODS}"),
        ));
    }
    let replica_id = raw.replica_id.clone().unwrap_or_else(default_replica_id);
    if replica_id.is_empty() || replica_id.len() > 128 {
        errors.push(problem("replica_id", "1 to 128 characters"));
    }
    Some(Config {
        me: me?,
        phase_ms: raw.phase_ms,
        period_ms,
        deployment: Arc::new(d?),
        health_check_ids: raw
            .regions
            .iter()
            .map(|r| r.health_check_id.clone())
            .collect(),
        table: raw.table.unwrap_or_default(),
        store,
        aws_endpoint: raw.aws_endpoint,
        health_endpoint: raw.health_endpoint,
        aws_region: raw.aws_region.unwrap_or_else(|| region.clone()),
        metrics_namespace: raw.metrics_namespace.unwrap_or_else(|| "Shareplane".into()),
        listen,
        api_token,
        admin_token,
        replica_id,
        test_store_delay: std::time::Duration::from_millis(test_store_delay_ms),
        timeouts,
        limits_rollout_periods,
        limits_source,
        limits_version: None,
        region,
    })
}

/// The deployment the checked parts make, and whether gateways can hold a lease in it. What
/// [`Deployment::try_new`] finds about a field already reported (a limit whose rate was
/// refused, a period out of range) is left out: it would blame the stand-in value.
fn check_deployment(
    regions: Vec<String>,
    limits: Vec<LimitSpec>,
    policy: SilentPolicy,
    fence: Fence,
    period_ms: u64,
    errors: &mut Vec<ConfigError>,
) -> Option<Deployment> {
    let d = Deployment {
        regions,
        limits,
        design: Design::NamedGrants,
        policy,
        fence,
        silent_after: 3,
        period_ms,
    };
    let reported: HashSet<String> = errors
        .iter()
        .map(|e| entry_of(&e.field).to_string())
        .collect();
    let d = match Deployment::try_new(d) {
        Ok(d) => Some(d),
        Err(found) => {
            let new: Vec<ConfigError> = found
                .into_iter()
                .filter(|e| !reported.contains(entry_of(&e.field)))
                .collect();
            errors.extend(new);
            None
        }
    };
    // Gateways must be able to hold a lease that runs out before any peer can reclaim.
    if let Some(Err(e)) = d.as_ref().map(shareplane_core::lease_bound) {
        if !reported.contains(entry_of(&e.field)) {
            errors.push(e);
        }
    }
    d
}

/// The entry a field belongs to: `limits[3]` for `limits[3].rate`, else the field itself.
fn entry_of(field: &str) -> &str {
    match field.split_once("].") {
        Some((head, _)) => &field[..head.len() + 1],
        None => field,
    }
}

/// Parses a limits file (the `[[limits]]` entries of a configuration, nothing else, as
/// `shareplane limits apply` takes and the table keeps) and checks each limit on its own against
/// the Regions `regions`, reporting every problem with its field (and line, for syntax).
/// [`with_limits`] checks them together (ids that appear twice, rates against the Regions).
pub fn parse_limits(text: &str, regions: &[String]) -> Result<Vec<LimitSpec>, ConfigErrors> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigErrors(vec![problem("limits", "larger than 16 MiB")]));
    }
    let (raw, mut located) = read::read_limits(text)?;
    let misread = located.misread();
    let mut errors = Vec::new();
    let limits = check_limits(&raw, regions, &mut errors);
    errors.retain(|e| !misread.contains(&e.field));
    if raw.is_empty() {
        errors.push(problem("limits", "no [[limits]] entry"));
    }
    let mut all = std::mem::take(&mut located.errors);
    all.append(&mut errors);
    located.annotate(&mut all);
    if all.is_empty() {
        Ok(limits)
    } else {
        Err(ConfigErrors(all))
    }
}

/// `cfg` running `limits`, from version `version` of the shared limits document; every problem
/// the deployment finds in them (a rate, floor or step cap that does not fit) is reported.
pub fn with_limits(
    cfg: &Config,
    limits: Vec<LimitSpec>,
    version: u64,
) -> Result<Config, ConfigErrors> {
    let d = Deployment {
        limits,
        ..(*cfg.deployment).clone()
    };
    let d = Deployment::try_new(d).map_err(ConfigErrors)?;
    Ok(Config {
        deployment: Arc::new(d),
        limits_version: Some(version),
        ..cfg.clone()
    })
}

/// What a reload changes: the deployment to run next and, for the log, what differs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitChanges {
    /// The running limits first, in their order, with their new settings, then the added ones
    /// in the order of the file.
    pub limits: Vec<LimitSpec>,
    /// Ids of limits that are new.
    pub added: Vec<String>,
    /// `(id, old version, new version, old rate, new rate)` of limits at a higher version.
    pub versioned: Vec<(String, u64, u64, Room, Room)>,
    /// Ids of limits whose floor, step cap, burst or shadow changed (live, at any version).
    pub tuned: Vec<String>,
}

impl LimitChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.versioned.is_empty() && self.tuned.is_empty()
    }
}

/// Checks what a reload from `old` to `new` (both already valid) would change, and refuses
/// anything that cannot change while the daemon runs, naming each field:
///
/// - every setting but the limits (Region, Regions, store, table, period, phase, listen address,
///   token, policy, fence, health checks, …): restart the daemon to change them;
/// - a limit's rate without a higher `version`, a lower `version`, its `kind` or `home`;
/// - a removed limit: records hold limits by position in the deployment, so removing one live
///   would make the limits after it read the wrong entries. Restart the daemon to remove one.
///
/// A rate at a higher version goes through the core's limit-change protocol (room in static
/// parts, never above the larger of the old and new rate); an added limit is adopted in this
/// Region's static part, like a limit present from the start. Limits keep their position, so
/// added ones go last whatever their place in the file.
pub fn plan_reload(old: &Config, new: &Config) -> Result<LimitChanges, ConfigErrors> {
    let mut errors = Vec::new();
    fixed_fields(old, new, &mut errors);
    let changes = limit_changes(&old.deployment.limits, &new.deployment.limits, &mut errors);
    if errors.is_empty() {
        Ok(changes)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn fixed_fields(old: &Config, new: &Config, errors: &mut Vec<ConfigError>) {
    let (a, b) = (&old.deployment, &new.deployment);
    let secret = |t: &Option<String>| t.as_ref().map(|_| "(set)".to_string());
    // The timeouts default to parts of the period: with a new period only the period is blamed.
    let timeouts = |c: &Config| match old.period_ms == new.period_ms {
        true => c.timeouts,
        false => old.timeouts,
    };
    let fields: [(&str, String, String); 21] = [
        (
            "store_timeout_ms",
            old.timeouts.store_ms.to_string(),
            timeouts(new).store_ms.to_string(),
        ),
        (
            "health_timeout_ms",
            old.timeouts.health_ms.to_string(),
            timeouts(new).health_ms.to_string(),
        ),
        (
            "limits_source",
            old.limits_source.name().to_string(),
            new.limits_source.name().to_string(),
        ),
        (
            "limits_rollout_periods",
            old.limits_rollout_periods.to_string(),
            new.limits_rollout_periods.to_string(),
        ),
        ("region", old.region.clone(), new.region.clone()),
        (
            "regions",
            format!("{:?}", a.regions),
            format!("{:?}", b.regions),
        ),
        (
            "phase_ms",
            old.phase_ms.to_string(),
            new.phase_ms.to_string(),
        ),
        (
            "period_ms",
            old.period_ms.to_string(),
            new.period_ms.to_string(),
        ),
        (
            "policy",
            format!("{:?}", a.policy),
            format!("{:?}", b.policy),
        ),
        ("fence", format!("{:?}", a.fence), format!("{:?}", b.fence)),
        (
            "regions[].health_check_id",
            format!("{:?}", old.health_check_ids),
            format!("{:?}", new.health_check_ids),
        ),
        ("table", old.table.clone(), new.table.clone()),
        (
            "store",
            format!("{:?}", old.store),
            format!("{:?}", new.store),
        ),
        (
            "aws_endpoint",
            format!("{:?}", old.aws_endpoint),
            format!("{:?}", new.aws_endpoint),
        ),
        ("aws_region", old.aws_region.clone(), new.aws_region.clone()),
        (
            "metrics_namespace",
            old.metrics_namespace.clone(),
            new.metrics_namespace.clone(),
        ),
        ("listen", old.listen.to_string(), new.listen.to_string()),
        ("replica_id", old.replica_id.clone(), new.replica_id.clone()),
        (
            "test_store_delay_ms",
            old.test_store_delay.as_millis().to_string(),
            new.test_store_delay.as_millis().to_string(),
        ),
        (
            "api_token",
            format!("{:?}", secret(&old.api_token)),
            String::new(),
        ),
        (
            "admin_token",
            format!("{:?}", secret(&old.admin_token)),
            String::new(),
        ),
    ];
    for (field, was, now) in fields {
        let token = field.ends_with("_token");
        let changed = match field {
            "api_token" => old.api_token != new.api_token,
            "admin_token" => old.admin_token != new.admin_token,
            _ => was != now,
        };
        if !changed {
            continue;
        }
        let what = if token {
            "cannot change while the daemon runs; restart it to change the token".to_string()
        } else {
            format!("cannot change while the daemon runs (running {was}, file {now}); restart it to change this")
        };
        errors.push(problem(field, what));
    }
}

/// What running `new` instead of `old` changes, refusing what cannot change live (see
/// [`plan_reload`]). `shareplane limits apply` checks a document with it before writing, so
/// that what the table holds is what running daemons can adopt.
pub fn limit_changes(
    old: &[LimitSpec],
    new: &[LimitSpec],
    errors: &mut Vec<ConfigError>,
) -> LimitChanges {
    let mut out = LimitChanges::default();
    let by_id: BTreeMap<&str, (usize, &LimitSpec)> = new
        .iter()
        .enumerate()
        .map(|(i, l)| (l.id.as_str(), (i, l)))
        .collect();
    for o in old {
        let Some(&(i, n)) = by_id.get(o.id.as_str()) else {
            errors.push(problem(
                "limits",
                format!(
                    "limit {:?} was removed: a limit cannot be removed while the daemon runs \
                     (records hold limits by position); restart the daemon to remove it",
                    o.id
                ),
            ));
            continue;
        };
        let at = format!("limits[{i}]");
        if n.kind != o.kind {
            errors.push(problem(
                format!("{at}.kind"),
                format!(
                    "{:?}: a limit's kind or home cannot change while the daemon runs",
                    o.id
                ),
            ));
        }
        if n.version < o.version {
            errors.push(problem(
                format!("{at}.version"),
                format!(
                    "{:?}: version {} is below the running version {}; versions only go up",
                    o.id, n.version, o.version
                ),
            ));
        } else if n.version == o.version && n.rate != o.rate {
            errors.push(problem(
                format!("{at}.version"),
                format!(
                    "{:?}: the rate changed from {} to {} without a higher version; set version = {} or more",
                    o.id,
                    o.rate,
                    n.rate,
                    o.version + 1
                ),
            ));
        } else if n.version > o.version {
            out.versioned
                .push((o.id.clone(), o.version, n.version, o.rate, n.rate));
        }
        let tuned = (n.floor, n.step_cap, n.burst_ms, n.shadow)
            != (o.floor, o.step_cap, o.burst_ms, o.shadow);
        if tuned {
            out.tuned.push(o.id.clone());
        }
        out.limits.push(n.clone());
    }
    let running: std::collections::BTreeSet<&str> = old.iter().map(|l| l.id.as_str()).collect();
    for n in new.iter().filter(|l| !running.contains(l.id.as_str())) {
        out.added.push(n.id.clone());
        out.limits.push(n.clone());
    }
    out
}

/// One of a few names; the first is the default. An unknown name is a problem naming the choices.
fn choice<T: Copy>(
    errors: &mut Vec<ConfigError>,
    field: &str,
    given: &Option<String>,
    options: &[(&str, T)],
) -> T {
    let name = given.as_deref().unwrap_or(options[0].0);
    match options.iter().find(|(n, _)| *n == name) {
        Some((_, v)) => *v,
        None => {
            let names: Vec<String> = options.iter().map(|(n, _)| format!("{n:?}")).collect();
            errors.push(problem(
                field,
                format!("{name:?}: use one of {}", names.join(", ")),
            ));
            options[0].1
        }
    }
}

fn check_aws(
    raw: &RawConfig,
    store: StoreKind,
    policy: SilentPolicy,
    errors: &mut Vec<ConfigError>,
) {
    let table = raw.table.as_deref().unwrap_or("");
    if store == StoreKind::DynamoDb && (table.is_empty() || table.len() > 255) {
        errors.push(problem(
            "table",
            "a DynamoDB table name of 1 to 255 characters is required",
        ));
    }
    for (field, ep) in [
        ("aws_endpoint", &raw.aws_endpoint),
        ("health_endpoint", &raw.health_endpoint),
    ] {
        if ep
            .as_deref()
            .is_some_and(|ep| !(ep.starts_with("http://") || ep.starts_with("https://")))
        {
            errors.push(problem(field, "must start with http:// or https://"));
        }
    }
    // A local health endpoint with the table in real AWS would mix test and real credentials.
    if raw.health_endpoint.is_some() && raw.aws_endpoint.is_none() {
        errors.push(problem(
            "health_endpoint",
            "tests only: needs aws_endpoint (both local, with test credentials)",
        ));
    }
    if store == StoreKind::DynamoDb && policy == SilentPolicy::TwoSignals {
        for (i, r) in raw.regions.iter().enumerate() {
            if r.health_check_id.as_deref().unwrap_or("").is_empty() {
                errors.push(problem(
                    format!("regions[{i}].health_check_id"),
                    "required with policy two-signals (the Route 53 health check of that Region)",
                ));
            }
        }
    }
}

fn check_listen(given: Option<&str>, errors: &mut Vec<ConfigError>) -> SocketAddr {
    let text = given.unwrap_or(DEFAULT_LISTEN);
    text.parse::<SocketAddr>().unwrap_or_else(|_| {
        errors.push(problem(
            "listen",
            format!("{text:?} is not an address like 127.0.0.1:8080"),
        ));
        SocketAddr::from(([127, 0, 0, 1], 8080))
    })
}

/// `host-<random UUID>`: two processes never share one, even with the same host name and
/// process id (every container's first process is pid 1). The host name, first 64 characters,
/// only helps an operator read it. Drawn once per process, so a reload of a file without
/// `replica_id` keeps it.
pub fn default_replica_id() -> String {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".into());
        let host: String = host.chars().filter(|c| !c.is_control()).take(64).collect();
        format!("{host}-{}", uuid::Uuid::new_v4().hyphenated())
    })
    .clone()
}

#[cfg(test)]
mod read_tests;

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
region = "B"
phase_ms = 1700
store = "memory"
api_token = "0123456789abcdef"
[[regions]]
name = "A"
[[regions]]
name = "B"
[[limits]]
id = "k-big"
rate = 10000
"#;

    #[test]
    fn the_default_replica_id_ends_in_a_random_uuid_drawn_once_per_process() {
        let id = default_replica_id();
        let uuid = id
            .rsplit_once('-')
            .map(|_| &id[id.len() - 36..])
            .unwrap_or("");
        let parsed = uuid::Uuid::try_parse(uuid).map(|u| u.get_version_num());
        assert_eq!(parsed.ok(), Some(4), "{id}");
        assert!(id.len() <= 128, "{id}");
        assert_eq!(default_replica_id(), id, "a reload keeps it");
        let a = parse(GOOD, &BTreeMap::new()).map(|c| c.replica_id);
        assert_eq!(a.ok().as_deref(), Some(id.as_str()));
    }

    #[test]
    fn a_syntax_error_names_its_own_line_even_at_the_start_of_one() {
        // A type error and an unknown field are reported with the others; a syntax error alone.
        for (text, field, line) in [
            ("region = \"B\"\nperiod_ms = 5000\nbogus = 1\n", "bogus", 3),
            ("region = \"B\"\nperiod_ms = \"x\"\n", "period_ms", 2),
            ("bogus = 1\n", "bogus", 1),
            ("region = \"B\"\nperiod_ms = \n", "config", 2),
        ] {
            let e = parse(text, &BTreeMap::new()).map(|_| ());
            let Err(e) = e else {
                panic!("{text:?} was accepted")
            };
            let mine: Vec<String> =
                e.0.iter()
                    .filter(|p| p.field == field)
                    .map(|p| p.to_string())
                    .collect();
            assert!(
                mine.len() == 1 && mine[0].ends_with(&format!("(at line {line})")),
                "{text:?}: {e}"
            );
            if field == "config" {
                assert!(
                    e.to_string()
                        .starts_with("invalid configuration (1 problem):"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn good_config_converts_to_a_deployment() {
        let c = parse(GOOD, &BTreeMap::new()).map_err(|e| e.to_string());
        let c = c.as_ref().map(|c| {
            (
                c.me.index(),
                c.period_ms,
                c.deployment.limits[0].floor,
                c.listen.to_string(),
            )
        });
        assert_eq!(
            c,
            Ok((1, 5000, Room::rps(500), "127.0.0.1:8080".to_string()))
        );
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let text = r#"
region = "Z"
phase_ms = 9000
period_ms = 5000
store = "dynamodb"
policy = "hope"
listen = "nowhere"
[[regions]]
name = "A"
[[limits]]
id = "x"
rate = -1
kind = "weird"
"#;
        let errs = match parse(text, &BTreeMap::new()) {
            Err(e) => e.0.into_iter().map(|e| e.field).collect::<Vec<_>>(),
            Ok(_) => vec![],
        };
        for f in [
            "phase_ms",
            "region",
            "table",
            "policy",
            "listen",
            "regions[0].health_check_id",
            "limits[0].rate",
            "limits[0].kind",
        ] {
            assert!(errs.iter().any(|e| e == f), "{f} missing in {errs:?}");
        }
    }

    #[test]
    fn the_health_endpoint_is_optional_local_and_checked() {
        let c = parse(GOOD, &BTreeMap::new()).map(|c| c.health_endpoint);
        assert_eq!(c.ok(), Some(None));
        let local = "aws_endpoint = \"http://127.0.0.1:5000\"\n";
        let with = format!("{local}health_endpoint = \"http://127.0.0.1:5001\"\n{GOOD}");
        let c = parse(&with, &BTreeMap::new()).map(|c| c.health_endpoint);
        assert_eq!(c.ok(), Some(Some("http://127.0.0.1:5001".to_string())));
        let fields = |text: &str| match parse(text, &BTreeMap::new()) {
            Err(e) => e.0.into_iter().map(|e| e.field).collect::<Vec<_>>(),
            Ok(_) => vec![],
        };
        let bad = format!("{local}health_endpoint = \"127.0.0.1:5001\"\n{GOOD}");
        assert_eq!(fields(&bad), vec!["health_endpoint".to_string()]);
        let alone = format!("health_endpoint = \"http://127.0.0.1:5001\"\n{GOOD}");
        assert_eq!(fields(&alone), vec!["health_endpoint".to_string()]);
    }

    #[test]
    fn the_test_store_delay_is_off_by_default_and_bounded() {
        let c = parse(GOOD, &BTreeMap::new()).map(|c| c.test_store_delay);
        assert_eq!(c.ok(), Some(std::time::Duration::ZERO));
        let slow = format!("test_store_delay_ms = 40\n{GOOD}");
        let c = parse(&slow, &BTreeMap::new()).map(|c| c.test_store_delay);
        assert_eq!(c.ok(), Some(std::time::Duration::from_millis(40)));
        let too = format!("test_store_delay_ms = 1250\n{GOOD}");
        let errs = match parse(&too, &BTreeMap::new()) {
            Err(e) => e.0.into_iter().map(|e| e.field).collect::<Vec<_>>(),
            Ok(_) => vec![],
        };
        assert_eq!(errs, vec!["test_store_delay_ms".to_string()]);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let text = format!("{GOOD}\nsurprise = 1\n");
        let e = parse(&text, &BTreeMap::new())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("surprise"), "{e}");
    }

    #[test]
    fn environment_overrides_the_file() {
        let env: BTreeMap<String, String> = [
            (ENV_REGION.to_string(), "A".to_string()),
            (
                ENV_API_TOKEN.to_string(),
                "ffffffffffffffffffff".to_string(),
            ),
            (ENV_CONFIG_TOML.to_string(), GOOD.to_string()),
        ]
        .into();
        let c = load(None, &env).map(|c| (c.region, c.phase_ms, c.api_token));
        assert_eq!(
            c.ok(),
            Some(("A".into(), 1700, Some("ffffffffffffffffffff".into())))
        );
    }

    /// GOOD as a Region whose limits come from the table (DynamoDB, no `[[limits]]`).
    fn table_mode() -> String {
        let head = GOOD.split("[[limits]]").next().unwrap_or_default();
        head.replace(
            "store = \"memory\"",
            "store = \"dynamodb\"\ntable = \"t\"\nlimits_source = \"table\"",
        )
        .replace("name = \"A\"", "name = \"A\"\nhealth_check_id = \"hc-a\"")
        .replace("name = \"B\"", "name = \"B\"\nhealth_check_id = \"hc-b\"")
    }

    fn problems(text: &str) -> Vec<String> {
        match parse(text, &BTreeMap::new()) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn limits_from_the_table_start_with_none_and_refuse_limits_in_the_file_or_a_memory_store() {
        let cfg = parse(&table_mode(), &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.limits_source, LimitsSource::Table);
        assert!(cfg.deployment.limits.is_empty());
        assert_eq!(cfg.limits_version, None);
        let both = table_mode() + "[[limits]]\nid = \"k\"\nrate = 1\n";
        let p = problems(&both);
        assert!(
            p.len() == 1 && p[0].starts_with("limits:") && p[0].contains("limits apply"),
            "{p:?}"
        );
        let memory = table_mode().replace("store = \"dynamodb\"", "store = \"memory\"");
        let p = problems(&memory);
        assert!(p.iter().any(|p| p.starts_with("limits_source:")), "{p:?}");
        let p =
            problems(&table_mode().replace("limits_source = \"table\"", "limits_source = \"s3\""));
        assert!(
            p.iter()
                .any(|p| p.starts_with("limits_source:") && p.contains("\"file\", \"table\"")),
            "{p:?}"
        );
        let p = problems(&GOOD.replace("name = \"A\"", "name = \"#limits\""));
        assert!(p.iter().any(|p| p.starts_with("regions[0].name:")), "{p:?}");
    }

    #[test]
    fn a_limits_file_is_checked_whole_and_runs_with_its_version() {
        let cfg = parse(&table_mode(), &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"));
        let regions = &cfg.deployment.regions;
        let limits = parse_limits("[[limits]]\nid = \"k\"\nrate = 100\n", regions)
            .unwrap_or_else(|e| panic!("{e}"));
        let running = with_limits(&cfg, limits, 7).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(running.deployment.limits[0].rate, Room::rps(100));
        assert_eq!(running.limits_version, Some(7));
        // Every problem, each with its field; a syntax error with its line; nothing else but
        // limits; no limit at all; ids twice (caught when the limits run together).
        let bad = "[[limits]]\nid = \"k k\"\nrate = -1\n[[limits]]\nid = \"s\"\nrate = 1\nkind = \"security\"\nhome = \"Z\"\n";
        let fields: Vec<String> = parse_limits(bad, regions)
            .err()
            .map(|e| e.0.into_iter().map(|p| p.field).collect())
            .unwrap_or_default();
        // The floor and step cap default to parts of the (negative) rate: not blamed for it.
        let want = ["limits[0].rate", "limits[0].id", "limits[1].home"];
        assert_eq!(fields, want);
        let e = parse_limits("[[limits]]\nid = \"k\"\nrate = \n", regions).err();
        assert!(e.is_some_and(|e| e.to_string().contains("line 3")));
        let e = parse_limits("region = \"A\"\n", regions).err();
        assert!(e.is_some_and(|e| e.to_string().contains("unknown field")));
        let e = parse_limits("", regions).err();
        assert!(e.is_some_and(|e| e.to_string().contains("no [[limits]]")));
        let twice = "[[limits]]\nid = \"k\"\nrate = 1\n[[limits]]\nid = \"k\"\nrate = 2\n";
        let limits = parse_limits(twice, regions).unwrap_or_else(|e| panic!("{e}"));
        let e = with_limits(&cfg, limits, 1).err();
        assert!(e.is_some_and(|e| e.to_string().contains("appears twice")));
    }

    fn reload(old: &str, new: &str) -> Result<LimitChanges, Vec<String>> {
        let env = BTreeMap::new();
        let cfg = |t: &str| parse(t, &env).unwrap_or_else(|e| panic!("{e}"));
        let (old, new) = (cfg(old), cfg(new));
        plan_reload(&old, &new).map_err(|e| e.0.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn a_reload_changes_rates_at_a_higher_version_and_adds_limits_last() {
        let new = GOOD.replace("rate = 10000", "rate = 8000\nversion = 2")
            + "[[limits]]\nid = \"k-new\"\nrate = 100\n";
        // The added limit is listed first in the file: it still goes last.
        let new = new.replacen(
            "[[limits]]",
            "[[limits]]\nid = \"k-first\"\nrate = 50\n[[limits]]",
            1,
        );
        let c = reload(GOOD, &new);
        let ids = c
            .as_ref()
            .map(|c| c.limits.iter().map(|l| l.id.clone()).collect::<Vec<_>>());
        assert_eq!(
            ids,
            Ok(vec!["k-big".into(), "k-first".into(), "k-new".into()])
        );
        let c = c.unwrap_or_default();
        assert_eq!(c.added, vec!["k-first".to_string(), "k-new".to_string()]);
        assert_eq!(
            c.versioned,
            vec![("k-big".into(), 1, 2, Room::rps(10_000), Room::rps(8_000))]
        );
        assert_eq!(reload(GOOD, GOOD).map(|c| c.is_empty()), Ok(true));
    }

    #[test]
    fn a_reload_refuses_what_cannot_change_live_naming_each_field() {
        let new = GOOD
            .replace("rate = 10000", "rate = 8000")
            .replace("phase_ms = 1700", "phase_ms = 1800\nperiod_ms = 4000")
            .replace(
                "store = \"memory\"",
                "store = \"memory\"\nlisten = \"127.0.0.1:9999\"",
            );
        let errs = reload(GOOD, &new).err().unwrap_or_default();
        for want in [
            "phase_ms: cannot change while the daemon runs (running 1700, file 1800)",
            "period_ms: cannot change",
            "listen: cannot change",
            "limits[0].version: \"k-big\": the rate changed from 10000 to 8000 without a higher version; set version = 2 or more",
        ] {
            assert!(errs.iter().any(|e| e.starts_with(want)), "{want:?} missing in {errs:?}");
        }
        assert_eq!(errs.len(), 4, "{errs:?}");
        let removed = GOOD.replace("id = \"k-big\"", "id = \"k-other\"");
        let errs = reload(GOOD, &removed).err().unwrap_or_default();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("limits: limit \"k-big\" was removed")),
            "{errs:?}"
        );
        let lower = GOOD.replace("rate = 10000", "rate = 10000\nversion = 3");
        let errs = reload(&lower, GOOD).err().unwrap_or_default();
        assert!(
            errs.iter().any(|e| e.contains("versions only go up")),
            "{errs:?}"
        );
        let kind = GOOD.replace(
            "rate = 10000",
            "rate = 10000\nkind = \"security\"\nversion = 2",
        );
        let errs = reload(GOOD, &kind).err().unwrap_or_default();
        assert!(
            errs.iter().any(|e| e.starts_with("limits[0].kind")),
            "{errs:?}"
        );
    }
}
