//! The same cases against the in-memory store, the simulated global table's store (as one
//! Region reads it, with no replication delay: `shareplane_table::store`, which the demo,
//! `shareplane local` and the daemon's tests run on) and the DynamoDB store (on moto), so that
//! the stand-ins stay honest. Each case is one generic async fn; the macro at the bottom
//! instantiates it for every store.

mod support;

use shareplane_aws::{create_table, DynamoStore};
use shareplane_core::{Deployment, RegionRecord};
use shareplane_store::memory::MemoryStore;
use shareplane_store::{
    Fetched, LimitsDoc, LimitsRead, RecordStore, StoreError, WriterToken, MAX_LIMITS_DOC_BYTES,
};
use shareplane_table::store::{SimTable, TableView};
use std::sync::Arc;
use support::{deployment, heir_at, owner_at, parts, record, rid};

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
    got.sort_by_key(|r| r.region());
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
    let expect: Vec<RegionRecord> = (0..3)
        .map(|region| {
            let mut r = parts(&d, region, 1);
            r.version = 2;
            for i in [0, 4_321, 9_998] {
                r.limits[i].demand += shareplane_core::Room::from_milli(17);
            }
            RegionRecord::from_parts(r)
        })
        .collect();
    for r in &expect {
        s.put(r, WriterToken(1)).await.expect("second put");
    }
    let mut got = records(s.read_all().await.expect("read_all"));
    got.sort_by_key(|r| r.region());
    assert_eq!(got.len(), 3);
    for (g, e) in got.iter().zip(&expect) {
        assert_eq!(
            **g,
            *e,
            "Region {} differs after the round trip",
            e.region()
        );
    }
}

/// Region 0's records in the order `read_all` returns them (after it wrote `written`).
async fn owner_records<S: RecordStore>(s: &S) -> Vec<RegionRecord> {
    let all = records(s.read_all().await.expect("read_all"));
    all.iter()
        .filter(|r| r.region() == rid(0))
        .map(|r| (**r).clone())
        .collect()
}

/// Writes Region 0's `record` as its daemon does: after a read of every record.
async fn owner_writes<S: RecordStore>(s: &S, record: &RegionRecord) {
    s.read_all().await.expect("read_all before the write");
    s.put(record, WriterToken(1)).await.expect("owner put");
}

/// The last record of every ended epoch is returned, exactly, in epoch order and before the
/// current record, and is never dropped while some heir has not closed that epoch for good (it
/// accounts with a later epoch of the owner); a store may drop it once every heir has.
async fn ended_epochs_kept_until_every_heir_has_closed_them<S: RecordStore>(
    s: S,
    d: Arc<Deployment>,
) {
    s.put(&heir_at(&d, 1, 10, 2, (1, 1)), WriterToken(1))
        .await
        .expect("heir 1");
    s.put(&heir_at(&d, 2, 10, 2, (1, 1)), WriterToken(1))
        .await
        .expect("heir 2");
    let e2 = owner_at(&d, 2, 2, 1);
    let e3 = owner_at(&d, 3, 4, 2);
    for r in [owner_at(&d, 2, 1, 0), e2.clone()] {
        owner_writes(&s, &r).await;
    }
    assert_eq!(
        owner_records(&s).await,
        vec![e2.clone()],
        "no epoch ended yet"
    );
    owner_writes(&s, &owner_at(&d, 3, 3, 2)).await;
    owner_writes(&s, &e3).await;
    let e4 = owner_at(&d, 4, 5, 4);
    owner_writes(&s, &e4).await;
    assert_eq!(
        owner_records(&s).await,
        vec![e2.clone(), e3.clone(), e4],
        "both ended epochs' last records, in epoch order, before the current one"
    );
    // Both heirs close epoch 2 for good; heir 1 marks epoch 3 at its last version but still
    // accounts with it (it reclaimed it before it saw epoch 4): it may still need the record.
    s.put(&heir_at(&d, 1, 11, 3, (3, 4)), WriterToken(1))
        .await
        .expect("heir 1 closes");
    s.put(&heir_at(&d, 2, 11, 4, (3, 4)), WriterToken(1))
        .await
        .expect("heir 2 closes");
    for v in 6..=9 {
        owner_writes(&s, &owner_at(&d, 4, v, 4)).await;
    }
    let current = owner_at(&d, 4, 9, 4);
    let got = owner_records(&s).await;
    let kept_e2 = got.first() == Some(&e2);
    let expect = if kept_e2 {
        vec![e2, e3.clone(), current.clone()]
    } else {
        vec![e3.clone(), current.clone()]
    };
    assert_eq!(
        got, expect,
        "epoch 3 is kept: heir 1 still accounts with it"
    );
    // Heir 1 accounts with epoch 4 too, still marking epoch 3 (it may still settle it up): a
    // store keeps epoch 3; the current record stays last.
    s.put(&heir_at(&d, 1, 12, 4, (3, 4)), WriterToken(1))
        .await
        .expect("heir 1 switches");
    for v in 10..=12 {
        owner_writes(&s, &owner_at(&d, 4, v, 4)).await;
    }
    let got = owner_records(&s).await;
    assert_eq!(got.last(), Some(&owner_at(&d, 4, 12, 4)));
    assert!(
        got[..got.len() - 1].iter().all(|r| r.epoch() < 4)
            && got.windows(2).all(|w| w[0].epoch() < w[1].epoch()),
        "whatever is still kept comes in epoch order before the current record: {:?}",
        got.iter()
            .map(|r| (r.epoch(), r.version()))
            .collect::<Vec<_>>()
    );
}

fn limits_doc(version: u64, text: String) -> LimitsDoc {
    LimitsDoc {
        version,
        text,
        applied_by: format!("operator-{version}@eu-west-1"),
        applied_at_ms: 1_700_000_000_000 + version,
    }
}

/// `n` limits as `shareplane limits apply` would write them (about 60 bytes each).
fn limits_text(n: usize, rate: u64) -> String {
    (0..n)
        .map(|i| {
            format!("[[limits]]\nid = \"tenant-{i:05}/api\"\nrate = {rate}\nburst_ms = 1000\n")
        })
        .collect()
}

async fn read_limits<S: RecordStore>(s: &S) -> LimitsRead {
    s.read_limits().await.expect("read_limits")
}

async fn limits_write_and_read<S: RecordStore>(s: S, _d: Arc<Deployment>) {
    assert_eq!(read_limits(&s).await, LimitsRead::Absent, "a new table");
    let v1 = limits_doc(1, limits_text(3, 100));
    s.write_limits(&v1).await.expect("write v1");
    assert_eq!(read_limits(&s).await, LimitsRead::Complete(v1));
    let v2 = limits_doc(2, limits_text(4, 200));
    s.write_limits(&v2).await.expect("write v2");
    assert_eq!(read_limits(&s).await, LimitsRead::Complete(v2.clone()));
    assert_eq!(
        read_limits(&s).await,
        LimitsRead::Complete(v2),
        "read again, unchanged"
    );
}

async fn limits_same_or_lower_version_refused<S: RecordStore>(s: S, _d: Arc<Deployment>) {
    let v5 = limits_doc(5, limits_text(2, 100));
    s.write_limits(&v5).await.expect("write v5");
    for (version, text, what) in [
        (
            5,
            limits_text(2, 100),
            "the same version and text (a retried apply)",
        ),
        (5, limits_text(2, 300), "the same version, another text"),
        (4, limits_text(1, 300), "a lower version"),
    ] {
        match s.write_limits(&limits_doc(version, text)).await {
            Err(StoreError::Conflict(m)) => assert!(m.contains('5'), "{what}: {m}"),
            other => panic!("{what}: expected a conflict, got {other:?}"),
        }
        assert_eq!(
            read_limits(&s).await,
            LimitsRead::Complete(v5.clone()),
            "{what}: the stored doc is unchanged"
        );
    }
}

async fn limits_large_doc_round_trips_and_oversized_is_refused<S: RecordStore>(
    s: S,
    _d: Arc<Deployment>,
) {
    let big = limits_doc(1, limits_text(100_000, 100));
    assert!(big.text.len() >= 6_000_000, "{} bytes", big.text.len());
    s.write_limits(&big).await.expect("write ~6 MB");
    assert_eq!(read_limits(&s).await, LimitsRead::Complete(big.clone()));
    let too_big = limits_doc(2, "x".repeat(MAX_LIMITS_DOC_BYTES + 1));
    match s.write_limits(&too_big).await {
        Err(StoreError::Fatal(_)) => {}
        other => panic!(
            "expected Fatal for {} bytes, got {other:?}",
            too_big.text.len()
        ),
    }
    assert_eq!(
        read_limits(&s).await,
        LimitsRead::Complete(big),
        "the refused write changed nothing"
    );
}

/// Multi-byte characters (4, 3 and 2 bytes) placed right across where the DynamoDB store cuts
/// its parts, and at the very end.
async fn limits_multibyte_text_across_part_boundaries_round_trips<S: RecordStore>(
    s: S,
    _d: Arc<Deployment>,
) {
    let max = shareplane_aws::limits::MAX_PART_BYTES;
    let mut text = String::new();
    let mut start = 0;
    for c in ['😀', '€', 'é'] {
        // The cut falls one byte into `c`, so the part ends before it and the next starts with it.
        let cut = start + max;
        while text.len() < cut - 1 {
            text.push(if text.len() % 61 == 60 { '\n' } else { 'a' });
        }
        text.push(c);
        start = cut - 1;
    }
    text.push_str("tail ✓ 😀");
    let doc = limits_doc(7, text);
    s.write_limits(&doc).await.expect("write");
    assert_eq!(read_limits(&s).await, LimitsRead::Complete(doc));
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

/// The simulated table as Region 0 reads it: its own records from its own copy, the others'
/// through its replica (visible at once: no delay, and a clock that stands still).
fn sim_table(d: &Arc<Deployment>) -> TableView {
    SimTable::new(d.n(), 0, || 1_000).view(rid(0))
}

macro_rules! conformance {
    ($($case:ident: $limits:expr;)*) => {
        mod memory {
            $(#[tokio::test]
            async fn $case() {
                super::$case(super::MemoryStore::new(), super::deployment($limits)).await;
            })*
        }
        mod sim_table {
            $(#[tokio::test]
            async fn $case() {
                let d = super::deployment($limits);
                super::$case(super::sim_table(&d), d).await;
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
    ended_epochs_kept_until_every_heir_has_closed_them: 600;
    limits_write_and_read: 1;
    limits_same_or_lower_version_refused: 1;
    limits_large_doc_round_trips_and_oversized_is_refused: 1;
    limits_multibyte_text_across_part_boundaries_round_trips: 1;
}
