//! Three Regions of real processes around one moto table, as the end-to-end tests run them: each
//! Region's `shareplane run` daemon (its configuration written to the run's directory), its
//! `redis-server` and its `shareplane-loadgen` gateway, and the Route 53 health datapoints.

use crate::local_aws;
use crate::procs::{binary, free_port, wait_for_port, ProcError, Procs};
use shareplane_limiter::loadgen::unix_ms_now;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The bearer token every daemon of a run accepts.
pub const TOKEN: &str = "e2e-token-0123456789abcdef";
/// The load generators' Redis bound (`--redis-timeout-ms`): these tests run a dozen processes on
/// a few cores, where a 50 ms bound (the production default) times calls out under load and brings
/// in the local fallback, which is not what they measure (crates/shareplane-limiter/tests/stall.rs
/// does).
pub const LOADGEN_REDIS_TIMEOUT_MS: &str = "250";

const AWS_ENV: [(&str, &str); 4] = [
    ("AWS_ACCESS_KEY_ID", "testing"),
    ("AWS_SECRET_ACCESS_KEY", "testing"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
    ("AWS_REGION", local_aws::LOCAL_AWS_REGION),
];

/// What every daemon of a run shares.
#[derive(Clone, Debug)]
pub struct Setup {
    pub regions: [&'static str; 3],
    pub phases_ms: [u64; 3],
    pub period_ms: u64,
    pub limit: &'static str,
    pub limit_rps: f64,
    pub floor_rps: f64,
    pub step_cap_rps: f64,
    pub table: String,
    /// The moto server of the table when all Regions share one, and the one that plays
    /// CloudWatch in us-east-1 (Route 53 health) for every Region.
    pub moto: String,
    /// One moto server per Region, by index, each holding that Region's replica of the table
    /// (see [`crate::replicator`]); empty: every Region uses `moto`.
    pub stores: Vec<String>,
    /// Route 53 health check id by Region index.
    pub health_ids: Vec<String>,
    /// The limit's `(rate, version)` each Region's file says, by index, once a test has changed
    /// it ([`Setup::set_limit`]); a Region not listed runs `limit_rps` at version 1.
    pub region_limits: Vec<Option<(f64, u64)>>,
}

/// One Region of a run.
#[derive(Clone, Debug)]
pub struct Region {
    pub name: &'static str,
    pub redis: String,
    pub redis_port: u16,
    /// The Redis server's index in [`Procs`].
    pub redis_proc: usize,
    /// The daemon's base URL.
    pub daemon: String,
    pub port: u16,
    /// The daemon's index in [`Procs`].
    pub daemon_proc: usize,
}

impl Setup {
    /// Region `me`'s configuration, listening on `listen`.
    pub fn config(&self, me: usize, listen: &str) -> String {
        let mut c = format!(
            "region = \"{}\"\nphase_ms = {}\nperiod_ms = {}\nstore = \"dynamodb\"\n\
             table = \"{}\"\naws_endpoint = \"{}\"\naws_region = \"{}\"\nlisten = \"{listen}\"\n\
             metrics_namespace = \"ShareplaneE2E\"\n",
            self.regions[me],
            self.phases_ms[me],
            self.period_ms,
            self.table,
            self.stores.get(me).unwrap_or(&self.moto),
            local_aws::LOCAL_AWS_REGION,
        );
        if !self.stores.is_empty() {
            c.push_str(&format!("health_endpoint = \"{}\"\n", self.moto));
        }
        for (name, id) in self.regions.iter().zip(&self.health_ids) {
            c.push_str(&format!(
                "\n[[regions]]\nname = \"{name}\"\nhealth_check_id = \"{id}\"\n"
            ));
        }
        let (rate, version) = self.limit_of(me);
        c.push_str(&format!(
            "\n[[limits]]\nid = \"{}\"\nrate = {rate}\nversion = {version}\nburst_s = 2\n\
             floor = {}\nstep_cap = {}\n",
            self.limit, self.floor_rps, self.step_cap_rps
        ));
        c
    }

    /// The limit's `(rate, version)` in Region `me`'s file.
    pub fn limit_of(&self, me: usize) -> (f64, u64) {
        self.region_limits
            .get(me)
            .copied()
            .flatten()
            .unwrap_or((self.limit_rps, 1))
    }

    /// Region `me`'s file from now on says `rate` at `version`; [`Setup::write_config`] writes it.
    pub fn set_limit(&mut self, me: usize, rate: f64, version: u64) {
        if self.region_limits.len() <= me {
            self.region_limits.resize(me + 1, None);
        }
        self.region_limits[me] = Some((rate, version));
    }

    /// Writes Region `me`'s configuration (listening on `port`) to the run's directory, where
    /// its daemon reads it at start and reloads it on SIGHUP. Returns the file.
    pub fn write_config(&self, dir: &Path, me: usize, port: u16) -> Result<PathBuf, ProcError> {
        let listen = format!("127.0.0.1:{port}");
        let file = dir.join(format!("daemon-{}.toml", self.regions[me]));
        std::fs::write(&file, self.config(me, &listen)).map_err(|source| ProcError::Log {
            path: file.clone(),
            source,
        })?;
        Ok(file)
    }

    /// Starts Region `me`'s daemon on `port` (a free one if `None`) and waits until it listens.
    /// Returns its base URL, port and index in `procs`.
    pub fn start_daemon(
        &self,
        procs: &mut Procs,
        me: usize,
        port: Option<u16>,
    ) -> Result<(String, u16, usize), ProcError> {
        let name = self.regions[me];
        let port = match port {
            Some(p) => p,
            None => free_port()?,
        };
        let listen = format!("127.0.0.1:{port}");
        let file = self.write_config(procs.dir(), me, port)?;
        let args = vec![
            "run".to_string(),
            "--config".to_string(),
            file.display().to_string(),
        ];
        let mut env = AWS_ENV.to_vec();
        env.push(("SHAREPLANE_API_TOKEN", TOKEN));
        let bin = binary("shareplane")?;
        let i = procs.spawn(
            &procs.fresh_name(&format!("daemon-{name}")),
            &bin,
            &args,
            &env,
        )?;
        wait_for_port(
            procs,
            i,
            &format!("daemon {name}"),
            port,
            Duration::from_secs(20),
        )?;
        Ok((format!("http://{listen}"), port, i))
    }

    /// Starts every Region's Redis and daemon.
    pub fn start_regions(
        &self,
        procs: &mut Procs,
        redis_bin: &Path,
    ) -> Result<Vec<Region>, ProcError> {
        let mut out = Vec::new();
        for (me, name) in self.regions.iter().enumerate() {
            let redis_port = free_port()?;
            let (redis, redis_proc) = start_redis_on(procs, redis_bin, name, redis_port)?;
            let (daemon, port, daemon_proc) = self.start_daemon(procs, me, None)?;
            out.push(Region {
                name,
                redis,
                redis_port,
                redis_proc,
                daemon,
                port,
                daemon_proc,
            });
        }
        Ok(out)
    }

    /// Starts Region `r`'s load generator: `pattern` for `duration_s` from `start_at` (Unix ms).
    pub fn start_loadgen(
        &self,
        procs: &mut Procs,
        r: &Region,
        pattern: &str,
        duration_s: u64,
        start_at: u64,
    ) -> Result<usize, ProcError> {
        let args: Vec<String> = [
            "--daemon",
            &r.daemon,
            "--redis",
            &r.redis,
            "--token",
            TOKEN,
            "--gateway",
            &format!("gw-{}", r.name),
            "--region",
            r.name,
            "--limit",
            self.limit,
            "--pattern",
            pattern,
            "--duration-s",
            &duration_s.to_string(),
            "--redis-timeout-ms",
            LOADGEN_REDIS_TIMEOUT_MS,
            "--ready-timeout-s",
            "20",
            "--start-at-unix-ms",
            &start_at.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let bin = binary("shareplane-loadgen")?;
        procs.spawn(
            &procs.fresh_name(&format!("loadgen-{}", r.name)),
            &bin,
            &args,
            &[],
        )
    }
}

/// Starts a `redis-server` on a free port (no persistence) and waits until it listens.
pub fn start_redis(procs: &mut Procs, redis_bin: &Path, name: &str) -> Result<String, ProcError> {
    start_redis_on(procs, redis_bin, name, free_port()?).map(|(url, _)| url)
}

/// Starts a `redis-server` on `port` (no persistence: a restart loses every bucket) and waits
/// until it listens. Returns its URL and index in `procs`.
pub fn start_redis_on(
    procs: &mut Procs,
    redis_bin: &Path,
    name: &str,
    port: u16,
) -> Result<(String, usize), ProcError> {
    let args: Vec<String> = ["--bind", "127.0.0.1", "--port", &port.to_string()]
        .iter()
        .map(|s| s.to_string())
        .chain(["--save", "", "--appendonly", "no"].map(String::from))
        .collect();
    let i = procs.spawn(
        &procs.fresh_name(&format!("redis-{name}")),
        redis_bin,
        &args,
        &[],
    )?;
    wait_for_port(procs, i, name, port, Duration::from_secs(10))?;
    Ok((format!("redis://127.0.0.1:{port}/"), i))
}

/// The verdict the health checks report for each Region, by index: what [`keep_health`] puts.
#[derive(Clone, Debug)]
pub struct Verdicts(Arc<Mutex<Vec<bool>>>);

impl Verdicts {
    pub fn all_healthy(n: usize) -> Verdicts {
        Verdicts(Arc::new(Mutex::new(vec![true; n])))
    }

    pub fn set(&self, region: usize, healthy: bool) {
        if let Some(v) = self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(region)
        {
            *v = healthy;
        }
    }

    fn get(&self) -> Vec<bool> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Puts every Region's verdict every `every` until `until` (Unix ms), and at once whenever it
/// changes to healthy or unhealthy. The daemons read the Minimum over one-minute periods, the
/// newest period deciding, so a Region that turns healthy again also gets a datapoint at the
/// start of the next minute: it reads healthy from then on rather than at the minute after.
pub async fn keep_health(
    moto: String,
    ids: Vec<String>,
    verdicts: Verdicts,
    every: Duration,
    until: u64,
) {
    let mut last: Option<Vec<bool>> = None;
    let mut next_put = 0;
    while unix_ms_now() < until {
        let now_v = verdicts.get();
        let changed = last.as_ref() != Some(&now_v);
        if changed || unix_ms_now() >= next_put {
            let now = SystemTime::now();
            let mut points: Vec<(&str, f64, SystemTime)> = Vec::new();
            for (i, (id, healthy)) in ids.iter().zip(&now_v).enumerate() {
                points.push((id, if *healthy { 1.0 } else { 0.0 }, now));
                let turned_healthy = last.as_ref().is_some_and(|l| l.get(i) == Some(&false));
                if *healthy && turned_healthy {
                    points.push((id, 1.0, next_minute(now)));
                }
            }
            if let Err(e) = local_aws::put_health(&moto, &points).await {
                eprintln!("health datapoints: {e}");
            }
            last = Some(now_v);
            next_put = unix_ms_now() + every.as_millis() as u64;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One second into the next whole minute after `t`.
fn next_minute(t: SystemTime) -> SystemTime {
    let s = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    SystemTime::UNIX_EPOCH + Duration::from_secs((s / 60 + 1) * 60 + 1)
}

/// Like [`keep_health`], for verdicts that must change within a second or two: every 500 ms it
/// puts each Region's verdict stamped 2 s ahead. moto groups datapoints into periods counted from
/// the query's start time rather than whole minutes, and the daemon asks from `now − 180 s` to
/// `now + 60 s`, so its newest period, `[now, now + 60 s)`, then holds only the verdicts put in the
/// last 2 s: unhealthy counts at the next read, healthy again within 2 s (the Minimum decides).
/// [`keep_health`]'s one-minute datapoints would instead leave a verdict of the last 60 s in the
/// newest period once their time has passed (a false "unhealthy" for a minute).
pub async fn keep_health_ahead(moto: String, ids: Vec<String>, verdicts: Verdicts, until: u64) {
    while unix_ms_now() < until {
        let at = SystemTime::now() + Duration::from_secs(2);
        let now_v = verdicts.get();
        let points: Vec<(&str, f64, SystemTime)> = ids
            .iter()
            .zip(&now_v)
            .map(|(id, h)| (id.as_str(), if *h { 1.0 } else { 0.0 }, at))
            .collect();
        if let Err(e) = local_aws::put_health(&moto, &points).await {
            eprintln!("health datapoints: {e}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
