//! The HTTP check and the gateway's own endpoints.
//!
//! - `GET /v1/check?limit=ID[&limit=ID2…][&cost=N]`: 200 when admitted, **429** with
//!   `Retry-After` when refused (Traefik ForwardAuth returns this answer to the client).
//! - `GET /v1/auth_request?…`: the same, but refuses with **403** and `Retry-After`, because
//!   NGINX's `auth_request` accepts only 2xx, 401 and 403 from the check (map it with
//!   `error_page 403 =429`, see docs/gateways.md).
//!
//!   Limits may also come from the `x-shareplane-limit` header (comma-separated) and the cost from
//!   `x-shareplane-cost`, so a proxy can set them per request. A limit that is a template takes
//!   its value from `entry=KEY=VALUE` (query) or an `x-shareplane-entry: KEY=VALUE` header (one
//!   entry per header; the value is everything after the first `=`), KEY being the template's
//!   entry. Any method is accepted (ForwardAuth
//!   forwards the client's); the body is ignored and bounded.
//! - `GET /metrics` (Prometheus text);
//! - `GET /healthz` (liveness): 200 unless the gateway is wedged; the body also carries the
//!   readiness line;
//! - `GET /readyz` (readiness): 503 with a one-line reason while no rule set is loaded, Redis was
//!   never reached, or the gateway is fenced; 200 otherwise (see [`crate::health`]).

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

use crate::decide::{ratelimit_fields, Code, DecideError, Decider, Named, Outcome};
use crate::health::Health;
use crate::metrics::Api;

/// The largest request body read (the check ignores it).
pub const MAX_BODY_BYTES: usize = 16 << 10;
/// The header that names limits.
pub const LIMIT_HEADER: &str = "x-shareplane-limit";
/// The header that carries the cost.
pub const COST_HEADER: &str = "x-shareplane-cost";
/// The header that carries one descriptor entry, `KEY=VALUE`, for templates.
pub const ENTRY_HEADER: &str = "x-shareplane-entry";

#[derive(Clone)]
struct App {
    decider: Arc<Decider>,
    health: Arc<Health>,
    ratelimit_headers: bool,
}

/// The router: the check, `/metrics`, `/healthz` and `/readyz`.
pub fn router(decider: Arc<Decider>, health: Arc<Health>, ratelimit_headers: bool) -> Router {
    Router::new()
        .route("/v1/check", any(check_429))
        .route("/v1/auth_request", any(check_403))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(App {
            decider,
            health,
            ratelimit_headers,
        })
}

async fn check_429(State(app): State<App>, uri: Uri, headers: HeaderMap) -> Response {
    check(&app, &uri, &headers, StatusCode::TOO_MANY_REQUESTS).await
}

async fn check_403(State(app): State<App>, uri: Uri, headers: HeaderMap) -> Response {
    check(&app, &uri, &headers, StatusCode::FORBIDDEN).await
}

/// What a check request asks: limit ids and a cost.
#[derive(Debug, PartialEq, Eq)]
pub struct CheckAsk {
    pub limits: Vec<String>,
    pub cost: u32,
    /// `(key, value)` entries, for the templates among `limits`.
    pub entries: Vec<(String, String)>,
}

/// Reads the limits and the cost from the query and the headers.
pub fn parse_ask(query: Option<&str>, headers: &HeaderMap) -> Result<CheckAsk, String> {
    let mut limits = Vec::new();
    let mut cost: Option<String> = None;
    let mut entries = Vec::new();
    let entry = |v: &str| match v.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("entry {v:?} is not KEY=VALUE")),
    };
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "limit" => limits.push(v.into_owned()),
            "cost" => cost = Some(v.into_owned()),
            "entry" => entries.push(entry(&v)?),
            other => {
                return Err(format!(
                    "unknown query parameter {other:?} (limit, cost, entry)"
                ))
            }
        }
    }
    for v in headers.get_all(ENTRY_HEADER) {
        let v = v
            .to_str()
            .map_err(|_| format!("{ENTRY_HEADER}: not ASCII"))?;
        entries.push(entry(v)?);
    }
    for v in headers.get_all(LIMIT_HEADER) {
        let v = v
            .to_str()
            .map_err(|_| format!("{LIMIT_HEADER}: not ASCII"))?;
        limits.extend(
            v.split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()),
        );
    }
    if let Some(v) = headers.get(COST_HEADER) {
        cost = Some(
            v.to_str()
                .map_err(|_| format!("{COST_HEADER}: not ASCII"))?
                .to_owned(),
        );
    }
    if limits.is_empty() {
        return Err(format!(
            "name at least one limit: ?limit=ID or a {LIMIT_HEADER} header"
        ));
    }
    let cost = match cost {
        None => 1,
        Some(c) => c
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("cost {c:?} is not a whole number"))?
            .max(1),
    };
    Ok(CheckAsk {
        limits,
        cost: u32::try_from(cost).unwrap_or(u32::MAX),
        entries,
    })
}

async fn check(app: &App, uri: &Uri, headers: &HeaderMap, refuse: StatusCode) -> Response {
    let ask = match parse_ask(uri.query(), headers) {
        Ok(a) => a,
        Err(e) => {
            let r: Result<Outcome, DecideError> = Err(DecideError::BadRequest(e.clone()));
            app.decider.metrics.request(Api::Http, &r);
            return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
        }
    };
    let entries: Vec<(&str, &str)> = ask
        .entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let named: Vec<Option<Named<'_>>> = ask
        .limits
        .iter()
        .map(|l| {
            Some(Named {
                limit: l,
                entries: &entries,
            })
        })
        .collect();
    match app.decider.decide(Api::Http, &named, ask.cost).await {
        Ok(o) => answer(&o, refuse, app.ratelimit_headers),
        Err(e) if e.is_callers() => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
        Err(e) => {
            let mut r = (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
    }
}

fn answer(o: &Outcome, refuse: StatusCode, ratelimit_headers: bool) -> Response {
    let mut r = if o.allowed {
        StatusCode::OK.into_response()
    } else {
        let over: Vec<&str> = o
            .descriptors
            .iter()
            .filter(|d| d.code == Code::OverLimit)
            .filter_map(|d| d.limit.as_ref().map(|l| l.id.as_str()))
            .collect();
        (refuse, format!("over limit: {}\n", over.join(", "))).into_response()
    };
    let h = r.headers_mut();
    if let Some(s) = o.retry_after_s.filter(|_| !o.allowed) {
        h.insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    if ratelimit_headers {
        if let Some((policy, state)) = ratelimit_fields(o) {
            for (name, v) in [("ratelimit-policy", policy), ("ratelimit", state)] {
                if let Ok(v) = HeaderValue::from_str(&v) {
                    h.insert(name, v);
                }
            }
        }
    }
    r
}

async fn metrics(State(app): State<App>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.decider
            .metrics
            .render(&app.decider.limiter, &app.health),
    )
        .into_response()
}

async fn healthz(State(app): State<App>) -> Response {
    let ready = match app.health.readiness(&app.decider.limiter) {
        Ok(line) => line,
        Err(why) => format!("not ready: {why}"),
    };
    match app.health.liveness() {
        Ok(()) => (StatusCode::OK, format!("alive ({ready})\n")).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

async fn readyz(State(app): State<App>) -> Response {
    match app.health.readiness(&app.decider.limiter) {
        Ok(line) => (StatusCode::OK, format!("{line}\n")).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_cost_come_from_the_query_and_the_headers() {
        let mut h = HeaderMap::new();
        let ask = parse_ask(Some("limit=k-big&limit=a%2Fb&cost=3"), &h);
        assert_eq!(
            ask,
            Ok(CheckAsk {
                limits: vec!["k-big".into(), "a/b".into()],
                cost: 3,
                entries: vec![],
            })
        );
        h.insert(LIMIT_HEADER, HeaderValue::from_static("x, y"));
        h.insert(COST_HEADER, HeaderValue::from_static("0"));
        let ask = parse_ask(None, &h);
        assert_eq!(
            ask,
            Ok(CheckAsk {
                limits: vec!["x".into(), "y".into()],
                cost: 1,
                entries: vec![],
            })
        );
        // Entries for templates: the value is all after the first '='.
        h.insert(ENTRY_HEADER, HeaderValue::from_static("user=a=b"));
        let ask = parse_ask(Some("entry=api_key%3Dk%2C1"), &h).map(|a| a.entries);
        assert_eq!(
            ask,
            Ok(vec![
                ("api_key".into(), "k,1".into()),
                ("user".into(), "a=b".into())
            ])
        );
        assert!(parse_ask(Some("limit=a&entry=novalue"), &HeaderMap::new()).is_err());
        assert!(parse_ask(None, &HeaderMap::new()).is_err());
        assert!(parse_ask(Some("limit=a&cost=-1"), &HeaderMap::new()).is_err());
        assert!(parse_ask(Some("limit=a&cost=lots"), &HeaderMap::new()).is_err());
        assert!(parse_ask(Some("limit=a&shard=2"), &HeaderMap::new()).is_err());
        let huge = parse_ask(Some("limit=a&cost=99999999999"), &HeaderMap::new());
        assert_eq!(huge.map(|a| a.cost), Ok(u32::MAX));
    }
}
