//! The daemon's configuration: a TOML file (or the whole TOML text in `SHAREPLANE_CONFIG_TOML`)
//! plus a few `SHAREPLANE_*` overrides, checked all at once.
//!
//! [`load`] never touches the network. It returns either a [`Config`] that `run` can use as it is,
//! or every problem found, each naming its field, so that `shareplane validate` and `shareplane
//! run` refuse an invalid file the same way.

mod batches;
mod changes;
mod limits_check;
pub mod read;
pub mod timeouts;

pub use changes::{limit_changes, plan_reload, LimitChanges};
pub use read::{RawConfig, RawLimit, RawRegion};
pub use timeouts::Timeouts;

pub(crate) use crate::problem::problem;
use crate::templates::{check_templates, slot_limits, TemplateSpec};
use limits_check::check_limits;
use shareplane_core::{ConfigError, Deployment, Design, Fence, LimitSpec, RegionId, SilentPolicy};
use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

/// Environment variables that override the file (documented in `shareplane run --help`).
pub const ENV_CONFIG_TOML: &str = "SHAREPLANE_CONFIG_TOML";
pub const ENV_REGION: &str = "SHAREPLANE_REGION";
pub const ENV_LISTEN: &str = "SHAREPLANE_LISTEN";
pub const ENV_API_TOKEN: &str = "SHAREPLANE_API_TOKEN";
pub use crate::tokens::{ENV_ADMIN_TOKEN, MIN_TOKEN_CHARS};
pub const ENV_PHASE_MS: &str = "SHAREPLANE_PHASE_MS";
pub const ENV_AWS_ENDPOINT: &str = "SHAREPLANE_AWS_ENDPOINT";
pub const ENV_REPLICA_ID: &str = "SHAREPLANE_REPLICA_ID";

/// The longest configuration text accepted (a file or the environment variable): 100,000 limits
/// take about 6 MB.
pub const MAX_CONFIG_BYTES: usize = 16 << 20;

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
    /// Limits per value of a descriptor entry, held by a static split or, with slots, by their
    /// slot limits (in `deployment.limits`, after the listed ones: [`crate::templates`]).
    pub templates: Arc<Vec<TemplateSpec>>,
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
    let (period_ms, period_ok) = check_period_and_phase(&raw, errors);
    let names: Vec<String> = raw.regions.iter().map(|r| r.name.clone()).collect();
    let (region, me) = check_region(&raw, &names, errors);
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
    let limits_source = check_limits_source(&raw, store, errors);
    check_region_names(&names, errors);
    let mut limits = check_limits(&raw.limits, &names, errors);
    let limit_ids: Vec<&str> = raw.limits.iter().map(|l| l.id.as_str()).collect();
    let templates = check_templates(&raw.templates, &limit_ids, errors);
    check_retired(
        raw.limits.iter().map(|l| l.id.as_str()),
        raw.templates.iter().map(|t| t.id.as_str()),
        raw.retired.as_deref().unwrap_or_default(),
        errors,
    );
    limits.extend(slot_limits(&templates, names.len()));
    let d = check_deployment(names, limits, policy, fence, period_ms, errors);
    let timeouts = timeouts::check_timeouts(&raw, period_ok, errors);
    let test_store_delay_ms =
        timeouts::check_test_delay(&raw, timeouts, period_ok.is_some(), errors);
    let (limits_rollout_periods, replica_id) = check_rollout_and_replica(&raw, errors);
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
        templates: Arc::new(templates),
        region,
    })
}

/// `period_ms`, with `Some` when it is within bounds, and `phase_ms` below it.
fn check_period_and_phase(raw: &RawConfig, errors: &mut Vec<ConfigError>) -> (u64, Option<u64>) {
    let period_ms = raw.period_ms.unwrap_or(DEFAULT_PERIOD_MS);
    let period_ok = timeouts::check_period(period_ms, errors);
    if period_ok.is_some() && raw.phase_ms >= period_ms {
        errors.push(problem(
            "phase_ms",
            format!("{} must be below period_ms ({period_ms})", raw.phase_ms),
        ));
    }
    (period_ms, period_ok)
}

/// This Region's name (`region`, which must be one of `regions`) and its id.
fn check_region(
    raw: &RawConfig,
    names: &[String],
    errors: &mut Vec<ConfigError>,
) -> (String, Option<RegionId>) {
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
    (region, me)
}

/// No Region's name may start with '#'.
fn check_region_names(names: &[String], errors: &mut Vec<ConfigError>) {
    if let Some(i) = names.iter().position(|n| n.starts_with('#')) {
        errors.push(problem(
            format!("regions[{i}].name"),
            "must not start with '#' (the table keeps the shared limits under \"#limits\")",
        ));
    }
}

/// `limits_source`, and what `"table"` rules out (limits in the file, the memory store).
fn check_limits_source(
    raw: &RawConfig,
    store: StoreKind,
    errors: &mut Vec<ConfigError>,
) -> LimitsSource {
    let limits_source = choice(
        errors,
        "limits_source",
        &raw.limits_source,
        LimitsSource::NAMES,
    );
    if limits_source == LimitsSource::Table {
        if !raw.limits.is_empty() || !raw.templates.is_empty() {
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
    limits_source
}

/// `limits_rollout_periods` and `replica_id`.
fn check_rollout_and_replica(raw: &RawConfig, errors: &mut Vec<ConfigError>) -> (u32, String) {
    let limits_rollout_periods = raw
        .limits_rollout_periods
        .unwrap_or(DEFAULT_ROLLOUT_PERIODS);
    if !(1..=MAX_ROLLOUT_PERIODS).contains(&limits_rollout_periods) {
        errors.push(problem(
            "limits_rollout_periods",
            format!("{limits_rollout_periods} must be 1 to {MAX_ROLLOUT_PERIODS}"),
        ));
    }
    let replica_id = raw.replica_id.clone().unwrap_or_else(default_replica_id);
    if replica_id.is_empty() || replica_id.len() > 128 {
        let n = replica_id.chars().count();
        errors.push(problem(
            "replica_id",
            format!("{n} characters: must be 1 to 128"),
        ));
    }
    (limits_rollout_periods, replica_id)
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

/// What a limits file holds: its limits, its templates and its retired ids.
#[derive(Clone, Debug, PartialEq)]
pub struct LimitsFile {
    /// The listed limits, then the templates' slot limits ([`slot_limits`]).
    pub limits: Vec<LimitSpec>,
    pub templates: Vec<TemplateSpec>,
    /// `retired`: ids of limits and slotted templates that an earlier version of the table's
    /// document removed, which no limit or template may take again (`None`: not written). Kept
    /// by `shareplane limits apply` ([`crate::limits`]).
    pub retired: Option<Vec<String>>,
}

/// Refuses a limit or template whose id is `retired`, each at its entry (`limits[i].id`,
/// `templates[i].id`): a Region that ran it may still hold room of it (room it was granted, or
/// inherited), while a Region adding it anew would adopt its static part again, so the room in
/// existence would exceed the rate. Used for a file's own `retired` list and, by `shareplane
/// limits apply`, for the table's.
pub(crate) fn check_retired<'a>(
    limits: impl IntoIterator<Item = &'a str>,
    templates: impl IntoIterator<Item = &'a str>,
    retired: &[String],
    errors: &mut Vec<ConfigError>,
) {
    if retired.is_empty() {
        return;
    }
    let retired: HashSet<&str> = retired.iter().map(String::as_str).collect();
    let ids = limits.into_iter().map(|id| ("limits", id)).enumerate();
    let ids = ids.chain(
        templates
            .into_iter()
            .map(|id| ("templates", id))
            .enumerate(),
    );
    for (i, (what, id)) in ids {
        if retired.contains(id) {
            errors.push(problem(
                format!("{what}[{i}].id"),
                format!(
                    "{id:?} is retired (an earlier version of the limits removed it): Regions that \
                     ran it may still hold room of it, to which its static part would arrive \
                     again; an id is never taken twice, so give it a new one"
                ),
            ));
        }
    }
}

/// Parses a limits file (the `[[limits]]` and `[[templates]]` entries of a configuration,
/// nothing else, as `shareplane limits apply` takes and the table keeps) and checks each limit
/// and template on its own against the Regions `regions`, reporting every problem with its field
/// (and line). [`with_limits`] checks the limits together (ids that appear twice, rates against
/// the Regions).
pub fn parse_limits(text: &str, regions: &[String]) -> Result<LimitsFile, ConfigErrors> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(ConfigErrors(vec![problem("limits", "larger than 16 MiB")]));
    }
    let (raw, raw_templates, retired, mut located) = read::read_limits(text)?;
    let misread = located.misread();
    let mut errors = Vec::new();
    let mut limits = check_limits(&raw, regions, &mut errors);
    let ids: Vec<&str> = raw.iter().map(|l| l.id.as_str()).collect();
    let templates = check_templates(&raw_templates, &ids, &mut errors);
    check_retired(
        raw.iter().map(|l| l.id.as_str()),
        raw_templates.iter().map(|t| t.id.as_str()),
        retired.as_deref().unwrap_or_default(),
        &mut errors,
    );
    limits.extend(slot_limits(&templates, regions.len()));
    errors.retain(|e| !misread.contains(&e.field));
    if raw.is_empty() && raw_templates.is_empty() {
        errors.push(problem("limits", "no [[limits]] or [[templates]] entry"));
    }
    let mut all = std::mem::take(&mut located.errors);
    all.append(&mut errors);
    located.annotate(&mut all);
    if all.is_empty() {
        Ok(LimitsFile {
            limits,
            templates,
            retired,
        })
    } else {
        Err(ConfigErrors(all))
    }
}

/// `cfg` running the limits and templates of `file`, from version `version` of the shared limits
/// document; every problem the deployment finds in the limits (a rate, floor or step cap that
/// does not fit) is reported.
pub fn with_limits(cfg: &Config, file: LimitsFile, version: u64) -> Result<Config, ConfigErrors> {
    let d = Deployment {
        limits: file.limits,
        ..(*cfg.deployment).clone()
    };
    let d = Deployment::try_new(d).map_err(ConfigErrors)?;
    Ok(Config {
        deployment: Arc::new(d),
        limits_version: Some(version),
        templates: Arc::new(file.templates),
        ..cfg.clone()
    })
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
mod slot_tests;

#[cfg(test)]
mod tests;
