//! DynamoDB-only behaviour on moto: foreign garbage items, half-replicated writes, packing.

mod support;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use shareplane_aws::codec::{self, Item};
use shareplane_aws::{create_table, DynamoStore};
use shareplane_core::{Deployment, RecordError};
use shareplane_store::{Fetched, RecordStore, Rejection, WriterToken};
use std::sync::Arc;
use support::{deployment, record, rid};

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
                i.insert("sv".into(), n("2"));
            }),
            Rejection::FutureSchema(2),
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
    let mut bad = record(&s.d, 1, 1);
    bad.limits[0].share = shareplane_core::Room(bad.limits[0].rate.0 + 1);
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
    let items = s.items("ap-southeast-2").await;
    assert!(
        items.len() * 20 <= 10_000,
        "{} items for 10,000 limits",
        items.len()
    );
    assert!(
        items.iter().all(|i| codec::item_bytes(i) < 200 * 1024),
        "every item well under 400 KB"
    );
    let mut v2 = v1.clone();
    v2.version = 2;
    v2.limits[5_000].demand.0 += 1;
    store.put(&v2, WriterToken(1)).await.expect("put v2");
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
    assert_eq!(r.limits.len(), 30);
    assert_eq!(&r.limits[..29], &v1.limits[1..]);
    assert_eq!(r.limits[29], shareplane_core::LimitRecord::default());
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
