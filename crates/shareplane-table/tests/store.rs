//! The simulated table's store as Regions read it on a clock the test moves: the same delays,
//! cuts and heals as the simulator's table (the store conformance suite, in
//! `crates/shareplane-aws/tests/conformance.rs`, runs it with no delay).

mod support;

use shareplane_core::{ReclaimMarkParts, RegionId, RegionRecord};
use shareplane_store::{Fetched, RecordStore, StoreError, WriterToken};
use shareplane_table::store::{SimTable, TableView};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use support::{parts, record};

fn rid(i: usize) -> RegionId {
    RegionId::new(i).expect("a Region")
}

/// Three Regions, records visible to the others 1,000 ms after they are written.
fn table() -> (SimTable, Arc<AtomicU64>) {
    let now = Arc::new(AtomicU64::new(0));
    let clock = now.clone();
    let t = SimTable::new(3, 1_000, move || clock.load(Ordering::SeqCst));
    (t, now)
}

/// `(epoch, version)` of each record of Region `w` that `view` reads, in the order read.
async fn of(view: &TableView, w: usize) -> Vec<(u64, u64)> {
    let all = view.read_all().await.expect("read_all");
    all.iter()
        .filter_map(|f| match f {
            Fetched::Record(r) if r.region() == rid(w) => Some((r.epoch(), r.version())),
            _ => None,
        })
        .collect()
}

async fn put(view: &TableView, r: RegionRecord) {
    view.put(&r, WriterToken(1)).await.expect("put");
}

#[tokio::test]
async fn a_record_is_visible_elsewhere_after_the_delay_and_to_its_writer_at_once() {
    let (t, now) = table();
    let (a, b) = (t.view(rid(0)), t.view(rid(1)));
    put(&a, record(0, 1, 1)).await;
    assert_eq!(of(&a, 0).await, vec![(1, 1)]);
    now.store(999, Ordering::SeqCst);
    assert_eq!(of(&b, 0).await, vec![]);
    now.store(1_000, Ordering::SeqCst);
    assert_eq!(of(&b, 0).await, vec![(1, 1)]);
}

#[tokio::test]
async fn the_newest_record_a_cut_held_back_arrives_the_delay_after_the_heal() {
    let (t, now) = table();
    let (a, b) = (t.view(rid(0)), t.view(rid(1)));
    put(&a, record(0, 1, 1)).await;
    now.store(500, Ordering::SeqCst);
    put(&a, record(0, 1, 2)).await;
    now.store(1_200, Ordering::SeqCst);
    t.set_cut(rid(0), true);
    assert!(t.is_cut(rid(0)));
    put(&a, record(0, 1, 3)).await;
    now.store(2_000, Ordering::SeqCst);
    put(&a, record(0, 1, 4)).await;
    now.store(6_000, Ordering::SeqCst);
    assert_eq!(
        of(&b, 0).await,
        vec![(1, 1)],
        "v2 was in flight at the cut, v3 and v4 written during it"
    );
    t.set_cut(rid(0), false);
    now.store(6_999, Ordering::SeqCst);
    assert_eq!(of(&b, 0).await, vec![(1, 1)], "replication takes the delay");
    now.store(7_000, Ordering::SeqCst);
    assert_eq!(of(&b, 0).await, vec![(1, 4)], "the newest, v3 skipped");
    assert_eq!(of(&t.view(rid(2)), 0).await, vec![(1, 4)]);
}

#[tokio::test]
async fn healing_one_region_leaves_another_cut_off() {
    let (t, now) = table();
    let (a, b, c) = (t.view(rid(0)), t.view(rid(1)), t.view(rid(2)));
    t.set_cut(rid(0), true);
    t.set_cut(rid(2), true);
    put(&a, record(0, 1, 1)).await;
    put(&c, record(2, 1, 1)).await;
    now.store(500, Ordering::SeqCst);
    t.set_cut(rid(0), false);
    assert!(!t.is_cut(rid(0)) && t.is_cut(rid(2)));
    now.store(1_500, Ordering::SeqCst);
    assert_eq!(of(&b, 0).await, vec![(1, 1)], "A's record, after the heal");
    assert_eq!(of(&b, 2).await, vec![], "C is still cut off");
    assert_eq!(of(&c, 0).await, vec![], "C sees nothing either");
    t.set_cut(rid(2), false);
    now.store(2_500, Ordering::SeqCst);
    assert_eq!(of(&b, 2).await, vec![(1, 1)]);
    assert_eq!(of(&c, 0).await, vec![(1, 1)]);
}

#[tokio::test]
async fn an_ended_epochs_last_record_travels_with_the_next_and_can_be_lost() {
    let (t, now) = table();
    let (a, b) = (t.view(rid(0)), t.view(rid(1)));
    put(&a, record(0, 1, 1)).await;
    put(&a, record(0, 1, 2)).await;
    put(&a, record(0, 2, 3)).await;
    assert_eq!(of(&a, 0).await, vec![(1, 2), (2, 3)], "the owner's copy");
    now.store(500, Ordering::SeqCst);
    assert_eq!(
        of(&b, 0).await,
        vec![],
        "not before the record it travels with"
    );
    now.store(1_000, Ordering::SeqCst);
    assert_eq!(of(&b, 0).await, vec![(1, 2), (2, 3)]);
    assert!(t.lose_kept(rid(0), 1));
    assert!(!t.lose_kept(rid(0), 1), "already lost");
    assert_eq!(of(&b, 0).await, vec![(2, 3)]);
    assert_eq!(of(&a, 0).await, vec![(2, 3)]);
}

/// Region `w`'s record (version `version`) that accounts with Region 0's epoch `acct` and marks
/// the same epoch as reclaimed (it closed every earlier one).
fn heir(w: usize, version: u64, acct: u64) -> RegionRecord {
    let mut r = parts(w, 1, version);
    r.peer_epochs.0[0] = acct;
    r.reclaims.0[0] = Some(ReclaimMarkParts {
        epoch: acct,
        version: 1,
        by: 1,
    });
    RegionRecord::from_parts(r)
}

#[tokio::test]
async fn the_owner_collects_an_ended_epoch_once_every_heir_in_its_replica_closed_it() {
    let (t, now) = table();
    let (a, b, c) = (t.view(rid(0)), t.view(rid(1)), t.view(rid(2)));
    put(&a, record(0, 1, 1)).await;
    put(&a, record(0, 2, 2)).await;
    put(&b, heir(1, 1, 2)).await;
    put(&c, heir(2, 1, 1)).await;
    now.store(1_000, Ordering::SeqCst);
    assert_eq!(of(&a, 2).await, vec![(1, 1)], "the owner reads C's record");
    put(&a, record(0, 2, 3)).await;
    assert_eq!(
        of(&a, 0).await,
        vec![(1, 1), (2, 3)],
        "C still accounts with 1"
    );
    put(&c, heir(2, 2, 2)).await;
    put(&a, record(0, 2, 4)).await;
    assert_eq!(
        of(&a, 0).await,
        vec![(1, 1), (2, 4)],
        "the owner's replica does not hold C's switch yet"
    );
    now.store(2_000, Ordering::SeqCst);
    assert_eq!(of(&a, 2).await, vec![(1, 2)]);
    put(&a, record(0, 2, 5)).await;
    assert_eq!(
        of(&a, 0).await,
        vec![(1, 1), (2, 5)],
        "every heir closed it, but the owner is not KEEP_ENDED_EPOCHS past it yet"
    );
    let later = 1 + shareplane_core::KEEP_ENDED_EPOCHS;
    put(&a, record(0, later, 6)).await;
    assert_eq!(
        of(&a, 0).await,
        vec![(2, 5), (later, 6)],
        "collected in the owner's write; epoch 2, which no heir closed, kept"
    );
    assert_eq!(
        of(&b, 0).await,
        vec![(1, 1), (2, 4)],
        "B's replica, a delay behind"
    );
    now.store(3_000, Ordering::SeqCst);
    assert_eq!(of(&b, 0).await, vec![(2, 5), (later, 6)]);
}

#[tokio::test]
async fn many_writes_read_as_few_and_a_silent_reader_still_gets_the_newest() {
    let (t, now) = table();
    let (a, b) = (t.view(rid(0)), t.view(rid(1)));
    for v in 1..=1_000 {
        now.store(v * 10, Ordering::SeqCst);
        put(&a, record(0, 1 + v / 400, v)).await;
        if v % 3 == 0 {
            assert_eq!(
                of(&b, 0).await.last().map(|r| r.1),
                (v > 100).then(|| v - 100)
            );
        }
    }
    now.store(20_000, Ordering::SeqCst);
    let read = of(&t.view(rid(2)), 0).await;
    assert_eq!(read, vec![(1, 399), (2, 799), (3, 1_000)]);
}

#[tokio::test]
async fn a_store_set_down_fails_reads_and_writes_and_a_region_outside_is_refused() {
    let (t, _now) = table();
    let a = t.view(rid(0));
    t.store().set_down(true);
    assert!(matches!(
        a.read_all().await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        a.put(&record(0, 1, 1), WriterToken(1)).await,
        Err(StoreError::Unavailable(_))
    ));
    t.store().set_down(false);
    assert!(matches!(
        t.view(rid(3)).put(&record(3, 1, 1), WriterToken(1)).await,
        Err(StoreError::Fatal(_))
    ));
    assert_eq!(of(&a, 3).await, vec![]);
}
