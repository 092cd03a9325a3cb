//! `shareplane`: the per-Region daemon and its tools. The work is done in the library.

use clap::{Parser, Subcommand};
use shareplane::config;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "shareplane",
    version = shareplane::VERSION,
    about = "Hold one rate limit true across several AWS Regions"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the partition-test simulator on a scenario file (see simulations/README.md).
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Check a configuration file and report every problem at once; touches no network.
    Validate {
        /// The TOML file (or omit it and set SHAREPLANE_CONFIG_TOML).
        config: Option<PathBuf>,
    },
    /// Run one replica of this Region's daemon until SIGINT or SIGTERM.
    ///
    /// SIGHUP, or a change of the file (looked at once a period), reloads the configuration:
    /// limits change live (a rate with a higher version, an added limit); anything else, and any
    /// invalid file, is refused with every problem logged and the running configuration kept.
    ///
    /// Environment: SHAREPLANE_CONFIG_TOML (the whole TOML text, instead of --config),
    /// SHAREPLANE_REGION, SHAREPLANE_LISTEN, SHAREPLANE_API_TOKEN (gateways' demand reports),
    /// SHAREPLANE_ADMIN_TOKEN (operator endpoints: abandon), SHAREPLANE_PHASE_MS,
    /// SHAREPLANE_AWS_ENDPOINT, SHAREPLANE_REPLICA_ID override the file.
    ///
    /// store = "dynamodb" needs AWS support, built in by default; a binary built with
    /// --no-default-features refuses it (exit 2).
    Run {
        /// The TOML file (see crates/shareplane/config.example.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        log: shareplane::LogArgs,
    },
    /// The shared limits in the global table: one source of limits for every Region whose
    /// configuration says `limits_source = "table"` (see docs/PROTOCOL.md, "One source of limits").
    Limits {
        #[command(subcommand)]
        command: LimitsCommand,
    },
    /// Three Regions in one process with a live web dashboard; no AWS account needed.
    Demo {
        /// Address of the dashboard (at /) and of each Region's API (at /regions/NAME/).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Rebalance period of the demo's Regions (shorter than production's 5 s so that
        /// things move quickly).
        #[arg(long, default_value_t = shareplane::demo::DEFAULT_PERIOD_MS)]
        period_ms: u64,
        #[command(flatten)]
        log: shareplane::LogArgs,
    },
    /// The real Region daemons on this machine before any deployment: A, B and C, each a whole
    /// `shareplane run` daemon with its own configuration file and API, on a simulated global
    /// table and a health source you set (faults through the control listener; see the
    /// banner). No AWS account needed.
    Local {
        /// Where the three configuration files are written (edit one to reload its Region).
        #[arg(long, default_value = "shareplane-local")]
        dir: PathBuf,
        /// The control listener's port; the Regions' APIs listen on the next three ports.
        #[arg(long, default_value_t = 7600)]
        port: u16,
        /// Rebalance period (production: 5000).
        #[arg(long, default_value_t = 1000)]
        period_ms: u64,
        /// The redis-server to run one of for each Region's gateway (default: the first on the
        /// PATH; none found: no gateways).
        #[arg(long)]
        redis_server: Option<PathBuf>,
        /// Start no gateways (nor their redis-servers), even with a redis-server on the PATH.
        #[arg(long)]
        no_gateways: bool,
        #[command(flatten)]
        log: shareplane::LogArgs,
    },
    /// Enforce this Region's shares for any gateway: Envoy's rate limit service (gRPC), an
    /// HTTP check for NGINX auth_request and Traefik ForwardAuth, /metrics, /healthz and /readyz
    /// (see docs/gateways.md). Runs until SIGINT or SIGTERM.
    Gateway {
        #[command(flatten)]
        flags: Box<shareplane_gateway::Flags>,
        #[command(flatten)]
        log: shareplane::LogArgs,
    },
}

#[derive(Subcommand)]
enum LimitsCommand {
    /// Check a limits file whole (on its own and against the table's current limits: a rate
    /// changes only with a higher version, kinds stay, nothing is left out unless
    /// --allow-removal) and write it as the table's next version. Every Region's daemon adopts
    /// it within a period. Exit 2 for a refused file, 1 for a store problem.
    Apply {
        /// A daemon configuration naming the table, its endpoint and the Regions (the
        /// operator's own Region's file will do).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The limits file: `[[limits]]` entries as in a configuration, nothing else.
        file: PathBuf,
        /// Check and print what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Write a file that leaves out limits the table has (running daemons keep running
        /// them until each is restarted). Their ids are retired for good: the document's
        /// `retired` list keeps them, and no later apply may take one again.
        #[arg(long)]
        allow_removal: bool,
    },
    /// Read envoyproxy/ratelimit's descriptor configuration (YAML, one domain per file) and
    /// write the same limits as shareplane's: a limits file (`[[limits]]`, `[[templates]]`) and
    /// the gateway's `[[descriptors]]` mappings. What cannot keep its meaning is refused, each
    /// with its file and path and why (exit 2); nothing is written then. Needs no configuration.
    Import {
        /// envoyproxy/ratelimit configuration files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Where the limits file goes (default: stdout).
        #[arg(long)]
        limits_out: Option<PathBuf>,
        /// Where the gateway's mappings go (default: stdout, after the limits).
        #[arg(long)]
        gateway_out: Option<PathBuf>,
    },
    /// Print the table's current limits: version, who applied them and when, and (with
    /// --text) the document itself.
    Show {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the whole document after the summary.
        #[arg(long)]
        text: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim { args } => shareplane_sim::cli::main(args),
        Command::Validate { config } => validate(config),
        Command::Run { config, log } => run(config, log.log_format),
        Command::Limits { command } => limits(command),
        Command::Demo {
            listen,
            period_ms,
            log,
        } => demo(listen, period_ms, log.log_format),
        Command::Local {
            dir,
            port,
            period_ms,
            redis_server,
            no_gateways,
            log,
        } => local(
            shareplane::local::LocalOptions {
                dir,
                port,
                period_ms,
                redis_server: (!no_gateways)
                    .then(|| shareplane::local_gateways::find_redis_server(redis_server))
                    .flatten(),
            },
            log.log_format,
        ),
        Command::Gateway { flags, log } => gateway(*flags, log.log_format),
    }
}

fn load(path: Option<PathBuf>) -> Result<config::Config, ExitCode> {
    config::load(path.as_deref(), &config::process_env()).map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

fn validate(path: Option<PathBuf>) -> ExitCode {
    match load(path) {
        Ok(c) => {
            let lease = shareplane_core::lease_bound(&c.deployment)
                .map(|b| {
                    format!(
                        "{} ms (reclaim possible after {} ms, margin {} ms)",
                        b.lease_ms,
                        b.reclaim_after_ms,
                        b.margin_ms()
                    )
                })
                .unwrap_or_else(|e| e.to_string());
            println!(
                "configuration is valid: region {}, {} Regions, {} limits, {} templates, period {} ms, phase {} ms, listen {}, store timeout {} ms, health timeout {} ms, gateway lease {lease}",
                c.region,
                c.deployment.n(),
                c.deployment.limits.len(),
                c.templates.len(),
                c.period_ms,
                c.phase_ms,
                c.listen,
                c.timeouts.store_ms,
                c.timeouts.health_ms,
            );
            if c.api_token.is_none() {
                println!(
                    "note: no API token ({} or api_token): `shareplane run` will refuse to start without one (gateways' demand reports need it)",
                    config::ENV_API_TOKEN
                );
            }
            if let Err(e) = shareplane::require_aws(c.store, shareplane::WITH_AWS) {
                println!("note: `shareplane run` will refuse this file here: {e}");
            }
            if c.admin_token.is_none() {
                println!(
                    "notice: no admin token ({} or admin_token): the operator endpoints are disabled (POST /v1/peers/{{region}}/abandon answers 403)",
                    config::ENV_ADMIN_TOKEN
                );
            }
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// Why the command stops: a log line at level error once logging is set up (so that with
/// `--log-format json` every line on stderr stays JSON), else a plain line.
fn fatal(why: std::fmt::Arguments<'_>) {
    if tracing::dispatcher::has_been_set() {
        tracing::error!("{why}");
    } else {
        eprintln!("{why}");
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            fatal(format_args!("cannot start the async runtime: {e}"));
            ExitCode::FAILURE
        })
}

fn run(path: Option<PathBuf>, log_format: shareplane::LogFormat) -> ExitCode {
    let source = shareplane::reload::ConfigSource {
        path: path.clone(),
        env: config::process_env(),
    };
    let cfg = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Err(e) = config::require_api_token(&cfg) {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    if let Err(e) = shareplane::require_aws(cfg.store, shareplane::WITH_AWS) {
        eprintln!("shareplane run: {e}");
        return ExitCode::from(2);
    }
    shareplane::init_logging_as(log_format);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(shareplane::run(cfg, source)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(format_args!("shareplane run: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// `shareplane limits import`: reads every file, writes both outputs only if nothing is refused.
fn import(files: &[PathBuf], limits_out: Option<&Path>, gateway_out: Option<&Path>) -> ExitCode {
    let mut texts = Vec::new();
    for f in files {
        match std::fs::read_to_string(f) {
            Ok(t) => texts.push((f.display().to_string(), t)),
            Err(e) => {
                eprintln!("shareplane limits import: cannot read {}: {e}", f.display());
                return ExitCode::from(2);
            }
        }
    }
    let out = match shareplane::import::import(&texts) {
        Ok(out) => out,
        Err(errors) => {
            eprintln!(
                "shareplane limits import: refused ({} problems), nothing written:",
                errors.len()
            );
            for e in errors {
                eprintln!("  {e}");
            }
            return ExitCode::from(2);
        }
    };
    for note in &out.notes {
        eprintln!("note: {note}");
    }
    for (text, to) in [(&out.limits, limits_out), (&out.gateway, gateway_out)] {
        match to {
            None => println!("{text}"),
            Some(p) => {
                if let Err(e) = std::fs::write(p, text) {
                    eprintln!(
                        "shareplane limits import: cannot write {}: {e}",
                        p.display()
                    );
                    return ExitCode::from(1);
                }
            }
        }
    }
    ExitCode::SUCCESS
}

fn limits(command: LimitsCommand) -> ExitCode {
    let path = match &command {
        LimitsCommand::Apply { config, .. } | LimitsCommand::Show { config, .. } => config.clone(),
        LimitsCommand::Import {
            files,
            limits_out,
            gateway_out,
        } => return import(files, limits_out.as_deref(), gateway_out.as_deref()),
    };
    // These commands serve nothing, so they need no API token (a configuration without one,
    // for a daemon that takes it from the environment, is accepted as `validate` accepts it).
    let cfg = match config::load(path.as_deref(), &config::process_env()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if cfg.store != config::StoreKind::DynamoDb {
        eprintln!("shareplane limits: the configuration says store = \"memory\", which lives inside one daemon's process; shared limits need store = \"dynamodb\"");
        return ExitCode::from(2);
    }
    limits_on_table(command, &cfg)
}

/// `shareplane limits apply|show` on the DynamoDB table `cfg` names.
#[cfg(feature = "aws")]
fn limits_on_table(command: LimitsCommand, cfg: &config::Config) -> ExitCode {
    use shareplane::limits::{ApplyOptions, LimitsError};
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result: Result<(), LimitsError> = rt.block_on(async {
        let (_, store) = shareplane::aws::table(cfg)
            .await
            .map_err(LimitsError::Store)?;
        match command {
            LimitsCommand::Apply {
                file,
                dry_run,
                allow_removal,
                ..
            } => {
                let opts = ApplyOptions {
                    dry_run,
                    allow_removal,
                };
                limits_apply(&store, cfg, &file, opts).await
            }
            // Answered before any configuration is read.
            LimitsCommand::Import { .. } => Ok(()),
            LimitsCommand::Show { text, .. } => limits_show(&store, cfg, text).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shareplane limits: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Built without AWS support there is no table to reach: a refused configuration (exit 2),
/// as `run` refuses it.
#[cfg(not(feature = "aws"))]
fn limits_on_table(_: LimitsCommand, _: &config::Config) -> ExitCode {
    eprintln!("shareplane limits: {}", shareplane::NoAws);
    ExitCode::from(2)
}

/// `shareplane limits apply`: checks `file` and writes it to the table unless `opts` says a dry run.
#[cfg(feature = "aws")]
async fn limits_apply(
    store: &shareplane_aws::DynamoStore,
    cfg: &config::Config,
    file: &Path,
    opts: shareplane::limits::ApplyOptions,
) -> Result<(), shareplane::limits::LimitsError> {
    use shareplane::limits::{self, LimitsError};
    let text = std::fs::read_to_string(file).map_err(|e| {
        LimitsError::Invalid(config::ConfigErrors(vec![shareplane_core::ConfigError {
            field: "file".into(),
            problem: format!("cannot read {}: {e}", file.display()),
        }]))
    })?;
    let (plan, written) =
        limits::apply(store, cfg, text, limits::applied_by(), now_ms(), opts).await?;
    let what = plan.describe();
    match written {
        Some(v) => println!(
            "applied limits version {v} to table {:?} (was {}): {what}; every daemon with limits_source = \"table\" adopts it within a period",
            cfg.table, plan.current
        ),
        None if plan.is_empty() => println!(
            "nothing to change: table {:?} keeps limits version {} ({what})",
            cfg.table, plan.current
        ),
        None => println!(
            "dry run: would write limits version {} to table {:?}: {what}",
            plan.current + 1,
            cfg.table
        ),
    }
    Ok(())
}

/// `shareplane limits show`: the shared limits' version and where they came from (and, with
/// `text`, the limits file itself).
#[cfg(feature = "aws")]
async fn limits_show(
    store: &shareplane_aws::DynamoStore,
    cfg: &config::Config,
    text: bool,
) -> Result<(), shareplane::limits::LimitsError> {
    match shareplane::limits::current(store).await? {
        None => println!(
            "table {:?} holds no shared limits (write them with `shareplane limits apply`)",
            cfg.table
        ),
        Some(doc) => {
            println!(
                "limits version {} in table {:?}: applied by {} at {} ({} bytes, digest {:016x})",
                doc.version,
                cfg.table,
                doc.applied_by,
                shareplane::events::rfc3339(doc.applied_at_ms),
                doc.text.len(),
                doc.digest()
            );
            if text {
                print!("{}", doc.text);
            }
        }
    }
    Ok(())
}

#[cfg(feature = "aws")]
fn now_ms() -> u64 {
    shareplane::clock::unix_ms_now()
}

fn demo(listen: SocketAddr, period_ms: u64, log_format: shareplane::LogFormat) -> ExitCode {
    shareplane::init_logging_as(log_format);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(shareplane::demo::run(listen, period_ms)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(format_args!("shareplane demo: {e}"));
            ExitCode::FAILURE
        }
    }
}

fn local(opts: shareplane::local::LocalOptions, log_format: shareplane::LogFormat) -> ExitCode {
    shareplane::init_logging_as(log_format);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(shareplane::local::run(opts)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(format_args!("shareplane local: {e}"));
            ExitCode::FAILURE
        }
    }
}

fn gateway(flags: shareplane_gateway::Flags, log_format: shareplane::LogFormat) -> ExitCode {
    let cfg = match shareplane_gateway::config::load(flags.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    shareplane::init_logging_as(log_format);
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let stop = async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let _in_runtime = rt.enter(); // the signal handlers register with the runtime
    rt.spawn(shareplane::shutdown_on_signals(tx));
    // SIGHUP reads the file (and the same flags) again; the gateway adopts what may change live.
    let (reload_tx, reloads) = tokio::sync::mpsc::channel(1);
    let hup = rt
        .block_on(async { tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) });
    match hup {
        Ok(mut hup) => {
            rt.spawn(async move {
                while hup.recv().await.is_some() {
                    let new = shareplane_gateway::config::load(flags.clone()).map_err(|e| e.0);
                    if reload_tx.send(new).await.is_err() {
                        return;
                    }
                }
            });
        }
        Err(e) => {
            tracing::error!(error = %e, "shareplane gateway: no SIGHUP handler, reloads are off")
        }
    }
    match rt.block_on(shareplane_gateway::run_reloading(cfg, stop, reloads)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(format_args!("shareplane gateway: {e}"));
            ExitCode::FAILURE
        }
    }
}
