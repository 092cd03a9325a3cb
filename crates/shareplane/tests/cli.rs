//! The command line: `validate` accepts the example configuration and reports every problem of
//! a bad one at once, with its field, without touching the network.

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
        .unwrap_or_else(|e| panic!("{e}"));
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
            .unwrap_or_else(|e| panic!("{e}"));
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
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for field in [
        "region:",
        "period_ms:",
        "table:",
        "api_token:",
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
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid configuration"), "{stderr}");
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

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sighup_reloads_a_new_rate_within_two_periods_and_the_daemon_runs_on() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
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
    let write = |t: String| std::fs::write(&path, t).unwrap_or_else(|e| panic!("{e}"));
    write(text("rate = 10000\n"));
    let mut child = Child(
        shareplane()
            .args(["run", "--log-format", "json", "--config"])
            .arg(&path)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    // Every log line is one JSON object; the line that says where the daemon listens is the
    // readiness signal to wait for.
    let (tx, rx) = std::sync::mpsc::channel::<serde_json::Value>();
    let stderr = child.0.stderr.take().unwrap_or_else(|| panic!("no stderr"));
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
    let next_line = |what: &str, ok: &dyn Fn(&serde_json::Value) -> bool| loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(v) if ok(&v) => return v,
            Ok(_) => {}
            Err(e) => panic!("no log line with {what}: {e}"),
        }
    };
    let listening = next_line("listen", &|v| v["fields"]["listen"].is_string());
    let addr = listening["fields"]["listen"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let limit = |v: &serde_json::Value| {
        let l = &v["limits"][0];
        (l["rate"].as_f64(), l["adopted_version"].as_u64())
    };
    let until = |what: &str, deadline: Duration, ok: &dyn Fn(&serde_json::Value) -> bool| {
        let start = Instant::now();
        loop {
            if let Some(v) = http_get(&addr, "/v1/state").filter(|v| ok(v)) {
                return (v, start.elapsed());
            }
            assert!(
                start.elapsed() < deadline,
                "{what} not seen within {deadline:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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
