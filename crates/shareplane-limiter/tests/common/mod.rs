//! Shared by the integration tests: the Redis URL convention and a tiny daemon that implements the
//! HTTP contract the gateway client talks to (`GET /v1/rules`, `POST /v1/demand`).

#![allow(clippy::disallowed_methods)] // tests, benches and examples may read clocks (clippy.toml)
#![allow(dead_code)] // each test file uses a part of it

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use shareplane_limiter::store::BucketCall;
use shareplane_limiter::{DemandReport, LimitKind, LimitWire, RulesWire};

/// The Redis URL from `SHAREPLANE_TEST_REDIS_URL`. Without it: panics when
/// `SHAREPLANE_REQUIRE_SERVICES=1` (tests/run-all.sh), otherwise says the test did nothing.
pub fn redis_url(test: &str) -> Option<String> {
    match std::env::var("SHAREPLANE_TEST_REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "{test}: SHAREPLANE_TEST_REDIS_URL is not set but SHAREPLANE_REQUIRE_SERVICES=1 \
                 (tests/run-all.sh starts redis-server and sets it)"
            );
            eprintln!(
                "{test}: did nothing: SHAREPLANE_TEST_REDIS_URL is not set (run tests/run-all.sh, \
                 or start redis-server and export it)"
            );
            None
        }
    }
}

/// The seed URL of a cluster-mode Redis of three masters from `SHAREPLANE_TEST_REDIS_CLUSTER_URL`
/// (tests/lib/redis-cluster.sh starts one). Without it: panics when
/// `SHAREPLANE_REQUIRE_SERVICES=1` (tests/run-all.sh), otherwise says the test did nothing.
pub fn redis_cluster_url(test: &str) -> Option<String> {
    match std::env::var("SHAREPLANE_TEST_REDIS_CLUSTER_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("SHAREPLANE_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "{test}: SHAREPLANE_TEST_REDIS_CLUSTER_URL is not set but \
                 SHAREPLANE_REQUIRE_SERVICES=1 (tests/run-all.sh starts the cluster and sets it)"
            );
            eprintln!(
                "{test}: did nothing: SHAREPLANE_TEST_REDIS_CLUSTER_URL is not set (run \
                 tests/run-all.sh, or tests/lib/redis-cluster.sh DIR P1 P2 P3 and export it)"
            );
            None
        }
    }
}

/// A limit id no other test (or earlier run against the same server) uses.
pub fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}-{}-{nanos}", std::process::id())
}

/// One enforced bucket of a check, with these numbers.
pub fn call(key: &str, rate: f64, burst: f64, cost: f64) -> BucketCall {
    BucketCall {
        key: key.to_owned(),
        rate,
        burst,
        cost,
        enforce: true,
    }
}

pub fn limit(id: &str, rate: f64, burst: f64) -> LimitWire {
    LimitWire {
        id: id.to_owned(),
        rate,
        burst,
        shadow: false,
        kind: LimitKind::Capacity,
    }
}

pub fn rules(version: u64, limits: Vec<LimitWire>) -> RulesWire {
    RulesWire {
        version,
        region: "A".to_owned(),
        limits,
        lease_ms: None,
        digest: None,
        base: None,
        templates: Vec::new(),
    }
}

/// A loopback port with nothing listening on it.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    l.local_addr()
        .unwrap_or_else(|e| panic!("addr: {e}"))
        .port()
}

pub const TOKEN: &str = "test-token";

struct Shared {
    rules: Mutex<RulesWire>,
    changed: tokio::sync::watch::Sender<u64>,
    forced: Mutex<Option<RulesWire>>,
    /// Sent with every answer (body and headers) when set, as the daemon does.
    lease_ms: Mutex<Option<u64>>,
    /// Largest total per (gateway, incarnation) and limit.
    totals:
        Mutex<BTreeMap<(String, shareplane_limiter::demand::Incarnation), BTreeMap<String, u64>>>,
    posts: Mutex<u64>,
    /// Requests that asked for a delta (this fake daemon never sends one, as a daemon that
    /// predates deltas), and whether it refuses them with 400 as such a daemon does.
    delta_requests: Mutex<u64>,
    refuse_deltas: Mutex<bool>,
    /// Largest would-refuse count per limit over every report, and whether a report that
    /// carries one is refused with 400, as a daemon that predates the field does.
    would_refuse: Mutex<BTreeMap<String, u64>>,
    refuse_would_refuse: Mutex<bool>,
    /// When set, a long poll answers 304 (renewing the lease) at least this often, as the
    /// daemon does once a lease period; without it only at the end of the wait.
    renew_every_ms: Mutex<Option<u64>>,
    /// Set by [`FakeDaemon::die`]: every rules request fails from then on.
    dead: std::sync::atomic::AtomicBool,
}

/// The fake daemon, serving on a loopback port until the test ends.
pub struct FakeDaemon {
    pub url: String,
    shared: Arc<Shared>,
}

impl FakeDaemon {
    pub async fn start(first: RulesWire) -> Self {
        let (changed, _) = tokio::sync::watch::channel(first.version);
        let shared = Arc::new(Shared {
            rules: Mutex::new(first),
            changed,
            forced: Mutex::new(None),
            lease_ms: Mutex::new(None),
            totals: Mutex::new(BTreeMap::new()),
            posts: Mutex::new(0),
            delta_requests: Mutex::new(0),
            refuse_deltas: Mutex::new(false),
            would_refuse: Mutex::new(BTreeMap::new()),
            refuse_would_refuse: Mutex::new(false),
            renew_every_ms: Mutex::new(None),
            dead: std::sync::atomic::AtomicBool::new(false),
        });
        let app = Router::new()
            .route("/v1/rules", get(get_rules))
            .route("/v1/demand", post(post_demand))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url: format!("http://{addr}"),
            shared,
        }
    }

    /// Publishes a rule set (long-polls waiting for a greater version answer at once).
    pub fn publish(&self, set: RulesWire) {
        let v = set.version;
        *lock(&self.shared.rules) = set;
        self.shared.changed.send_replace(v);
    }

    /// The next `GET /v1/rules` answers 200 with `set`, whatever its version (a lagging daemon).
    pub fn force_next(&self, set: RulesWire) {
        *lock(&self.shared.forced) = Some(set);
    }

    /// From now on every answer carries this lease (milliseconds), renewal number `seq`.
    pub fn set_lease(&self, lease_ms: Option<u64>) {
        *lock(&self.shared.lease_ms) = lease_ms;
    }

    /// From now on a long poll answers at least every `ms` (a lease renewal), as the daemon does.
    pub fn renew_every(&self, ms: u64) {
        *lock(&self.shared.renew_every_ms) = Some(ms);
    }

    /// The daemon dies: every rules request, including those waiting, fails with 503 from now on,
    /// so the lease is never renewed again.
    pub fn die(&self) {
        self.shared
            .dead
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.shared.changed.send_modify(|_| {});
    }

    /// The Region's demand total for a limit: the sum over gateways of their largest totals.
    pub fn demand(&self, limit: &str) -> u64 {
        lock(&self.shared.totals)
            .values()
            .filter_map(|t| t.get(limit))
            .sum()
    }

    pub fn posts(&self) -> u64 {
        *lock(&self.shared.posts)
    }

    /// Requests so far that asked for a delta.
    pub fn delta_requests(&self) -> u64 {
        *lock(&self.shared.delta_requests)
    }

    /// The largest would-refuse count received for a limit.
    pub fn would_refuse(&self, limit: &str) -> u64 {
        lock(&self.shared.would_refuse)
            .get(limit)
            .copied()
            .unwrap_or(0)
    }

    /// Refuse a report with `would_refuse` counts with 400, as a daemon that predates them does.
    pub fn refuse_would_refuse(&self) {
        *lock(&self.shared.refuse_would_refuse) = true;
    }

    /// Answer a request for a delta with 400, as a daemon that predates deltas does.
    pub fn refuse_deltas(&self) {
        *lock(&self.shared.refuse_deltas) = true;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Deserialize)]
struct RulesQuery {
    after: Option<u64>,
    wait_ms: Option<u64>,
    delta: Option<String>,
}

async fn get_rules(
    State(s): State<Arc<Shared>>,
    Query(q): Query<RulesQuery>,
    headers: HeaderMap,
) -> Response {
    let lease = *lock(&s.lease_ms);
    if q.delta.is_some() {
        *lock(&s.delta_requests) += 1;
        if *lock(&s.refuse_deltas) {
            return (axum::http::StatusCode::BAD_REQUEST, "unknown field `delta`").into_response();
        }
    }
    if let Some(set) = lock(&s.forced).take() {
        return rules_response(&set, lease);
    }
    let mut changed = s.changed.subscribe();
    let wait_ms = q.wait_ms.unwrap_or(0).min(30_000);
    let wait_ms = lock(&s.renew_every_ms).map_or(wait_ms, |r| wait_ms.min(r));
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    loop {
        if s.dead.load(std::sync::atomic::Ordering::SeqCst) {
            return (StatusCode::SERVICE_UNAVAILABLE, "the daemon died").into_response();
        }
        let set = lock(&s.rules).clone();
        let etag = format!("\"{}\"", set.version);
        let unchanged = headers
            .get(header::IF_NONE_MATCH)
            .is_some_and(|v| v.as_bytes() == etag.as_bytes());
        let newer = q.after.is_none_or(|a| set.version > a);
        // The lease as it is when the answer leaves, as the daemon's (a long poll that waited
        // answers with the lease set meanwhile).
        let lease = *lock(&s.lease_ms);
        if newer && !(q.after.is_none() && unchanged) {
            return rules_response(&set, lease);
        }
        if q.after.is_none() {
            return not_modified(lease);
        }
        if tokio::time::timeout_at(deadline, changed.changed())
            .await
            .is_err()
        {
            if s.dead.load(std::sync::atomic::Ordering::SeqCst) {
                return (StatusCode::SERVICE_UNAVAILABLE, "the daemon died").into_response();
            }
            return not_modified(*lock(&s.lease_ms));
        }
    }
}

fn lease_headers(lease: Option<u64>) -> Vec<(&'static str, String)> {
    lease.map_or_else(Vec::new, |ms| {
        vec![
            (shareplane_limiter::lease::LEASE_MS_HEADER, ms.to_string()),
            (shareplane_limiter::lease::HELD_MS_HEADER, "0".to_string()),
            (shareplane_limiter::lease::LEASE_SEQ_HEADER, "1".to_string()),
        ]
    })
}

fn not_modified(lease: Option<u64>) -> Response {
    let mut resp = StatusCode::NOT_MODIFIED.into_response();
    for (k, v) in lease_headers(lease) {
        if let Ok(v) = v.parse() {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

fn rules_response(set: &RulesWire, lease: Option<u64>) -> Response {
    let mut set = set.clone();
    set.lease_ms = lease;
    let mut resp = ([(header::ETAG, format!("\"{}\"", set.version))], Json(set)).into_response();
    for (k, v) in lease_headers(lease) {
        if let Ok(v) = v.parse() {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

async fn post_demand(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let authorized = headers
        .get(header::AUTHORIZATION)
        .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes());
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({"error": "bad token"})),
        )
            .into_response();
    }
    let report: DemandReport = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let error = serde_json::json!({"error": e.to_string()});
            return (StatusCode::BAD_REQUEST, Json(error)).into_response();
        }
    };
    if !report.would_refuse.is_empty() && *lock(&s.refuse_would_refuse) {
        let error = serde_json::json!({"error": "bad demand report: unknown field `would_refuse`, expected one of `gateway`, `incarnation`, `totals`"});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    *lock(&s.posts) += 1;
    for (limit, n) in &report.would_refuse {
        let mut w = lock(&s.would_refuse);
        let t = w.entry(limit.clone()).or_default();
        *t = (*t).max(*n);
    }
    let mut totals = lock(&s.totals);
    let mine = totals
        .entry((report.gateway, report.incarnation))
        .or_default();
    for (limit, total) in report.totals {
        let t = mine.entry(limit).or_default();
        *t = (*t).max(total);
    }
    Json(serde_json::json!({"ok": true})).into_response()
}

/// A TCP proxy in front of a Redis server that a test can cut (closing every connection and refusing
/// new ones) and restore.
pub struct Proxy {
    port: u16,
    open: Arc<std::sync::atomic::AtomicBool>,
    cuts: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    pub async fn start(redis_url: &str) -> Self {
        let upstream = redis_url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"))
            .port();
        let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (cuts, _) = tokio::sync::watch::channel(0);
        let (open2, cuts2) = (open.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if !open2.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection closed
                }
                let (upstream, mut cut) = (upstream.clone(), cuts2.subscribe());
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { port, open, cuts }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn cut(&self) {
        self.open.store(false, std::sync::atomic::Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    pub fn restore(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A plain connection to one Redis node (a cluster's seed, a master), for commands about the
/// server itself.
pub async fn node(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap_or_else(|e| panic!("{e}"))
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A cluster's masters' addresses (`127.0.0.1:port`), from `CLUSTER NODES` asked of `conn`.
pub async fn masters(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    nodes
        .lines()
        .filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("master")))
        .filter_map(|l| l.split(' ').nth(1))
        .map(|a| a.split('@').next().unwrap_or(a).to_owned())
        .collect()
}
