//! The token-bucket script in Redis/Valkey: bucket keys, the call, and its reply.
//!
//! [`RedisBuckets`] loads the script once per connection (`SCRIPT LOAD`), calls it by hash
//! (`EVALSHA`) and loads it again when the server answers `NOSCRIPT` (after a restart, a failover or a
//! `SCRIPT FLUSH`), then retries once. Every call is bounded by one timeout, the wait for a
//! connection included; the connection itself is made (and the scripts loaded) by one background
//! task at a time within [`CONNECT_TIMEOUT`], so a TLS set-up slower than one call's bound still
//! completes and serves the calls after it. A connection that failed or timed out is dropped and
//! made again on the next call.
//!
//! [`RedisMode::Cluster`] speaks to a cluster-mode Redis or Valkey (ElastiCache Serverless is one)
//! through the redis crate's cluster client: the URL names one seed node, the client learns the
//! slot map from it, sends each call to the master of its keys' slot and follows `MOVED` and `ASK`
//! redirections. `SCRIPT LOAD` goes to every node. Every key of one call must carry one hash tag
//! (see [`crate::keys`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

pub mod batch;

/// The script's source (see `bucket.lua` for its arguments and reply).
pub const SCRIPT: &str = include_str!("bucket.lua");
/// The repayment script's source (see `repay.lua`): charges what the local fallback admitted to
/// the buckets once Redis answers again.
pub const REPAY_SCRIPT: &str = include_str!("repay.lua");

/// The most buckets one call may check.
pub const MAX_BUCKETS_PER_CALL: usize = 32;

/// The most TTL the client asks for (one day); the script still raises it to burst / rate.
pub const MAX_TTL_MS: u64 = 86_400_000;
/// The least TTL the client asks for.
pub const MIN_TTL_MS: u64 = 60_000;

/// Whether the Redis/Valkey behind the URL runs in cluster mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RedisMode {
    /// One server, or a replication group's primary endpoint (cluster mode disabled).
    #[default]
    Standalone,
    /// A cluster-mode-enabled cluster (ElastiCache Serverless, or cluster mode enabled), reached
    /// through one seed node.
    Cluster,
}

/// How bucket keys are named. The key names the limit, never its version, so old and new numbers
/// spend the same tokens.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeyScheme {
    /// `rl:{<limit id>}:global`: each limit in its own hash slot. Multi-limit calls work on a
    /// standalone server or a cluster-mode-disabled replication group (ElastiCache's default); on a
    /// cluster-mode-enabled cluster they fail with `CROSSSLOT`, so use [`KeyScheme::SharedTag`].
    #[default]
    PerLimit,
    /// `rl:{<tag>}:<limit id>`: every limit under one hash tag, so any set of limits can be checked
    /// in one call on a cluster too, at the cost of putting all of this gateway's buckets in one slot.
    SharedTag(String),
}

impl KeyScheme {
    pub fn key(&self, limit_id: &str) -> String {
        match self {
            Self::PerLimit => format!("rl:{{{limit_id}}}:global"),
            Self::SharedTag(tag) => format!("rl:{{{tag}}}:{limit_id}"),
        }
    }
}

/// One bucket of a call, with the rule numbers that apply now.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketCall {
    pub key: String,
    pub rate: f64,
    pub burst: f64,
    pub cost: f64,
    /// `false` for a shadow limit: evaluated and reported, never refuses.
    pub enforce: bool,
}

impl BucketCall {
    /// The TTL the client asks for: see [`ttl_ms`].
    pub fn ttl_ms(&self) -> u64 {
        ttl_ms(self.rate, self.burst)
    }

    /// Whether the rate, burst and cost are finite numbers >= 0, as the script requires.
    fn numbers_valid(&self) -> bool {
        [self.rate, self.burst, self.cost]
            .iter()
            .all(|x| x.is_finite() && *x >= 0.0)
    }
}

/// The TTL the client asks for a bucket of `rate` and `burst`: twice the time a full refill takes,
/// within [[`MIN_TTL_MS`], [`MAX_TTL_MS`]] (the scripts raise it to at least burst / rate
/// regardless). The margin keeps a bucket alive across a cut in the rate: a bucket that expired
/// would come back full.
pub fn ttl_ms(rate: f64, burst: f64) -> u64 {
    if rate <= 0.0 {
        return MAX_TTL_MS;
    }
    let refill_ms = (burst / rate * 2000.0).ceil();
    if refill_ms.is_finite() && refill_ms < MAX_TTL_MS as f64 {
        (refill_ms as u64).max(MIN_TTL_MS)
    } else {
        MAX_TTL_MS
    }
}

/// What the local fallback admitted on one bucket, to be charged to it (see `repay.lua`).
#[derive(Debug, Clone, PartialEq)]
pub struct Debt {
    pub key: String,
    /// The rule numbers that apply now (the refill since the bucket's stamp is credited first).
    pub rate: f64,
    pub burst: f64,
    /// Tokens the fallback admitted.
    pub owed: f64,
}

/// A bucket's verdict in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketVerdict {
    /// The bucket had the tokens.
    Admit,
    /// Not enough tokens now; the refill will cover it.
    Short,
    /// The cost exceeds the burst: no wait helps.
    CostAboveBurst,
}

/// The script's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptReply {
    pub allowed: bool,
    /// Whole seconds until the refill covers every refusing bucket; `None` when admitted or when no
    /// wait helps.
    pub retry_after_s: Option<u64>,
    /// Per bucket, in call order: the verdict and the tokens left after the call.
    pub buckets: Vec<(BucketVerdict, f64)>,
}

/// Why a call did not produce a reply.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("Redis did not answer within {0:?}")]
    Timeout(Duration),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("script reply does not have the expected shape: {0}")]
    Reply(String),
    #[error("a call checks 1 to {MAX_BUCKETS_PER_CALL} buckets, not {0}")]
    BucketCount(usize),
    #[error("Redis setting: {0}")]
    Setting(String),
    #[error("cannot connect to Redis: {0}")]
    Connect(String),
}

/// The longest a connection's set-up (TCP, TLS, `SCRIPT LOAD`) may take; it runs in the
/// background, so no call waits for it longer than the call's own bound.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The script in one Redis/Valkey server (or replication group endpoint). Cheap to clone: clones
/// share one connection and one set of batches.
#[derive(Clone)]
pub struct RedisBuckets {
    timeout: Duration,
    mode: RedisMode,
    shared: Arc<Shared>,
}

/// A standalone or a cluster client.
#[allow(clippy::large_enum_variant)] // one per limiter, made once: size does not matter
enum Client {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// A connection of either kind; cheap to clone (both multiplex one set of sockets).
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        match self {
            Self::Single(c) => cmd.query_async(c).await,
            Self::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

/// What the background connector and the calls share.
struct Shared {
    client: Client,
    sha: String,
    repay_sha: String,
    conn: Mutex<Option<Conn>>,
    /// Whether a connector task runs now (at most one does).
    connecting: AtomicBool,
    /// Woken when a connector ends, connected or not.
    connected: tokio::sync::Notify,
    /// Why the last connection attempt failed.
    last_error: Mutex<Option<String>>,
    /// Set by the first connection made (a one-way latch).
    connected_once: AtomicBool,
    loads: AtomicU64,
    /// Bucket-script calls sent, and the checks they carried.
    calls: AtomicU64,
    checks: AtomicU64,
    /// The checks waiting for their key group's next call ([`batch`]).
    queues: batch::Queues,
}

impl RedisBuckets {
    /// Prepares a client for `url` (`redis://host:port/`, or `rediss://` for TLS with the system's
    /// roots). Nothing is sent until the first call, so
    /// a gateway can start while Redis is down.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, StoreError> {
        Self::with_ca(url, timeout, None)
    }

    /// [`RedisBuckets::new`] for `redis://` or `rediss://` (TLS); `ca_pem` holds the PEM
    /// certificates that sign a `rediss://` server's certificate (`None`: the system's roots).
    /// A CA with a `redis://` URL is refused rather than silently unused.
    pub fn with_ca(
        url: &str,
        timeout: Duration,
        ca_pem: Option<&[u8]>,
    ) -> Result<Self, StoreError> {
        Self::with_mode(url, RedisMode::Standalone, timeout, ca_pem)
    }

    /// [`RedisBuckets::with_ca`] for a standalone server or, with [`RedisMode::Cluster`], a
    /// cluster reached through the seed node `url`.
    pub fn with_mode(
        url: &str,
        mode: RedisMode,
        timeout: Duration,
        ca_pem: Option<&[u8]>,
    ) -> Result<Self, StoreError> {
        let client = client(url, mode, ca_pem)?;
        let sha = redis::Script::new(SCRIPT).get_hash().to_owned();
        let repay_sha = redis::Script::new(REPAY_SCRIPT).get_hash().to_owned();
        Ok(Self {
            timeout,
            mode,
            shared: Arc::new(Shared {
                client,
                sha,
                repay_sha,
                conn: Mutex::new(None),
                connecting: AtomicBool::new(false),
                connected: tokio::sync::Notify::new(),
                last_error: Mutex::new(None),
                connected_once: AtomicBool::new(false),
                loads: AtomicU64::new(0),
                calls: AtomicU64::new(0),
                checks: AtomicU64::new(0),
                queues: batch::Queues::default(),
            }),
        })
    }

    /// How many times the scripts were loaded (once per connection, plus once per `NOSCRIPT`).
    pub fn script_loads(&self) -> u64 {
        self.shared.loads.load(Ordering::Relaxed)
    }

    /// The bucket-script calls sent and the checks they carried (more checks than calls: checks
    /// that arrived together went in one call, [`batch`]).
    pub fn script_calls(&self) -> (u64, u64) {
        let s = &self.shared;
        (
            s.calls.load(Ordering::Relaxed),
            s.checks.load(Ordering::Relaxed),
        )
    }

    /// Whether a connection was ever made (and the scripts loaded); `Err` with the last
    /// connection error while none was.
    pub fn connected_once(&self) -> Result<(), String> {
        if self.shared.connected_once.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(lock(&self.shared.last_error)
            .clone()
            .unwrap_or_else(|| "not connected yet".to_owned()))
    }

    /// Starts connecting now (in the background) unless connected or connecting, so that the
    /// first calls find a connection (TLS set-up may take longer than one call's bound). Must be
    /// called within a tokio runtime.
    pub fn warm_up(&self) {
        if lock(&self.shared.conn).is_none() {
            self.shared.clone().spawn_connector();
        }
    }

    /// Checks and spends the buckets of `calls`, all or nothing, within the timeout (the wait for
    /// the call that carries it included: checks that arrive together share one script call,
    /// [`batch`]).
    pub async fn run(&self, calls: &[BucketCall]) -> Result<ScriptReply, StoreError> {
        if calls.is_empty() || calls.len() > MAX_BUCKETS_PER_CALL {
            return Err(StoreError::BucketCount(calls.len()));
        }
        if let Some(c) = calls.iter().find(|c| !c.numbers_valid()) {
            // Refused here, alone: the script would refuse the whole batch it came in.
            return Err(StoreError::Reply(format!(
                "bucket {} has a rate, burst or cost that is not a finite number >= 0 \
                 (rate {}, burst {}, cost {})",
                c.key, c.rate, c.burst, c.cost
            )));
        }
        batch::check(self, calls).await
    }

    /// One script call for `checks` (see `bucket.lua`), within the timeout: per check, its reply.
    pub(crate) async fn call_batch(
        &self,
        checks: &[&[BucketCall]],
    ) -> Result<Vec<Result<ScriptReply, StoreError>>, StoreError> {
        // The distinct keys, and each bucket's index among them (from 1, as Lua counts).
        let mut keys: Vec<&str> = Vec::new();
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut index: Vec<usize> = Vec::new();
        for c in checks.iter().flat_map(|calls| calls.iter()) {
            let at = *seen.entry(c.key.as_str()).or_insert_with(|| {
                keys.push(&c.key);
                keys.len()
            });
            index.push(at);
        }
        let mut args = redis::cmd("EVALSHA");
        args.arg(&self.shared.sha).arg(keys.len());
        for k in &keys {
            args.arg(*k);
        }
        args.arg(checks.len());
        let mut at = index.into_iter();
        for calls in checks {
            args.arg(calls.len());
            for c in *calls {
                args.arg(at.next().unwrap_or(0))
                    .arg(c.rate)
                    .arg(c.burst)
                    .arg(c.cost)
                    .arg(c.ttl_ms())
                    .arg(u8::from(c.enforce));
            }
        }
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        (self.shared.checks).fetch_add(checks.len() as u64, Ordering::Relaxed);
        let reply = self.bounded(&args).await?;
        Ok(items(&reply, checks.len())?
            .iter()
            .zip(checks)
            .map(|(item, calls)| parse_reply(item, calls.len()))
            .collect())
    }

    pub(crate) fn mode(&self) -> RedisMode {
        self.mode
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn queues(&self) -> &batch::Queues {
        &self.shared.queues
    }

    /// Charges `debts` to their buckets in one call within the timeout, and returns the tokens each
    /// holds afterwards (below zero: the bucket refuses until the refill pays the rest).
    pub async fn repay(&self, debts: &[Debt]) -> Result<Vec<f64>, StoreError> {
        if debts.is_empty() || debts.len() > MAX_BUCKETS_PER_CALL {
            return Err(StoreError::BucketCount(debts.len()));
        }
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.shared.repay_sha).arg(debts.len());
        for d in debts {
            cmd.arg(&d.key);
        }
        for d in debts {
            cmd.arg(d.rate)
                .arg(d.burst)
                .arg(d.owed)
                .arg(ttl_ms(d.rate, d.burst));
        }
        let reply = self.bounded(&cmd).await?;
        items(&reply, debts.len())?.iter().map(decimal).collect()
    }

    /// Sends `cmd` (an `EVALSHA` of one of the scripts) within the timeout.
    async fn bounded(&self, cmd: &redis::Cmd) -> Result<redis::Value, StoreError> {
        let result = tokio::time::timeout(self.timeout, self.run_unbounded(cmd)).await;
        let result = result
            .unwrap_or(Err(StoreError::Timeout(self.timeout)))
            .map_err(|e| self.explain(e));
        if let Err(StoreError::Timeout(_) | StoreError::Redis(_) | StoreError::Connect(_)) = &result
        {
            // A half-dead connection would fail every call after it: make a new one next time.
            *lock(&self.shared.conn) = None;
        }
        result
    }

    /// A redirection on a standalone connection means the server runs in cluster mode: say what
    /// to configure rather than pass on a bare `MOVED`.
    fn explain(&self, e: StoreError) -> StoreError {
        use redis::{ErrorKind, ServerErrorKind};
        match e {
            StoreError::Redis(r)
                if self.mode == RedisMode::Standalone
                    && matches!(
                        r.kind(),
                        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
                    ) =>
            {
                StoreError::Setting(format!(
                    "the Redis server runs in cluster mode ({r}): set redis_mode = \"cluster\""
                ))
            }
            other => other,
        }
    }

    async fn run_unbounded(&self, cmd: &redis::Cmd) -> Result<redis::Value, StoreError> {
        let mut conn = self.connection().await?;
        match conn.query(cmd).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                tracing::info!(
                    "bucket scripts missing on the server (NOSCRIPT); loading them again"
                );
                self.shared.load(&mut conn).await?;
                Ok(conn.query(cmd).await?)
            }
            other => Ok(other?),
        }
    }

    /// The connection, or the outcome of the connector this call starts or joins. The call's
    /// bound cuts the wait; the connector goes on within [`CONNECT_TIMEOUT`] and leaves its
    /// connection for the next call.
    async fn connection(&self) -> Result<Conn, StoreError> {
        if let Some(c) = lock(&self.shared.conn).as_ref() {
            return Ok(c.clone());
        }
        let ended = self.shared.connected.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if let Some(c) = lock(&self.shared.conn).as_ref() {
            return Ok(c.clone());
        }
        self.shared.clone().spawn_connector();
        ended.await;
        if let Some(c) = lock(&self.shared.conn).as_ref() {
            return Ok(c.clone());
        }
        let why = lock(&self.shared.last_error)
            .clone()
            .unwrap_or_else(|| "connection failed".to_owned());
        Err(StoreError::Connect(why))
    }
}

impl Shared {
    /// Starts the connector unless one runs.
    fn spawn_connector(self: Arc<Self>) {
        if self.connecting.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(async move {
            let started = crate::clock::std_now();
            let outcome = tokio::time::timeout(CONNECT_TIMEOUT, self.connect()).await;
            let outcome = outcome.unwrap_or_else(|_| {
                Err(StoreError::Connect(format!(
                    "no connection within {CONNECT_TIMEOUT:?}"
                )))
            });
            match outcome {
                Ok(c) => {
                    tracing::info!(
                        setup_ms = crate::clock::std_since(started).as_millis() as u64,
                        "connected to Redis and loaded the scripts"
                    );
                    *lock(&self.conn) = Some(c);
                    *lock(&self.last_error) = None;
                    self.connected_once.store(true, Ordering::Release);
                }
                Err(e) => *lock(&self.last_error) = Some(e.to_string()),
            }
            self.connecting.store(false, Ordering::Release);
            self.connected.notify_waiters();
        });
    }

    async fn connect(&self) -> Result<Conn, StoreError> {
        let mut c = match &self.client {
            Client::Single(c) => Conn::Single(c.get_multiplexed_async_connection().await?),
            Client::Cluster(c) => Conn::Cluster(c.get_async_connection().await?),
        };
        self.load(&mut c).await?;
        Ok(c)
    }

    /// Loads both scripts (on a cluster, on every node: the cluster client sends `SCRIPT LOAD`
    /// to all of them and fails unless all succeed).
    async fn load(&self, conn: &mut Conn) -> Result<(), StoreError> {
        for (source, want) in [(SCRIPT, &self.sha), (REPAY_SCRIPT, &self.repay_sha)] {
            let sha: String = conn
                .query(redis::cmd("SCRIPT").arg("LOAD").arg(source))
                .await?;
            if sha != *want {
                return Err(StoreError::Reply(format!(
                    "server hashed a script to {sha}, expected {want}"
                )));
            }
        }
        self.loads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The client for `url` in `mode`, with the CA of a `rediss://` server if given.
fn client(url: &str, mode: RedisMode, ca_pem: Option<&[u8]>) -> Result<Client, StoreError> {
    let tls = url.starts_with("rediss://");
    if tls {
        install_crypto_provider();
    } else if ca_pem.is_some() {
        return Err(StoreError::Setting(
            "a CA certificate is given but the Redis URL is not rediss://".to_owned(),
        ));
    }
    let certs = ca_pem.map(|pem| redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(pem.to_vec()),
    });
    Ok(match (mode, certs) {
        (RedisMode::Standalone, None) => Client::Single(redis::Client::open(url)?),
        (RedisMode::Standalone, Some(certs)) => {
            Client::Single(redis::Client::build_with_tls(url, certs)?)
        }
        (RedisMode::Cluster, certs) => {
            // TLS, when the seed's URL is rediss://, applies to every node the client learns of.
            let mut b = ClusterClient::builder([url]).connection_timeout(CONNECT_TIMEOUT);
            if let Some(certs) = certs {
                b = b.certs(certs);
            }
            Client::Cluster(b.build()?)
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `n` items of a reply that must be an array of that many.
fn items(v: &redis::Value, n: usize) -> Result<&[redis::Value], StoreError> {
    let redis::Value::Array(items) = v else {
        return Err(StoreError::Reply(format!("expected an array, got {v:?}")));
    };
    if items.len() != n {
        return Err(StoreError::Reply(format!(
            "expected {n} items, got {}",
            items.len()
        )));
    }
    Ok(items)
}

fn parse_reply(v: &redis::Value, n: usize) -> Result<ScriptReply, StoreError> {
    let items = items(v, 2 + 2 * n)?;
    let allowed = int(&items[0])? == 1;
    let retry = int(&items[1])?;
    let retry_after_s = u64::try_from(retry).ok();
    let mut buckets = Vec::with_capacity(n);
    for pair in items[2..].chunks_exact(2) {
        let verdict = match int(&pair[0])? {
            0 => BucketVerdict::Admit,
            1 => BucketVerdict::Short,
            2 => BucketVerdict::CostAboveBurst,
            x => return Err(StoreError::Reply(format!("unknown verdict {x}"))),
        };
        buckets.push((verdict, thousandths(&pair[1])?));
    }
    Ok(ScriptReply {
        allowed,
        retry_after_s,
        buckets,
    })
}

/// Makes rustls's `ring` provider the process default unless one is installed already. Where both
/// of rustls's providers are compiled in (this workspace's binaries, which link the AWS SDK's
/// `aws-lc-rs` as well), rustls picks none by itself and redis's TLS set-up would panic.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one in between: then that one serves, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A token count the bucket script sends in thousandths of a token, rounded down.
fn thousandths(v: &redis::Value) -> Result<f64, StoreError> {
    Ok(int(v)? as f64 / 1000.0)
}

/// A token count the repayment script sends as a decimal string.
fn decimal(v: &redis::Value) -> Result<f64, StoreError> {
    let tokens = match v {
        redis::Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|t| t.is_finite()),
        _ => None,
    };
    tokens.ok_or_else(|| StoreError::Reply(format!("bad tokens {v:?}")))
}

fn int(v: &redis::Value) -> Result<i64, StoreError> {
    match v {
        redis::Value::Int(i) => Ok(*i),
        other => Err(StoreError::Reply(format!(
            "expected an integer, got {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_limit_never_its_version() {
        assert_eq!(KeyScheme::PerLimit.key("k-big"), "rl:{k-big}:global");
        assert_eq!(
            KeyScheme::SharedTag("gw".into()).key("k-big"),
            "rl:{gw}:k-big"
        );
    }

    #[test]
    fn ttl_covers_a_full_refill() {
        let call = |rate, burst| BucketCall {
            key: String::new(),
            rate,
            burst,
            cost: 1.0,
            enforce: true,
        };
        assert_eq!(call(0.01, 20.0).ttl_ms(), 4_000_000);
        assert_eq!(call(10_000.0, 20_000.0).ttl_ms(), MIN_TTL_MS);
        assert_eq!(call(0.0, 0.0).ttl_ms(), MAX_TTL_MS);
        assert_eq!(call(1e-9, 1e12).ttl_ms(), MAX_TTL_MS);
    }

    #[test]
    fn replies_of_the_wrong_shape_are_errors() {
        use redis::Value::{Array, BulkString, Int};
        let ok = Array(vec![Int(0), Int(3), Int(1), Int(500)]);
        let reply = parse_reply(&ok, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reply.retry_after_s, Some(3));
        assert_eq!(reply.buckets, [(BucketVerdict::Short, 0.5)]);
        assert!(parse_reply(&ok, 2).is_err());
        assert!(parse_reply(&Int(1), 1).is_err());
        let bad = Array(vec![Int(1), Int(-1), Int(7), Int(1000)]);
        assert!(parse_reply(&bad, 1).is_err());
        let text = Array(vec![Int(1), Int(-1), Int(0), BulkString(b"1".to_vec())]);
        assert!(parse_reply(&text, 1).is_err(), "tokens come as an integer");
    }
}
