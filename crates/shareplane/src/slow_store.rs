//! A record store that answers every call a fixed time late: the test-only `test_store_delay_ms`
//! setting, so that end-to-end tests can reproduce slow store calls (reports arriving while a
//! rebalance waits for the store) against a store that is fast on a local machine.
//!
//! Not a mock: every call goes to the wrapped store, after the delay. The daemon's per-call
//! timeout still applies to the whole call, delay included.

use shareplane_core::{Deployment, RegionId, RegionRecord};
use shareplane_store::{
    Fetched, Lease, LimitsDoc, LimitsRead, RecordStore, StoreError, WriterToken,
};
use std::sync::Arc;
use std::time::Duration;

/// `inner`, with every call waiting `delay` first (no wait at all when it is zero).
pub struct SlowStore<S> {
    inner: S,
    delay: Duration,
}

impl<S> SlowStore<S> {
    pub fn new(inner: S, delay: Duration) -> SlowStore<S> {
        SlowStore { inner, delay }
    }

    async fn wait(&self) {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
    }
}

impl<S: RecordStore> RecordStore for SlowStore<S> {
    fn set_deployment(&self, d: Arc<Deployment>) {
        self.inner.set_deployment(d);
    }

    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        self.wait().await;
        self.inner.put(record, token).await
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        self.wait().await;
        self.inner.read_all().await
    }

    async fn read_one(&self, region: RegionId) -> Result<Option<Fetched>, StoreError> {
        self.wait().await;
        self.inner.read_one(region).await
    }

    async fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Lease, StoreError> {
        self.wait().await;
        self.inner
            .acquire_lease(region, holder, now_ms, ttl_ms)
            .await
    }

    async fn read_limits(&self) -> Result<LimitsRead, StoreError> {
        self.wait().await;
        self.inner.read_limits().await
    }

    async fn write_limits(&self, doc: &LimitsDoc) -> Result<(), StoreError> {
        self.wait().await;
        self.inner.write_limits(doc).await
    }
}
