//! shareplane on AWS: the DynamoDB record store, the CloudWatch health reader and the CloudWatch
//! metric publisher. This is the only crate that knows the AWS SDK.
//!
//! - [`DynamoStore`] implements [`shareplane_store::RecordStore`] on a DynamoDB (global) table
//!   with partition key `pk` (S, the Region's name) and sort key `sk` (S). Each Region writes only
//!   items under its own name: a header `sk = "rec"`, shards `sk = "rec#0000"…`, its writer
//!   lease `sk = "lease"`, and a copy of the last record of each ended epoch `E` that some heir
//!   may still need (`sk = "prev#E"`, `"prev#E#0000"`…, `E` in 10 digits). The item layout and
//!   its validation are in [`codec`]; the write and read protocols, and when a kept epoch is
//!   deleted, in [`dynamo`]. The same table holds the shared limits
//!   ([`shareplane_store::LimitsDoc`]) under partition key `#limits`: a head and the text in
//!   parts keyed by version and digest ([`limits`]); a Region name may not start with `#`.
//! - [`HealthReader`] reads Route 53 health check status from CloudWatch in us-east-1.
//! - [`MetricsPublisher`] publishes the alarm metrics ([`metrics`] lists them).
//! - [`client`] builds SDK clients (explicit endpoint for tests, default chain for production)
//!   and holds the one retry decision, [`client::is_retryable`].
//!
//! # Cost (10,000 limits × 3 Regions)
//!
//! Measured by `cargo bench -p shareplane-aws --bench codec` (fixture records with every amount
//! filled in and limit ids like `tenant-00042/api`; one write per Region every 5 s):
//!
//! | figure                                   | value                                   |
//! |------------------------------------------|-----------------------------------------|
//! | item bytes per Region                    | 505,542 (50.6 bytes per limit)          |
//! | items per Region                         | 41 (1 header + 40 shards of 256 limits) |
//! | largest item                             | 13 KB (DynamoDB allows 400 KB)          |
//! | items per limit per Region               | 0.0041 (1/244; the aim was at most 1/20)|
//! | WCU per Region per 5 s, every limit changed | 1,018 (transactional writes count double) |
//! | the same, 10 limits changed              | 236 (only changed shards are rewritten) |
//! | the same, no limit changed               | 2 (the header alone)                    |
//! | replicated WCU across 3 Regions per 5 s, busy | 6,108 (1,222 per second)           |
//! | replicated WCU across 3 Regions per 5 s, quiet | 12                                |
//! | RCU per Region per 5 s (read all 3 Regions, eventually consistent) | 185.5       |
//! | encode 3 Regions / decode and validate 3 Regions | 1.1 ms / 4.1 ms (release)       |
//!
//! Write units count 1 WCU per started KB of each item written, doubled because every write is a
//! `TransactWriteItems`. Replicated units: each writing Region pays its transactional units, and
//! each of the 2 other replicas pays the plain units again when the write arrives; summed over
//! the 3 writing Regions. One item per limit would instead cost at least 10,000 WCU per Region per
//! period (20,000 transactional). A busy record costs what its bytes cost: the demand of an active
//! limit changes every period, so most shards are rewritten; compressing shard blobs is the next
//! lever if that bill matters.
//!
//! # Wiring
//!
//! ```no_run
//! # async fn wire(deployment: std::sync::Arc<shareplane_core::Deployment>) {
//! use shareplane_aws::{client, CallLimits, DynamoStore, Endpoint, HealthReader, MetricsPublisher};
//! use std::time::Duration;
//! let config = client::sdk_config(&Endpoint::Default { region: None }, CallLimits::default()).await;
//! let me = deployment.region_id("eu-west-1").expect("configured");
//! let store = DynamoStore::new(client::dynamodb(&config), "shareplane", deployment.clone(), me);
//! let checks = vec![Some("hc-us".to_string()), Some("hc-eu".to_string()), None];
//! let health = HealthReader::new(
//!     client::cloudwatch_health(&config), // pinned to us-east-1
//!     checks,
//!     Duration::from_secs(180), // freshness window
//!     Duration::from_secs(2),   // call timeout
//! );
//! let metrics = MetricsPublisher::new(client::cloudwatch(&config), "Shareplane");
//! # }
//! ```
//!
//! # The table (for the infrastructure code)
//!
//! One DynamoDB global table with a replica in every Region of the deployment: partition key
//! `pk` (S), sort key `sk` (S), no secondary index, no TTL (kept epochs are deleted by their
//! owner once every heir has moved past them, never by age). The daemon needs `dynamodb:Query`
//! and `GetItem` on every Region's items, and for its `TransactWriteItems` calls (whose actions
//! are authorized one by one) `dynamodb:PutItem`, `DeleteItem` (old shards, collected kept
//! epochs) and `ConditionCheckItem` on its own Region's items only (`dynamodb:LeadingKeys` = its
//! name; infra/ grants exactly that), `cloudwatch:GetMetricData` (in us-east-1) and
//! `cloudwatch:PutMetricData` (its own Region). Its reads cover the shared limits too (`GetItem`
//! and `Query` on `#limits`); whoever applies them needs `GetItem`, `Query`, `PutItem` and
//! `DeleteItem` on the `#limits` items (`dynamodb:LeadingKeys` = `#limits`), and no daemon does.
//!
//! A kept epoch costs its record's bytes once more when the epoch ends (the copy travels in the
//! write that starts the next epoch, together with the first full write of the new one: 82
//! items, two transactions, for 10,000 limits), and its read units at every read of every
//! Region until it is collected (about 62 RCU per reader per period for 10,000 limits), plus one
//! consistent read of the own record at the first write after a restart, a lease change or a
//! failed write (the store must learn the stored epoch).

pub mod client;
pub mod codec;
pub mod dynamo;
pub mod health;
pub mod limits;
pub mod metrics;

pub use client::{is_retryable, CallLimits, Endpoint};
pub use dynamo::{create_table, DynamoStore};
pub use health::HealthReader;
pub use metrics::{MetricsPublisher, Point};
