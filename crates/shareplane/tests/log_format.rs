//! `--log-format json` in every long-running subcommand (`gateway`, `demo`, `local`; `run` has
//! its own tests in `cli.rs`): each is started as a process, and every line it writes on stderr,
//! from the start to its exit on SIGTERM, must be one JSON object with a level and a message,
//! and no field written empty. The gateway's failed rule fetch keeps its cause.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// A child process, killed when the test ends however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `shareplane ARGS --log-format json`, and each of its stderr lines as it comes.
fn start(args: &[&str]) -> (Child, Receiver<String>) {
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_shareplane"))
            .args(args)
            .args(["--log-format", "json"])
            .env_remove("RUST_LOG")
            .env_remove("SHAREPLANE_DEMAND_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("shareplane {args:?} does not start: {e}")),
    );
    let stderr = child.0.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// `line` as JSON, checked: an object with a level, a message and no empty field.
fn parse(line: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("a stderr line is not JSON ({e}): {line}"));
    let level = v["level"].as_str().unwrap_or("");
    assert!(
        ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
        "no level: {line}"
    );
    assert!(
        v["fields"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "no message: {line}"
    );
    let fields = v["fields"].as_object().cloned().unwrap_or_default();
    for (k, f) in fields {
        assert_ne!(f, serde_json::json!(""), "field {k} written empty: {line}");
    }
    v
}

/// Reads lines (each checked by [`parse`]) until `count` of them satisfy `want`; all read.
fn read_until(
    rx: &Receiver<String>,
    what: &str,
    count: usize,
    want: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let mut seen = Vec::new();
    let mut found = 0;
    while found < count {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let v = parse(&line);
                found += usize::from(want(&v));
                seen.push(v);
            }
            Err(e) => panic!("{found} of {count} lines with {what} ({e}); read: {seen:#?}"),
        }
    }
    seen
}

/// SIGTERM, then every line until stderr closes (each checked); the exit must be clean and the
/// last lines must be the shutdown's.
fn stop(mut child: Child, rx: &Receiver<String>) -> Vec<serde_json::Value> {
    let pid = child.0.id().to_string();
    let sent = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(
        sent.as_ref().is_ok_and(|s| s.success()),
        "kill -TERM {pid}: {sent:?}"
    );
    let mut rest = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => rest.push(parse(&line)),
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("no exit 30 s after SIGTERM: {rest:#?}"),
        }
    }
    let status = child.0.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "{status}: {rest:#?}");
    assert!(
        rest.iter()
            .any(|v| v["fields"]["message"] == "SIGTERM received; shutting down"),
        "{rest:#?}"
    );
    rest
}

fn message_is(v: &serde_json::Value, m: &str) -> bool {
    v["fields"]["message"] == m
}

#[test]
fn the_gateway_logs_json_and_a_failed_rule_fetch_keeps_its_cause() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let rules = format!("http://127.0.0.1:{closed}");
    let redis = format!("redis://127.0.0.1:{closed}/");
    let (child, rx) = start(&[
        "gateway",
        "--rules",
        &rules,
        "--redis",
        &redis,
        "--http-listen",
        "127.0.0.1:0",
    ]);
    let lines = read_until(&rx, "a failed rule fetch", 1, |v| {
        message_is(v, "rule fetch failed")
    });
    let failed = lines.last().cloned().unwrap_or_default();
    let error = failed["fields"]["error"].as_str().unwrap_or("");
    // The cause at the end of the source chain, not only reqwest's "error sending request".
    assert!(
        error.to_ascii_lowercase().contains("connection refused"),
        "{failed}"
    );
    assert!(error.contains(&format!("127.0.0.1:{closed}")), "{failed}");
    assert_eq!(failed["level"], "WARN", "{failed}");
    stop(child, &rx);
}

#[test]
fn the_demo_logs_json_from_start_to_shutdown() {
    let (child, rx) = start(&["demo", "--listen", "127.0.0.1:0"]);
    let lines = read_until(&rx, "a writer lease taken", 3, |v| {
        message_is(v, "took the writer lease")
    });
    let mut regions: Vec<&str> = (lines.iter())
        .filter(|v| message_is(v, "took the writer lease"))
        .filter_map(|v| v["fields"]["region"].as_str())
        .collect();
    regions.sort_unstable();
    assert_eq!(regions, ["A", "B", "C"]);
    stop(child, &rx);
}

#[test]
fn local_logs_json_from_start_to_shutdown() {
    let dir = std::env::temp_dir().join(format!("shareplane-log-local-{}", std::process::id()));
    let dir_arg = dir.display().to_string();
    let (child, rx) = start(&["local", "--dir", &dir_arg, "--port", "0"]);
    let lines = read_until(&rx, "a local Region started", 3, |v| {
        message_is(v, "local Region started")
    });
    let mut regions: Vec<&str> = (lines.iter())
        .filter(|v| message_is(v, "local Region started"))
        .filter_map(|v| v["fields"]["region"].as_str())
        .collect();
    regions.sort_unstable();
    assert_eq!(regions, ["A", "B", "C"]);
    stop(child, &rx);
    let _ = std::fs::remove_dir_all(&dir);
}
