//! An in-memory [`RecordStore`]: one replica, writes visible at once.

use crate::{
    Fetched, Lease, LimitsDoc, LimitsRead, RecordStore, StoreError, WriterToken,
    MAX_LIMITS_DOC_BYTES,
};
use shareplane_core::{RegionId, RegionRecord};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

#[derive(Default)]
struct Inner {
    records: BTreeMap<RegionId, (Arc<RegionRecord>, WriterToken)>,
    /// Each Region's last record of every ended epoch (see [`RecordStore::read_all`]).
    previous: BTreeMap<(RegionId, u64), Arc<RegionRecord>>,
    leases: BTreeMap<RegionId, Lease>,
    /// The shared limits, as last written.
    limits: Option<LimitsDoc>,
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
        if let Some((old, old_token)) = inner.records.get(&record.region()) {
            if token < *old_token {
                return Err(StoreError::Conflict(format!(
                    "writer token {} is lower than the stored {}",
                    token.0, old_token.0
                )));
            }
            if record.version() <= old.version() {
                return Err(StoreError::Conflict(format!(
                    "version {} is not higher than the stored {}",
                    record.version(),
                    old.version()
                )));
            }
        }
        let replaced = inner
            .records
            .insert(record.region(), (Arc::new(record.clone()), token));
        if let Some((old, _)) = replaced {
            if old.epoch() < record.epoch() {
                inner.previous.insert((record.region(), old.epoch()), old);
            }
        }
        Ok(())
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        let inner = self.lock();
        Self::check_up(&inner)?;
        // Previous-epoch records first, so that a reader keeping "the last one per Region" ends
        // with the current record.
        let previous = inner.previous.values().map(|r| Fetched::Record(r.clone()));
        let current = inner
            .records
            .values()
            .map(|(r, _)| Fetched::Record(r.clone()));
        Ok(previous.chain(current).collect())
    }

    async fn read_one(&self, region: RegionId) -> Result<Option<Fetched>, StoreError> {
        let inner = self.lock();
        Self::check_up(&inner)?;
        Ok(inner
            .records
            .get(&region)
            .map(|(r, _)| Fetched::Record(r.clone())))
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
        let lease = Lease {
            holder: holder.to_string(),
            token,
            expires_at_ms: now_ms + ttl_ms,
        };
        inner.leases.insert(region, lease.clone());
        Ok(lease)
    }

    async fn read_limits(&self) -> Result<LimitsRead, StoreError> {
        let inner = self.lock();
        Self::check_up(&inner)?;
        Ok(match &inner.limits {
            Some(doc) => LimitsRead::Complete(doc.clone()),
            None => LimitsRead::Absent,
        })
    }

    async fn write_limits(&self, doc: &LimitsDoc) -> Result<(), StoreError> {
        let mut inner = self.lock();
        Self::check_up(&inner)?;
        if doc.text.len() > MAX_LIMITS_DOC_BYTES {
            return Err(StoreError::Fatal(format!(
                "the limits document is {} bytes, more than {MAX_LIMITS_DOC_BYTES}",
                doc.text.len()
            )));
        }
        if let Some(old) = inner.limits.as_ref().filter(|o| o.version >= doc.version) {
            return Err(StoreError::Conflict(format!(
                "limits version {} is not higher than the stored {}",
                doc.version, old.version
            )));
        }
        inner.limits = Some(doc.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shareplane_core::{Deployment, Design, Fence, SilentPolicy};

    fn rec(epoch: u64, version: u64) -> RegionRecord {
        let d = Deployment::try_new(Deployment {
            regions: vec!["A".into(), "B".into()],
            limits: vec![],
            design: Design::NamedGrants,
            policy: SilentPolicy::TwoSignals,
            fence: Fence::OwnUnhealthy,
            silent_after: 3,
            period_ms: 5_000,
        })
        .expect("valid");
        let mut r = RegionRecord::genesis(&d, RegionId::new(0).expect("id")).into_parts();
        r.epoch = epoch;
        r.version = version;
        RegionRecord::from_parts(r)
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        // The memory store never awaits anything, so one poll finishes every call.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the memory store never waits"),
        }
    }

    fn versions(store: &MemoryStore) -> Vec<(u64, u64)> {
        block_on(store.read_all())
            .expect("up")
            .into_iter()
            .filter_map(|f| match f {
                Fetched::Record(r) => Some((r.epoch(), r.version())),
                Fetched::Rejected { .. } => None,
            })
            .collect()
    }

    #[test]
    fn keeps_the_last_record_of_the_previous_epoch_before_the_current_one() {
        let store = MemoryStore::new();
        block_on(store.put(&rec(1, 1), WriterToken(1))).expect("write");
        block_on(store.put(&rec(1, 2), WriterToken(1))).expect("write");
        assert_eq!(versions(&store), vec![(1, 2)]);
        block_on(store.put(&rec(2, 3), WriterToken(1))).expect("write");
        assert_eq!(versions(&store), vec![(1, 2), (2, 3)]);
        assert!(
            block_on(store.put(&rec(2, 3), WriterToken(1))).is_err(),
            "same version refused"
        );
    }
}
