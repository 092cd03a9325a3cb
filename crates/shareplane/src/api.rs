//! The Region's HTTP API for gateways and operators (axum).
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/rules` | the rule set and its `lease_ms`; `ETag`, `If-None-Match` → 304; long-poll `?after=V&wait_ms=W&lease_seq=S`, answered on a newer version or a lease renewal; lease headers on every answer |
//! | `POST /v1/demand` | a gateway's running totals, and what its shadow limits would have refused (`would_refuse`) (bearer API token; body ≤ 64 KiB); 422 names implausible totals |
//! | `GET /dashboard` | a read-only page of this Region's view of every Region (reads `v1/state` and `v1/events`), with a chart of one limit's shares over time |
//! | `GET /dashboard/chart.js` | the chart script both dashboards (this one and the demo's) include |
//! | `GET /v1/state` | why each share is what it is; `?limits_from=I&limits_count=N` pages the limits (`limits_total`, `next_limits_from`) |
//! | `GET /v1/events` | operator events, oldest first (`?after=SEQ`: only newer ones); at most the last 1,000 |
//! | `GET /v1/limits/{id}/explain` | one limit: demand, target, share, pool, grants in flight, why the share is what it is (`why`, `why_detail`: at target or floor, step cap, waiting for grants from whom, silent peers, fenced, in debt), peers, health, policy |
//! | `POST /v1/peers/{region}/abandon` | `{"epoch": E}` (bearer **admin** token; 403 for the API token or when no admin token is configured): stop waiting for the last record of that peer's ended epoch `E` (`waiting_for_record:<region>`); 202, decided at the next rebalance (event `estate_abandoned` or `abandon_refused`); 409 unless this replica leads and waits for exactly that record |
//! | `GET /healthz`, `/readyz`, `/metrics` | liveness, readiness latch, Prometheus text |
//!
//! Every answer is gzip-compressed when the request says `Accept-Encoding: gzip`. Every refusal
//! is a 4xx (or 503) with a JSON body `{"error": "..."}`.

use crate::rules::RuleSet;
use crate::state::Shared;
use crate::tokens;
use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// The longest a long-poll is held.
pub const MAX_WAIT_MS: u64 = 30_000;
/// On every rules answer (200 and 304): milliseconds a gateway may still enforce the rule set it
/// runs, counted from this answer (the 200's body carries the same number as `lease_ms`).
pub const LEASE_MS_HEADER: &str = "shareplane-lease-ms";
/// On every rules answer: milliseconds the daemon held the request before answering, so that a
/// gateway can count the lease from when it sent the request plus this, never from later.
pub const HELD_MS_HEADER: &str = "shareplane-held-ms";
/// On every rules answer: the renewal the lease stands on (the own record version); rises with
/// every renewal. A long-poll with `lease_seq` below it is answered at once.
pub const LEASE_SEQ_HEADER: &str = "shareplane-lease-seq";

/// The API of one Region, to be served at `/` (or nested under a prefix by the demo).
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/rules", get(rules))
        .route("/v1/demand", post(demand))
        .route("/v1/state", get(state))
        .route("/v1/events", get(events))
        .route("/v1/limits/{id}/explain", get(explain))
        .route("/v1/peers/{region}/abandon", post(abandon))
        .route("/dashboard", get(dashboard))
        .route("/dashboard/chart.js", get(chart_script))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // gzip when the client asks for it (`Accept-Encoding: gzip`), else as it is: a whole
        // rule set of 100,000 limits is 8.8 MB as JSON and compresses about tenfold.
        .layer(tower_http::compression::CompressionLayer::new().gzip(true))
        .with_state(shared)
}

/// A refusal with a JSON body.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

fn err(status: StatusCode, msg: impl Into<String>) -> ApiError {
    ApiError(status, msg.into())
}

pub async fn not_found() -> ApiError {
    err(StatusCode::NOT_FOUND, "no such route")
}

async fn method_not_allowed() -> ApiError {
    err(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
    )
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesQuery {
    after: Option<u64>,
    wait_ms: Option<u64>,
    /// The lease sequence (`Shareplane-Lease-Seq`) of the gateway's last answer: a long-poll
    /// from a gateway that missed a renewal is answered at once.
    lease_seq: Option<u64>,
    /// The digest (hex) of the set of version `after` that the gateway runs: it takes a delta
    /// (only the limits changed since) if this replica published that very set.
    delta: Option<String>,
}

async fn rules(
    State(s): State<Arc<Shared>>,
    q: Result<Query<RulesQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let arrived_ms = s.clock.now_ms();
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, e.body_text()))?;
    if let Some(after) = q.after {
        let mut rx = s.subscribe();
        let mut renewals = s.subscribe_lease();
        let cur = rx.borrow_and_update().clone();
        let lease = *renewals.borrow_and_update();
        let base = q.delta.as_deref().map(|d| (after, d));
        if cur.version > after {
            return Ok(rules_answer(&s, &cur, arrived_ms, base));
        }
        if q.lease_seq.is_some_and(|seen| lease.record_version > seen) {
            return Ok(not_modified(&s, &cur, arrived_ms));
        }
        let wait = Duration::from_millis(q.wait_ms.unwrap_or(MAX_WAIT_MS).min(MAX_WAIT_MS));
        let mut shutdown = s.shutdown_signal();
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        // The lease running out is answered too: so no answer that carries a lease left was held
        // longer than the lease (the margin's drift allowance for the held time relies on it).
        let runs_out = lease_end(&s, lease, arrived_ms);
        tokio::pin!(runs_out);
        loop {
            tokio::select! {
                _ = &mut deadline => break,
                _ = shutdown.wait_for(|v| *v) => break,
                // A renewal is answered at once, so that gateways hear of it every period.
                _ = renewals.changed() => break,
                () = &mut runs_out => break,
                changed = rx.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let now = rx.borrow_and_update().clone();
                    if now.version > after {
                        return Ok(rules_answer(&s, &now, arrived_ms, base));
                    }
                }
            }
        }
        let latest = rx.borrow().clone();
        return Ok(not_modified(&s, &latest, arrived_ms));
    }
    let cur = s.rules();
    if cur.version == 0 {
        return Err(err(
            StatusCode::SERVICE_UNAVAILABLE,
            "no rule set published yet",
        ));
    }
    let inm = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok());
    if inm.is_some_and(|v| {
        v.split(',')
            .any(|t| t.trim() == cur.etag || t.trim() == "*")
    }) {
        return Ok(not_modified(&s, &cur, arrived_ms));
    }
    Ok(rule_response(&s, &cur, arrived_ms))
}

/// Completes when `lease` runs out, if it had not by `now_ms`; never otherwise.
async fn lease_end(s: &Shared, lease: crate::state::RuleLease, now_ms: u64) {
    if lease.until_ms > now_ms {
        tokio::time::sleep_until(s.clock.instant_at(lease.until_ms)).await;
    } else {
        std::future::pending::<()>().await;
    }
}

/// The lease headers of every rules answer: the lease left now, how long the request was held
/// before this answer, and the renewal it stands on.
fn lease_headers(s: &Shared, arrived_ms: u64, h: &mut HeaderMap) -> u64 {
    let now = s.clock.now_ms();
    let lease = s.lease();
    let remaining = lease.until_ms.saturating_sub(now);
    for (name, v) in [
        (LEASE_MS_HEADER, remaining),
        (HELD_MS_HEADER, now.saturating_sub(arrived_ms)),
        (LEASE_SEQ_HEADER, lease.record_version),
    ] {
        h.insert(name, HeaderValue::from(v));
    }
    remaining
}

fn rule_response(s: &Shared, r: &RuleSet, arrived_ms: u64) -> Response {
    rules_answer(s, r, arrived_ms, None)
}

/// The answer with `r`: a delta from `base` (the version and digest of the set the gateway runs)
/// when this replica can give one, else the whole set.
fn rules_answer(s: &Shared, r: &RuleSet, arrived_ms: u64, base: Option<(u64, &str)>) -> Response {
    let mut h = HeaderMap::new();
    let lease_ms = lease_headers(s, arrived_ms, &mut h);
    let delta = base.and_then(|(v, digest)| r.delta_body(v, digest, lease_ms));
    let body = match delta {
        Some(d) => {
            s.metrics.rules_deltas.inc();
            d
        }
        None => r.body_with_lease(lease_ms),
    };
    let mut resp = Response::new(Body::from(body));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&r.etag) {
        h.insert(header::ETAG, v);
    }
    resp.headers_mut().extend(h);
    resp
}

fn not_modified(s: &Shared, r: &RuleSet, arrived_ms: u64) -> Response {
    let mut resp = StatusCode::NOT_MODIFIED.into_response();
    if r.version > 0 {
        if let Ok(v) = HeaderValue::from_str(&r.etag) {
            resp.headers_mut().insert(header::ETAG, v);
        }
    }
    lease_headers(s, arrived_ms, resp.headers_mut());
    resp
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DemandReport {
    gateway: String,
    incarnation: shareplane_limiter::demand::Incarnation,
    totals: BTreeMap<String, u64>,
    /// Calls each shadow limit would have refused, running since the gateway's start.
    #[serde(default)]
    would_refuse: BTreeMap<String, u64>,
}

/// Checks `Authorization: Bearer <API token>` (what gateways hold: demand reports only), in time
/// independent of where the tokens differ.
pub fn authorized(s: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(want) = s.api_token.as_deref() else {
        return Err(err(
            StatusCode::FORBIDDEN,
            "writes are disabled: no API token is configured",
        ));
    };
    let got = tokens::bearer(headers)
        .ok_or_else(|| err(StatusCode::UNAUTHORIZED, "missing bearer token"))?;
    if tokens::same(got, want) {
        Ok(())
    } else {
        Err(err(StatusCode::UNAUTHORIZED, "wrong bearer token"))
    }
}

/// Checks `Authorization: Bearer <admin token>` for an operator endpoint: 403 when no admin
/// token is configured or the API token (which only reports demand) is offered, 401 otherwise.
pub fn authorized_admin(s: &Shared, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(want) = s.admin_token.as_deref() else {
        return Err(err(
            StatusCode::FORBIDDEN,
            format!(
                "operator endpoints are disabled: no admin token is configured (set {} or \
                 admin_token, and restart the daemon)",
                crate::config::ENV_ADMIN_TOKEN
            ),
        ));
    };
    let got = tokens::bearer(headers)
        .ok_or_else(|| err(StatusCode::UNAUTHORIZED, "missing bearer token"))?;
    if tokens::same(got, want) {
        return Ok(());
    }
    if s.api_token
        .as_deref()
        .is_some_and(|api| tokens::same(got, api))
    {
        return Err(err(
            StatusCode::FORBIDDEN,
            "this is the API (demand) token, which only reports demand: operator endpoints \
             take the admin token",
        ));
    }
    Err(err(StatusCode::UNAUTHORIZED, "wrong bearer token"))
}

async fn demand(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if let Err(e) = authorized(&s, &headers) {
        s.metrics.demand_rejected.inc("unauthorized");
        return Err(e);
    }
    let body = body.map_err(|e| {
        s.metrics.demand_rejected.inc("body");
        err(e.status(), e.body_text())
    })?;
    let report: DemandReport = serde_json::from_slice(&body).map_err(|e| {
        s.metrics.demand_rejected.inc("bad_json");
        err(StatusCode::BAD_REQUEST, format!("bad demand report: {e}"))
    })?;
    let outcome = {
        let mut book = s.demand();
        // Stamped on receipt, under the book's lock, so that stamps follow the order of updates.
        let now = s.clock.now_ms();
        let o = book.report_with(
            now,
            &report.gateway,
            report.incarnation,
            &report.totals,
            &report.would_refuse,
        );
        s.metrics.gateways.set(book.gateways() as u64);
        o
    };
    let o = match outcome {
        Ok(o) => o,
        Err(e) => {
            s.metrics.demand_rejected.inc("invalid");
            return Err(err(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()));
        }
    };
    if !o.refused.is_empty() {
        return Ok(refused_totals(&s, &report.gateway, &o));
    }
    s.metrics.demand_reports.inc();
    let mut body = serde_json::json!({ "ok": true });
    if !o.unknown.is_empty() {
        body["ignored"] = serde_json::json!(o.unknown);
    }
    if o.stale {
        body["stale"] = serde_json::json!(true);
    }
    Ok(Json(body).into_response())
}

/// The body of `POST /v1/peers/{region}/abandon`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AbandonRequest {
    epoch: u64,
}

/// The epoch of `region` that this replica, leading, waits for the last record of, when it is
/// `epoch`; else why not (409).
fn waits_for(s: &Shared, region: &str, epoch: u64) -> Result<u64, ApiError> {
    let view = s.view();
    if view.role != "leader" {
        return Err(err(
            StatusCode::CONFLICT,
            format!(
                "this replica is {}: ask the replica that leads the Region (GET /v1/state, role)",
                view.role
            ),
        ));
    }
    let p = view.peers.iter().find(|p| p.region == region);
    let acct = p.and_then(|p| p.accounts_with_epoch).unwrap_or(0);
    if p.and_then(|p| p.waiting_for_record).unwrap_or(0) == 0 {
        return Err(err(
            StatusCode::CONFLICT,
            format!("not waiting for a record of {region} (it accounts with its epoch {acct})"),
        ));
    }
    if epoch != acct {
        return Err(err(
            StatusCode::CONFLICT,
            format!(
                "waiting for the last record of {region}'s epoch {acct}, not epoch {}",
                epoch
            ),
        ));
    }
    Ok(acct)
}

/// An operator's recovery from `waiting_for_record:<region>` (docs/PROTOCOL.md, "Giving up on a
/// lost record"). Checked here against the leader's last view so that a mistake is answered at
/// once; the coordinator decides at the next rebalance.
async fn abandon(
    State(s): State<Arc<Shared>>,
    Path(region): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    authorized_admin(&s, &headers)?;
    let body = body.map_err(|e| err(e.status(), e.body_text()))?;
    let req: AbandonRequest = serde_json::from_slice(&body).map_err(|e| {
        err(
            StatusCode::BAD_REQUEST,
            format!("bad request: {e} (expected {{\"epoch\": N}})"),
        )
    })?;
    let d = s.d();
    let Some(peer) = shareplane_core::regions(d.n()).find(|&r| d.region_name(r) == region) else {
        return Err(err(
            StatusCode::NOT_FOUND,
            format!("no Region named {region:?} is configured"),
        ));
    };
    if peer == s.me {
        return Err(err(
            StatusCode::CONFLICT,
            "this is the Region's own name: it never waits for its own records",
        ));
    }
    let acct = waits_for(&s, &region, req.epoch)?;
    if !s.request_abandon(peer, req.epoch) {
        return Err(err(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the daemon's loop has {} requests waiting and reads none; try again later",
                crate::state::MAX_QUEUED_COMMANDS
            ),
        ));
    }
    let body = serde_json::json!({
        "queued": true,
        "detail": format!(
            "the next rebalance stops waiting for the last record of {region}'s epoch {acct} unless \
             the coordinator refuses: see GET /v1/events (estate_abandoned or abandon_refused)"
        ),
    });
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// 422 for a report with implausible totals: each refused limit with its reason. The report's
/// other totals were adopted (totals of different limits are independent, as in a report split
/// into several posts). Counted per total, logged once per gateway.
fn refused_totals(s: &Shared, gateway: &str, o: &crate::demand::ReportOutcome) -> Response {
    s.metrics.demand_rejected.inc("implausible");
    for (_, r) in &o.refused {
        s.metrics.demand_totals_refused.inc(r.reason());
    }
    let named: Vec<String> = o.refused.iter().map(|(l, r)| format!("{l}: {r}")).collect();
    if o.first_refusal {
        s.event(
            crate::events::Kind::DemandRefused,
            None,
            None,
            format!(
                "gateway {gateway}: implausible totals refused and not adopted (logged once per gateway): {}",
                named.join("; ")
            ),
        );
    } else {
        tracing::debug!(region = %s.region, gateway, refused = %named.join("; "), "implausible demand totals refused");
    }
    let refused: serde_json::Map<String, serde_json::Value> = o
        .refused
        .iter()
        .map(|(l, r)| {
            (
                l.clone(),
                serde_json::json!({ "reason": r.reason(), "detail": r.to_string() }),
            )
        })
        .collect();
    let body = serde_json::json!({
        "error": format!("implausible demand totals, not adopted: {}", named.join("; ")),
        "refused": refused,
        "counted": o.counted,
    });
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}

/// This Region's view of every Region, read-only: the page reads `v1/state` and `v1/events`.
const DASHBOARD: &str = include_str!("region.html");

async fn dashboard() -> Response {
    (
        [(axum::http::header::CACHE_CONTROL, "no-cache")],
        axum::response::Html(DASHBOARD),
    )
        .into_response()
}

/// The chart both dashboards draw (this one and the demo's), served to both.
const CHART_JS: &str = include_str!("chart.js");

pub async fn chart_script() -> Response {
    (
        [
            (axum::http::header::CACHE_CONTROL, "no-cache"),
            (
                axum::http::header::CONTENT_TYPE,
                "text/javascript; charset=utf-8",
            ),
        ],
        CHART_JS,
    )
        .into_response()
}

/// The view, how many limits there are and where the next page starts (`None`: no page
/// after this one), and what the configuration reloads did (`config`).
#[derive(serde::Serialize)]
struct StateAnswer<'a> {
    #[serde(flatten)]
    state: crate::view::StateJson<'a>,
    limits_total: usize,
    next_limits_from: Option<usize>,
    config: crate::state::ConfigStatus,
}

/// `GET /v1/state?limits_from=I&limits_count=N`: a page of the limits (all of them without
/// `limits_count`; at 100,000 limits the whole answer is tens of megabytes).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StateQuery {
    limits_from: Option<usize>,
    limits_count: Option<usize>,
}

async fn state(
    State(s): State<Arc<Shared>>,
    q: Result<Query<StateQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, e.body_text()))?;
    let view = s.view();
    let total = view.limits.count();
    let (state, next) = match (q.limits_from, q.limits_count) {
        (None, None) => (crate::view::StateJson::all(&view), None),
        (from, count) => {
            let from = from.unwrap_or(0);
            let count = count.unwrap_or(total);
            let end = from.saturating_add(count);
            let next = (end < total).then_some(end);
            (crate::view::StateJson::page(&view, from, count), next)
        }
    };
    Ok(Json(StateAnswer {
        state,
        limits_total: total,
        next_limits_from: next,
        config: s.config_status(),
    })
    .into_response())
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<u64>,
}

async fn events(
    State(s): State<Arc<Shared>>,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| err(StatusCode::BAD_REQUEST, e.body_text()))?;
    let (events, dropped) = s.events.since(q.after.unwrap_or(0));
    Ok(Json(serde_json::json!({
        "region": s.region,
        "events": events,
        // Events newer than `after` that the ring no longer holds.
        "dropped": dropped,
    }))
    .into_response())
}

async fn explain(
    State(s): State<Arc<Shared>>,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|e| err(StatusCode::BAD_REQUEST, e.body_text()))?;
    let v = s.view();
    // Builds the view of this limit alone, not of every limit.
    let Some(limit) = v.limits.selected(|_, l| l == id).into_iter().next() else {
        return Err(err(StatusCode::NOT_FOUND, format!("no limit {id:?}")));
    };
    let published = s.rules();
    let index = s.d().limit_index(&id);
    let published_rate = index
        .and_then(|i| published.rates.get(i))
        .map(|r| r.as_rps());
    Ok(Json(serde_json::json!({
        "region": v.region,
        "role": v.role,
        "policy": v.policy,
        "limit": limit,
        "published": { "version": published.version, "rate": published_rate },
        "peers": v.peers,
        "health": v.health,
        "alarms": v.alarms,
        "store_ok": v.store_ok,
        "last_error": v.last_error,
    }))
    .into_response())
}

async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "ok": true }))
}

async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    if s.is_ready() {
        Json(serde_json::json!({ "ready": true })).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "ready": false })),
        )
            .into_response()
    }
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    let text = s.render_metrics();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Serves `router` on `listener` until `shutdown` reads true, then stops accepting and waits at
/// most `drain` for requests in flight (long-polls answer at once on shutdown).
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: tokio::sync::watch::Receiver<bool>,
    drain: Duration,
) -> std::io::Result<()> {
    use std::future::IntoFuture;
    let mut sd = shutdown.clone();
    let server = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = sd.wait_for(|v| *v).await;
        })
        .into_future();
    let mut sd2 = shutdown;
    let bound = async move {
        let _ = sd2.wait_for(|v| *v).await;
        tokio::time::sleep(drain).await;
    };
    tokio::select! {
        r = server => {
            tracing::info!("HTTP server drained");
            r
        }
        _ = bound => {
            tracing::warn!(drain_ms = drain.as_millis() as u64, "HTTP drain bound reached; closing remaining connections");
            Ok(())
        }
    }
}
