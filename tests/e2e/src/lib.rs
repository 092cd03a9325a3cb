//! End-to-end tests of shareplane: real processes (daemons, `redis-server`, load generators) on
//! 127.0.0.1 around one local DynamoDB-compatible server (moto). The harness lives here; the tests
//! are in `tests/`.
//!
//! - [`procs`]: children that always stop (`timeout`, own process group, stopped on drop).
//! - [`cluster`]: three Regions' daemons, Redis servers and load generators, and their health.
//! - [`local_aws`]: the record table and the health datapoints on moto.
//! - [`faults`]: fault schedules, fixed (the restore race) or drawn from a seed.
//! - [`checker`]: judges a partition run's recorded history (admissions, enforced shares).
//! - [`figures`]: the properties of a run, from the load generators' output and polled rules.
//! - [`replicator`]: a global table made of one moto server per Region and a replication link
//!   between each two that can be cut and healed.
//! - [`rules`]: reading the daemons' published rule sets.
//!
//! Environment (the workspace's convention): `SHAREPLANE_TEST_MOTO_URL` names the moto server;
//! without it the tests say they did nothing, unless `SHAREPLANE_REQUIRE_SERVICES=1`, which makes
//! them fail. The binaries must be built first: `cargo build -p shareplane -p shareplane-limiter
//! --bins` (tests/run-all.sh does it).

// A test harness: it times real processes on the machine's clocks (clippy.toml bans direct clock
// reads in the daemon's and the gateways' code, not in tests).
#![allow(clippy::disallowed_methods)]

pub mod checker;
pub mod cluster;
pub mod faults;
pub mod figures;
pub mod local_aws;
pub mod procs;
pub mod replicator;
pub mod rules;

/// Whether missing services fail the tests (tests/run-all.sh sets it) rather than skip them.
pub fn services_required() -> bool {
    std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() == Ok("1")
}

/// What a test needs from outside, or `None` (after saying why the test did nothing) when it is
/// missing and not required. Panics with `why` when it is missing and required.
pub fn needed<T>(test: &str, found: Option<T>, why: &str) -> Option<T> {
    if found.is_some() {
        return found;
    }
    assert!(
        !services_required(),
        "{test}: {why}, but SHAREPLANE_REQUIRE_SERVICES=1 (tests/run-all.sh provides it)"
    );
    eprintln!("{test}: did nothing: {why}");
    None
}

/// The moto URL from `SHAREPLANE_TEST_MOTO_URL`, per [`needed`].
pub fn moto_url(test: &str) -> Option<String> {
    let url = std::env::var("SHAREPLANE_TEST_MOTO_URL")
        .ok()
        .filter(|u| !u.is_empty());
    needed(test, url, "SHAREPLANE_TEST_MOTO_URL is not set")
}

/// `redis-server` on the PATH, per [`needed`].
pub fn redis_server(test: &str) -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("redis-server"))
            .find(|p| p.is_file())
    });
    needed(test, found, "redis-server is not on the PATH")
}

/// The built binary `name` next to this test executable (see [`procs::binary`]), per [`needed`].
pub fn built(test: &str, name: &str) -> Option<std::path::PathBuf> {
    let bin = procs::binary(name);
    let why = bin
        .as_ref()
        .err()
        .map(ToString::to_string)
        .unwrap_or_default();
    needed(test, bin.ok(), &why)
}

/// A name no other run against the same server uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        shareplane_limiter::loadgen::unix_ms_now()
    )
}

/// Where tests write their figures too (tests/run-all.sh prints the file, since cargo test hides
/// the output of tests that pass).
pub const REPORT_ENV: &str = "SHAREPLANE_E2E_REPORT";

/// Appends `text` to the file named by [`REPORT_ENV`], if set (several tests share the file;
/// tests/run-all.sh removes it before the run).
pub fn append_report(text: &str) {
    let Some(path) = std::env::var_os(REPORT_ENV) else {
        return;
    };
    use std::io::Write;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{text}"));
    if let Err(e) = written {
        eprintln!("cannot write the report to {path:?}: {e}");
    }
}
