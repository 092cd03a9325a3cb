//! `shareplane-loadgen`: one gateway under load. Watches a daemon's rules, reports demand to it,
//! sends checks for one limit at a demand pattern through the Region's Redis, and writes one JSON
//! line per second (see `shareplane_limiter::loadgen::SecondStats`) to stdout at the end, and a
//! summary to stderr among its log lines (`--log-format json`: every stderr line one JSON object).
//!
//! Example: `shareplane-loadgen --daemon http://127.0.0.1:8081 --redis redis://127.0.0.1:6391/
//!   --token T --gateway gw-a --region A --limit k-big --pattern 0:720 --duration-s 60`

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use shareplane_limiter::demand::Incarnation;
use shareplane_limiter::loadgen::{drive_until, Pattern, Run, SecondStats};
use shareplane_limiter::{http, DemandReporter, Limiter, LimiterConfig, LimiterStats, RuleWatcher};

#[derive(Parser, Debug)]
#[command(
    about = "Drive one gateway's limiter with a demand pattern and count admissions per second"
)]
struct Args {
    /// The daemon's base URL (rules and demand).
    #[arg(long)]
    daemon: String,
    /// The Region's Redis, redis://host:port/.
    #[arg(long)]
    redis: String,
    /// Bearer token for POST /v1/demand.
    #[arg(long)]
    token: String,
    #[arg(long, default_value = "loadgen")]
    gateway: String,
    /// Refuse rule sets for another Region.
    #[arg(long)]
    region: Option<String>,
    #[arg(long)]
    limit: String,
    /// "AT_S:RPS,AT_S:RPS,...": the demand, piecewise constant from each time on.
    #[arg(long)]
    pattern: String,
    #[arg(long, default_value_t = 60)]
    duration_s: u64,
    /// Seconds to wait for the first rule set before sending (requests need rules).
    #[arg(long, default_value_t = 10)]
    ready_timeout_s: u64,
    #[arg(long, default_value_t = 1000)]
    report_every_ms: u64,
    #[arg(long, default_value_t = 25_000)]
    wait_ms: u64,
    #[arg(long, default_value_t = 1)]
    gateways_per_region: u32,
    #[arg(long, default_value_t = 50)]
    redis_timeout_ms: u64,
    /// Start sending at this wall-clock time (ms since the Unix epoch), to line up several
    /// generators; at once if absent or past.
    #[arg(long)]
    start_at_unix_ms: Option<u64>,
    #[command(flatten)]
    log: shareplane_limiter::logging::LogArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // The limiter's own lines from warnings up (it logs every rule set installed at info); this
    // binary's from info, for its summary.
    shareplane_limiter::logging::init(args.log.log_format, "warn,shareplane_loadgen=info");
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("shareplane-loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let pattern = Pattern::parse(&args.pattern)?;
    let cfg = LimiterConfig {
        region: args.region.clone(),
        gateways_per_region: args.gateways_per_region,
        redis_timeout: Duration::from_millis(args.redis_timeout_ms),
        ..LimiterConfig::new(args.redis.clone())
    };
    let limiter = Arc::new(Limiter::new(cfg)?);
    let client = http::client()?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let watcher = RuleWatcher::new(client.clone(), &args.daemon, args.wait_ms);
    let watching = tokio::spawn(watcher.run(limiter.clone(), stopped()));
    let reporter = DemandReporter::new(
        client,
        &args.daemon,
        &args.token,
        &args.gateway,
        Incarnation::now(),
    )?;
    let every = Duration::from_millis(args.report_every_ms.max(10));
    let reporting = tokio::spawn(reporter.run(limiter.clone(), every, stopped()));

    let ready = tokio::time::timeout(Duration::from_secs(args.ready_timeout_s), async {
        while limiter.version() == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if ready.is_err() {
        let _ = stop_tx.send(true);
        return Err(format!(
            "no rule set from {} within {} s",
            args.daemon, args.ready_timeout_s
        )
        .into());
    }
    let run = Run {
        limit: args.limit,
        pattern,
        duration: Duration::from_secs(args.duration_s),
        tick: Duration::from_millis(10),
        start_unix_ms: args.start_at_unix_ms,
    };
    // SIGINT or SIGTERM stops the run early; the seconds begun are still printed.
    let seconds = drive_until(limiter.clone(), run, interrupted()).await;
    let _ = stop_tx.send(true);
    let seconds = seconds?;
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        let _ = watching.await;
        let _ = reporting.await;
    })
    .await;
    for s in &seconds {
        println!("{}", serde_json::to_string(s)?);
    }
    summary(&seconds, &limiter.stats());
    Ok(())
}

/// Resolves on the first SIGINT or SIGTERM.
async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let term = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// The run's totals as one log line (its figures as fields).
fn summary(seconds: &[SecondStats], stats: &LimiterStats) {
    tracing::info!(
        seconds = seconds.len(),
        sent = seconds.iter().map(|s| s.sent).sum::<u64>(),
        admitted = seconds.iter().map(|s| s.admitted).sum::<u64>(),
        fallback_decisions = stats.fallback_decisions,
        redis_failures = stats.redis_failures,
        fallback_repaid = stats.fallback_repaid,
        fallback_owed = stats.fallback_owed,
        "shareplane-loadgen: done (fallback tokens repaid to Redis of those owed)"
    );
}
