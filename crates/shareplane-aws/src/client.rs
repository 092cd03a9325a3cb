//! Building SDK clients, and the one place that decides which AWS errors are worth retrying.

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
/// What the clients are built from (named here so that callers need no SDK crate of their own).
pub use aws_config::SdkConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use shareplane_store::StoreError;
use std::time::Duration;

/// Route 53 publishes health check metrics to CloudWatch in this Region only.
pub const HEALTH_METRICS_REGION: &str = "us-east-1";

/// Where the clients talk to.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint {
    /// Production: the default credential and Region chain; `region` overrides the chain's Region.
    Default { region: Option<String> },
    /// Tests and local runs: an explicit URL (for example moto on 127.0.0.1) with fixed test
    /// credentials, so that nothing ever consults the instance metadata service or real AWS.
    Local { url: String, region: String },
}

/// Bounds on every AWS call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallLimits {
    /// One whole operation, retries included.
    pub operation_timeout: Duration,
    pub connect_timeout: Duration,
    /// Attempts per operation (the SDK's standard retry with backoff).
    pub max_attempts: u32,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            operation_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(1),
            max_attempts: 3,
        }
    }
}

/// Loads the shared SDK configuration for `endpoint` with `limits` applied.
pub async fn sdk_config(endpoint: &Endpoint, limits: CallLimits) -> SdkConfig {
    let timeouts = TimeoutConfig::builder()
        .operation_timeout(limits.operation_timeout)
        .connect_timeout(limits.connect_timeout)
        .build();
    let loader = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(timeouts)
        .retry_config(RetryConfig::standard().with_max_attempts(limits.max_attempts.max(1)));
    match endpoint {
        Endpoint::Default { region: None } => loader.load().await,
        Endpoint::Default { region: Some(r) } => loader.region(Region::new(r.clone())).load().await,
        Endpoint::Local { url, region } => {
            loader
                .endpoint_url(url.clone())
                .region(Region::new(region.clone()))
                .credentials_provider(Credentials::new(
                    "testing",
                    "testing",
                    None,
                    None,
                    "shareplane-local",
                ))
                .load()
                .await
        }
    }
}

/// A DynamoDB client for the daemon's own Region (its local replica of the global table).
pub fn dynamodb(config: &SdkConfig) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(config)
}

/// A CloudWatch client for the daemon's own Region (where its metrics go).
pub fn cloudwatch(config: &SdkConfig) -> aws_sdk_cloudwatch::Client {
    aws_sdk_cloudwatch::Client::new(config)
}

/// A CloudWatch client pinned to us-east-1 whatever `config`'s Region, for Route 53 health metrics.
pub fn cloudwatch_health(config: &SdkConfig) -> aws_sdk_cloudwatch::Client {
    let conf = aws_sdk_cloudwatch::config::Builder::from(config)
        .region(Region::new(HEALTH_METRICS_REGION))
        .build();
    aws_sdk_cloudwatch::Client::from_conf(conf)
}

/// Error codes that say "try again later" (throttling, capacity, transient server trouble).
const RETRYABLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "TransactionConflictException",
    "TransactionInProgressException",
    "LimitExceededException",
];

/// The one decision whether a failed AWS call may succeed when retried: timeouts, connection
/// failures, unreadable responses and the throttling/server codes above are retryable; request
/// construction failures and every other service error are not.
pub fn is_retryable<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            true
        }
        SdkError::ServiceError(e) => e.err().code().is_some_and(|c| RETRYABLE_CODES.contains(&c)),
        _ => false,
    }
}

/// Maps an SDK error to the store's error, through [`is_retryable`].
pub fn store_error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    what: &str,
    err: SdkError<E, R>,
) -> StoreError {
    let text = describe(&err);
    if is_retryable(&err) {
        StoreError::Unavailable(format!("{what}: {text}"))
    } else {
        StoreError::Fatal(format!("{what}: {text}"))
    }
}

/// A one-line description: the service's code and message when there is one.
pub fn describe<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    err: &SdkError<E, R>,
) -> String {
    match err {
        SdkError::ServiceError(e) => format!(
            "{} ({})",
            e.err().code().unwrap_or("unknown error"),
            e.err().message().unwrap_or("no message")
        ),
        other => {
            let mut s = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(e) = source {
                s.push_str(": ");
                s.push_str(&e.to_string());
                source = e.source();
            }
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::put_item::PutItemError;

    fn service(code: &str) -> SdkError<PutItemError, ()> {
        SdkError::service_error(
            PutItemError::generic(ErrorMetadata::builder().code(code).build()),
            (),
        )
    }

    #[test]
    fn throttling_timeouts_and_server_trouble_are_retryable_the_rest_is_not() {
        assert!(is_retryable(&service(
            "ProvisionedThroughputExceededException"
        )));
        assert!(is_retryable(&service("ThrottlingException")));
        assert!(is_retryable(&service("InternalServerError")));
        assert!(is_retryable(&SdkError::<PutItemError, ()>::timeout_error(
            "slow"
        )));
        assert!(!is_retryable(&service("ValidationException")));
        assert!(!is_retryable(&service("ResourceNotFoundException")));
        assert!(!is_retryable(
            &SdkError::<PutItemError, ()>::construction_failure("bad input")
        ));
        assert!(
            matches!(store_error("PutItem", service("AccessDeniedException")), StoreError::Fatal(m) if m.contains("AccessDenied"))
        );
        assert!(matches!(
            store_error("PutItem", service("ThrottlingException")),
            StoreError::Unavailable(_)
        ));
    }
}
