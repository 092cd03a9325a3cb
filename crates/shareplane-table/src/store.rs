//! The simulated global table as a [`RecordStore`], for the daemon's tests, the demo and
//! `shareplane local`: one [`Table`] on a millisecond clock the caller hands in, and a
//! [`MemoryStore`] for what the table does not model (the conditions of a `put`, writer
//! tokens, leases, the shared limits, and being set down).
//!
//! Each Region reads its own replica ([`SimTable::view`]): another Region's write becomes
//! visible `delay_ms` after it was made (SPEC §9: ~1 s), a cut Region neither sees nor is seen,
//! and at the heal the newest record a cut held back arrives `delay_ms` later, with the same
//! rules as the simulator's (see the crate's documentation). A Region reads its own records
//! from its own copy at once. An ended epoch's last record travels with its Region's records
//! until the owner collects it by the core's `closed_for_good`.

use crate::{Table, Visible};
use shareplane_core::{RegionId, RegionRecord, MAX_REGIONS};
use shareplane_store::memory::MemoryStore;
use shareplane_store::{
    Fetched, Lease, LimitsDoc, LimitsRead, RecordStore, StoreError, WriterToken,
};
use std::sync::{Arc, Mutex, MutexGuard};

struct Inner {
    table: Table,
    /// The Regions cut off from all others (bit per Region).
    cut: u8,
    /// The latest time read, so that the table never sees time go backwards.
    now: i64,
}

/// The table. Cloning shares it.
#[derive(Clone)]
pub struct SimTable {
    store: MemoryStore,
    inner: Arc<Mutex<Inner>>,
    now_ms: Arc<dyn Fn() -> u64 + Send + Sync>,
    delay_ms: u64,
}

impl SimTable {
    /// A table of `regions` Regions (at most [`MAX_REGIONS`]) on the clock `now_ms`, each
    /// record visible to the other Regions `delay_ms` after it was written.
    pub fn new(
        regions: usize,
        delay_ms: u64,
        now_ms: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> SimTable {
        let delay = i64::try_from(delay_ms).unwrap_or(i64::MAX / 2);
        let inner = Inner {
            table: Table::new(vec![delay; regions.min(MAX_REGIONS)]),
            cut: 0,
            now: i64::MIN,
        };
        SimTable {
            store: MemoryStore::new(),
            inner: Arc::new(Mutex::new(inner)),
            now_ms: Arc::new(now_ms),
            delay_ms,
        }
    }

    /// The table as Region `me`'s daemons read it.
    pub fn view(&self, me: RegionId) -> TableView {
        TableView {
            table: self.clone(),
            me,
        }
    }

    /// The store behind it (to set it down, or to read what was written, as one replica that
    /// sees every write at once).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Cuts Region `r` off (no record crosses in either direction) or heals it; the other
    /// Regions' cuts go on.
    pub fn set_cut(&self, r: RegionId, cut: bool) {
        let bit = 1u8 << r.index();
        let mut inner = self.lock();
        let now = inner.now();
        if cut && inner.cut & bit == 0 {
            inner.cut |= bit;
            inner.table.cut(bit, now);
        } else if !cut && inner.cut & bit != 0 {
            inner.cut &= !bit;
            inner.table.heal(now);
            let still = inner.cut;
            for q in (0..MAX_REGIONS).filter(|q| still >> q & 1 == 1) {
                inner.table.cut(1 << q, now);
            }
        }
    }

    pub fn is_cut(&self, r: RegionId) -> bool {
        self.lock().cut >> r.index() & 1 == 1
    }

    /// Loses the kept last record of Region `r`'s ended epoch `epoch` in every replica, as if
    /// its item had never replicated and its owner's copy were gone too (for tests of
    /// `waiting_for_record` and its recovery). Returns whether there was one.
    pub fn lose_kept(&self, r: RegionId, epoch: u64) -> bool {
        self.lock().table.lose_previous(r.index(), epoch)
    }

    fn lock(&self) -> Locked<'_> {
        // Each update leaves the table whole between its own steps; a panic elsewhere cannot
        // leave it half-done.
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        Locked {
            guard,
            clock: self.now_ms.as_ref(),
        }
    }
}

struct Locked<'a> {
    guard: MutexGuard<'a, Inner>,
    clock: &'a (dyn Fn() -> u64 + Send + Sync),
}

impl Locked<'_> {
    /// Now on the table's clock, never before the last time read.
    fn now(&mut self) -> i64 {
        let ms = i64::try_from((self.clock)()).unwrap_or(i64::MAX / 2);
        self.guard.now = self.guard.now.max(ms);
        self.guard.now
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.guard
    }
}

/// One Region's replica of a [`SimTable`].
#[derive(Clone)]
pub struct TableView {
    table: SimTable,
    me: RegionId,
}

fn fetched(v: Visible) -> impl Iterator<Item = Fetched> {
    v.previous
        .into_iter()
        .chain([v.latest])
        .map(Fetched::Record)
}

impl RecordStore for TableView {
    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        let w = record.region().index();
        let regions = self.table.lock().table.regions();
        if w >= regions {
            return Err(StoreError::Fatal(format!(
                "Region {w} writes to a table of {regions} Regions"
            )));
        }
        self.table.store.put(record, token).await?;
        let mut inner = self.table.lock();
        let now = inner.now();
        let visible = now.saturating_add(i64::try_from(self.table.delay_ms).unwrap_or(0));
        inner.table.write(w, Arc::new(record.clone()), visible);
        // What no replica can be handed any more goes at once: a writer keeps about one
        // record per write in flight, and what each replica holds.
        inner.table.compact(w, now);
        Ok(())
    }

    /// Every Region's newest record in this replica, each after its last records of ended
    /// epochs in epoch order (so a reader keeping the last one per Region ends with the
    /// current record). Fails exactly when the store is down.
    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        self.table.store.read_all().await?;
        let mut inner = self.table.lock();
        let now = inner.now();
        let me = self.me.index();
        let mut out = Vec::new();
        for w in 0..MAX_REGIONS {
            let v = if w == me {
                inner.table.own(w)
            } else {
                inner.table.replica(w, me, now)
            };
            out.extend(v.into_iter().flat_map(fetched));
        }
        Ok(out)
    }

    async fn read_one(&self, region: RegionId) -> Result<Option<Fetched>, StoreError> {
        self.table.store.read_one(region).await
    }

    async fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Lease, StoreError> {
        self.table
            .store
            .acquire_lease(region, holder, now_ms, ttl_ms)
            .await
    }

    /// The shared limits are one document in the table, the same in every replica (the demo
    /// and its tests model no replication delay for it).
    async fn read_limits(&self) -> Result<LimitsRead, StoreError> {
        self.table.store.read_limits().await
    }

    async fn write_limits(&self, doc: &LimitsDoc) -> Result<(), StoreError> {
        self.table.store.write_limits(doc).await
    }
}
