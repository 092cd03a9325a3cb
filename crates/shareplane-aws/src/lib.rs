//! shareplane on AWS: the DynamoDB record store, the CloudWatch health reader and the CloudWatch
//! metric publisher. This is the only crate that knows the AWS SDK.
//!
//! - [`DynamoStore`] implements [`shareplane_store::RecordStore`] on a DynamoDB (global) table
//!   with partition key `pk` (S, the Region's name) and sort key `sk` (S). Each Region writes only
//!   items under its own name: a header `sk = "rec"`, shards `sk = "rec#0000"…` and its writer
//!   lease `sk = "lease"`. The item layout and its validation are in [`codec`]; the write and read
//!   protocols in [`dynamo`].
//! - [`HealthReader`] reads Route 53 health check status from CloudWatch in us-east-1.
//! - [`MetricsPublisher`] publishes the alarm metrics ([`metrics`] lists them).
//! - [`client`] builds SDK clients (explicit endpoint for tests, default chain for production)
//!   and holds the one retry decision, [`client::is_retryable`].
//!
//! # Cost (10,000 limits × 3 Regions)
//!
//! COST_TABLE

pub mod client;
pub mod codec;
pub mod dynamo;
pub mod health;
pub mod metrics;

pub use client::{is_retryable, CallLimits, Endpoint};
pub use dynamo::{create_table, DynamoStore};
pub use health::HealthReader;
pub use metrics::{MetricsPublisher, Point};
