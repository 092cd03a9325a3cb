//! A simulated global table over [`MemoryStore`] for the demo and the daemon tests: one table,
//! but each Region reads its own "replica", where another Region's write becomes visible
//! `delay_ms` after it was made (SPEC §9: ~1 s), and a cut Region neither sees nor is seen.
//!
//! Writes, fencing and leases are the memory store's own, so the daemon is tested against the
//! same `put` conditions it meets there. Like the real table, it keeps each Region's last record
//! of every ended epoch next to the current one (the newest [`MAX_KEPT_EPOCHS`]): a survivor that
//! never saw those epochs end needs them to close the old estates, one by one (see
//! `Coordinator::observe`).

use crate::clock::Clock;
use shareplane_core::{PerRegion, RegionId, RegionRecord};
use shareplane_store::memory::MemoryStore;
use shareplane_store::{
    Fetched, Lease, LimitsDoc, LimitsRead, RecordStore, StoreError, WriterToken,
};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

/// At most this many pending writes are kept per Region (older visible ones are dropped).
const MAX_PENDING: usize = 64;
/// Ended epochs kept per Region (the oldest is dropped first), as many as the real store
/// returns per read.
pub const MAX_KEPT_EPOCHS: usize = 64;

#[derive(Default)]
struct Replicas {
    /// Per writer: `(visible_at_ms, record)`, oldest first; the front is visible.
    history: BTreeMap<RegionId, VecDeque<(u64, Arc<RegionRecord>)>>,
    cut: PerRegion<bool>,
    /// What each reader last saw of each writer: a cut freezes it.
    seen: BTreeMap<(RegionId, RegionId), Arc<RegionRecord>>,
    /// Each Region's last record of every ended epoch, by epoch.
    kept: BTreeMap<RegionId, BTreeMap<u64, Arc<RegionRecord>>>,
}

/// The table. Cloning shares it.
#[derive(Clone)]
pub struct SimTable {
    store: MemoryStore,
    replicas: Arc<Mutex<Replicas>>,
    clock: Clock,
    delay_ms: u64,
}

impl SimTable {
    pub fn new(clock: Clock, delay_ms: u64) -> SimTable {
        SimTable {
            store: MemoryStore::new(),
            replicas: Arc::default(),
            clock,
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

    /// The underlying store (to set it down, or to read what was written).
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// Cuts Region `r` off (no record crosses in either direction) or heals it.
    pub fn set_cut(&self, r: RegionId, cut: bool) {
        self.replicas().cut[r] = cut;
    }

    pub fn is_cut(&self, r: RegionId) -> bool {
        self.replicas().cut[r]
    }

    /// Loses the kept last record of Region `r`'s ended epoch `epoch` in every replica, as if
    /// its item had never replicated and its owner's copy were gone too (for tests of
    /// `waiting_for_record` and its recovery). Returns whether there was one.
    pub fn lose_kept(&self, r: RegionId, epoch: u64) -> bool {
        self.replicas()
            .kept
            .get_mut(&r)
            .is_some_and(|k| k.remove(&epoch).is_some())
    }

    fn replicas(&self) -> MutexGuard<'_, Replicas> {
        // Each update is a few inserts; a panic elsewhere cannot leave it half-done.
        self.replicas.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One Region's replica of a [`SimTable`].
#[derive(Clone)]
pub struct TableView {
    table: SimTable,
    me: RegionId,
}

impl RecordStore for TableView {
    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        let before = self.table.store.read_one(record.region).await?;
        self.table.store.put(record, token).await?;
        let now = self.table.clock.now_ms();
        let mut reps = self.table.replicas();
        if let Some(Fetched::Record(old)) = before {
            if old.epoch < record.epoch {
                let kept = reps.kept.entry(record.region).or_default();
                kept.insert(old.epoch, old);
                while kept.len() > MAX_KEPT_EPOCHS {
                    kept.pop_first();
                }
            }
        }
        let h = reps.history.entry(record.region).or_default();
        h.push_back((now + self.table.delay_ms, Arc::new(record.clone())));
        while h.len() > MAX_PENDING || (h.len() >= 2 && h[1].0 <= now) {
            h.pop_front();
        }
        Ok(())
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        // Fails exactly when the store is down; the own record is read directly.
        let stored = self.table.store.read_all().await?;
        let now = self.table.clock.now_ms();
        let mut reps = self.table.replicas();
        let mut out = Vec::new();
        for f in stored {
            let Fetched::Record(r) = &f else { continue };
            let w = r.region;
            if w == self.me {
                out.push(f);
                continue;
            }
            let cut = reps.cut[w] || reps.cut[self.me];
            let visible = if cut {
                None
            } else {
                let h = reps.history.entry(w).or_default();
                while h.len() >= 2 && h[1].0 <= now {
                    h.pop_front();
                }
                h.front().filter(|e| e.0 <= now).map(|e| e.1.clone())
            };
            if !cut {
                if let Some(k) = reps.kept.get(&w) {
                    out.extend(k.values().map(|p| Fetched::Record(p.clone())));
                }
            }
            let key = (self.me, w);
            if let Some(v) = visible {
                reps.seen.insert(key, v);
            }
            if let Some(v) = reps.seen.get(&key) {
                out.push(Fetched::Record(v.clone()));
            }
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
