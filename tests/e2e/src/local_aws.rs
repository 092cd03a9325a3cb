//! The local AWS side of a run: the record table on moto and the Route 53 health datapoints moto
//! never publishes by itself (SPEC §6 reads `AWS/Route53 HealthCheckStatus` in us-east-1).

use crate::procs::{free_port, wait_for_port, ProcError, Procs};
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, MetricDatum};
use shareplane_aws::client::{self, CallLimits, Endpoint};
use shareplane_aws::health::{HEALTH_DIMENSION, HEALTH_METRIC, ROUTE53_NAMESPACE};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The AWS Region every process of a local run uses, so that all of them see the same moto
/// table (moto keeps one state per Region; a real global table has one replica per Region).
pub const LOCAL_AWS_REGION: &str = "us-east-1";

#[derive(Debug, thiserror::Error)]
pub enum LocalAwsError {
    #[error("cannot create table {table} on {url}: {why}")]
    Table {
        table: String,
        url: String,
        why: String,
    },
    #[error("cannot put health datapoints on {url}: {why}")]
    Health { url: String, why: String },
}

fn endpoint(url: &str) -> Endpoint {
    Endpoint::Local {
        url: url.to_string(),
        region: LOCAL_AWS_REGION.to_string(),
    }
}

fn limits() -> CallLimits {
    CallLimits {
        operation_timeout: Duration::from_secs(20),
        ..CallLimits::default()
    }
}

/// The moto server program: `SHAREPLANE_TEST_MOTO_SERVER`, else the workspace's `.venv-moto`
/// (tests/run-all.sh makes it), else `moto_server` on the PATH; `None` if none is a file.
pub fn moto_server_program() -> Option<PathBuf> {
    let named = std::env::var_os("SHAREPLANE_TEST_MOTO_SERVER").map(PathBuf::from);
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-moto/bin/moto_server");
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("moto_server"))
            .find(|p| p.is_file())
    });
    [named, Some(venv), on_path]
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
}

/// Starts a moto server of its own (for one Region's replica of the table) on a free port of
/// 127.0.0.1 and waits until it listens. Returns its URL.
pub fn start_moto(procs: &mut Procs, program: &Path, name: &str) -> Result<String, ProcError> {
    let port = free_port()?;
    let args: Vec<String> = ["-H", "127.0.0.1", "-p", &port.to_string()]
        .map(String::from)
        .to_vec();
    let i = procs.spawn(
        &procs.fresh_name(&format!("moto-{name}")),
        program,
        &args,
        &[],
    )?;
    wait_for_port(
        procs,
        i,
        &format!("moto {name}"),
        port,
        Duration::from_secs(30),
    )?;
    Ok(format!("http://127.0.0.1:{port}"))
}

/// Creates the record table `table` on the moto server at `url` (nothing if it exists).
pub async fn create_table(url: &str, table: &str) -> Result<(), LocalAwsError> {
    let c = client::dynamodb(&client::sdk_config(&endpoint(url), limits()).await);
    shareplane_aws::create_table(&c, table)
        .await
        .map_err(|e| LocalAwsError::Table {
            table: table.to_string(),
            url: url.to_string(),
            why: e.to_string(),
        })
}

/// Puts `HealthCheckStatus = 1` (healthy) at `at` for every id in `check_ids`.
pub async fn put_healthy(
    url: &str,
    check_ids: &[String],
    at: SystemTime,
) -> Result<(), LocalAwsError> {
    let points: Vec<(&str, f64, SystemTime)> =
        check_ids.iter().map(|id| (id.as_str(), 1.0, at)).collect();
    put_health(url, &points).await
}

/// Puts one `HealthCheckStatus` datapoint per `(check id, value, time)`: 1 healthy, 0 unhealthy
/// (Route 53 publishes them only in us-east-1, and moto never does by itself).
pub async fn put_health(
    url: &str,
    points: &[(&str, f64, SystemTime)],
) -> Result<(), LocalAwsError> {
    let cw = client::cloudwatch_health(&client::sdk_config(&endpoint(url), limits()).await);
    let data: Vec<MetricDatum> = points
        .iter()
        .map(|(id, value, at)| {
            MetricDatum::builder()
                .metric_name(HEALTH_METRIC)
                .dimensions(
                    Dimension::builder()
                        .name(HEALTH_DIMENSION)
                        .value(*id)
                        .build(),
                )
                .timestamp(DateTime::from(*at))
                .value(*value)
                .build()
        })
        .collect();
    cw.put_metric_data()
        .namespace(ROUTE53_NAMESPACE)
        .set_metric_data(Some(data))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| LocalAwsError::Health {
            url: url.to_string(),
            why: client::describe(&e),
        })
}

/// The record table `table` on the moto server at `url`, read as Region `me` of `deployment`
/// reads it (to see the records the daemons really wrote).
pub async fn store(
    url: &str,
    table: &str,
    deployment: std::sync::Arc<shareplane_core::Deployment>,
    me: shareplane_core::RegionId,
) -> shareplane_aws::DynamoStore {
    let c = client::dynamodb(&client::sdk_config(&endpoint(url), limits()).await);
    shareplane_aws::DynamoStore::new(c, table, deployment, me)
}
