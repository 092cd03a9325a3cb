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

/// `GET /v1/state` as JSON.
async fn state(addr: std::net::SocketAddr) -> serde_json::Value {
    match get(addr, "/v1/state").await {
        Some((200, body)) => serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}")),
        other => panic!("GET /v1/state gave {other:?}"),
    }
}

/// Polls `/v1/state` every 20 ms (at most 10 s) until `ok` holds of it.
async fn state_until(
    addr: std::net::SocketAddr,
    what: &str,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let wait = async {
        loop {
            let v = state(addr).await;
            if ok(&v) {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("{what}: not seen within 10 s"))
}

/// With `limits_source = "table"` the daemon waits for the shared limits, runs them, follows
/// every newer version through the reloader, and keeps what runs when a version is refused
/// (one that drops a limit, one that does not parse), saying why in `GET /v1/state`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_from_the_table_are_waited_for_followed_and_a_refused_version_changes_nothing() {
    use shareplane_store::{LimitsDoc, RecordStore};
    let text = "region = \"A\"\nperiod_ms = 500\nstore = \"dynamodb\"\ntable = \"t\"\n\
                limits_source = \"table\"\nlisten = \"127.0.0.1:0\"\napi_token = \"0123456789abcdef\"\n\
                [[regions]]\nname = \"A\"\nhealth_check_id = \"hc-a\"\n";
    let source = ConfigSource {
        path: None,
        env: BTreeMap::from([(config::ENV_CONFIG_TOML.to_string(), text.to_string())]),
    };
    let cfg = source.load().unwrap_or_else(|e| panic!("{e}"));
    assert!(cfg.deployment.limits.is_empty());
    let store = MemoryStore::new();
    let doc = |version: u64, text: &str| LimitsDoc {
        version,
        text: text.to_string(),
        applied_by: "test".into(),
        applied_at_ms: 0,
    };
    let write = |d: LimitsDoc| {
        let store = store.clone();
        async move {
            store
                .write_limits(&d)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let (stop, mut shutdown) = watch::channel(false);

    // Nothing in the table: it waits (and a shutdown would end the wait).
    let waiting = {
        let (store, mut shutdown) = (store.clone(), shutdown.clone());
        tokio::spawn(async move { shareplane::with_table_limits(cfg, &store, &mut shutdown).await })
    };
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(!waiting.is_finished(), "it must wait for limits");
    let two = "[[limits]]\nid = \"k\"\nrate = 100\n[[limits]]\nid = \"s\"\nrate = 1\nkind = \"security\"\n";
    // A version it cannot run (a home that is no Region here) is not run: it waits on.
    write(doc(
        1,
        "[[limits]]\nid = \"s\"\nrate = 1\nkind = \"security\"\nhome = \"Z\"\n",
    ))
    .await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(!waiting.is_finished(), "a version it cannot run is not run");
    write(doc(2, two)).await;
    let cfg = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap_or_else(|_| panic!("the written limits were not taken within 5 s"))
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no shutdown was sent"));
    assert_eq!(
        (cfg.deployment.limits.len(), cfg.limits_version),
        (2, Some(2))
    );

    let region = RegionDaemon::new(cfg, source.clone(), shutdown.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let served = tokio::spawn(region.serve(listener, store.clone(), NoHealth));
    let k = |v: &serde_json::Value| {
        (
            v["limits"][0]["rate"].as_f64(),
            v["config"]["limits_version"].as_u64(),
        )
    };
    state_until(addr, "version 2 running", |v| {
        k(v) == (Some(100.0), Some(2))
    })
    .await;

    // A version that drops a limit is refused by the running daemon: it keeps both.
    write(doc(3, "[[limits]]\nid = \"k\"\nrate = 100\n")).await;
    let v = state_until(addr, "version 3 refused", |v| {
        v["config"]["last_reload"] == "refused"
    })
    .await;
    let why = v["config"]["last_reload_error"].to_string();
    assert!(why.contains("\\\"s\\\" was removed"), "{why}");
    assert_eq!(
        (k(&v), v["limits"].as_array().map(Vec::len)),
        ((Some(100.0), Some(2)), Some(2))
    );

    // A newer version that only changes a rate (at a higher version) runs.
    let lowered = two.replace("rate = 100", "rate = 80\nversion = 2");
    write(doc(4, &lowered)).await;
    let v = state_until(addr, "version 4 running", |v| k(v) == (Some(80.0), Some(4))).await;
    assert_eq!(v["config"]["last_reload"], "applied", "{v}");

    // One that does not parse changes nothing either.
    write(doc(5, "[[limits]]\nid = \"k\"\nrate = \n")).await;
    let v = state_until(addr, "version 5 refused", |v| {
        v["config"]["last_reload"] == "refused"
    })
    .await;
    assert!(
        v["config"]["last_reload_error"]
            .to_string()
            .contains("line 3"),
        "{v}"
    );
    assert_eq!(k(&v), (Some(80.0), Some(4)));

    let _ = stop.send(true);
    let result = tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .unwrap_or_else(|_| panic!("serve did not return within 30 s of the shutdown signal"));
    assert!(matches!(result, Ok(Ok(()))), "{result:?}");
    let cfg = source.load().unwrap_or_else(|e| panic!("{e}"));
    let empty = MemoryStore::new();
    assert!(
        shareplane::with_table_limits(cfg, &empty, &mut shutdown)
            .await
            .is_none(),
        "after the shutdown signal a wait for limits ends at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_is_served_at_the_regions_part_and_a_reload_changes_it_live() {
    let dir = std::env::temp_dir().join(format!("shareplane-tpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join("run.toml");
    let template = |rate: u32| {
        format!(
            "{}[[templates]]\nid = \"per_api_key\"\nentry = \"api_key\"\nrate = {rate}\n\
             [[templates.overrides]]\nvalue = \"partner\"\nrate = 1000\n",
            text("rate = 10000\n")
        )
    };
    std::fs::write(&path, template(100)).unwrap_or_else(|e| panic!("{e}"));
    let source = ConfigSource {
        path: Some(path.clone()),
        env: BTreeMap::new(),
    };
    let cfg = source.load().unwrap_or_else(|e| panic!("{e}"));
    let (stop, shutdown) = watch::channel(false);
    let region = RegionDaemon::new(cfg, source, shutdown);
    let reloads = region.reloads();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let served = tokio::spawn(region.serve(listener, MemoryStore::new(), NoHealth));
    // One Region: its part is the whole rate. Served until `rate` is what the template says.
    let template_rate = |want: f64| async move {
        loop {
            if let Some((200, body)) = get(addr, "/v1/rules").await {
                let wire: shareplane_limiter::RulesWire =
                    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
                let t = wire
                    .templates
                    .first()
                    .map(|t| (t.rate, t.burst, t.overrides.len()));
                if t.is_some_and(|t| t.0 == want) {
                    return t;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let first = tokio::time::timeout(Duration::from_secs(20), template_rate(100.0))
        .await
        .unwrap_or_else(|_| panic!("no template at 100/s within 20 s"));
    assert_eq!(first, Some((100.0, 200.0, 1)));
    // Only the template changes: the reload changes no limit, and the next rule set carries it.
    std::fs::write(&path, template(50)).unwrap_or_else(|e| panic!("{e}"));
    let outcome = reloads.reload().await;
    assert_eq!(outcome, Some(ReloadOutcome::Unchanged), "no limit changed");
    tokio::time::timeout(Duration::from_secs(10), template_rate(50.0))
        .await
        .unwrap_or_else(|_| panic!("the reloaded template was not served within 10 s"));
    let _ = stop.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(30), served).await;
    let _ = std::fs::remove_dir_all(&dir);
}
