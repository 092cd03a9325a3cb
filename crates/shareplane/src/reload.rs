//! Reloading the configuration while `shareplane run` runs: on SIGHUP, and when the file
//! changes (a poll once a period of its modification time and size, then of a hash of its
//! content).
//!
//! A new file is read and checked whole by [`crate::config::load`], exactly as at start, and then
//! against the running configuration by [`crate::config::plan_reload`]. On any problem every
//! problem is logged, counted (`shareplane_config_reloads_total{result="refused"}`) and shown in
//! `GET /v1/state` (`config.last_reload_error`), and the running configuration stays. Otherwise
//! the new deployment is handed to the rebalance loop ([`Shared::propose`]), which adopts it
//! between two rebalances, so that the coordinator, the store, the rule set and the API switch
//! together; the next rebalance adopts changed limit versions through the core's limit-change
//! protocol.
//!
//! With `limits_source = "table"` the limits come from the shared limits document in the global
//! table instead of the file: [`follow_table_limits`] reads it once a period and hands every newer
//! version to the reloader ([`ReloadHandle::adopt_table`]), which checks it whole and plans it
//! against the running limits exactly as it does a changed file; a reload of the file then
//! changes nothing but what the file holds (and the file holds no limits).
//!
//! The [`Reloader`] does not know where a trigger comes from: `run` connects SIGHUP to its
//! [`ReloadHandle`], and tests call the handle directly (on paused time, without a signal).

use crate::config::{self, Config, ConfigErrors, LimitChanges, LimitsSource};
use crate::events::Kind;
use crate::state::Shared;
use shareplane_core::Deployment;
use shareplane_store::{LimitsDoc, LimitsRead, RecordStore};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

/// Where the configuration comes from: the file (or `SHAREPLANE_CONFIG_TOML`) and the
/// environment overrides captured at start.
#[derive(Clone, Debug)]
pub struct ConfigSource {
    pub path: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
}

impl ConfigSource {
    pub fn load(&self) -> Result<Config, ConfigErrors> {
        config::load(self.path.as_deref(), &self.env)
    }
}

/// What one reload did.
#[derive(Clone, Debug, PartialEq)]
pub enum ReloadOutcome {
    /// The limits changed; the loop adopts them at its next tick.
    Applied(LimitChanges),
    /// The file says what runs already.
    Unchanged,
    /// The running configuration stays; every problem, each naming its field.
    Refused(Vec<String>),
}

impl ReloadOutcome {
    /// The metric label and the `config.last_reload` value.
    pub fn name(&self) -> &'static str {
        match self {
            ReloadOutcome::Applied(_) => "applied",
            ReloadOutcome::Unchanged => "unchanged",
            ReloadOutcome::Refused(_) => "refused",
        }
    }
}

/// What the [`Reloader`] is asked to do.
enum Request {
    /// Read the file again.
    File(oneshot::Sender<ReloadOutcome>),
    /// Run this version of the shared limits document.
    Table(LimitsDoc, oneshot::Sender<ReloadOutcome>),
}

/// Asks the [`Reloader`] to reload now (SIGHUP, or a test). Cheap to clone.
#[derive(Clone)]
pub struct ReloadHandle(mpsc::Sender<Request>);

impl ReloadHandle {
    /// Reloads and returns what it did; `None` once the reloader has stopped.
    pub async fn reload(&self) -> Option<ReloadOutcome> {
        let (tx, rx) = oneshot::channel();
        self.0.send(Request::File(tx)).await.ok()?;
        rx.await.ok()
    }

    /// Asks the reloader to run `doc` (with `limits_source = "table"`); a version not above the
    /// running one changes nothing. `None` once the reloader has stopped.
    pub async fn adopt_table(&self, doc: LimitsDoc) -> Option<ReloadOutcome> {
        let (tx, rx) = oneshot::channel();
        self.0.send(Request::Table(doc, tx)).await.ok()?;
        rx.await.ok()
    }
}

/// The file as last seen: a change of modification time or size makes the poll hash the
/// content, and only a different hash reloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fingerprint {
    modified: Option<SystemTime>,
    len: u64,
    hash: u64,
}

/// Reloads on request and when the file changes; see the module documentation.
pub struct Reloader {
    source: ConfigSource,
    running: Config,
    shared: Arc<Shared>,
    seen: Option<Fingerprint>,
    requests: mpsc::Receiver<Request>,
    poll: Duration,
}

/// Requests queued beyond this are refused (a burst of signals is one reload anyway).
const MAX_QUEUED_RELOADS: usize = 4;

impl Reloader {
    /// A reloader for a daemon that started with `running`, read from `source`.
    pub fn new(
        source: ConfigSource,
        running: Config,
        shared: Arc<Shared>,
    ) -> (Reloader, ReloadHandle) {
        let (tx, rx) = mpsc::channel(MAX_QUEUED_RELOADS);
        let poll = Duration::from_millis(running.period_ms);
        let seen = source.path.as_ref().and_then(|p| fingerprint(p, None));
        shared.update_config_status(|s| {
            s.generation = 1;
            s.path = source.path.as_ref().map(|p| p.display().to_string());
            s.limits_source = running.limits_source.name();
            s.limits_version = running.limits_version;
        });
        let r = Reloader {
            source,
            running,
            shared,
            seen,
            requests: rx,
            poll,
        };
        (r, ReloadHandle(tx))
    }

    /// Until the shared shutdown signal.
    pub async fn run(mut self) {
        let mut shutdown = self.shared.shutdown_signal();
        let mut tick = tokio::time::interval(self.poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tokio::select! {
                req = self.requests.recv() => {
                    let (outcome, reply) = match req {
                        None => return,
                        Some(Request::File(reply)) => (self.reload("signal"), reply),
                        Some(Request::Table(doc, reply)) => (self.adopt_table(doc), reply),
                    };
                    let _ = reply.send(outcome);
                }
                _ = tick.tick() => {
                    if self.file_changed() {
                        self.reload("the file changed");
                    }
                }
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }

    /// Whether the file's content differs from what was last loaded (a cheap look first).
    fn file_changed(&mut self) -> bool {
        let Some(path) = &self.source.path else {
            return false;
        };
        let now = fingerprint(path, self.seen);
        match (now, self.seen) {
            (Some(n), Some(s)) if n.hash == s.hash => {
                self.seen = Some(n);
                false
            }
            (Some(_), _) => true,
            // Unreadable now: a reload would only be refused; SIGHUP reports why.
            (None, _) => false,
        }
    }

    /// Reads, checks and (if it changes something and nothing is wrong) proposes the new
    /// configuration. `why` names the trigger in the log. With `limits_source = "table"` the
    /// file holds no limits: the running ones stay (the table's next version changes them).
    pub fn reload(&mut self, why: &str) -> ReloadOutcome {
        if let Some(p) = &self.source.path {
            self.seen = fingerprint(p, None);
        }
        let new = self
            .source
            .load()
            .map(|new| match self.running.limits_source {
                LimitsSource::File => new,
                LimitsSource::Table => Config {
                    deployment: self.running.deployment.clone(),
                    limits_version: self.running.limits_version,
                    templates: self.running.templates.clone(),
                    ..new
                },
            });
        self.adopt(why, new)
    }

    /// Checks version `doc.version` of the shared limits document whole and, if it changes
    /// something and nothing is wrong, proposes it; a version not above the running one is
    /// [`ReloadOutcome::Unchanged`].
    pub fn adopt_table(&mut self, doc: LimitsDoc) -> ReloadOutcome {
        let why = format!("shared limits version {}", doc.version);
        if self.running.limits_version >= Some(doc.version) {
            return ReloadOutcome::Unchanged;
        }
        let new = config::parse_limits(&doc.text, &self.running.deployment.regions)
            .and_then(|limits| config::with_limits(&self.running, limits, doc.version));
        self.adopt(&why, new)
    }

    /// Plans `new` against the running configuration and proposes it; reports the outcome.
    fn adopt(&mut self, why: &str, new: Result<Config, ConfigErrors>) -> ReloadOutcome {
        let outcome = match new
            .and_then(|new| config::plan_reload(&self.running, &new).map(|c| (new, c)))
        {
            Err(e) => ReloadOutcome::Refused(e.0.iter().map(|p| p.to_string()).collect()),
            Ok((new, c)) if c.is_empty() => {
                // A document that changes no limit is still the one running.
                self.running.limits_version = new.limits_version;
                self.adopt_templates(why, &new);
                ReloadOutcome::Unchanged
            }
            Ok((mut new, c)) => {
                let d = Deployment {
                    limits: c.limits.clone(),
                    ..(*self.running.deployment).clone()
                };
                match Deployment::try_new(d) {
                    Ok(d) => {
                        let d = Arc::new(d);
                        new.deployment = d.clone();
                        if self.shared.propose(d) {
                            self.adopt_templates(why, &new);
                            self.running = new;
                            ReloadOutcome::Applied(c)
                        } else {
                            ReloadOutcome::Refused(vec![format!(
                                "the daemon's loop has {} commands waiting and reads none: \
                                 the running configuration stays",
                                crate::state::MAX_QUEUED_COMMANDS
                            )])
                        }
                    }
                    Err(es) => ReloadOutcome::Refused(es.iter().map(|p| p.to_string()).collect()),
                }
            }
        };
        self.report(why, &outcome);
        outcome
    }

    /// Templates need no protocol to change: each Region publishes its static part of the new
    /// rates with its next rule set (docs/PROTOCOL.md, "Templates": the bound while Regions run
    /// different rates). They change with an accepted reload only.
    fn adopt_templates(&mut self, why: &str, new: &Config) {
        if new.templates == self.running.templates {
            return;
        }
        let d = &self.running.deployment;
        let wire = crate::templates::wire(&new.templates, d.n(), self.running.me);
        self.shared.set_templates(wire);
        self.running.templates = new.templates.clone();
        info!(region = %self.shared.region, trigger = why, templates = new.templates.len(),
              "templates changed: published with the next rule set");
    }

    fn report(&self, why: &str, outcome: &ReloadOutcome) {
        let region = &self.shared.region;
        self.shared.metrics.config_reloads.inc(outcome.name());
        let at_ms = crate::clock::unix_ms_now();
        let limits_version = self.running.limits_version;
        self.shared.update_config_status(|s| {
            s.last_reload = Some(outcome.name());
            s.last_reload_at_ms = Some(at_ms);
            s.limits_version = limits_version;
            match outcome {
                ReloadOutcome::Refused(es) => s.last_reload_error = es.clone(),
                ReloadOutcome::Applied(_) => {
                    s.generation += 1;
                    s.last_reload_error.clear();
                }
                ReloadOutcome::Unchanged => s.last_reload_error.clear(),
            }
        });
        match outcome {
            ReloadOutcome::Refused(es) => self.shared.event(
                Kind::ConfigRefused,
                None,
                None,
                format!(
                    "reload ({why}) refused, the running configuration stays; {} problems: {}",
                    es.len(),
                    es.join("; ")
                ),
            ),
            ReloadOutcome::Unchanged => {
                info!(%region, trigger = why, "configuration reloaded: no limit changed")
            }
            ReloadOutcome::Applied(c) => {
                let versioned: Vec<String> = c
                    .versioned
                    .iter()
                    .map(|(id, v0, v1, r0, r1)| format!("{id} v{v0}→v{v1} {r0}→{r1}"))
                    .collect();
                self.shared.event(
                    Kind::ConfigReloaded,
                    None,
                    None,
                    format!(
                        "reload ({why}): added [{}], new versions [{}], tuned [{}]; the next rebalance adopts them",
                        c.added.join(", "),
                        versioned.join(", "),
                        c.tuned.join(", ")
                    ),
                )
            }
        }
    }
}

fn fingerprint(path: &std::path::Path, seen: Option<Fingerprint>) -> Option<Fingerprint> {
    let meta = std::fs::metadata(path).ok()?;
    let (modified, len) = (meta.modified().ok(), meta.len());
    if let Some(s) = seen.filter(|s| s.modified == modified && s.len == len) {
        return Some(s);
    }
    if len > config::MAX_CONFIG_BYTES as u64 {
        // Hash the size alone: the reload reports the file as too large.
        return Some(Fingerprint {
            modified,
            len,
            hash: len,
        });
    }
    let bytes = std::fs::read(path).ok()?;
    Some(Fingerprint {
        modified,
        len,
        hash: shareplane_core::fnv1a_64(&bytes),
    })
}

/// With `limits_source = "table"`: reads the shared limits document once a period and hands
/// every complete version above `seen` (the one the daemon started with) to the reloader, each
/// once; a refused version stays refused (its problems in `GET /v1/state`) until a newer one
/// comes. Returns once the reloader has stopped (at shutdown).
pub async fn follow_table_limits<S: RecordStore>(
    store: Arc<S>,
    reloads: ReloadHandle,
    mut seen: u64,
    period: Duration,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_problem = String::new();
    loop {
        tick.tick().await;
        if reloads.0.is_closed() {
            return;
        }
        let problem = match store.read_limits().await {
            Ok(LimitsRead::Complete(doc)) if doc.version > seen => {
                seen = doc.version;
                if reloads.adopt_table(doc).await.is_none() {
                    return;
                }
                String::new()
            }
            Ok(LimitsRead::Incomplete { version }) if version > seen => format!(
                "shared limits version {version} has not fully arrived at this replica yet; \
                 the running limits stay"
            ),
            Ok(_) => String::new(),
            Err(e) => format!("cannot read the shared limits: {e}; the running limits stay"),
        };
        if !problem.is_empty() && problem != last_problem {
            warn!("{problem}");
        }
        last_problem = problem;
    }
}

/// Reloads on every SIGHUP until the reloader stops. The handler is installed before this
/// returns (so SIGHUP no longer ends the process from then on); the future does the reloading.
pub fn reload_on_sighup(handle: ReloadHandle) -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    async move {
        #[cfg(unix)]
        {
            let mut hup = match hup {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "cannot listen for SIGHUP; reloads follow file changes only");
                    return;
                }
            };
            while hup.recv().await.is_some() {
                info!("SIGHUP received; reloading the configuration");
                if handle.reload().await.is_none() {
                    return;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = handle;
    }
}
