//! The same cases against the in-memory store and the DynamoDB store (on moto), so that the
//! in-memory stand-in stays honest. Each case is one generic async fn; the macro at the bottom
//! instantiates it for both stores.

mod support;

use shareplane_aws::{create_table, DynamoStore};
use shareplane_core::{Deployment, RegionRecord};
use shareplane_store::memory::MemoryStore;
use shareplane_store::{Fetched, RecordStore, StoreError, WriterToken};
use std::sync::Arc;
use support::{deployment, record, rid};

fn records(fetched: Vec<Fetched>) -> Vec<Arc<RegionRecord>> {
    fetched
        .into_iter()
        .map(|f| match f {
            Fetched::Record(r) => r,
            Fetched::Rejected { region, reason } => panic!("{region:?} rejected: {reason}"),
        })
        .collect()
}

async fn read_back<S: RecordStore>(s: &S, region: usize) -> RegionRecord {
    match s.read_one(rid(region)).await {
        Ok(Some(Fetched::Record(r))) => (*r).clone(),
        other => panic!("read_one({region}) gave {other:?}"),
    }
}

fn assert_conflict(result: Result<(), StoreError>, what: &str) {
    match result {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("{what}: expected a conflict, got {other:?}"),
    }
}

async fn write_and_read<S: RecordStore>(s: S, d: Arc<Deployment>) {
    assert!(
        s.read_all().await.expect("read_all").is_empty(),
        "a new table holds no records"
    );
    assert!(s.read_one(rid(1)).await.expect("read_one").is_none());
    let written: Vec<RegionRecord> = (0..3).map(|r| record(&d, r, 10 + r as u64)).collect();
    for r in &written {
        s.put(r, WriterToken(1)).await.expect("put");
    }
    let mut got = records(s.read_all().await.expect("read_all"));
    got.sort_by_key(|r| r.region);
    assert_eq!(
        got.iter().map(|r| (**r).clone()).collect::<Vec<_>>(),
        written
    );
    for (i, r) in written.iter().enumerate() {
        assert_eq!(&read_back(&s, i).await, r);
    }
}

async fn lower_version_refused<S: RecordStore>(s: S, d: Arc<Deployment>) {
    let v5 = record(&d, 1, 5);
    s.put(&v5, WriterToken(1)).await.expect("first put");
    assert_conflict(
        s.put(&record(&d, 1, 4), WriterToken(1)).await,
        "a lower version",
    );
    assert_conflict(
        s.put(&record(&d, 1, 5), WriterToken(1)).await,
        "the same version",
    );
    assert_eq!(read_back(&s, 1).await, v5);
    let v6 = record(&d, 1, 6);
    s.put(&v6, WriterToken(1)).await.expect("a higher version");
    assert_eq!(read_back(&s, 1).await, v6);
}

async fn stale_writer_refused<S: RecordStore>(s: S, d: Arc<Deployment>) {
    s.put(&record(&d, 2, 1), WriterToken(2))
        .await
        .expect("first put");
    assert_conflict(
        s.put(&record(&d, 2, 2), WriterToken(1)).await,
        "a lower token",
    );
    s.put(&record(&d, 2, 2), WriterToken(2))
        .await
        .expect("the same token");
    s.put(&record(&d, 2, 3), WriterToken(3))
        .await
        .expect("a higher token");
    assert_conflict(
        s.put(&record(&d, 2, 4), WriterToken(2)).await,
        "the deposed writer",
    );
    assert_eq!(read_back(&s, 2).await, record(&d, 2, 3));
}

async fn lease_take_renew_expire_takeover<S: RecordStore>(s: S, _d: Arc<Deployment>) {
    let a = s
        .acquire_lease(rid(0), "host-a", 1_000, 10_000)
        .await
        .expect("free lease");
    assert_eq!(
        (a.holder.as_str(), a.token, a.expires_at_ms),
        ("host-a", WriterToken(1), 11_000)
    );
    assert!(matches!(
        s.acquire_lease(rid(0), "host-b", 5_000, 10_000).await,
        Err(StoreError::Conflict(_))
    ));
    let renewed = s
        .acquire_lease(rid(0), "host-a", 6_000, 10_000)
        .await
        .expect("renew");
    assert_eq!(
        (renewed.token, renewed.expires_at_ms),
        (WriterToken(1), 16_000)
    );
    assert!(matches!(
        s.acquire_lease(rid(0), "host-b", 15_999, 10_000).await,
        Err(StoreError::Conflict(_))
    ));
    let b = s
        .acquire_lease(rid(0), "host-b", 16_000, 10_000)
        .await
        .expect("takeover at expiry");
    assert_eq!((b.holder.as_str(), b.token), ("host-b", WriterToken(2)));
    assert!(matches!(
        s.acquire_lease(rid(0), "host-a", 17_000, 10_000).await,
        Err(StoreError::Conflict(_))
    ));
    let other = s
        .acquire_lease(rid(1), "host-a", 17_000, 10_000)
        .await
        .expect("another Region's lease");
    assert_eq!(other.token, WriterToken(1));
}

/// 10,000 limits × 3 Regions, written twice (the second time with a few limits changed, which
/// exercises partial shard rewrites), must read back exactly.
async fn ten_thousand_limits_round_trip<S: RecordStore>(s: S, d: Arc<Deployment>) {
    for region in 0..3 {
        s.put(&record(&d, region, 1), WriterToken(1))
            .await
            .expect("first put");
    }
    let mut expect: Vec<RegionRecord> = (0..3).map(|r| record(&d, r, 1)).collect();
    for r in expect.iter_mut() {
        r.version = 2;
        for i in [0, 4_321, 9_998] {
            r.limits[i].demand.0 += 17;
        }
        s.put(r, WriterToken(1)).await.expect("second put");
    }
    let mut got = records(s.read_all().await.expect("read_all"));
    got.sort_by_key(|r| r.region);
    assert_eq!(got.len(), 3);
    for (g, e) in got.iter().zip(&expect) {
        assert_eq!(**g, *e, "Region {} differs after the round trip", e.region);
    }
}

async fn dynamo(test: &str, d: &Arc<Deployment>) -> Option<DynamoStore> {
    let url = support::moto_url(test)?;
    let config = support::moto_config(&url).await;
    let client = shareplane_aws::client::dynamodb(&config);
    let table = support::unique("conf");
    create_table(&client, &table).await.expect("create table");
    create_table(&client, &table)
        .await
        .expect("creating an existing table is not an error");
    Some(DynamoStore::new(client, table, d.clone(), rid(0)))
}

macro_rules! conformance {
    ($($case:ident: $limits:expr;)*) => {
        mod memory {
            $(#[tokio::test]
            async fn $case() {
                super::$case(super::MemoryStore::new(), super::deployment($limits)).await;
            })*
        }
        mod dynamodb {
            $(#[tokio::test]
            async fn $case() {
                let d = super::deployment($limits);
                let Some(s) = super::dynamo(stringify!($case), &d).await else { return };
                super::$case(s, d).await;
            })*
        }
    };
}

conformance! {
    write_and_read: 600;
    lower_version_refused: 50;
    stale_writer_refused: 50;
    lease_take_renew_expire_takeover: 1;
    ten_thousand_limits_round_trip: 10_000;
}
