//! `shareplane run`'s daemon in-process ([`shareplane::RegionDaemon`]): the listener, the store, the
//! health source and the shutdown signal are the test's own, so the whole daemon (loop, API,
//! reloader) is tested without spawning the binary.

use shareplane::config;
use shareplane::health::NoHealth;
use shareplane::reload::{ConfigSource, ReloadOutcome};
use shareplane::RegionDaemon;
use shareplane_store::memory::MemoryStore;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// `GET path` over HTTP/1.1: the status code and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

fn text(limit: &str) -> String {
    format!(
        "region = \"A\"\nperiod_ms = 500\nstore = \"memory\"\nlisten = \"127.0.0.1:0\"\n\
         api_token = \"0123456789abcdef\"\n[[regions]]\nname = \"A\"\n[[limits]]\nid = \"k\"\n{limit}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_runs_in_process_serves_its_rules_reloads_and_stops_on_its_signal() {
    let dir = std::env::temp_dir().join(format!("shareplane-inproc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("run.toml");
    std::fs::write(&path, text("rate = 10000\n")).unwrap_or_else(|e| panic!("{e}"));
    let source = ConfigSource {
        path: Some(path.clone()),
        env: BTreeMap::new(),
    };
    let cfg = source.load().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.store, config::StoreKind::Memory);
    let (stop, shutdown) = watch::channel(false);
    let region = RegionDaemon::new(cfg, source, shutdown);
    let reloads = region.reloads();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let served = tokio::spawn(region.serve(listener, MemoryStore::new(), NoHealth));

    // The first rule set: the whole limit in the only Region, under a lease.
    let rules = async {
        loop {
            if let Some((200, body)) = get(addr, "/v1/rules").await {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let body = tokio::time::timeout(Duration::from_secs(20), rules)
        .await
        .unwrap_or_else(|_| panic!("no rule set within 20 s"));
    let wire: shareplane_limiter::RulesWire =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!((wire.region.as_str(), wire.limits[0].rate), ("A", 10_000.0));
    assert!(wire.lease_ms.is_some_and(|l| l > 0), "{body}");

    // A reload through the handle (what SIGHUP does), then the new rate is served.
    std::fs::write(&path, text("rate = 8000\nversion = 2\n")).unwrap_or_else(|e| panic!("{e}"));
    let outcome = reloads.reload().await;
    assert!(
        matches!(outcome, Some(ReloadOutcome::Applied(_))),
        "{outcome:?}"
    );
    let lowered = async {
        loop {
            if let Some((200, body)) = get(addr, "/v1/rules").await {
                if body.contains("\"rate\":8000") {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), lowered)
        .await
        .unwrap_or_else(|_| panic!("the reloaded rate was not served within 10 s"));

    // The shutdown signal stops it: serve returns, cleanly, and nothing listens any more.
    let _ = stop.send(true);
    let result = tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .unwrap_or_else(|_| panic!("serve did not return within 30 s of the shutdown signal"));
    assert!(matches!(result, Ok(Ok(()))), "{result:?}");
    assert!(get(addr, "/v1/health").await.is_none(), "still serving");
    let _ = std::fs::remove_dir_all(&dir);
}
