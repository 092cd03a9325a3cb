//! The HTTP check behind a real NGINX running docs/gateways.md's configuration (`auth_request`,
//! `error_page 403 =429`, and `error_page 500 =503` for a gateway that is down or not ready) in
//! front of a small upstream, driven with curl; and the check as Traefik ForwardAuth sees it
//! (429 with Retry-After straight from the gateway).

mod common;

use std::path::Path;

use common::{
    flags, limit, metric, program, redis_url, rules, run, scratch, unique, FakeDaemon, Gateway,
    Proc,
};
use shareplane_gateway::config::FileConfig;

/// A free loopback port (nginx needs its ports in its configuration).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The first fenced block of `lang` in docs/gateways.md.
fn docs_block(lang: &str) -> String {
    let docs = include_str!("../../../docs/gateways.md");
    let open = format!("```{lang}\n");
    let start = docs
        .find(&open)
        .unwrap_or_else(|| panic!("docs/gateways.md has no {lang} block"))
        + open.len();
    let len = docs[start..].find("```").unwrap_or(0);
    docs[start..start + len].to_owned()
}

/// docs/gateways.md's NGINX configuration as printed there, with this test's ports and limit,
/// inside an `http` block that keeps every file NGINX writes in `dir`.
fn nginx_conf(dir: &Path, front: u16, upstream: u16, gateway: &str, limit: &str) -> String {
    let mut snippet = docs_block("nginx");
    for (from, to) in [
        (
            "127.0.0.1:8082",
            gateway.trim_start_matches("http://").to_owned(),
        ),
        ("listen 80;", format!("listen 127.0.0.1:{front};")),
        ("127.0.0.1:9000", format!("127.0.0.1:{upstream}")),
        ("limit=k-big", format!("limit={limit}")),
    ] {
        assert!(
            snippet.contains(from),
            "the docs' NGINX snippet no longer has {from:?}"
        );
        snippet = snippet.replace(from, &to);
    }
    let d = dir.display();
    format!(
        r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;

    # The small upstream the limit protects.
    server {{
        listen 127.0.0.1:{upstream};
        location / {{ return 200 "upstream\n"; }}
    }}

{snippet}
}}
"#
    )
}

/// curl's status code, headers (lower-case names) and body for one GET.
fn curl(curl: &Path, url: &str) -> (u16, Vec<(String, String)>, String) {
    let out = run(
        curl,
        &[
            "-s".into(),
            "-i".into(),
            "--max-time".into(),
            "10".into(),
            url.into(),
        ],
    );
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_passes_under_the_share_and_answers_429_with_retry_after_beyond() {
    let test = "nginx_auth_request_passes_under_the_share_and_answers_429_with_retry_after_beyond";
    let (Some(redis), Some(nginx)) = (
        redis_url(test),
        program(test, "SHAREPLANE_TEST_NGINX", "an nginx with auth_request"),
    ) else {
        return;
    };
    let curl_bin = on_path("curl").unwrap_or_else(|| panic!("{test}: curl is not on the PATH"));
    let (k, traefik) = (unique("nginx"), unique("traefik"));
    let daemon = FakeDaemon::start(rules(
        1,
        vec![limit(&k, 0.5, 5.0), limit(&traefik, 0.5, 2.0)],
    ))
    .await;
    let gw = Gateway::start(FileConfig::default(), flags(&daemon, &redis)).await;
    gw.ready().await;

    let dir = scratch("nginx");
    let (front, upstream) = (free_port(), free_port());
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(&dir, front, upstream, &gw.http, &k))
        .unwrap_or_else(|e| panic!("{e}"));
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-p".into(),
            dir.display().to_string(),
            "-e".into(),
            dir.join("error.log").display().to_string(),
            "-c".into(),
            conf.display().to_string(),
        ];
        a.extend(extra.iter().map(|s| (*s).to_owned()));
        a
    };
    run(&nginx, &args(&["-t"]));
    let mut proc = Proc::spawn(&dir, "nginx", &nginx, &args(&[]));
    let url = format!("http://127.0.0.1:{front}/orders");
    let mut up = false;
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", front)).is_ok() {
            up = true;
            break;
        }
        assert!(
            proc.alive(),
            "nginx exited: {}",
            std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(up, "nginx never listened");

    // The burst of 5 passes to the upstream; then NGINX answers 429 with the gateway's Retry-After.
    let answers: Vec<_> = (0..7).map(|_| curl(&curl_bin, &url)).collect();
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses[..5], [200; 5], "{answers:?}");
    assert_eq!(answers[0].2, "upstream\n");
    assert_eq!(statuses[6], 429, "{answers:?}");
    let (_, h, body) = &answers[6];
    let retry: u64 = header(h, "retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {h:?}"));
    assert!((1..=2).contains(&retry), "Retry-After {retry}");
    assert_eq!(body, "too many requests\n");

    // Traefik ForwardAuth returns the check's own answer: 429 with Retry-After.
    let check = format!("{}/v1/check?limit={traefik}", gw.http);
    let direct: Vec<_> = (0..3).map(|_| curl(&curl_bin, &check)).collect();
    assert_eq!(
        direct.iter().map(|a| a.0).collect::<Vec<_>>()[..2],
        [200, 200],
        "{direct:?}"
    );
    assert_eq!(direct[2].0, 429, "{direct:?}");
    assert!(header(&direct[2].1, "retry-after").is_some(), "{direct:?}");
    // Bad requests are answered 400 with the reason.
    let (bad, _, why) = curl(
        &curl_bin,
        &format!("{}/v1/check?limit={traefik}&cost=lots", gw.http),
    );
    assert_eq!(bad, 400);
    assert!(why.contains("not a whole number"), "{why}");
    let (health, _, text) = curl(&curl_bin, &format!("{}/readyz", gw.http));
    assert_eq!(health, 200, "{text}");

    let m = gw.metrics().await;
    let over = metric(
        &m,
        &format!("shareplane_gateway_decisions_total{{limit=\"{k}\",code=\"over_limit\"}}"),
    );
    assert!(over.is_some_and(|n| n >= 1.0), "{m}");
    assert_eq!(
        metric(
            &m,
            "shareplane_gateway_requests_total{api=\"http\",result=\"bad_request\"}"
        ),
        Some(1.0)
    );

    // The gateway down: NGINX's auth_request would answer 500; the docs' recipe makes it 503
    // with a Retry-After, and nothing reaches the upstream.
    gw.stop().await;
    let (status, h, body) = curl(&curl_bin, &url);
    assert_eq!(status, 503, "{h:?} {body}");
    assert_eq!(header(&h, "retry-after"), Some("1"), "{h:?}");
    assert_eq!(body, "rate limit check unavailable\n");
    drop(proc);
}
