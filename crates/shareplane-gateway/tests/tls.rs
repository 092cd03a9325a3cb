//! `rediss://`: a real redis-server on a TLS port with certificates made here with openssl. The
//! gateway with the right CA is decided by Redis; with another CA it refuses the server and its
//! limits follow their failure policy.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    flags, limit, metric, redis_url, rules, run, scratch, unique, FakeDaemon, Gateway, Proc,
};
use shareplane_gateway::config::FileConfig;

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

fn openssl(bin: &Path, dir: &Path, args: &str) {
    let args: Vec<String> = args
        .split_whitespace()
        .map(|a| a.replace("DIR", &dir.display().to_string()))
        .collect();
    run(bin, &args);
}

/// A CA, and a server certificate for 127.0.0.1 signed by it; and a second, unrelated CA.
fn certificates(openssl_bin: &Path, dir: &Path) {
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n")
        .unwrap_or_else(|e| panic!("{e}"));
    for ca in ["ca", "other-ca"] {
        openssl(
            openssl_bin,
            dir,
            &format!("req -x509 -newkey rsa:2048 -nodes -keyout DIR/{ca}.key -out DIR/{ca}.pem -days 1 -subj /CN=shareplane-test-{ca}"),
        );
    }
    openssl(openssl_bin, dir, "req -newkey rsa:2048 -nodes -keyout DIR/server.key -out DIR/server.csr -subj /CN=127.0.0.1");
    openssl(openssl_bin, dir, "x509 -req -in DIR/server.csr -CA DIR/ca.pem -CAkey DIR/ca.key -CAcreateserial -out DIR/server.pem -days 1 -extfile DIR/ext.cnf");
}

async fn checks(gw: &Gateway, limit: &str, n: usize) -> Vec<u16> {
    let client = reqwest::Client::new();
    let mut out = Vec::new();
    for _ in 0..n {
        let r = client
            .get(format!("{}/v1/check?limit={limit}", gw.http))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        out.push(r.status().as_u16());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_speaks_tls_to_redis_and_verifies_the_server_against_its_ca() {
    let test = "the_gateway_speaks_tls_to_redis_and_verifies_the_server_against_its_ca";
    // The plain server's URL says the suite has Redis; the TLS server is started here.
    let (Some(_), Some(redis_bin), Some(openssl_bin)) =
        (redis_url(test), on_path("redis-server"), on_path("openssl"))
    else {
        return;
    };
    let dir = scratch("tls");
    certificates(&openssl_bin, &dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"));
    let d = |f: &str| dir.join(f).display().to_string();
    let args: Vec<String> = [
        "--bind",
        "127.0.0.1",
        "--port",
        "0",
        "--tls-port",
        &port.to_string(),
        "--tls-cert-file",
        &d("server.pem"),
        "--tls-key-file",
        &d("server.key"),
        "--tls-ca-cert-file",
        &d("ca.pem"),
        "--tls-auth-clients",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let mut redis = Proc::spawn(&dir, "redis-tls", &redis_bin, &args);
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        assert!(
            redis.alive(),
            "redis-server exited: see {}",
            d("redis-tls.out")
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let url = format!("rediss://127.0.0.1:{port}/");
    let k = unique("tls");
    let daemon = FakeDaemon::start(rules(1, vec![limit(&k, 0.001, 3.0)])).await;

    let mut good = flags(&daemon, &url);
    good.redis_ca = Some(dir.join("ca.pem"));
    let gw = Gateway::start(FileConfig::default(), good).await;
    gw.ready().await;
    // Redis decides: the burst of 3 passes (the local fallback would start empty and refuse).
    assert_eq!(checks(&gw, &k, 4).await, [200, 200, 200, 429]);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_redis_decisions_total"),
        Some(4.0),
        "{m}"
    );
    assert_eq!(metric(&m, "shareplane_gateway_fallback_in_use"), Some(0.0));
    gw.stop().await;

    // Another CA: the server is refused, the capacity limit falls back to its local share
    // (empty on entry, so refused), and the gateway says so.
    let mut wrong = flags(&daemon, &url);
    wrong.redis_ca = Some(dir.join("other-ca.pem"));
    let gw = Gateway::start(FileConfig::default(), wrong).await;
    let (status, body) = gw
        .health_until(|_, body| body.starts_with("Redis not reached yet: cannot connect"))
        .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("Unknown") || body.contains("certificate"),
        "{body}"
    );
    assert_eq!(
        checks(&gw, &unique("tls-wrong"), 1).await,
        [200],
        "an unknown limit is allowed by default"
    );
    let k2 = k.clone();
    assert_eq!(checks(&gw, &k2, 1).await, [429]);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_fallback_in_use"),
        Some(1.0),
        "{m}"
    );
    assert!(metric(&m, "shareplane_gateway_redis_failures_total").is_some_and(|n| n >= 1.0));
    assert_eq!(
        metric(&m, "shareplane_gateway_redis_decisions_total"),
        Some(0.0)
    );
    gw.stop().await;
}

/// Three ports whose cluster bus ports (port + 10000) are free too.
fn cluster_ports() -> Vec<u16> {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos()) as usize
        + std::process::id() as usize;
    (0..25_000usize)
        .map(|i| 20_000 + ((seed + i * 7_919) % 25_000) as u16)
        .filter(|p| free(*p) && free(p + 10_000))
        .take(3)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_as_elasticache_serverless_serves_multi_limit_checks() {
    let test = "a_tls_cluster_as_elasticache_serverless_serves_multi_limit_checks";
    // The suite's cluster says cluster tests are expected; this one starts its own, over TLS.
    if common::redis_cluster_url(test).is_none() {
        return;
    }
    let [redis_bin, cli, openssl_bin] = ["redis-server", "redis-cli", "openssl"]
        .map(|p| on_path(p).unwrap_or_else(|| panic!("{test}: {p} is not on PATH")));
    let dir = scratch("tls-cluster");
    certificates(&openssl_bin, &dir);
    let d = |f: &str| dir.join(f).display().to_string();
    let ports = cluster_ports();
    let mut servers = Vec::new();
    for p in &ports {
        let args: Vec<String> = [
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--tls-port",
            &p.to_string(),
            "--tls-cluster",
            "yes",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &d(&format!("nodes-{p}.conf")),
            "--tls-cert-file",
            &d("server.pem"),
            "--tls-key-file",
            &d("server.key"),
            "--tls-ca-cert-file",
            &d("ca.pem"),
            "--tls-auth-clients",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            &d(""),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        servers.push(Proc::spawn(&dir, &format!("redis-{p}"), &redis_bin, &args));
    }
    let tls = ["--tls", "--cacert", &d("ca.pem")].map(str::to_owned);
    for p in &ports {
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", *p)).is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    let mut create: Vec<String> = tls.to_vec();
    create.push("--cluster".into());
    create.push("create".into());
    create.extend(ports.iter().map(|p| format!("127.0.0.1:{p}")));
    create.extend(["--cluster-replicas", "0", "--cluster-yes"].map(str::to_owned));
    run(&cli, &create);
    for p in &ports {
        let mut info: Vec<String> = tls.to_vec();
        info.extend([
            "-p".to_owned(),
            p.to_string(),
            "cluster".into(),
            "info".into(),
        ]);
        let mut ok = false;
        for _ in 0..200 {
            ok = run(&cli, &info).contains("cluster_state:ok");
            if ok {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(ok, "node {p} never reported cluster_state:ok");
    }
    // As an operator configures ElastiCache Serverless: rediss://, cluster mode, the CA.
    let (a, b) = (unique("tls-cl-a"), unique("tls-cl-b"));
    let daemon = FakeDaemon::start(rules(
        1,
        vec![limit(&a, 0.001, 3.0), limit(&b, 0.001, 50.0)],
    ))
    .await;
    let mut f = flags(&daemon, &format!("rediss://127.0.0.1:{}/", ports[0]));
    f.redis_ca = Some(dir.join("ca.pem"));
    f.redis_mode = Some(shareplane_limiter::RedisMode::Cluster);
    let file = FileConfig {
        redis_timeout_ms: Some(2_000),
        ..FileConfig::default()
    };
    let gw = Gateway::start(file, f).await;
    gw.ready().await;
    let client = reqwest::Client::new();
    let mut got = Vec::new();
    for _ in 0..4 {
        let r = client
            .get(format!("{}/v1/check?limit={a}&limit={b}", gw.http))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        got.push(r.status().as_u16());
    }
    // Redis decides: the burst of 3 passes (the local fallback would start empty and refuse).
    assert_eq!(got, [200, 200, 200, 429]);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_redis_decisions_total"),
        Some(4.0),
        "{m}"
    );
    gw.stop().await;
    drop(servers);
}
