//! Where Regions keep their records: the interface the daemon writes through, and an in-memory
//! implementation for `shareplane demo`, tests and conformance checks.
//!
//! The DynamoDB implementation lives in `shareplane-aws`. Both must pass the same conformance
//! suite, so that the in-memory store stays an honest stand-in.
//!
//! The same table also holds the **shared limits** ([`LimitsDoc`]): one document of limits that
//! `shareplane limits apply` writes once and every Region's daemon reads, so that a plan change
//! is made in one place.

use shareplane_core::{Deployment, RecordError, RegionId, RegionRecord};
use std::future::Future;
use std::sync::Arc;

pub mod memory;

/// A writer's fencing token: the lease generation under which a daemon writes its Region's record.
/// A write carrying a lower token than the one stored is refused, so a deposed leader can never
/// overwrite its successor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct WriterToken(pub u64);

/// A lease on a Region's writer role (HA: one writer per Region).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub holder: String,
    pub token: WriterToken,
    /// On the store's clock as the daemon passed it in; leases compare times of one Region only.
    pub expires_at_ms: u64,
}

/// One item read from the table: a valid record, or why it was rejected.
#[derive(Clone, Debug)]
pub enum Fetched {
    Record(Arc<RegionRecord>),
    Rejected {
        region: Option<String>,
        reason: Rejection,
    },
}

/// Why an item could not be turned into a record. Each has a stable cause for metrics.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Rejection {
    #[error("item is malformed: {0}")]
    Malformed(String),
    #[error("item is larger than {0} bytes")]
    Oversized(usize),
    #[error("item has schema version {0}, newer than this daemon understands")]
    FutureSchema(u32),
    #[error("record fails validation: {0}")]
    Invalid(#[from] RecordError),
}

impl Rejection {
    pub fn cause(&self) -> &'static str {
        match self {
            Rejection::Malformed(_) => "malformed",
            Rejection::Oversized(_) => "oversized",
            Rejection::FutureSchema(_) => "future_schema",
            Rejection::Invalid(e) => e.cause(),
        }
    }
}

/// One version of the shared limits: what `shareplane limits apply` wrote and every daemon with
/// `limits_source = "table"` runs. The store keeps the text exactly as given and checks nothing
/// in it; what it means is the daemon's business (`shareplane::config::parse_limits`), which
/// checks it whole before anything runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsDoc {
    /// Rises with every apply; a daemon adopts only a version higher than the one it runs.
    pub version: u64,
    /// The limits file (TOML with `[[limits]]` entries only), at most [`MAX_LIMITS_DOC_BYTES`].
    pub text: String,
    /// Who applied it (informational, for operators).
    pub applied_by: String,
    /// When it was applied, in Unix milliseconds on the applier's clock (informational).
    pub applied_at_ms: u64,
}

impl LimitsDoc {
    /// The digest a reader checks the reassembled text against (FNV-1a of its bytes).
    pub fn digest(&self) -> u64 {
        shareplane_core::fnv1a_64(self.text.as_bytes())
    }
}

/// The largest shared limits document a store keeps: the largest configuration file (16 MiB;
/// 100,000 limits take about 6 MB).
pub const MAX_LIMITS_DOC_BYTES: usize = 16 << 20;

/// What a read of the shared limits found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitsRead {
    /// Nothing was ever applied to this table.
    Absent,
    /// The newest document this replica holds, whole and checked against its digest.
    Complete(LimitsDoc),
    /// This replica names `version` as the newest, but not all of its parts have arrived yet (a
    /// global table replicates item by item, in no promised order), or they do not add up to
    /// the digest the head names. Nothing of it may be used: read again later.
    Incomplete { version: u64 },
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The stored record has the same or a higher version, or a higher writer token.
    #[error("conditional write refused: {0}")]
    Conflict(String),
    /// The store did not answer, or answered with an error that may pass.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store answered with an error that retrying will not fix.
    #[error("store error: {0}")]
    Fatal(String),
}

impl StoreError {
    /// The one place that decides whether a failed call is worth retrying.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }
}

/// The global table as one Region's daemon sees it (its local replica).
pub trait RecordStore: Send + Sync + 'static {
    /// Follows a configuration reload that changed the limits (the daemon calls it between
    /// rebalances). A store that keeps core records as they are (the in-memory one) needs
    /// nothing; one that encodes limits by id (DynamoDB) encodes and decodes with `d` from now on.
    fn set_deployment(&self, d: Arc<Deployment>) {
        let _ = d;
    }

    /// Writes this Region's own record, only if its version is higher than the stored one and
    /// `token` is not lower than the stored writer token.
    fn put(
        &self,
        record: &RegionRecord,
        token: WriterToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads every Region's record (the own one included) from the local replica.
    ///
    /// A store must also return each Region's last record of **every** ended epoch, before the
    /// current records, until every heir has marked it: a survivor that restarted, or was cut off
    /// while a peer ended several epochs, closes those epochs one by one from exactly those
    /// records (see docs/PROTOCOL.md, "Return"). Without them the survivor keeps the old estates
    /// frozen: room is stranded, never created.
    fn read_all(&self) -> impl Future<Output = Result<Vec<Fetched>, StoreError>> + Send;

    /// Reads one Region's record (a restarting daemon reads its own), `None` if never written.
    fn read_one(
        &self,
        region: RegionId,
    ) -> impl Future<Output = Result<Option<Fetched>, StoreError>> + Send;

    /// Takes or renews the writer lease of `region` for `holder` until `now_ms + ttl_ms`.
    /// Succeeds when the lease is free, expired at `now_ms`, or already held by `holder`; a new
    /// holder gets a higher token. Refused with [`StoreError::Conflict`] otherwise.
    fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;

    /// Reads the shared limits from the local replica (see [`LimitsDoc`]). No default: a
    /// wrapper that forgot to pass it on would refuse, and its daemon would never get limits.
    fn read_limits(&self) -> impl Future<Output = Result<LimitsRead, StoreError>> + Send;

    /// Writes `doc` as the newest shared limits, only if its version is higher than the stored
    /// one's ([`StoreError::Conflict`] otherwise) and its text is at most
    /// [`MAX_LIMITS_DOC_BYTES`] ([`StoreError::Fatal`]). Readers see either the previous document
    /// or the whole new one, never a mix.
    fn write_limits(&self, doc: &LimitsDoc) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A shared store is a store: the daemon can own one handle while another part of the process
/// (a bench, a metrics reader) keeps its own.
impl<S: RecordStore> RecordStore for Arc<S> {
    fn set_deployment(&self, d: Arc<Deployment>) {
        (**self).set_deployment(d);
    }

    fn put(
        &self,
        record: &RegionRecord,
        token: WriterToken,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).put(record, token)
    }

    fn read_all(&self) -> impl Future<Output = Result<Vec<Fetched>, StoreError>> + Send {
        (**self).read_all()
    }

    fn read_one(
        &self,
        region: RegionId,
    ) -> impl Future<Output = Result<Option<Fetched>, StoreError>> + Send {
        (**self).read_one(region)
    }

    fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send {
        (**self).acquire_lease(region, holder, now_ms, ttl_ms)
    }

    fn read_limits(&self) -> impl Future<Output = Result<LimitsRead, StoreError>> + Send {
        (**self).read_limits()
    }

    fn write_limits(&self, doc: &LimitsDoc) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).write_limits(doc)
    }
}
