//! `shareplane local`: three whole Region daemons on one machine. The files it writes are valid
//! configurations, the Regions share the limit, and the operator's faults reach them: a stopped
//! Region whose check reads unhealthy is reclaimed by the other two, and comes back in a new epoch.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

use shareplane::local::{self, Local, LocalOptions};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// One HTTP/1.1 request: the status code and the body.
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// Region `api`'s state.
async fn state(api: SocketAddr) -> Option<serde_json::Value> {
    let (code, body) = http(api, "GET", "/v1/state", "").await?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

fn peer_state(s: &serde_json::Value, peer: &str) -> String {
    let peers = s["peers"].as_array().cloned().unwrap_or_default();
    peers
        .iter()
        .find(|p| p["region"] == peer)
        .and_then(|p| p["state"].as_str())
        .unwrap_or("")
        .to_owned()
}

fn share(s: &serde_json::Value) -> f64 {
    s["limits"][0]["share"].as_f64().unwrap_or(-1.0)
}

/// Polls `check` on Region `api`'s state until it holds (true) or `within` passes (false).
async fn until(
    api: SocketAddr,
    within: Duration,
    check: impl Fn(&serde_json::Value) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if state(api).await.is_some_and(|s| check(&s)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_daemons_share_the_limit_and_a_stopped_unhealthy_region_is_reclaimed_then_returns() {
    let dir = std::env::temp_dir().join(format!("shareplane-local-{}", std::process::id()));
    let opts = LocalOptions {
        dir: dir.clone(),
        port: 0,
        period_ms: 300,
        redis_server: None,
    };
    let control_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let control = control_listener.local_addr().unwrap();
    let (stop, stopped) = watch::channel(false);
    let l = Local::start(&opts, control, stopped).await.unwrap();
    tokio::spawn(async move {
        axum::serve(control_listener, local::router(l.clone()))
            .await
            .ok();
    });
    // Every file is a configuration `shareplane run` accepts.
    for name in ["a", "b", "c"] {
        let path = dir.join(format!("{name}.toml"));
        let cfg = shareplane::config::load(Some(&path), &Default::default());
        assert!(cfg.is_ok(), "{}: {:?}", path.display(), cfg.err());
    }
    let text = std::fs::read_to_string(dir.join("a.toml")).unwrap();
    let api_of = |name: &str| -> SocketAddr {
        let text = std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap();
        let line = text.lines().find(|l| l.starts_with("listen = ")).unwrap();
        line.trim_start_matches("listen = ")
            .trim_matches('"')
            .parse()
            .unwrap()
    };
    assert!(text.contains("region = \"A\""), "{text}");
    let (a, c) = (api_of("a"), api_of("c"));
    // No demand yet: the three share 10,000 evenly.
    assert!(
        until(a, Duration::from_secs(20), |s| (share(s) - 3333.334).abs()
            < 1.0
            && peer_state(s, "B") == "live")
        .await,
        "{:?}",
        state(a).await
    );
    // Bad control requests are refused, naming what is allowed.
    let (code, body) = http(control, "POST", "/regions/B/health", "sick")
        .await
        .unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("healthy, unhealthy or unknown"), "{body}");
    assert_eq!(
        http(control, "POST", "/regions/Z/stop", "")
            .await
            .unwrap()
            .0,
        404
    );
    // B's daemon goes away and its check reads unhealthy: A and C reclaim it and rise.
    assert_eq!(
        http(control, "POST", "/regions/B/stop", "")
            .await
            .unwrap()
            .0,
        200
    );
    assert_eq!(
        http(control, "POST", "/regions/B/stop", "")
            .await
            .unwrap()
            .0,
        409
    );
    let (code, _) = http(control, "POST", "/regions/B/health", "unhealthy")
        .await
        .unwrap();
    assert_eq!(code, 200);
    for api in [a, c] {
        assert!(
            until(api, Duration::from_secs(30), |s| peer_state(s, "B")
                == "reclaimed"
                && share(s) > 4000.0)
            .await,
            "{:?}",
            state(api).await
        );
    }
    // B comes back (it was away too long to resume): a new epoch, which A accounts with.
    http(control, "POST", "/regions/B/health", "healthy")
        .await
        .unwrap();
    assert_eq!(
        http(control, "POST", "/regions/B/start", "")
            .await
            .unwrap()
            .0,
        200
    );
    let b_epoch = |s: &serde_json::Value| {
        let peers = s["peers"].as_array().cloned().unwrap_or_default();
        peers
            .iter()
            .find(|p| p["region"] == "B")
            .and_then(|p| p["epoch"].as_u64())
    };
    assert!(
        until(a, Duration::from_secs(20), |s| b_epoch(s) == Some(2)).await,
        "{:?}",
        state(a).await
    );
    assert!(
        until(a, Duration::from_secs(30), |s| peer_state(s, "B") == "live").await,
        "{:?}",
        state(a).await
    );
    stop.send(true).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// With a `redis-server`, each Region gets its Redis and a gateway: it loads the Region's rule
/// set, admits at the Region's share, reports its demand to the Region's daemon, and fences once
/// that daemon stops (its lease runs out); `local`'s shutdown stops the redis-servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_region_gets_a_gateway_that_limits_under_its_daemons_lease() {
    let Some(bin) = shareplane::local_gateways::find_redis_server(
        std::env::var_os("SHAREPLANE_TEST_REDIS_SERVER").map(Into::into),
    ) else {
        eprintln!("skipped: no redis-server on the PATH (tests/run-all.sh installs one)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("shareplane-local-gw-{}", std::process::id()));
    let opts = LocalOptions {
        dir: dir.clone(),
        port: 0,
        period_ms: 300,
        redis_server: Some(bin),
    };
    let control_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let control = control_listener.local_addr().unwrap();
    let (stop, stopped) = watch::channel(false);
    let l = Local::start(&opts, control, stopped).await.unwrap();
    let l2 = l.clone();
    tokio::spawn(async move {
        axum::serve(control_listener, local::router(l2)).await.ok();
    });
    let (gw, redis) = {
        let gateways = l.gateways.lock().await;
        assert_eq!(gateways.len(), 3);
        let a = gateways.iter().find(|g| g.region == "A").unwrap();
        (a.http, a.redis)
    };
    let banner = local::banner(&l, &dir).await;
    assert!(
        banner.contains(&format!("A gateway: curl -i 'http://{gw}/v1/check")),
        "{banner}"
    );
    let api_a = l.regions().await[0].1;
    // Ready once it holds A's rule set; a check of the local limit is admitted.
    let ready = |want: u16| async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < deadline {
            if http(gw, "GET", "/readyz", "")
                .await
                .is_some_and(|(c, _)| c == want)
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(
        ready(200).await,
        "{:?}",
        http(gw, "GET", "/readyz", "").await
    );
    let (code, body) = http(gw, "GET", "/v1/check?limit=k-big", "").await.unwrap();
    assert_eq!(code, 200, "{body}");
    // It reports its demand to A's daemon, which counts it as A's one gateway.
    let reporting = async {
        for _ in 0..200 {
            let m = http(api_a, "GET", "/metrics", "")
                .await
                .map(|r| r.1)
                .unwrap_or_default();
            if m.contains("shareplane_demand_gateways{region=\"A\"} 1") {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(
        reporting.await,
        "{:?}",
        http(api_a, "GET", "/metrics", "").await
    );
    // A's daemon stops: the gateway's lease runs out, it fences and refuses.
    assert_eq!(
        http(control, "POST", "/regions/A/stop", "")
            .await
            .unwrap()
            .0,
        200
    );
    assert!(
        ready(503).await,
        "{:?}",
        http(gw, "GET", "/readyz", "").await
    );
    let (code, body) = http(gw, "GET", "/v1/check?limit=k-big", "").await.unwrap();
    assert_ne!(code, 200, "a fenced gateway admits nothing: {body}");
    // Shutdown stops the Regions' redis-servers.
    stop.send(true).unwrap();
    let gone = async {
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(redis).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    assert!(gone.await, "A's redis-server still answers on {redis}");
    let _ = std::fs::remove_dir_all(&dir);
}
