//! Shared by the gateway's integration tests: the outside programs they drive (found through
//! environment variables that tests/run-all.sh sets), child processes that always stop, and a
//! gateway served in-process on loopback ports against a fake daemon.
#![allow(dead_code)] // each test file uses a part of it

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use shareplane_gateway::config::{self, FileConfig, Flags};

// The fake daemon of the limiter's tests (`GET /v1/rules`, `POST /v1/demand`), shared rather
// than copied.
#[path = "../../../shareplane-limiter/tests/common/mod.rs"]
pub mod daemon;

#[allow(unused_imports)] // each test file uses a part of it
pub use daemon::{limit, redis_cluster_url, redis_url, rules, unique, FakeDaemon, TOKEN};

/// The longest any child may live: `timeout` stops it even if the test process is killed.
pub const CHILD_LIFETIME_S: u32 = 120;

/// `var` as a path to an existing file: without it, panics when `SHAREPLANE_REQUIRE_SERVICES=1`
/// (tests/run-all.sh), otherwise says the test did nothing.
pub fn program(test: &str, var: &str, what: &str) -> Option<PathBuf> {
    let found = std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "{test}: {var} ({what}) is not set to a file but SHAREPLANE_REQUIRE_SERVICES=1 \
             (tests/run-all.sh sets it)"
        );
        eprintln!(
            "{test}: did nothing: {var} ({what}) is not set to a file (tests/run-all.sh sets it)"
        );
    }
    found
}

/// Python with grpcio (`SHAREPLANE_TEST_GRPC_PYTHON`).
pub fn grpc_python(test: &str) -> Option<PathBuf> {
    program(test, "SHAREPLANE_TEST_GRPC_PYTHON", "a python with grpcio")
}

/// A scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique(name));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// A child under `timeout` in its own process group; dropping it stops the group.
pub struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    /// Starts `program args` with stdout and stderr in `dir/<name>.out` and `.err`.
    pub fn spawn(dir: &Path, name: &str, program: &Path, args: &[String]) -> Proc {
        use std::os::unix::process::CommandExt;
        let file = |ext: &str| {
            std::fs::File::create(dir.join(format!("{name}.{ext}")))
                .unwrap_or_else(|e| panic!("{name}.{ext}: {e}"))
        };
        let child = Command::new("timeout")
            .arg("-k")
            .arg("5")
            .arg(CHILD_LIFETIME_S.to_string())
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file("out"))
            .stderr(file("err"))
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({}): {e}", program.display()));
        Proc {
            name: name.to_owned(),
            child,
        }
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        for _ in 0..50 {
            if !self.alive() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

/// Runs `program args` to completion (at most 60 s) and returns its stdout; panics with its
/// stderr if it fails.
pub fn run(program: &Path, args: &[String]) -> String {
    let out = Command::new("timeout")
        .arg("60")
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{}",
        program.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A gateway served in this process on loopback ports; stopped when dropped.
pub struct Gateway {
    pub grpc: String,
    pub http: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Gateway {
    /// Serves with `flags` (the listeners are chosen here) over `file`.
    pub async fn start(file: FileConfig, mut flags: Flags) -> Gateway {
        // The gateway's log in the test's captured output (shown when it fails).
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("info")
            .try_init();
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let http = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let (ga, ha) = (
            grpc.local_addr().unwrap_or_else(|e| panic!("{e}")),
            http.local_addr().unwrap_or_else(|e| panic!("{e}")),
        );
        flags.grpc_listen = Some(ga);
        flags.http_listen = Some(ha);
        let cfg = config::resolve(file, flags).unwrap_or_else(|e| panic!("{e}"));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let stop = async move {
                let _ = rx.await;
            };
            if let Err(e) = shareplane_gateway::serve(cfg, Some(grpc), Some(http), stop).await {
                panic!("gateway: {e}");
            }
        });
        Gateway {
            grpc: ga.to_string(),
            http: format!("http://{ha}"),
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Waits until `/readyz` says ready (a rule set loaded, Redis reached, not fenced).
    pub async fn ready(&self) {
        let last = self.health_until(|status, _| status == 200).await;
        assert_eq!(last.0, 200, "the gateway never became ready: {}", last.1);
    }

    /// Polls `/readyz` (for at most 5 s) until `done(status, body)`; returns the last answer.
    pub async fn health_until(&self, done: impl Fn(u16, &str) -> bool) -> (u16, String) {
        self.probe_until("readyz", done).await
    }

    /// Polls `/<path>` (for at most 5 s) until `done(status, body)`; returns the last answer.
    pub async fn probe_until(&self, path: &str, done: impl Fn(u16, &str) -> bool) -> (u16, String) {
        let client = reqwest::Client::new();
        let mut last = (0, String::new());
        for _ in 0..200 {
            if let Ok(r) = client.get(format!("{}/{path}", self.http)).send().await {
                let status = r.status().as_u16();
                last = (status, r.text().await.unwrap_or_default());
                if done(last.0, &last.1) {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        last
    }

    /// Stops it and waits for the drain.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
    }

    pub async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.http))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Flags for a gateway on `daemon` and `redis`.
pub fn flags(daemon: &FakeDaemon, redis: &str) -> Flags {
    Flags {
        rules: Some(daemon.url.clone()),
        redis: Some(redis.to_owned()),
        demand_token: Some(TOKEN.to_owned()),
        gateway_id: Some("gw-test".to_owned()),
        ..Flags::default()
    }
}

/// The value of a metric line `name{labels} value` (exact match of `series`).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}
