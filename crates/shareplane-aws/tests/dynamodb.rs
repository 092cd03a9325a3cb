//! DynamoDB-only behaviour on moto: foreign garbage items, half-replicated writes, packing, and
//! the shared limits' parts (missing, altered, collected, raced) and malformed head.

mod support;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use shareplane_aws::codec::{self, Item};
use shareplane_aws::{create_table, limits, DynamoStore};
use shareplane_core::{Deployment, RecordError, RegionRecord};
use shareplane_store::{
    Fetched, LimitsDoc, LimitsRead, RecordStore, Rejection, StoreError, WriterToken,
};
use std::sync::Arc;
use support::{deployment, heir_at, owner_at, parts, record, rid};

struct Setup {
    client: Client,
    table: String,
    d: Arc<Deployment>,
}

async fn setup(test: &str, limits: usize) -> Option<Setup> {
    let url = support::moto_url(test)?;
    let client = shareplane_aws::client::dynamodb(&support::moto_config(&url).await);
    let table = support::unique("dyn");
    create_table(&client, &table).await.expect("create table");
    Some(Setup {
        client,
        table,
        d: deployment(limits),
    })
}

impl Setup {
    fn store(&self) -> DynamoStore {
        DynamoStore::new(
            self.client.clone(),
            self.table.clone(),
            self.d.clone(),
            rid(0),
        )
    }

    async fn raw_put(&self, item: Item) {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .expect("raw put");
    }

    async fn items(&self, region: &str) -> Vec<Item> {
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :p")
            .expression_attribute_values(":p", AttributeValue::S(region.into()))
            .send()
            .await
            .expect("query");
        out.items.unwrap_or_default()
    }
}

fn rejection(fetched: &[Fetched], region: &str) -> Option<Rejection> {
    fetched.iter().find_map(|f| match f {
        Fetched::Rejected {
            region: Some(r),
            reason,
        } if r == region => Some(reason.clone()),
        _ => None,
    })
}

/// Writes a valid record of eu-west-1, lets `spoil` change its items, and returns the rejection.
async fn spoiled(s: &Setup, spoil: impl Fn(&mut Item)) -> Option<Rejection> {
    let store = s.store();
    store
        .put(&record(&s.d, 1, 1), WriterToken(1))
        .await
        .expect("put");
    for mut item in s.items("eu-west-1").await {
        spoil(&mut item);
        s.raw_put(item).await;
    }
    let fetched = store.read_all().await.expect("read_all");
    rejection(&fetched, "eu-west-1")
}

/// A named way to spoil a valid record's items, and the rejection it must cause.
type Spoiler = (&'static str, Box<dyn Fn(&mut Item)>, Rejection);

fn is_header(item: &Item) -> bool {
    item.get("sk") == Some(&AttributeValue::S("rec".into()))
}

#[tokio::test]
async fn foreign_garbage_is_rejected_with_its_cause_and_counted() {
    let Some(s) = setup("foreign_garbage_is_rejected_with_its_cause_and_counted", 40).await else {
        return;
    };
    let n = |v: &str| AttributeValue::N(v.into());
    let cases: Vec<Spoiler> = vec![
        (
            "future schema",
            Box::new(move |i: &mut Item| {
                i.insert("sv".into(), n(&(codec::SCHEMA_VERSION + 1).to_string()));
            }),
            Rejection::FutureSchema(codec::SCHEMA_VERSION + 1),
        ),
        (
            "negative version",
            Box::new(move |i: &mut Item| {
                if is_header(i) {
                    i.insert("ver".into(), n("-3"));
                }
            }),
            Rejection::Malformed("attribute ver is negative".into()),
        ),
        (
            "fractional version",
            Box::new(move |i: &mut Item| {
                if is_header(i) {
                    i.insert("ver".into(), n("2.5"));
                }
            }),
            Rejection::Malformed("attribute ver is not an unsigned integer: 2.5".into()),
        ),
        (
            "garbage header blob",
            Box::new(|i: &mut Item| {
                if is_header(i) {
                    i.insert("h".into(), AttributeValue::B(Blob::new(vec![0xff; 11])));
                }
            }),
            Rejection::Malformed("a varint overflows 64 bits".into()),
        ),
        (
            "header blob not binary",
            Box::new(|i: &mut Item| {
                if is_header(i) {
                    i.insert("h".into(), AttributeValue::S("hello".into()));
                }
            }),
            Rejection::Malformed("attribute h is missing or not binary".into()),
        ),
    ];
    for (what, spoil, want) in cases {
        let s = setup(what, 40).await.expect("moto is configured");
        assert_eq!(spoiled(&s, spoil).await, Some(want), "{what}");
    }
    // A self-contradictory record: the share above the limit's rate.
    let mut bad = parts(&s.d, 1, 1);
    bad.limits[0].share = shareplane_core::Room::from_milli(bad.limits[0].rate.milli() + 1);
    let bad = RegionRecord::from_parts(bad);
    let enc = codec::encode(&s.d, &bad);
    s.raw_put(enc.shard_item(0, 1).expect("shard 0")).await;
    s.raw_put(enc.header_item(1, &[1])).await;
    let store = s.store();
    let fetched = store.read_all().await.expect("read_all");
    let want = Rejection::Invalid(RecordError::Contradiction {
        limit: Some(0),
        what: "share, target or unmet exceeds the limit's rate",
    });
    assert_eq!(rejection(&fetched, "eu-west-1"), Some(want));
    store.read_all().await.expect("read_all again");
    assert_eq!(
        store.rejections().get("contradiction"),
        Some(&2),
        "each rejection is counted"
    );
}

#[tokio::test]
async fn a_half_replicated_write_reads_as_not_updated() {
    let Some(s) = setup("a_half_replicated_write_reads_as_not_updated", 600).await else {
        return;
    };
    let writer = s.store();
    let reader = s.store();
    let v1 = record(&s.d, 1, 1);
    writer.put(&v1, WriterToken(1)).await.expect("put v1");
    assert!(
        matches!(&reader.read_all().await.expect("read")[..], [Fetched::Record(r)] if **r == v1)
    );
    let v2 = record(&s.d, 1, 2);
    writer.put(&v2, WriterToken(1)).await.expect("put v2");
    // Shard 1 falls back to what it held at v1, as if v2's copy had not replicated yet.
    let old = codec::encode(&s.d, &v1).shard_item(1, 1).expect("shard 1");
    s.raw_put(old).await;
    let seen = reader.read_all().await.expect("read");
    assert!(
        matches!(&seen[..], [Fetched::Record(r)] if **r == v1),
        "the reader keeps v1: {seen:?}"
    );
    let fresh = s.store();
    assert!(
        fresh.read_all().await.expect("read").is_empty(),
        "a reader without a consistent copy sees none"
    );
    assert!(
        reader.rejections().is_empty(),
        "replication lag is not a rejection"
    );
    // Replication catches up: v2's shard 1 arrives, and the set is consistent at v2.
    s.raw_put(codec::encode(&s.d, &v2).shard_item(1, 1).expect("shard 1"))
        .await;
    assert!(
        matches!(&reader.read_all().await.expect("read")[..], [Fetched::Record(r)] if **r == v2)
    );
}

#[tokio::test]
async fn ten_thousand_limits_pack_into_few_items_and_unchanged_shards_are_not_rewritten() {
    let Some(s) = setup("ten_thousand_limits_pack_into_few_items", 10_000).await else {
        return;
    };
    let store = s.store();
    let v1 = record(&s.d, 2, 1);
    store.put(&v1, WriterToken(1)).await.expect("put v1");
    let first_units = store.write_units();
    let items = s.items("ap-southeast-2").await;
    // 2 units per started KB of each item written: at least one per KB of what was written.
    let kb: u64 = items
        .iter()
        .map(|i| codec::item_bytes(i).div_ceil(1024) as u64)
        .sum();
    assert!(first_units >= 2 * kb, "{first_units} units for {kb} KB");
    assert!(
        items.len() * 20 <= 10_000,
        "{} items for 10,000 limits",
        items.len()
    );
    assert!(
        items.iter().all(|i| codec::item_bytes(i) < 200 * 1024),
        "every item well under 400 KB"
    );
    let mut v2 = v1.to_parts();
    v2.version = 2;
    v2.limits[5_000].demand += shareplane_core::Room::from_milli(1);
    let v2 = RegionRecord::from_parts(v2);
    store.put(&v2, WriterToken(1)).await.expect("put v2");
    // The second write wrote one shard and the header.
    let second_units = store.write_units() - first_units;
    assert!(
        second_units > 0 && second_units * 5 < first_units,
        "first write {first_units} units, second {second_units}"
    );
    let versions: Vec<String> = s
        .items("ap-southeast-2")
        .await
        .iter()
        .filter(|i| !is_header(i))
        .filter_map(|i| match i.get("ver") {
            Some(AttributeValue::N(v)) => Some(v.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        versions.iter().filter(|v| *v == "2").count(),
        1,
        "only the changed shard is rewritten"
    );
    assert_eq!(versions.len(), items.len() - 1);
    let reader = DynamoStore::new(s.client.clone(), s.table.clone(), s.d.clone(), rid(1));
    assert!(matches!(reader.read_one(rid(2)).await, Ok(Some(Fetched::Record(r))) if *r == v2));
}

#[tokio::test]
async fn limits_unknown_to_the_reader_are_ignored_and_missing_ones_read_as_unadopted() {
    let Some(s) = setup("limits_unknown_to_the_reader", 30).await else {
        return;
    };
    let writer = s.store();
    let v1 = record(&s.d, 1, 1);
    writer.put(&v1, WriterToken(1)).await.expect("put");
    // The reader's deployment drops limit 0 and adds a new one at the end.
    let mut d2 = (*s.d).clone();
    d2.limits.remove(0);
    let mut extra = d2.limits[0].clone();
    extra.id = "tenant-new/api".into();
    d2.limits.push(extra);
    let reader = DynamoStore::new(s.client.clone(), s.table.clone(), Arc::new(d2), rid(0));
    let Ok(Some(Fetched::Record(r))) = reader.read_one(rid(1)).await else {
        panic!("no record")
    };
    assert_eq!(r.limits().len(), 30);
    assert_eq!(&r.limits()[..29], &v1.limits()[1..]);
    assert_eq!(r.limits()[29], shareplane_core::LimitRecord::default());
}

#[tokio::test]
async fn a_record_written_in_several_transactions_round_trips_and_stays_fenced() {
    let Some(s) = setup("a_record_written_in_several_transactions", 1_000).await else {
        return;
    };
    let store = s.store().with_max_transaction_actions(2);
    let v1 = record(&s.d, 0, 1);
    store
        .put(&v1, WriterToken(5))
        .await
        .expect("put v1 in 4 shard transactions + the header");
    assert!(matches!(store.read_one(rid(0)).await, Ok(Some(Fetched::Record(r))) if *r == v1));
    let stale = s.store().with_max_transaction_actions(2);
    let refused = stale.put(&record(&s.d, 0, 2), WriterToken(4)).await;
    assert!(
        matches!(refused, Err(shareplane_store::StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert!(
        matches!(store.read_one(rid(0)).await, Ok(Some(Fetched::Record(r))) if *r == v1),
        "nothing of the stale write shows"
    );
    let v2 = record(&s.d, 0, 2);
    store.put(&v2, WriterToken(5)).await.expect("put v2");
    assert!(matches!(store.read_one(rid(0)).await, Ok(Some(Fetched::Record(r))) if *r == v2));
}

async fn read(store: &DynamoStore) -> Arc<shareplane_core::RegionRecord> {
    match store.read_one(rid(0)).await {
        Ok(Some(Fetched::Record(r))) => r,
        other => panic!("{other:?}"),
    }
}

/// A record read back unchanged is the copy already held: the own one shares its entries with
/// what was written, a peer's is decoded once while it does not change.
#[tokio::test]
async fn an_unchanged_record_is_held_once() {
    let Some(s) = setup("an_unchanged_record_is_held_once", 1_000).await else {
        return;
    };
    let (own, peer) = (
        s.store(),
        DynamoStore::new(s.client.clone(), s.table.clone(), s.d.clone(), rid(1)),
    );
    let v1 = record(&s.d, 0, 1);
    own.put(&v1, WriterToken(5)).await.expect("put v1");
    let mine = read(&own).await;
    assert_eq!(*mine, v1);
    assert!(
        mine.limits().shares_with(v1.limits()),
        "the own record is what was written"
    );
    let (first, again) = (read(&peer).await, read(&peer).await);
    assert_eq!(*first, v1);
    assert!(Arc::ptr_eq(&first, &again), "decoded once while unchanged");
    let v2 = record(&s.d, 0, 2);
    own.put(&v2, WriterToken(5)).await.expect("put v2");
    let newer = read(&peer).await;
    assert_eq!(*newer, v2, "a new write is read anew");
}

#[tokio::test]
async fn an_unreachable_table_is_a_retryable_error() {
    let endpoint = shareplane_aws::Endpoint::Local {
        url: "http://127.0.0.1:9".into(),
        region: "eu-west-1".into(),
    };
    let limits = shareplane_aws::CallLimits {
        max_attempts: 1,
        ..Default::default()
    };
    let client = shareplane_aws::client::dynamodb(
        &shareplane_aws::client::sdk_config(&endpoint, limits).await,
    );
    let store = DynamoStore::new(client, "nowhere", deployment(3), rid(0));
    let err = store.read_all().await.expect_err("nothing listens there");
    assert!(err.is_retryable(), "{err:?}");
    let err = store
        .put(&record(&deployment(3), 0, 1), WriterToken(1))
        .await
        .expect_err("nothing listens there");
    assert!(
        matches!(err, shareplane_store::StoreError::Unavailable(_)),
        "{err:?}"
    );
}

/// The race the shard condition closes: a deposed writer whose header check still passes (its
/// successor has written shards but not yet its header) must not overwrite the successor's shards.
#[tokio::test]
async fn a_deposed_writer_cannot_overwrite_a_successors_shards() {
    let Some(s) = setup("a_deposed_writer_cannot_overwrite", 600).await else {
        return;
    };
    let successor = s.store();
    let v2 = record(&s.d, 0, 2);
    successor
        .put(&v2, WriterToken(5))
        .await
        .expect("successor writes");
    // Roll the header back to the deposed writer's token, as if the successor's header were late.
    let enc = codec::encode(&s.d, &v2);
    s.raw_put(enc.header_item(4, &vec![2; enc.shards.len()]))
        .await;
    let deposed = s.store().with_max_transaction_actions(2);
    let refused = deposed.put(&record(&s.d, 0, 3), WriterToken(4)).await;
    assert!(
        matches!(refused, Err(shareplane_store::StoreError::Conflict(_))),
        "{refused:?}"
    );
    let shard_tokens: Vec<Option<AttributeValue>> = s
        .items("us-east-1")
        .await
        .iter()
        .filter(|i| !is_header(i))
        .map(|i| i.get("tok").cloned())
        .collect();
    assert_eq!(
        shard_tokens,
        vec![Some(AttributeValue::N("5".into())); enc.shards.len()]
    );
}

impl Setup {
    /// The sort keys of `region`'s kept items, in key order.
    async fn kept_keys(&self, region: &str) -> Vec<String> {
        let mut keys: Vec<String> = self
            .items(region)
            .await
            .iter()
            .filter_map(|i| match i.get("sk") {
                Some(AttributeValue::S(sk)) if sk.starts_with(codec::KEPT_PREFIX) => {
                    Some(sk.clone())
                }
                _ => None,
            })
            .collect();
        keys.sort();
        keys
    }

    /// Puts a copy of every item of `region` whose sort key starts with `from` under `to` + the
    /// rest of its key, changed by `spoil`.
    async fn copy_items(&self, region: &str, from: &str, to: &str, spoil: impl Fn(&mut Item)) {
        for mut item in self.items(region).await {
            let Some(AttributeValue::S(sk)) = item.get("sk").cloned() else {
                continue;
            };
            let Some(rest) = sk.strip_prefix(from) else {
                continue;
            };
            item.insert("sk".into(), AttributeValue::S(format!("{to}{rest}")));
            spoil(&mut item);
            self.raw_put(item).await;
        }
    }
}

/// Every sort key of kept epoch `epoch` with `shards` shards.
fn kept_set(epoch: u64, shards: usize) -> Vec<String> {
    let mut keys = vec![codec::kept_sk(epoch)];
    keys.extend((0..shards).map(|i| codec::kept_shard_sk(epoch, i)));
    keys
}

/// `region`'s records, in the order `read_all` gives them, with every rejection of it.
async fn region_reads(store: &DynamoStore, region: usize) -> (Vec<(u64, u64)>, Vec<Rejection>) {
    let name = support::REGIONS[region];
    let mut records = Vec::new();
    let mut rejected = Vec::new();
    for f in store.read_all().await.expect("read_all") {
        match f {
            Fetched::Record(r) if r.region() == rid(region) => {
                records.push((r.epoch(), r.version()))
            }
            Fetched::Rejected {
                region: Some(n),
                reason,
            } if n == name => rejected.push(reason),
            _ => {}
        }
    }
    (records, rejected)
}

/// Both heirs of Region 0 write a record at `version` that accounts with its epoch `acct` and
/// marks `mark`.
async fn heirs(s: &Setup, version: u64, acct: u64, mark: (u64, u64)) {
    for heir in [1, 2] {
        s.store()
            .put(&heir_at(&s.d, heir, version, acct, mark), WriterToken(1))
            .await
            .expect("heir put");
    }
}

async fn owner_writes(store: &DynamoStore, record: &shareplane_core::RegionRecord) {
    store.read_all().await.expect("read_all before the write");
    store.put(record, WriterToken(1)).await.expect("owner put");
}

#[tokio::test]
async fn kept_epochs_are_collected_a_few_items_a_write_once_every_heir_has_moved_past_them() {
    let Some(s) = setup("kept_epochs_are_collected", 600).await else {
        return;
    };
    let d = s.d.clone();
    let owner = s.store().with_max_collect_per_write(3);
    heirs(&s, 10, 2, (1, 1)).await;
    for (e, v, pf) in [(2, 1, 0), (2, 2, 1), (3, 3, 2), (3, 4, 2), (7, 5, 4)] {
        owner_writes(&owner, &owner_at(&d, e, v, pf)).await;
    }
    let both: Vec<String> = [kept_set(2, 3), kept_set(3, 3)].concat();
    assert_eq!(s.kept_keys("us-east-1").await, both);
    owner_writes(&owner, &owner_at(&d, 7, 6, 4)).await;
    assert_eq!(
        s.kept_keys("us-east-1").await,
        both,
        "no heir has closed anything"
    );

    heirs(&s, 11, 3, (2, 2)).await;
    owner_writes(&owner, &owner_at(&d, 7, 7, 4)).await;
    assert_eq!(
        s.kept_keys("us-east-1").await,
        both,
        "the heirs switched past epoch 2 but still mark it: they may still settle it up"
    );

    heirs(&s, 12, 7, (3, 4)).await;
    owner_writes(&owner, &owner_at(&d, 7, 8, 4)).await;
    let header_left: Vec<String> = [vec![codec::kept_sk(2)], kept_set(3, 3)].concat();
    assert_eq!(
        s.kept_keys("us-east-1").await,
        header_left,
        "three deletes: the shards first"
    );
    assert_eq!(
        region_reads(&owner, 0).await,
        (vec![(3, 4), (7, 8)], vec![]),
        "a partly collected set is left out, not rejected"
    );
    owner_writes(&owner, &owner_at(&d, 7, 9, 4)).await;
    assert_eq!(s.kept_keys("us-east-1").await, kept_set(3, 3));
    owner_writes(&owner, &owner_at(&d, 7, 10, 4)).await;
    assert_eq!(
        s.kept_keys("us-east-1").await,
        kept_set(3, 3),
        "epoch 3: the heirs account past it but still mark it"
    );

    // Heir 1 marks a later epoch (here the running one: a false verdict's reclaim), heir 2 still
    // marks epoch 3: heir 2 may still need it.
    s.store()
        .put(&heir_at(&d, 1, 13, 7, (7, 10)), WriterToken(1))
        .await
        .expect("heir 1 marks a later epoch");
    s.store()
        .put(&heir_at(&d, 2, 13, 7, (3, 4)), WriterToken(1))
        .await
        .expect("heir 2 still marks epoch 3");
    owner_writes(&owner, &owner_at(&d, 7, 11, 4)).await;
    assert_eq!(s.kept_keys("us-east-1").await, kept_set(3, 3));
    s.store()
        .put(&heir_at(&d, 2, 14, 7, (7, 10)), WriterToken(1))
        .await
        .expect("heir 2 marks a later epoch");
    for v in 12..=13 {
        owner_writes(&owner, &owner_at(&d, 7, v, 4)).await;
    }
    assert!(s.kept_keys("us-east-1").await.is_empty());
    assert_eq!(region_reads(&owner, 0).await, (vec![(7, 13)], vec![]));
    assert!(
        s.kept_keys("eu-west-1").await.is_empty() && s.items("eu-west-1").await.len() == 4,
        "nobody else's items were touched"
    );
}

#[tokio::test]
async fn a_kept_set_is_read_only_when_consistent_and_a_spoiled_one_is_rejected() {
    let Some(s) = setup("a_kept_set_is_read_only_when_consistent", 600).await else {
        return;
    };
    let mut v1 = parts(&s.d, 1, 1);
    v1.epoch = 3;
    let v1 = RegionRecord::from_parts(v1);
    let mut v2 = parts(&s.d, 1, 2);
    v2.epoch = 4;
    v2.prev_final = 1;
    let v2 = RegionRecord::from_parts(v2);
    s.store().put(&v1, WriterToken(1)).await.expect("v1");
    s.store()
        .put(&v2, WriterToken(1))
        .await
        .expect("v2 starts epoch 4");
    let reader = s.store();
    let all = reader.read_all().await.expect("read_all");
    let theirs: Vec<&shareplane_core::RegionRecord> = all
        .iter()
        .filter_map(|f| match f {
            Fetched::Record(r) if r.region() == rid(1) => Some(&**r),
            _ => None,
        })
        .collect();
    assert_eq!(
        theirs,
        vec![&v1, &v2],
        "the kept record, exactly, then the current one"
    );

    // A kept shard at another version than its header names: still replicating, left out.
    let kept3 = codec::kept_sk(3);
    let shard1 = codec::kept_shard_sk(3, 1);
    let original = s
        .items("eu-west-1")
        .await
        .into_iter()
        .find(|i| i.get("sk") == Some(&AttributeValue::S(shard1.clone())))
        .expect("kept shard 1");
    let mut lagging = original.clone();
    lagging.insert("ver".into(), AttributeValue::N("0".into()));
    s.raw_put(lagging).await;
    assert_eq!(region_reads(&reader, 1).await, (vec![(4, 2)], vec![]));
    s.raw_put(original).await;

    // A kept set labelled with another epoch than its record's is rejected; the rest still reads.
    s.copy_items("eu-west-1", &kept3, &codec::kept_sk(2), |_| {})
        .await;
    let (records, rejected) = region_reads(&reader, 1).await;
    assert_eq!(records, vec![(3, 1), (4, 2)]);
    assert_eq!(
        rejected,
        vec![Rejection::Malformed(
            "the items kept for epoch 2 hold a record of epoch 3".into()
        )]
    );
    // A garbage kept header is rejected too, never adopted.
    s.copy_items("eu-west-1", &kept3, &kept3, |i| {
        if i.contains_key("h") {
            i.insert("h".into(), AttributeValue::B(Blob::new(vec![0xff; 11])));
        }
    })
    .await;
    let (records, rejected) = region_reads(&reader, 1).await;
    assert_eq!(records, vec![(4, 2)]);
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    assert!(rejected.contains(&Rejection::Malformed("a varint overflows 64 bits".into())));
    assert_eq!(
        reader.rejections().get("malformed"),
        Some(&3),
        "each rejection is counted"
    );
}

#[tokio::test]
async fn an_epoch_switch_in_several_transactions_after_a_restart_keeps_the_last_record() {
    let Some(s) = setup("an_epoch_switch_in_several_transactions", 1_000).await else {
        return;
    };
    let d = s.d.clone();
    let v1 = owner_at(&d, 2, 1, 0);
    s.store()
        .with_max_transaction_actions(2)
        .put(&v1, WriterToken(5))
        .await
        .expect("v1");
    // A deposed writer's switch fails in its first transaction: nothing is kept.
    let refused = s
        .store()
        .with_max_transaction_actions(2)
        .put(&owner_at(&d, 3, 2, 1), WriterToken(4))
        .await;
    assert!(
        matches!(refused, Err(shareplane_store::StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert!(s.kept_keys("us-east-1").await.is_empty());
    // A restarted writer (a new store knows nothing of the stored epoch) switches epochs.
    let v2 = owner_at(&d, 3, 2, 1);
    s.store()
        .with_max_transaction_actions(2)
        .put(&v2, WriterToken(5))
        .await
        .expect("v2, in several transactions");
    assert_eq!(s.kept_keys("us-east-1").await, kept_set(2, 4));
    let reader = DynamoStore::new(s.client.clone(), s.table.clone(), d.clone(), rid(1));
    let all = reader.read_all().await.expect("read_all");
    let got: Vec<&shareplane_core::RegionRecord> = all
        .iter()
        .filter_map(|f| match f {
            Fetched::Record(r) if r.region() == rid(0) => Some(&**r),
            _ => None,
        })
        .collect();
    assert_eq!(got, vec![&v1, &v2]);
}

#[tokio::test]
async fn an_inconsistent_stored_record_is_not_kept_and_the_new_epoch_is_still_written() {
    let Some(s) = setup("an_inconsistent_stored_record_is_not_kept", 600).await else {
        return;
    };
    let d = s.d.clone();
    s.store()
        .put(&owner_at(&d, 2, 1, 0), WriterToken(1))
        .await
        .expect("v1");
    // Shard 1 overwritten by a write whose header never landed.
    let mut half = parts(&d, 0, 7);
    half.epoch = 2;
    let half = RegionRecord::from_parts(half);
    s.raw_put(codec::encode(&d, &half).shard_item(1, 1).expect("shard 1"))
        .await;
    let v2 = owner_at(&d, 3, 8, 1);
    s.store().put(&v2, WriterToken(1)).await.expect("v2");
    assert!(s.kept_keys("us-east-1").await.is_empty());
    let reader = DynamoStore::new(s.client.clone(), s.table.clone(), d.clone(), rid(1));
    assert_eq!(region_reads(&reader, 0).await, (vec![(3, 8)], vec![]));
}

#[tokio::test]
async fn after_a_reload_that_adds_a_limit_the_store_writes_it_with_the_digest_and_every_reader_copes(
) {
    let Some(s) = setup("reload_adds_a_limit", codec::LIMITS_PER_SHARD).await else {
        return;
    };
    let store = s.store();
    let mut r1 = record(&s.d, 0, 1);
    r1.stamp_limits_digest(shareplane_core::limits_digest(&s.d.limits));
    store.put(&r1, WriterToken(1)).await.expect("put");
    // The reload adds one limit: the record now needs a second shard.
    let mut d2 = (*s.d).clone();
    let mut extra = d2.limits[0].clone();
    extra.id = "tenant-added/api".into();
    d2.limits.push(extra.clone());
    let d2 = Arc::new(d2);
    store.set_deployment(d2.clone());
    let mut r2 = record(&d2, 0, 2);
    r2.stamp_limits_digest(shareplane_core::limits_digest(&d2.limits));
    assert_ne!(r1.limits_digest(), r2.limits_digest());
    store
        .put(&r2, WriterToken(1))
        .await
        .expect("put after the reload");
    let Ok(Some(Fetched::Record(back))) = store.read_one(rid(0)).await else {
        panic!("the own record does not read back")
    };
    assert_eq!(
        *back, r2,
        "the own record with the added limit and its digest"
    );
    // A peer that has not reloaded yet ignores the limit it does not know and sees the digest.
    let peer = DynamoStore::new(s.client.clone(), s.table.clone(), s.d.clone(), rid(1));
    let Ok(Some(Fetched::Record(seen))) = peer.read_one(rid(0)).await else {
        panic!("the peer cannot read the record")
    };
    assert_eq!(seen.limits().len(), codec::LIMITS_PER_SHARD);
    assert_eq!(&seen.limits()[..], &r2.limits()[..codec::LIMITS_PER_SHARD]);
    assert_eq!(seen.limits_digest(), r2.limits_digest());
}

// The shared limits (`#limits`): what only the DynamoDB layout can get wrong.

fn limits_doc(version: u64, text: String) -> LimitsDoc {
    LimitsDoc {
        version,
        text,
        applied_by: "ops@example".into(),
        applied_at_ms: 1_700_000_000_000,
    }
}

/// About `bytes` of limits text (so more than one part beyond [`limits::MAX_PART_BYTES`]).
fn limits_text(bytes: usize, rate: u64) -> String {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < bytes {
        text.push_str(&format!(
            "[[limits]]\nid = \"tenant-{i:05}\"\nrate = {rate}\n"
        ));
        i += 1;
    }
    text
}

impl Setup {
    /// The sort keys of every `#limits` item, in key order (`head` sorts before `v#…`).
    async fn limits_keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :p")
                .expression_attribute_values(":p", AttributeValue::S(limits::LIMITS_PK.into()))
                .projection_expression("sk")
                .set_exclusive_start_key(start)
                .send()
                .await
                .expect("query");
            keys.extend(page.items().iter().filter_map(|i| match i.get("sk") {
                Some(AttributeValue::S(sk)) => Some(sk.clone()),
                _ => None,
            }));
            start = page.last_evaluated_key;
            if start.is_none() {
                return keys;
            }
        }
    }

    async fn limits_item(&self, sk: &str) -> Item {
        self.client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(limits::LIMITS_PK.into()))
            .key("sk", AttributeValue::S(sk.into()))
            .send()
            .await
            .expect("get")
            .item
            .unwrap_or_else(|| panic!("no item {sk}"))
    }

    async fn limits_delete(&self, sk: &str) {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(limits::LIMITS_PK.into()))
            .key("sk", AttributeValue::S(sk.into()))
            .send()
            .await
            .expect("raw delete");
    }
}

/// The part keys of `doc`, as the store writes them.
fn part_keys(doc: &LimitsDoc, parts: usize) -> Vec<String> {
    (0..parts)
        .map(|i| limits::part_sk(doc.version, doc.digest(), i))
        .collect()
}

fn parts_of(keys: &[String], version: u64) -> usize {
    let prefix = format!("{}{version:020}#", limits::PART_PREFIX);
    keys.iter().filter(|k| k.starts_with(&prefix)).count()
}

#[tokio::test]
async fn shared_limits_whose_parts_are_missing_read_as_incomplete_until_they_arrive() {
    let Some(s) = setup("shared_limits_whose_parts_are_missing", 1).await else {
        return;
    };
    let v1 = limits_doc(1, limits_text(800_000, 100));
    s.store().write_limits(&v1).await.expect("write v1");
    let keys = part_keys(&v1, 3);
    assert_eq!(
        s.limits_keys().await,
        [vec![limits::HEAD_SK.to_string()], keys.clone()].concat()
    );
    let daemon = s.store();
    assert_eq!(
        daemon.read_limits().await,
        Ok(LimitsRead::Complete(v1.clone()))
    );
    // Part 1 has not replicated yet (taken away again).
    let part1 = s.limits_item(&keys[1]).await;
    s.limits_delete(&keys[1]).await;
    assert_eq!(
        s.store().read_limits().await,
        Ok(LimitsRead::Incomplete { version: 1 }),
        "a reader that never saw v1 whole"
    );
    assert_eq!(
        daemon.read_limits().await,
        Ok(LimitsRead::Complete(v1.clone())),
        "a reader that read v1 whole does not read its parts again while the head is unchanged"
    );
    s.raw_put(part1).await;
    assert_eq!(
        s.store().read_limits().await,
        Ok(LimitsRead::Complete(v1.clone()))
    );
    // v2's head arrives before any of its parts.
    let v2 = limits_doc(2, limits_text(1_000, 200));
    let writer = s.store();
    writer.write_limits(&v2).await.expect("write v2");
    let v2_part = limits::part_sk(2, v2.digest(), 0);
    s.limits_delete(&v2_part).await;
    assert_eq!(
        daemon.read_limits().await,
        Ok(LimitsRead::Incomplete { version: 2 }),
        "a new head is never served from the old text"
    );
    // A repeated (foreign-digest) part of the same version does not complete it either.
    let mut stray = s.limits_item(&keys[0]).await;
    stray.insert(
        "sk".into(),
        AttributeValue::S(limits::part_sk(2, v2.digest() ^ 1, 0)),
    );
    s.raw_put(stray).await;
    assert_eq!(
        daemon.read_limits().await,
        Ok(LimitsRead::Incomplete { version: 2 })
    );
}

#[tokio::test]
async fn a_shared_limits_part_whose_text_was_altered_reads_as_incomplete() {
    let Some(s) = setup("a_shared_limits_part_whose_text_was_altered", 1).await else {
        return;
    };
    let v1 = limits_doc(1, limits_text(500_000, 100));
    s.store().write_limits(&v1).await.expect("write");
    let sk = limits::part_sk(1, v1.digest(), 1);
    let mut part = s.limits_item(&sk).await;
    let Some(AttributeValue::S(txt)) = part.get("txt") else {
        panic!("part 1 has no text")
    };
    // The same length, one rate changed: only the digest can tell.
    let altered = txt.replacen("rate = 100", "rate = 900", 1);
    assert_eq!(altered.len(), txt.len());
    assert_ne!(&altered, txt);
    part.insert("txt".into(), AttributeValue::S(altered));
    s.raw_put(part).await;
    assert_eq!(
        s.store().read_limits().await,
        Ok(LimitsRead::Incomplete { version: 1 })
    );
}

#[tokio::test]
async fn a_malformed_shared_limits_head_is_fatal_and_names_the_attribute() {
    let Some(s) = setup("a_malformed_shared_limits_head", 1).await else {
        return;
    };
    let v1 = limits_doc(1, limits_text(1_000, 100));
    s.store().write_limits(&v1).await.expect("write");
    let good = s.limits_item(limits::HEAD_SK).await;
    let n = |v: &str| AttributeValue::N(v.into());
    let cases = [
        ("parts", AttributeValue::S("1".into())),
        ("parts", n("100000")),
        ("bytes", n("99999999999")),
        ("ver", n("-1")),
        ("dig", AttributeValue::S("not hex".into())),
        ("by", n("7")),
    ];
    for (attr, value) in cases {
        let mut head = good.clone();
        head.insert(attr.into(), value.clone());
        s.raw_put(head).await;
        match s.store().read_limits().await {
            Err(StoreError::Fatal(m)) => assert!(
                m.contains(&format!("attribute {attr}")),
                "{attr} = {value:?}: {m}"
            ),
            other => panic!("{attr} = {value:?}: expected Fatal, got {other:?}"),
        }
    }
    let mut head = good.clone();
    head.remove("at");
    s.raw_put(head).await;
    let read = s.store().read_limits().await;
    assert!(
        matches!(&read, Err(StoreError::Fatal(m)) if m.contains("attribute at")),
        "{read:?}"
    );
    let write = s.store().write_limits(&limits_doc(2, "x".into())).await;
    assert!(
        matches!(&write, Err(StoreError::Fatal(m)) if m.contains("attribute at")),
        "a write over a malformed head is refused, not guessed at: {write:?}"
    );
}

#[tokio::test]
async fn older_shared_limits_parts_are_collected_and_the_previous_versions_stay() {
    let Some(s) = setup("older_shared_limits_parts_are_collected", 1).await else {
        return;
    };
    let store = s.store();
    let docs: Vec<LimitsDoc> = (1..=3)
        .map(|v| limits_doc(v, limits_text(400_000, 100 * v)))
        .collect();
    store.write_limits(&docs[0]).await.expect("v1");
    let after_v1 = store.write_units();
    assert!(after_v1 >= 400_000 / 1024, "{after_v1} units for 400 KB");
    store.write_limits(&docs[1]).await.expect("v2");
    let keys = s.limits_keys().await;
    assert_eq!((parts_of(&keys, 1), parts_of(&keys, 2)), (2, 2), "{keys:?}");
    store.write_limits(&docs[2]).await.expect("v3");
    let keys = s.limits_keys().await;
    assert_eq!(
        (parts_of(&keys, 1), parts_of(&keys, 2), parts_of(&keys, 3)),
        (0, 2, 2),
        "v1's parts are gone, v2's (the previous version) stay: {keys:?}"
    );
    assert_eq!(
        keys,
        [
            vec![limits::HEAD_SK.to_string()],
            part_keys(&docs[1], 2),
            part_keys(&docs[2], 2),
        ]
        .concat()
    );
    assert!(store.write_units() >= 3 * after_v1);
    assert_eq!(
        s.store().read_limits().await,
        Ok(LimitsRead::Complete(docs[2].clone()))
    );
}

/// Two applies of the same version from two Regions race on one replica: both pass the
/// version check before either head lands. One head wins; the loser's parts are deleted, unless
/// they are the winner's own (the same text: the same keys).
#[tokio::test]
async fn racing_applies_of_one_version_leave_exactly_the_winners_parts() {
    let Some(s) = setup("racing_applies_of_one_version", 1).await else {
        return;
    };
    let (a, b) = (s.store(), s.store());
    let da = limits_doc(4, limits_text(700_000, 100));
    let db = limits_doc(4, limits_text(700_000, 200));
    let (ra, rb) = tokio::join!(a.write_limits(&da), b.write_limits(&db));
    let winner = match (&ra, &rb) {
        (Ok(()), Err(StoreError::Conflict(_))) => &da,
        (Err(StoreError::Conflict(_)), Ok(())) => &db,
        other => panic!("expected one write and one conflict, got {other:?}"),
    };
    assert_eq!(
        s.limits_keys().await,
        [vec![limits::HEAD_SK.to_string()], part_keys(winner, 3)].concat(),
        "only the winner's parts are left"
    );
    assert_eq!(
        s.store().read_limits().await,
        Ok(LimitsRead::Complete(winner.clone()))
    );
    // The same text twice: the loser's parts are the winner's, and stay.
    let same = limits_doc(5, limits_text(700_000, 300));
    let (ra, rb) = tokio::join!(a.write_limits(&same), b.write_limits(&same));
    assert!(
        ra.is_ok() != rb.is_ok(),
        "one write and one conflict: {ra:?} {rb:?}"
    );
    assert_eq!(
        s.store().read_limits().await,
        Ok(LimitsRead::Complete(same))
    );
}

#[tokio::test]
async fn a_region_name_that_starts_with_a_hash_is_refused_before_any_call() {
    let mut d = (*deployment(1)).clone();
    d.regions[0] = limits::LIMITS_PK.into();
    let d = Deployment::try_new(d).unwrap();
    let endpoint = shareplane_aws::Endpoint::Local {
        url: "http://127.0.0.1:9".into(),
        region: "eu-west-1".into(),
    };
    let client = shareplane_aws::client::dynamodb(
        &shareplane_aws::client::sdk_config(
            &endpoint,
            shareplane_aws::CallLimits {
                max_attempts: 1,
                ..Default::default()
            },
        )
        .await,
    );
    let store = DynamoStore::new(client, "nowhere", Arc::new(d), rid(0));
    let err = store.read_one(rid(0)).await.expect_err("a reserved name");
    assert!(
        matches!(&err, StoreError::Fatal(m) if m.contains("'#'")),
        "not an unreachable table: {err:?}"
    );
    assert!(
        store
            .read_one(rid(1))
            .await
            .is_err_and(|e| e.is_retryable()),
        "other Regions are fine (and unreachable here)"
    );
}
