//! An in-memory [`RecordStore`]: one replica, writes visible at once.

use crate::{Fetched, Lease, RecordStore, StoreError, WriterToken};
use shareplane_core::{RegionId, RegionRecord};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default)]
struct Inner {
    records: BTreeMap<RegionId, (Arc<RegionRecord>, WriterToken)>,
    leases: BTreeMap<RegionId, Lease>,
    /// When set, every call fails as if the store were unreachable (for outage tests and demos).
    down: bool,
}

/// Cloning shares the same table.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// Makes every following call fail with [`StoreError::Unavailable`] (or work again).
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated (each update is one
        // insert), so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn check_up(inner: &Inner) -> Result<(), StoreError> {
        if inner.down {
            Err(StoreError::Unavailable("memory store is set down".into()))
        } else {
            Ok(())
        }
    }
}

impl RecordStore for MemoryStore {
    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        let mut inner = self.lock();
        Self::check_up(&inner)?;
        if let Some((old, old_token)) = inner.records.get(&record.region) {
            if token < *old_token {
                return Err(StoreError::Conflict(format!(
                    "writer token {} is lower than the stored {}",
                    token.0, old_token.0
                )));
            }
            if record.version <= old.version {
                return Err(StoreError::Conflict(format!(
                    "version {} is not higher than the stored {}",
                    record.version, old.version
                )));
            }
        }
        inner.records.insert(record.region, (Arc::new(record.clone()), token));
        Ok(())
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        let inner = self.lock();
        Self::check_up(&inner)?;
        Ok(inner.records.values().map(|(r, _)| Fetched::Record(r.clone())).collect())
    }

    async fn read_one(&self, region: RegionId) -> Result<Option<Fetched>, StoreError> {
        let inner = self.lock();
        Self::check_up(&inner)?;
        Ok(inner.records.get(&region).map(|(r, _)| Fetched::Record(r.clone())))
    }

    async fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Lease, StoreError> {
        let mut inner = self.lock();
        Self::check_up(&inner)?;
        let token = match inner.leases.get(&region) {
            Some(l) if l.holder == holder => l.token,
            Some(l) if l.expires_at_ms > now_ms => {
                return Err(StoreError::Conflict(format!(
                    "lease held by {} until {}",
                    l.holder, l.expires_at_ms
                )))
            }
            Some(l) => WriterToken(l.token.0 + 1),
            None => WriterToken(1),
        };
        let lease = Lease { holder: holder.to_string(), token, expires_at_ms: now_ms + ttl_ms };
        inner.leases.insert(region, lease.clone());
        Ok(lease)
    }
}
