//! `shareplane gateway` reloads its configuration file on SIGHUP, as the daemon does: what may
//! change live is applied, anything else refused (the running configuration stays), each counted.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The body of `GET /metrics` on `addr`, if it answered.
fn metrics(addr: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

fn reloads(addr: &str, result: &str) -> Option<f64> {
    let series = format!("shareplane_gateway_config_reloads_total{{result=\"{result}\"}} ");
    metrics(addr)?
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

/// Polls until the count of `result` is `want` (at most 10 s).
fn until(addr: &str, result: &str, want: f64) -> Option<f64> {
    let mut got = None;
    for _ in 0..200 {
        got = reloads(addr, result);
        if got == Some(want) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    got
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sighup_reloads_the_gateways_file_and_refuses_what_takes_a_restart() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = format!("127.0.0.1:{port}");
    let dir = std::env::temp_dir().join(format!("sp-gw-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("gateway.toml");
    // Nothing listens at either URL: the gateway runs (not ready) and serves /metrics.
    let base = format!("rules = \"http://127.0.0.1:1\"\nhttp_listen = \"{addr}\"\n");
    let write = |extra: &str| {
        std::fs::write(&file, format!("{base}{extra}")).unwrap_or_else(|e| panic!("{e}"))
    };
    write("redis = \"redis://127.0.0.1:1/\"\n");
    let child = Command::new(env!("CARGO_BIN_EXE_shareplane"))
        .args(["gateway", "--config"])
        .arg(&file)
        .env_remove("SHAREPLANE_DEMAND_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut child = Child(child);
    assert_eq!(
        until(&addr, "applied", 0.0),
        Some(0.0),
        "the gateway never served /metrics"
    );
    let hup = || {
        let pid = child.0.id().to_string();
        let s = Command::new("kill").args(["-HUP", &pid]).status();
        assert!(s.is_ok_and(|s| s.success()), "kill -HUP failed");
    };
    write("redis = \"redis://127.0.0.1:1/\"\ntemplate_value = \"error\"\n[[descriptors]]\nkey = \"k\"\nlimit = \"l\"\n");
    hup();
    assert_eq!(until(&addr, "applied", 1.0), Some(1.0));
    // Another Redis takes a restart: refused, and so is a file that does not load.
    write("redis = \"redis://127.0.0.2:1/\"\n");
    hup();
    assert_eq!(until(&addr, "refused", 1.0), Some(1.0));
    write("redis = 7\n");
    hup();
    assert_eq!(until(&addr, "refused", 2.0), Some(2.0));
    assert!(
        matches!(child.0.try_wait(), Ok(None)),
        "the gateway runs on"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
