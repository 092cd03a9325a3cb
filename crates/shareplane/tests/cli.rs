//! The command line: `validate` accepts the example configuration and reports every problem of
//! a bad one at once, with its field, without touching the network; `run` reloads on SIGHUP;
//! `limits apply` reaches every Region's daemon through the table (on moto).

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

#[cfg(feature = "aws")]
mod support;

use std::process::Command;

fn shareplane() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_shareplane"));
    c.env_remove("SHAREPLANE_CONFIG_TOML")
        .env_remove("SHAREPLANE_REGION")
        .env_remove("SHAREPLANE_API_TOKEN");
    c
}

#[test]
fn validate_accepts_the_example_configuration() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config.example.toml");
    let out = shareplane()
        .args(["validate", example])
        .env("SHAREPLANE_API_TOKEN", "an-api-token-of-enough-length")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("region us-east-1, 3 Regions, 2 limits"),
        "{stdout}"
    );
    assert!(
        stdout.contains("gateway lease 7300 ms (reclaim possible after 10000 ms, margin 2700 ms)"),
        "{stdout}"
    );
    assert!(stdout.contains("notice: no admin token"), "{stdout}");
    // The shipped example passes without any secret (CI needs no fake token).
    let out = shareplane()
        .args(["validate", example])
        .env_remove("SHAREPLANE_ADMIN_TOKEN")
        .output()
        .unwrap();
    let bare = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{bare}");
    assert!(bare.contains("note: no API token"), "{bare}");
    let with_admin = |admin: &str| {
        shareplane()
            .args(["validate", example])
            .env("SHAREPLANE_API_TOKEN", "an-api-token-of-enough-length")
            .env("SHAREPLANE_ADMIN_TOKEN", admin)
            .output()
            .unwrap()
    };
    let out = with_admin("an-admin-token-of-its-own");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(!stdout.contains("notice"), "{stdout}");
    let out = with_admin("an-api-token-of-enough-length");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("admin_token: must differ from the API token"),
        "{stderr}"
    );
}

#[test]
fn the_gateway_refuses_a_rules_url_that_cannot_be_a_daemon_naming_the_flag() {
    let out = shareplane()
        .args([
            "gateway",
            "--rules",
            "http://127.0.0.1:9/v1/demand",
            "--redis",
            "redis://127.0.0.1:9/",
            "--http-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("rules (--rules): \"http://127.0.0.1:9/v1/demand\" names a daemon endpoint"),
        "{stderr}"
    );
}

#[test]
fn validate_and_run_refuse_a_period_too_short_for_a_gateway_lease() {
    let text = "region = \"A\"\nperiod_ms = 200\nstore = \"memory\"\n\
                api_token = \"0123456789abcdef\"\n[[regions]]\nname = \"A\"\n\
                [[limits]]\nid = \"k\"\nrate = 100\n";
    for cmd in ["validate", "run"] {
        let out = shareplane()
            .args([cmd])
            .env("SHAREPLANE_CONFIG_TOML", text)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(
            stderr.contains("period_ms: is 200 ms: gateways would get a lease of")
                && stderr.contains("use at least 211 ms"),
            "{cmd}: {stderr}"
        );
    }
}

#[test]
fn validate_reports_every_problem_with_its_field() {
    let bad = "region = \"nowhere\"\nperiod_ms = 10\n[[regions]]\nname = \"A\"\n[[limits]]\nid = \"x\"\nrate = 1e300\n";
    let out = shareplane()
        .args(["validate"])
        .env("SHAREPLANE_CONFIG_TOML", bad)
        .env("SHAREPLANE_ADMIN_TOKEN", "short")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for field in [
        "region:",
        "period_ms:",
        "table:",
        "admin_token:",
        "limits[0].rate:",
        "regions[0].health_check_id:",
    ] {
        assert!(stderr.contains(field), "{field} missing in:\n{stderr}");
    }
}

#[test]
fn run_refuses_an_invalid_configuration_the_same_way() {
    let out = shareplane()
        .args(["run"])
        .env("SHAREPLANE_CONFIG_TOML", "region = 3\n")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid configuration"), "{stderr}");
}

#[test]
fn the_version_is_the_release_version() {
    let out = shareplane().arg("-V").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let version = env!("CARGO_PKG_VERSION");
    assert_ne!(version, "0.0.0", "the binary has a release version");
    if shareplane::WITH_AWS {
        assert_eq!(stdout.trim(), format!("shareplane {version}"));
    } else {
        let light =
            format!("shareplane {version} (built without AWS support: --no-default-features)");
        assert_eq!(stdout.trim(), light);
    }
}

/// Every file the help of a command points to is in the repository (issue 34: `sim --help`
/// named a SIMULATOR.md that is not).
#[test]
fn every_file_the_help_names_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let commands: [&[&str]; 11] = [
        &[],
        &["sim"],
        &["validate"],
        &["run"],
        &["limits"],
        &["limits", "apply"],
        &["limits", "import"],
        &["limits", "show"],
        &["demo"],
        &["local"],
        &["gateway"],
    ];
    let mut named = 0;
    for args in commands {
        let out = shareplane().args(args).arg("--help").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {text}");
        let words = text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)));
        for w in words.map(|w| w.trim_end_matches('.')) {
            let file = [".md", ".toml", ".yaml"].iter().any(|x| w.ends_with(x));
            // Upper-case placeholders (SCENARIO.toml) name the user's files, not ours; a
            // Markdown file is always one of ours (a SIMULATOR.md would be checked).
            let placeholder =
                !w.ends_with(".md") && w.chars().next().is_some_and(|c| c.is_ascii_uppercase());
            if !file || placeholder {
                continue;
            }
            named += 1;
            assert!(
                root.join(w).is_file(),
                "{args:?} --help names {w}, which is not in the repository"
            );
        }
    }
    assert!(named >= 5, "only {named} files named");
}

/// `validate` needs no secret: without an API token (or an admin token) it checks everything,
/// says what each one is needed for and exits 0; `run` refuses to start without the API token.
#[test]
fn validate_needs_no_token_but_run_refuses_to_start_without_one() {
    let text = "region = \"A\"\nstore = \"memory\"\nlisten = \"127.0.0.1:0\"\n\
                [[regions]]\nname = \"A\"\n[[limits]]\nid = \"k\"\nrate = 100\n";
    let out = shareplane()
        .args(["validate"])
        .env("SHAREPLANE_CONFIG_TOML", text)
        .env_remove("SHAREPLANE_ADMIN_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("configuration is valid"), "{stdout}");
    assert!(
        stdout.contains("note: no API token (SHAREPLANE_API_TOKEN or api_token): `shareplane run` will refuse to start without one"),
        "{stdout}"
    );
    assert!(
        stdout.contains("notice: no admin token")
            && stdout.contains("operator endpoints are disabled"),
        "{stdout}"
    );
    let out = shareplane()
        .args(["run"])
        .env("SHAREPLANE_CONFIG_TOML", text)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("api_token: required to run"), "{stderr}");
}

/// Every problem at once, type errors included, each naming the field, the value written and
/// its line; nothing blamed on a value the file did not write.
#[test]
fn validate_reports_type_errors_and_bad_values_together_each_with_its_line() {
    let text = "region = \"A\"\nstore = \"memory\"\nperiod_ms = 0\nlisten = 8080\n\
                [[regions]]\nname = \"A\"\n\
                [[limits]]\nid = \"k\"\nrate = -5\n\
                [[limits]]\nid = \"j\"\nrate = \"fast\"\nshadow = \"yes\"\n";
    let out = shareplane()
        .args(["validate"])
        .env("SHAREPLANE_CONFIG_TOML", text)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().map(str::trim).collect();
    let want = [
        "invalid configuration (5 problems):",
        "listen: 8080: expected a string (at line 4)",
        "limits[1].rate: \"fast\": expected a number (at line 12)",
        "limits[1].shadow: \"yes\": expected true or false (at line 13)",
        "period_ms: 0 must be 100 to 600000 (at line 3)",
        "limits[0].rate: -5 must be positive (at line 9)",
    ];
    assert_eq!(lines, want, "{stderr}");
}

/// `shareplane sim` refuses what it cannot run with exit 2 and a message naming the field: a
/// `kill_daemon` in a deployment whose gateways can hold no lease, a demand window past the
/// memory budget, a fuzz range that passes the largest seed.
#[test]
fn sim_refuses_input_it_cannot_run_with_exit_2_naming_the_field() {
    let g1 = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../simulations/scenarios/g1-grants-staggered.toml"
    ))
    .unwrap();
    let dir = std::env::temp_dir().join(format!("shareplane-cli-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kill = g1.replace("silent_after = 3", "silent_after = 1")
        + "\n[[event]]\nat_s = 10.0\nkill_daemon = \"B\"\n";
    let window = g1.replace("demand_window_s = 5.0", "demand_window_s = 10000000.0");
    for (name, text, said) in [
        (
            "kill.toml",
            kill,
            "`kill_daemon` needs gateways that can hold a lease",
        ),
        ("window.toml", window, "`sync.demand_window_s` is so long"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = shareplane().arg("sim").arg(&path).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(said), "{name}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let out = shareplane()
        .args([
            "sim",
            "fuzz",
            "--seeds",
            "2",
            "--start",
            &u64::MAX.to_string(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("passes the largest seed"), "{stderr}");
}

/// `sim fuzz --print` writes only the scenarios on stdout (the verdicts and the report go to
/// stderr), so that `--print > seed.toml` is a file `shareplane sim` runs unchanged.
#[test]
fn fuzz_print_writes_a_scenario_that_sim_runs() {
    let out = shareplane()
        .args([
            "sim", "fuzz", "--family", "swarm", "--seeds", "1", "--start", "7", "--print",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("family swarm"),
        "the report is on stderr: {stderr}"
    );
    assert!(
        !stdout.contains("family swarm"),
        "and not on stdout: {stdout}"
    );
    let path =
        std::env::temp_dir().join(format!("shareplane-cli-print-{}.toml", std::process::id()));
    std::fs::write(&path, stdout.as_bytes()).unwrap();
    let run = shareplane().arg("sim").arg(&path).output().unwrap();
    let _ = std::fs::remove_file(&path);
    let ran = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && ran.contains("scenario: swarm seed 7"),
        "{ran}{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// `GET path` on `addr`; the body, or `None` if the daemon did not answer 200.
fn http_get(addr: &str, path: &str) -> Option<serde_json::Value> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| serde_json::from_str(body).ok())
        .flatten()
}

/// Ends the child when the test ends, whatever happened.
struct Child(std::process::Child);

type LogLines = std::sync::mpsc::Receiver<serde_json::Value>;

/// `shareplane run --config path` with JSON logs: the child, the address it listens on (the
/// line that says so is the readiness signal to wait for) and its log lines from then on.
fn spawn_run(path: &std::path::Path) -> (Child, String, LogLines) {
    let (child, rx) = spawn_run_logs(path);
    let addr = listen_addr(&rx);
    (child, addr, rx)
}

/// The address in the log line that says where the daemon listens.
fn listen_addr(rx: &LogLines) -> String {
    let listening = next_log(rx, "listen", &|v| v["fields"]["listen"].is_string());
    listening["fields"]["listen"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// `shareplane run --config path` with JSON logs, and its log lines.
fn spawn_run_logs(path: &std::path::Path) -> (Child, LogLines) {
    use std::io::BufRead;
    let mut child = Child(
        shareplane()
            .args(["run", "--log-format", "json", "--config"])
            .arg(path)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("shareplane run starts"),
    );
    // Every log line is one JSON object.
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let stderr = child.0.stderr.take().expect("no stderr");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let v = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line}"));
            if tx.send(v).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// The next log line for which `ok` holds (at most a minute away).
fn next_log(
    rx: &LogLines,
    what: &str,
    ok: &dyn Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    loop {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(v) if ok(&v) => return v,
            Ok(_) => {}
            Err(e) => panic!("no log line with {what}: {e}"),
        }
    }
}

/// Polls `GET /v1/state` every 20 ms until `ok` holds of it; the state and how long it took.
fn state_until(
    addr: &str,
    what: &str,
    deadline: std::time::Duration,
    ok: &dyn Fn(&serde_json::Value) -> bool,
) -> (serde_json::Value, std::time::Duration) {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = http_get(addr, "/v1/state").filter(|v| ok(v)) {
            return (v, start.elapsed());
        }
        assert!(
            start.elapsed() < deadline,
            "{what} not seen within {deadline:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sighup_reloads_a_new_rate_within_two_periods_and_the_daemon_runs_on() {
    use std::time::Duration;
    const PERIOD_MS: u64 = 1_000;
    let dir = std::env::temp_dir().join(format!("shareplane-sighup-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("run.toml");
    let text = |limit: &str| {
        format!(
            "region = \"A\"\nperiod_ms = {PERIOD_MS}\nstore = \"memory\"\nlisten = \"127.0.0.1:0\"\n\
             api_token = \"0123456789abcdef\"\n[[regions]]\nname = \"A\"\n[[limits]]\nid = \"k\"\n{limit}"
        )
    };
    let write = |t: String| std::fs::write(&path, t).unwrap();
    write(text("rate = 10000\n"));
    let (mut child, addr, rx) = spawn_run(&path);
    let next_line = |what: &str, ok: &dyn Fn(&serde_json::Value) -> bool| next_log(&rx, what, ok);
    let limit = |v: &serde_json::Value| {
        let l = &v["limits"][0];
        (l["rate"].as_f64(), l["adopted_version"].as_u64())
    };
    let until = |what: &str, deadline: Duration, ok: &dyn Fn(&serde_json::Value) -> bool| {
        state_until(&addr, what, deadline, ok)
    };
    until("the first record", Duration::from_secs(30), &|v| {
        v["record_version"].as_u64() > Some(0)
    });

    write(text("rate = 8000\nversion = 2\n"));
    let pid = child.0.id().to_string();
    let hup = Command::new("kill").args(["-HUP", &pid]).status();
    assert!(hup.is_ok_and(|s| s.success()), "kill -HUP failed");
    let (v, took) = until("the new rate", Duration::from_secs(10), &|v| {
        limit(v) == (Some(8000.0), Some(2))
    });
    eprintln!("the new rate showed in /v1/state {took:?} after SIGHUP (period {PERIOD_MS} ms)");
    assert!(
        took <= Duration::from_millis(2 * PERIOD_MS),
        "the new rate took {took:?}, more than two periods"
    );
    assert_eq!(v["config"]["generation"], 2, "{v}");
    assert_eq!(v["config"]["last_reload"], "applied", "{v}");
    assert!(
        child.0.try_wait().ok().flatten().is_none(),
        "SIGHUP ended the daemon"
    );
    // The reload and the adoption were one structured event line each.
    for kind in ["config_reloaded", "limit_adopted"] {
        let e = next_line(kind, &|v| v["fields"]["event"] == kind);
        assert_eq!(e["fields"]["region"], "A", "{e}");
        assert!(e["fields"]["detail"].is_string(), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `shareplane limits ARGS` against moto: exit code, stdout, stderr.
#[cfg(feature = "aws")]
fn limits_cli(url: &str, args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = shareplane()
        .arg("limits")
        .args(args)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("SHAREPLANE_AWS_ENDPOINT", url)
        .output()
        .expect("shareplane limits runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One source of limits (issue 15): two Regions' daemons with `limits_source = "table"` on one
/// DynamoDB table (moto); a daemon started before any limits exist waits for them; one
/// `shareplane limits apply` reaches both, and a refused file changes nothing.
#[cfg(feature = "aws")]
#[test]
fn one_limits_apply_reaches_every_region_and_a_refused_file_changes_nothing() {
    use std::time::Duration;
    const PERIOD_MS: u64 = 1_000;
    let Some(url) = support::moto_url() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("shareplane-limits-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let table = format!("limits-apply-{}", std::process::id());
    let region_file = |name: &str, phase_ms: u64| {
        let path = dir.join(format!("{name}.toml"));
        let text = format!(
            "region = \"{name}\"\nphase_ms = {phase_ms}\nperiod_ms = {PERIOD_MS}\nstore = \"dynamodb\"\n\
             table = \"{table}\"\naws_endpoint = \"{url}\"\naws_region = \"us-east-1\"\n\
             listen = \"127.0.0.1:0\"\napi_token = \"0123456789abcdef\"\nlimits_source = \"table\"\n\
             [[regions]]\nname = \"A\"\nhealth_check_id = \"hc-a\"\n[[regions]]\nname = \"B\"\nhealth_check_id = \"hc-b\"\n"
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let (a_cfg, b_cfg) = (region_file("A", 0), region_file("B", 500));
    let limits_file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let v1 = limits_file(
        "v1.toml",
        "[[limits]]\nid = \"k-big\"\nrate = 10000\n\n[[limits]]\nid = \"login\"\nrate = 0.0833\nkind = \"security\"\n",
    );
    let v2 = limits_file(
        "v2.toml",
        "[[limits]]\nid = \"k-big\"\nrate = 8000\nversion = 2\n\n[[limits]]\nid = \"login\"\nrate = 0.0833\nkind = \"security\"\n",
    );
    let no_bump = limits_file(
        "no-bump.toml",
        "[[limits]]\nid = \"k-big\"\nrate = 6000\nversion = 2\n\n[[limits]]\nid = \"login\"\nrate = 0.0833\nkind = \"security\"\n",
    );
    let removed = limits_file(
        "removed.toml",
        "[[limits]]\nid = \"k-big\"\nrate = 8000\nversion = 2\n",
    );
    let apply = |file: &std::path::Path, extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["apply".as_ref(), "--config".as_ref(), a_cfg.as_os_str()];
        args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
        args.push(file.as_os_str());
        limits_cli(&url, &args)
    };
    // The limits commands serve nothing and need no API token: an operator's copy of a
    // rendered configuration (whose daemon reads the token from the environment) has none.
    let ops_cfg = dir.join("ops.toml");
    let b_text = std::fs::read_to_string(&b_cfg).unwrap();
    let without_token = b_text.replace("api_token = \"0123456789abcdef\"\n", "");
    assert_ne!(without_token, b_text);
    std::fs::write(&ops_cfg, without_token).unwrap();
    let show = || {
        limits_cli(
            &url,
            &["show".as_ref(), "--config".as_ref(), ops_cfg.as_os_str()],
        )
    };

    // A starts before any limits exist: it says why it waits, and serves nothing meanwhile.
    let (_a, a_logs) = spawn_run_logs(&a_cfg);
    let waiting = next_log(&a_logs, "waiting for limits", &|v| {
        v["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("holds no shared limits yet"))
    });
    assert_eq!(waiting["level"], "WARN", "{waiting}");
    let (code, out, err) = show();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("holds no shared limits"), "{out}");

    let (code, out, err) = apply(&v1, &["--dry-run"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("dry run: would write limits version 1"),
        "{out}"
    );
    assert!(
        show().1.contains("holds no shared limits"),
        "a dry run wrote nothing"
    );
    let (code, out, err) = apply(&v1, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("applied limits version 1") && out.contains("added: k-big, login"),
        "{out}"
    );
    let a_addr = listen_addr(&a_logs);
    let (_b, b_addr, _b_logs) = spawn_run(&b_cfg);
    let k_big = |v: &serde_json::Value| {
        let l = &v["limits"][0];
        (l["id"].as_str() == Some("k-big")).then(|| {
            (
                l["rate"].as_f64(),
                l["adopted_version"].as_u64(),
                v["config"]["limits_version"].as_u64(),
            )
        })
    };
    for addr in [&a_addr, &b_addr] {
        let (v, _) = state_until(addr, "limits version 1", Duration::from_secs(30), &|v| {
            k_big(v) == Some((Some(10_000.0), Some(1), Some(1)))
        });
        assert_eq!(v["config"]["limits_source"], "table", "{v}");
        assert_eq!(v["limits"].as_array().map(Vec::len), Some(2), "{v}");
    }

    // One apply, both Regions.
    let (code, out, err) = apply(&v2, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("applied limits version 2") && out.contains("k-big v1→v2"),
        "{out}"
    );
    for (name, addr) in [("A", &a_addr), ("B", &b_addr)] {
        let (_, took) = state_until(addr, "limits version 2", Duration::from_secs(10), &|v| {
            k_big(v) == Some((Some(8_000.0), Some(2), Some(2)))
        });
        eprintln!("{name} ran the applied rate {took:?} after `limits apply` returned (period {PERIOD_MS} ms)");
        // The poll of the table (once a period) and the next rebalance.
        assert!(
            took <= Duration::from_millis(3 * PERIOD_MS),
            "{name} took {took:?}"
        );
    }

    // Refused files change nothing: a new rate at the same version, a limit left out.
    let (code, _, err) = apply(&no_bump, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("limits[0].version") && err.contains("set version = 3"),
        "{err}"
    );
    let (code, _, err) = apply(&removed, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("login") && err.contains("--allow-removal"),
        "{err}"
    );
    let (code, out, _) = apply(&v2, &[]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("nothing to change") && out.contains("keeps limits version 2"),
        "{out}"
    );
    let (code, out, err) = show();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("limits version 2 in table"), "{out}");
    for addr in [&a_addr, &b_addr] {
        let v = http_get(addr, "/v1/state").unwrap_or_else(|| panic!("{addr} answers"));
        assert_eq!(k_big(&v), Some((Some(8_000.0), Some(2), Some(2))), "{v}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
