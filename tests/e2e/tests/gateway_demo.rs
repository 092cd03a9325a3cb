//! Issue 14's "done when", with real processes: `shareplane demo`, `shareplane gateway` on Region
//! A's rules and a real redis-server, a grpcio client (crates/shareplane-gateway/tests/
//! rls_client.py) calling `ShouldRateLimit` for `shareplane_limit=k-big`, and NGINX with
//! `auth_request` in front of a small upstream, driven by curl.

use shareplane_e2e::procs::{free_port, wait_for_port, Procs};
use shareplane_e2e::{built, cluster, needed, redis_server, unique};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The largest cost the gateway charges here; A's burst (2 s of its share) stays above it.
const MAX_COST: u32 = 2_000;

fn env_file(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_file())
}

fn nginx_conf(dir: &Path, front: u16, upstream: u16, gateway_http: u16) -> String {
    let d = dir.display();
    format!(
        r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {d}/nginx-access.log;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{upstream};
        location / {{ return 200 "upstream\n"; }}
    }}
    server {{
        listen 127.0.0.1:{front};
        location = /_shareplane {{
            internal;
            proxy_pass http://127.0.0.1:{gateway_http}/v1/auth_request?limit=k-big;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            # Each request through here costs {MAX_COST}, so the test spends A's share quickly.
            proxy_set_header X-Shareplane-Cost {MAX_COST};
        }}
        location / {{
            auth_request /_shareplane;
            auth_request_set $shareplane_retry_after $upstream_http_retry_after;
            error_page 403 =429 @shareplane_refused;
            proxy_pass http://127.0.0.1:{upstream};
        }}
        location @shareplane_refused {{
            add_header Retry-After $shareplane_retry_after always;
            return 429 "too many requests\n";
        }}
    }}
}}
"#
    )
}

fn output(program: &Path, args: &[String]) -> String {
    let out = Command::new("timeout")
        .arg("60")
        .arg(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_the_demo_answers_grpcio_and_nginx_refuses_with_429_once_the_share_is_spent() {
    let test =
        "a_gateway_on_the_demo_answers_grpcio_and_nginx_refuses_with_429_once_the_share_is_spent";
    let Some(redis_bin) = redis_server(test) else {
        return;
    };
    let Some(bin) = built(test, "shareplane") else {
        return;
    };
    let python = env_file("SHAREPLANE_TEST_GRPC_PYTHON");
    let Some(python) = needed(test, python, "SHAREPLANE_TEST_GRPC_PYTHON is not set") else {
        return;
    };
    let nginx = env_file("SHAREPLANE_TEST_NGINX");
    let Some(nginx) = needed(test, nginx, "SHAREPLANE_TEST_NGINX is not set") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(unique("e2e-gateway-demo"));
    let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
    let redis = cluster::start_redis(&mut procs, &redis_bin, "A")
        .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
    let port = || free_port().unwrap_or_else(|e| panic!("{e}"));
    let (demo_port, grpc_port, http_port, front, upstream) =
        (port(), port(), port(), port(), port());
    let demo = procs
        .spawn(
            "demo",
            &bin,
            &[
                "demo".into(),
                "--listen".into(),
                format!("127.0.0.1:{demo_port}"),
            ],
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::task::block_in_place(|| {
        wait_for_port(&mut procs, demo, "demo", demo_port, Duration::from_secs(20))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
    let args: Vec<String> = [
        "gateway",
        "--rules",
        &format!("http://127.0.0.1:{demo_port}/regions/A"),
        "--redis",
        &redis,
        "--grpc-listen",
        &format!("127.0.0.1:{grpc_port}"),
        "--http-listen",
        &format!("127.0.0.1:{http_port}"),
        "--max-cost",
        &MAX_COST.to_string(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let gw = procs
        .spawn("gateway", &bin, &args, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let client = reqwest::Client::new();
    let mut healthy = String::new();
    for _ in 0..400 {
        procs
            .check_alive(gw)
            .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
        if let Ok(r) = client
            .get(format!("http://127.0.0.1:{http_port}/readyz"))
            .send()
            .await
        {
            let ok = r.status().is_success();
            healthy = r.text().await.unwrap_or_default();
            if ok {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        healthy.starts_with("ok"),
        "gateway not ready: {healthy}\n{}",
        procs.log_tails(20)
    );

    // grpcio: OK at cost 1, OVER_LIMIT at a cost above A's burst (2 s of at most the whole 10,000).
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../crates/shareplane-gateway/tests/rls_client.py"
    );
    let calls = r#"[{"domain":"edge","descriptors":[[["shareplane_limit","k-big"]]],"hits_addend":1},
                    {"domain":"edge","descriptors":[[["shareplane_limit","k-big"]]],"hits_addend":20001}]"#;
    let out = output(
        &python,
        &[
            script.into(),
            format!("127.0.0.1:{grpc_port}"),
            calls.into(),
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v[0][0]["overall_code"], "OK", "{out}");
    assert_eq!(
        v[0][0]["statuses"][0]["current_limit"]["name"], "k-big",
        "{out}"
    );
    assert_eq!(v[1][0]["overall_code"], "OVER_LIMIT", "{out}");

    // NGINX: 200 while A's share lasts, then 429 with a Retry-After.
    std::fs::write(
        dir.join("nginx.conf"),
        nginx_conf(&dir, front, upstream, http_port),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let nginx_args: Vec<String> = vec![
        "-p".into(),
        dir.display().to_string(),
        "-e".into(),
        dir.join("nginx-error.log").display().to_string(),
        "-c".into(),
        dir.join("nginx.conf").display().to_string(),
    ];
    let ngx = procs
        .spawn("nginx", &nginx, &nginx_args, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    tokio::task::block_in_place(|| {
        wait_for_port(&mut procs, ngx, "nginx", front, Duration::from_secs(10))
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", procs.log_tails(20)));
    let url = format!("http://127.0.0.1:{front}/");
    let mut seen = Vec::new();
    let mut refused = None;
    for _ in 0..40 {
        let head = output(
            Path::new("curl"),
            &[
                "-s".into(),
                "-i".into(),
                "--max-time".into(),
                "10".into(),
                url.clone(),
            ],
        );
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        seen.push(status);
        if status == 429 {
            refused = Some(head);
            break;
        }
    }
    assert_eq!(seen.first(), Some(&200), "{seen:?}");
    let refused =
        refused.unwrap_or_else(|| panic!("never refused: {seen:?}\n{}", procs.log_tails(20)));
    let retry = refused
        .lines()
        .find_map(|l| {
            l.strip_prefix("Retry-After:")
                .or_else(|| l.strip_prefix("retry-after:"))
        })
        .map(str::trim);
    assert!(
        retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| s >= 1)),
        "{refused}"
    );
    let line = format!(
        "gateway on the demo: grpcio OK at cost 1, OVER_LIMIT at 20001; NGINX (cost {MAX_COST} each) {seen:?}, Retry-After {}",
        retry.unwrap_or("?")
    );
    println!("{line}");
    shareplane_e2e::append_report(&line);
}
