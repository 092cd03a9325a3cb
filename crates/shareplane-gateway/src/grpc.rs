//! Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.
//!
//! Each descriptor is mapped to a limit or a template (see [`crate::mapping`]; a template takes
//! the value of its entry from the same descriptor); all of a request's limits are checked in
//! one limiter call, all or nothing. The cost is the descriptors' `hits_addend` when
//! set (all equal), else the request's, 0 meaning 1. A descriptor's `limit` override is ignored:
//! the numbers are the Region's share from the daemon. Responses carry each descriptor's status
//! (`current_limit` in the smallest unit that expresses the share exactly, `limit_remaining` from
//! the bucket, `duration_until_reset` until the bucket is full) and, on refusal, `retry-after`.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code as PbCode, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tonic::{Request, Response, Status};

use crate::decide::{ratelimit_fields, Code, DecideError, Decider, Named, Outcome};
use crate::metrics::Api;

/// The largest request message accepted (bytes).
pub const MAX_MESSAGE_BYTES: usize = 64 << 10;

pub struct RlsService {
    decider: Arc<Decider>,
    ratelimit_headers: bool,
}

impl RlsService {
    pub fn new(decider: Arc<Decider>, ratelimit_headers: bool) -> Self {
        Self {
            decider,
            ratelimit_headers,
        }
    }

    /// The tonic service, with the message size bounded.
    pub fn into_server(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self).max_decoding_message_size(MAX_MESSAGE_BYTES)
    }
}

#[tonic::async_trait]
impl RateLimitService for RlsService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let req = request.into_inner();
        let cost = cost_of(&req).map_err(|e| status_of(&e))?;
        let entries: Vec<Vec<(&str, &str)>> = req
            .descriptors
            .iter()
            .map(|d| {
                d.entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
                    .collect()
            })
            .collect();
        let live = self.decider.live.get();
        let named: Vec<Option<Named<'_>>> = entries
            .iter()
            .map(|e| {
                live.mapper
                    .limit_for(&req.domain, e)
                    .map(|limit| Named { limit, entries: e })
            })
            .collect();
        match self.decider.decide(Api::Grpc, &named, cost).await {
            Ok(o) => Ok(Response::new(response(&o, self.ratelimit_headers))),
            Err(e) => Err(status_of(&e)),
        }
    }
}

/// The cost of a request: one `hits_addend` for all its descriptors.
fn cost_of(req: &RateLimitRequest) -> Result<u32, DecideError> {
    if req.descriptors.iter().any(|d| d.is_negative_hits) {
        return Err(DecideError::BadRequest(
            "is_negative_hits is not supported: tokens are never given back".to_owned(),
        ));
    }
    let mut per_descriptor = req
        .descriptors
        .iter()
        .filter_map(|d| d.hits_addend.as_ref().map(|h| h.value));
    let cost = match per_descriptor.next() {
        None => u64::from(req.hits_addend),
        Some(first) => {
            if per_descriptor.any(|h| h != first) {
                return Err(DecideError::BadRequest(
                    "descriptors carry different hits_addend values: shareplane charges one cost \
                     per request"
                        .to_owned(),
                ));
            }
            first
        }
    };
    Ok(u32::try_from(cost.max(1)).unwrap_or(u32::MAX))
}

fn status_of(e: &DecideError) -> Status {
    if e.is_callers() {
        Status::invalid_argument(e.to_string())
    } else {
        Status::unavailable(e.to_string())
    }
}

fn response(o: &Outcome, ratelimit_headers: bool) -> RateLimitResponse {
    let code = |c: Code| match c {
        Code::Ok => PbCode::Ok as i32,
        Code::OverLimit => PbCode::OverLimit as i32,
    };
    let statuses = o
        .descriptors
        .iter()
        .map(|d| DescriptorStatus {
            code: code(d.code),
            current_limit: d.limit.as_ref().map(|l| {
                let (requests_per_unit, unit) = per_unit(l.rate);
                RateLimit {
                    name: l.id.clone(),
                    requests_per_unit,
                    unit: unit as i32,
                }
            }),
            limit_remaining: d.limit.as_ref().map_or(0, |l| l.remaining()),
            duration_until_reset: d.limit.as_ref().map(|l| pb_duration(l.seconds_to_full())),
            ..DescriptorStatus::default()
        })
        .collect();
    let mut headers = Vec::new();
    if let Some(s) = o.retry_after_s.filter(|_| !o.allowed) {
        headers.push(header("retry-after", s.to_string()));
    }
    if ratelimit_headers {
        if let Some((policy, state)) = ratelimit_fields(o) {
            headers.push(header("ratelimit-policy", policy));
            headers.push(header("ratelimit", state));
        }
    }
    RateLimitResponse {
        overall_code: code(if o.allowed { Code::Ok } else { Code::OverLimit }),
        statuses,
        response_headers_to_add: headers,
        ..RateLimitResponse::default()
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..HeaderValue::default()
    }
}

fn pb_duration(s: f64) -> PbDuration {
    let s = s.clamp(0.0, 315_576_000_000.0);
    PbDuration {
        seconds: s.trunc() as i64,
        nanos: (s.fract() * 1e9) as i32,
    }
}

/// A share in the smallest unit that expresses it as a whole number of requests (a share of
/// 1,350.5 requests/s is 81,030 per minute); a share no unit expresses exactly is rounded down
/// in the largest unit that fits `u32`, so what Envoy shows is never above the share.
pub fn per_unit(rate_per_s: f64) -> (u32, Unit) {
    const UNITS: [(Unit, f64); 4] = [
        (Unit::Second, 1.0),
        (Unit::Minute, 60.0),
        (Unit::Hour, 3_600.0),
        (Unit::Day, 86_400.0),
    ];
    if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
        return (0, Unit::Second);
    }
    let mut best = (
        rate_per_s.floor().min(f64::from(u32::MAX)) as u32,
        Unit::Second,
    );
    for (unit, secs) in UNITS {
        let n = rate_per_s * secs;
        if n > f64::from(u32::MAX) {
            break;
        }
        best = (n.floor() as u32, unit);
        if (n - n.round()).abs() < 1e-6 {
            return (n.round() as u32, unit);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::google::protobuf::UInt64Value;

    #[test]
    fn shares_are_expressed_exactly_in_the_smallest_unit_that_can() {
        assert_eq!(per_unit(5_600.0), (5_600, Unit::Second));
        assert_eq!(per_unit(1_350.5), (81_030, Unit::Minute));
        assert_eq!(per_unit(0.25), (15, Unit::Minute));
        assert_eq!(per_unit(1.0 / 3_600.0), (1, Unit::Hour));
        // 1/7 per second is no whole number in any unit: rounded down per day.
        assert_eq!(per_unit(1.0 / 7.0), (12_342, Unit::Day));
        // Too large to count per minute: per second, rounded down.
        assert_eq!(per_unit(1e8 + 0.5), (100_000_000, Unit::Second));
        assert_eq!(per_unit(f64::NAN), (0, Unit::Second));
        assert_eq!(per_unit(0.0), (0, Unit::Second));
    }

    fn descriptor(hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            hits_addend: hits.map(|value| UInt64Value { value }),
            ..RateLimitDescriptor::default()
        }
    }

    #[test]
    fn the_cost_is_one_hits_addend_per_request() {
        let req = |hits_addend, descriptors| RateLimitRequest {
            hits_addend,
            descriptors,
            ..RateLimitRequest::default()
        };
        assert_eq!(cost_of(&req(0, vec![descriptor(None)])), Ok(1));
        assert_eq!(cost_of(&req(7, vec![descriptor(None)])), Ok(7));
        assert_eq!(
            cost_of(&req(7, vec![descriptor(Some(3)), descriptor(Some(3))])),
            Ok(3)
        );
        assert_eq!(
            cost_of(&req(0, vec![descriptor(Some(1 << 40))])),
            Ok(u32::MAX)
        );
        assert!(cost_of(&req(0, vec![descriptor(Some(1)), descriptor(Some(2))])).is_err());
        let mut negative = descriptor(None);
        negative.is_negative_hits = true;
        assert!(cost_of(&req(1, vec![negative])).is_err());
    }
}
