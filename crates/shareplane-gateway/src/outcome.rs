//! What a decision answers: the outcome of a request, each descriptor's code and limit, and the
//! errors that answer instead. `decide` produces them and re-exports them; `metrics` counts them.

use shareplane_limiter::store::MAX_BUCKETS_PER_CALL;
use shareplane_limiter::templates::ValueProblem;

/// The most descriptors one request may carry (all are checked in one script call).
pub const MAX_DESCRIPTORS: usize = MAX_BUCKETS_PER_CALL;

/// A request that is answered with an error rather than a decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    #[error("descriptor {0} maps to no limit this gateway runs (unmapped = \"error\")")]
    Unmapped(usize),
    #[error("a request carries at most {MAX_DESCRIPTORS} descriptors, this one {0}")]
    TooMany(usize),
    #[error("no rule set loaded yet: the gateway has not heard from its daemon")]
    NoRules,
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error(
        "descriptor {index} names template {template:?} but {} (template_value = \"error\")",
        match problem {
            ValueProblem::Missing => "carries no value for its entry",
            ValueProblem::TooLong => "its value is longer than the 256 bytes a template takes",
        }
    )]
    TemplateValue {
        index: usize,
        template: String,
        problem: ValueProblem,
    },
    #[error("the limiter could not check the request: {0}")]
    Limiter(String),
}

impl DecideError {
    /// Whether the caller asked for something wrong (rather than the gateway being unready).
    pub fn is_callers(&self) -> bool {
        matches!(
            self,
            Self::Unmapped(_) | Self::TooMany(_) | Self::BadRequest(_) | Self::TemplateValue { .. }
        )
    }
}

/// A descriptor's code, as Envoy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::OverLimit => "over_limit",
        }
    }
}

/// The limit behind one descriptor, as the running rule set has it.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitView {
    pub id: String,
    /// Requests per second (the Region's share).
    pub rate: f64,
    pub burst: f64,
    /// Tokens left in the bucket after the call, where known.
    pub tokens: Option<f64>,
}

impl LimitView {
    /// Whole tokens left (0 when unknown).
    pub fn remaining(&self) -> u32 {
        let t = self.tokens.unwrap_or(0.0).floor();
        if t.is_finite() && t > 0.0 {
            t.min(f64::from(u32::MAX)) as u32
        } else {
            0
        }
    }

    /// Seconds until the bucket is full again (0 when it is, or when nothing refills it).
    pub fn seconds_to_full(&self) -> f64 {
        let missing = self.burst - self.tokens.unwrap_or(0.0).max(0.0);
        if self.rate > 0.0 && missing > 0.0 {
            missing / self.rate
        } else {
            0.0
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DescriptorOutcome {
    pub code: Code,
    /// `None` for a descriptor that maps to no limit.
    pub limit: Option<LimitView>,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub allowed: bool,
    /// Whole seconds for a Retry-After when refused and a wait helps.
    pub retry_after_s: Option<u64>,
    /// In request order.
    pub descriptors: Vec<DescriptorOutcome>,
}
