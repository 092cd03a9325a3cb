//! The decoder never panics, whatever the table holds: arbitrary attribute maps, arbitrary bytes,
//! and valid encodings with bytes flipped, cut or inserted. Valid records round-trip exactly.

mod support;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use proptest::prelude::*;
use shareplane_aws::codec::{self, Decoded, Item};
use shareplane_core::{PerRegion, RegionRecord, RegionRecordParts};
use shareplane_store::Rejection;
use support::{deployment, parts, record, rid, set_epoch};

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..5).prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        Just("NaN".to_string()),
        Just("-inf".to_string()),
        Just("1e400".to_string()),
        Just("99999999999999999999999".to_string()),
        ".{0,12}",
    ]
}

fn value() -> impl Strategy<Value = AttributeValue> {
    prop_oneof![
        number_text().prop_map(AttributeValue::N),
        ".{0,16}".prop_map(AttributeValue::S),
        proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|b| AttributeValue::B(Blob::new(b))),
        any::<bool>().prop_map(AttributeValue::Bool),
    ]
}

fn sort_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("rec".to_string()),
        (0usize..4).prop_map(codec::shard_sk),
        Just("rec#".to_string()),
        Just("rec#-1".to_string()),
        Just("rec#99999999999999999999999".to_string()),
        Just("lease".to_string()),
        "rec.{0,8}",
    ]
}

fn item() -> impl Strategy<Value = Item> {
    let names = prop_oneof![
        Just("sv"),
        Just("ver"),
        Just("tok"),
        Just("h"),
        Just("d"),
        Just("x")
    ];
    (
        prop_oneof![Just("eu-west-1".to_string()), ".{0,10}"],
        sort_key(),
        proptest::collection::vec((names, value()), 0..7),
    )
        .prop_map(|(pk, sk, attrs)| {
            let mut item: Item = attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            item.insert("pk".into(), AttributeValue::S(pk));
            item.insert("sk".into(), AttributeValue::S(sk));
            item
        })
}

/// A mutation of one blob: flip a byte, cut the tail, or insert a byte.
#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

fn mutate(item: &mut Item, attr: &str, m: &Mutation) {
    let Some(AttributeValue::B(b)) = item.get(attr) else {
        return;
    };
    let mut bytes = b.as_ref().to_vec();
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
    match *m {
        Mutation::Flip(i, x) if !bytes.is_empty() => {
            let i = at(i, bytes.len());
            bytes[i] ^= x;
        }
        Mutation::Flip(..) => {}
        Mutation::Cut(i) => bytes.truncate(at(i, bytes.len())),
        Mutation::Insert(i, b) => bytes.insert(at(i, bytes.len() + 1), b),
    }
    item.insert(attr.into(), AttributeValue::B(Blob::new(bytes)));
}

fn valid_items(
    limits: usize,
    version: u64,
) -> (std::sync::Arc<shareplane_core::Deployment>, Vec<Item>) {
    let d = deployment(limits);
    let enc = codec::encode(&d, &record(&d, 1, version));
    let mut items: Vec<Item> = (0..enc.shards.len())
        .filter_map(|i| enc.shard_item(i, 3))
        .collect();
    items.push(enc.header_item(3, &vec![version; enc.shards.len()]));
    (d, items)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_items_never_panic(items in proptest::collection::vec(item(), 0..6)) {
        let d = deployment(20);
        // Whatever comes back is fine; the property is that it comes back.
        let _ = codec::decode(&d, rid(0), rid(1), &items);
    }

    #[test]
    fn mutated_encodings_never_panic_and_anything_accepted_is_valid(
        which in 0usize..3,
        ms in proptest::collection::vec(mutation(), 1..4),
    ) {
        let (d, mut items) = valid_items(300, 7);
        let target = which % items.len();
        let attr = if target == items.len() - 1 { "h" } else { "d" };
        for m in &ms {
            mutate(&mut items[target], attr, m);
        }
        if let Decoded::Record(r) = codec::decode(&d, rid(0), rid(1), &items) {
            prop_assert!(r.validate(&d, rid(0)).is_ok());
            prop_assert_eq!(r.limits().len(), 300);
        }
    }

    #[test]
    fn valid_records_round_trip(limits in 1usize..700, version in 1u64..1_000_000, region in 0usize..3) {
        let d = deployment(limits);
        let r = record(&d, region, version);
        let enc = codec::encode(&d, &r);
        let mut items: Vec<Item> = (0..enc.shards.len()).filter_map(|i| enc.shard_item(i, 1)).collect();
        items.push(enc.header_item(1, &vec![version; enc.shards.len()]));
        prop_assert_eq!(codec::decode(&d, rid((region + 1) % 3), rid(region), &items), Decoded::Record(Box::new(r)));
    }
}

#[test]
fn an_oversized_item_is_rejected_before_decoding() {
    let (d, mut items) = valid_items(10, 1);
    let last = items.len() - 1;
    items[last].insert(
        "pad".into(),
        AttributeValue::B(Blob::new(vec![0; codec::MAX_ITEM_BYTES])),
    );
    assert_eq!(
        codec::decode(&d, rid(0), rid(1), &items),
        Decoded::Rejected(Rejection::Oversized(codec::MAX_ITEM_BYTES))
    );
}

#[test]
fn a_missing_shard_is_inconsistent_not_rejected() {
    let (d, mut items) = valid_items(600, 4);
    items.remove(1);
    assert_eq!(
        codec::decode(&d, rid(0), rid(1), &items),
        Decoded::Inconsistent("shard 1 of version 4 is missing".into())
    );
}

#[test]
fn a_header_naming_an_unconfigured_region_with_data_is_rejected() {
    let (d, items) = valid_items(10, 1);
    let mut small = (*d).clone();
    small.regions.truncate(2);
    assert!(matches!(
        codec::decode(&small, rid(0), rid(1), &items),
        Decoded::Rejected(Rejection::Invalid(
            shareplane_core::RecordError::Contradiction { limit: None, .. }
        ))
    ));
}

#[test]
fn kept_keys_round_trip_and_only_the_canonical_spelling_is_read() {
    assert_eq!(codec::kept_sk(7), "prev#0000000007");
    assert_eq!(codec::kept_shard_sk(7, 12), "prev#0000000007#0012");
    assert_eq!(
        codec::parse_kept_sk(&codec::kept_sk(1 << 32)),
        Some((1 << 32, None))
    );
    assert_eq!(
        codec::parse_kept_sk(&codec::kept_shard_sk(3, 4095)),
        Some((3, Some(4095)))
    );
    for odd in [
        "prev#7",
        "prev#000000007",
        "prev#0000000007#12",
        "prev#00000000x7",
        "prev#",
        "rec#0000",
        "prev#0000000007#0012#1",
        "prev#+000000007",
    ] {
        assert_eq!(codec::parse_kept_sk(odd), None, "{odd}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A record's items kept under its epoch and split again decode to the same record.
    #[test]
    fn kept_items_split_back_into_the_record(limits in 1usize..700, epoch in 1u64..1_000, region in 0usize..3) {
        let d = deployment(limits);
        let mut r = parts(&d, region, 5);
        set_epoch(&mut r, epoch);
        r.prev_final = if epoch == 1 { 0 } else { 4 };
        let r = RegionRecord::from_parts(r);
        let enc = codec::encode(&d, &r);
        let mut items: Vec<Item> = (0..enc.shards.len())
            .filter_map(|i| enc.shard_item(i, 3))
            .collect();
        items.push(enc.header_item(3, &vec![5; enc.shards.len()]));
        let kept = codec::keep(&items, epoch, 3);
        prop_assert_eq!(kept.len(), items.len());
        let mut all = kept;
        all.extend(items.iter().cloned());
        let sets = codec::split(all);
        prop_assert_eq!(sets.current.len(), items.len());
        prop_assert_eq!(sets.kept.keys().copied().collect::<Vec<_>>(), vec![epoch]);
        let me = rid((region + 1) % 3);
        let got = codec::decode_kept(&d, me, rid(region), epoch, &sets.kept[&epoch]);
        prop_assert_eq!(got, Decoded::Record(Box::new(r.clone())));
        let wrong = codec::decode_kept(&d, me, rid(region), epoch + 1, &sets.kept[&epoch]);
        prop_assert!(matches!(wrong, Decoded::Rejected(_)));
    }
}

/// A record written before schema 3 names no account epochs: an open account then belonged to
/// the writer's current epoch (a new epoch zeroed it) and a closed one to the epoch that closed
/// it, and that is what the reader derives.
#[test]
fn a_schema_2_record_reads_its_accounts_as_they_were_kept() {
    let d = deployment(20);
    let mut r = parts(&d, 1, 77);
    // Region 2 is closed (marked at its accounted epoch) by epoch 1; Region 0 is open.
    r.reclaims.0[2] = Some(shareplane_core::ReclaimMarkParts {
        epoch: r.peer_epochs.0[2],
        version: 5,
        by: 1,
    });
    r.reclaims.0[0] = None;
    r.account_epochs.0[0] = r.epoch;
    r.account_epochs.0[1] = r.epoch;
    r.account_epochs.0[2] = 1;
    let r = RegionRecord::from_parts(r);
    let enc = codec::encode(&d, &r);
    let mut items: Vec<Item> = (0..enc.shards.len())
        .filter_map(|i| enc.shard_item(i, 1))
        .collect();
    items.push(enc.header_item_of_schema(1, &vec![77; enc.shards.len()], 2));
    assert_eq!(
        codec::decode(&d, rid(0), rid(1), &items),
        Decoded::Record(Box::new(r.clone()))
    );
    // The same header as schema 3 without the account epochs is malformed, not misread.
    let last = items.len() - 1;
    items[last].insert("sv".into(), AttributeValue::N("3".into()));
    assert!(matches!(
        codec::decode(&d, rid(0), rid(1), &items),
        Decoded::Rejected(_)
    ));
}

#[test]
fn the_limits_digest_round_trips_and_a_header_without_it_is_unknown() {
    let d = deployment(10);
    let mut r = record(&d, 1, 5);
    r.stamp_limits_digest(shareplane_core::limits_digest(&d.limits));
    let enc = codec::encode(&d, &r);
    let mut items = stored(&enc);
    let decoded = |items: &[Item]| decode_as(&d, items, |r| r.limits_digest());
    assert_eq!(decoded(&items), Ok(r.limits_digest()));
    assert!(r.limits_digest().is_some());
    // A header of an older writer carries no digest: it decodes, as unknown.
    let last = items.len() - 1;
    items[last].remove(codec::DIGEST_ATTR);
    assert_eq!(decoded(&items), Ok(None));
    // One that is not a number is malformed, never misread.
    items[last].insert(codec::DIGEST_ATTR.into(), AttributeValue::N("-1".into()));
    assert!(decoded(&items).is_err_and(|e| e.contains("Malformed")));
}

#[test]
fn the_fenced_flag_round_trips_and_a_header_without_it_is_not_fenced() {
    let d = deployment(10);
    let mut r = parts(&d, 1, 5);
    r.fenced = true;
    let enc = codec::encode(&d, &RegionRecord::from_parts(r.clone()));
    let mut items = stored(&enc);
    let decoded = |items: &[Item]| decode_as(&d, items, |r| r.fenced());
    assert_eq!(decoded(&items), Ok(true));
    // An unfenced writer, or an older one, writes no attribute: not fenced.
    let last = items.len() - 1;
    items[last].remove(codec::FENCED_ATTR);
    assert_eq!(decoded(&items), Ok(false));
    r.fenced = false;
    let unfenced =
        codec::encode(&d, &RegionRecord::from_parts(r)).header_item(1, &vec![5; enc.shards.len()]);
    assert!(!unfenced.contains_key(codec::FENCED_ATTR));
    // One that is not a BOOL is malformed, never misread.
    items[last].insert(codec::FENCED_ATTR.into(), AttributeValue::N("1".into()));
    assert!(decoded(&items).is_err_and(|e| e.contains("Malformed")));
}

#[test]
fn what_the_writer_had_seen_round_trips_and_a_header_without_it_said_nothing() {
    pairs_round_trip(
        codec::SEEN_ATTR,
        |r| {
            r.seen.0[0] = (3, 41);
            r.seen.0[2] = (1, 7);
        },
        |r| r.seen = PerRegion::default(),
        |r| r.seen(),
    );
}

#[test]
fn what_the_writer_froze_round_trips_and_a_header_without_it_froze_nothing() {
    let d = deployment(10);
    let mut items = pairs_round_trip(
        codec::FROZEN_ATTR,
        |r| {
            r.seen.0[0] = (3, 41);
            r.frozen.0[0] = Some((3, 40));
        },
        |r| r.frozen = PerRegion::default(),
        |r| r.frozen(),
    );
    // A freeze of a record its writer does not say it saw is rejected, never adopted.
    let last = items.len() - 1;
    let mut ahead = Vec::new();
    for (e, v) in [(3u8, 42u8), (0, 0), (0, 0)] {
        ahead.extend([e, v]);
    }
    items[last].insert(codec::FROZEN_ATTR.into(), AttributeValue::B(ahead.into()));
    let decoded = decode_as(&d, &items, |r| r.frozen());
    assert!(
        decoded
            .as_ref()
            .is_err_and(|e| e.contains("froze a record")),
        "{decoded:?}"
    );
}

/// An optional header attribute of one `(epoch, version)` pair per Region (`attr`): what `set`
/// puts in a record round trips (read back by `get`); a header without it, from an older
/// writer, decodes to the default (it said nothing); a record that `clear` leaves with nothing
/// to say writes none; a truncated blob, or one that is not binary, is malformed, never misread.
/// Returns the stored items, attribute included.
fn pairs_round_trip<T: PartialEq + std::fmt::Debug + Default>(
    attr: &str,
    set: impl Fn(&mut RegionRecordParts),
    clear: impl Fn(&mut RegionRecordParts),
    get: impl Fn(&RegionRecord) -> T,
) -> Vec<Item> {
    let d = deployment(10);
    let mut r = parts(&d, 1, 5);
    set(&mut r);
    let record = RegionRecord::from_parts(r.clone());
    let enc = codec::encode(&d, &record);
    let mut items = stored(&enc);
    let decoded = |items: &[Item]| decode_as(&d, items, &get);
    assert_eq!(decoded(&items), Ok(get(&record)));
    let last = items.len() - 1;
    let written = items[last].remove(attr).expect("written");
    assert_eq!(decoded(&items), Ok(T::default()));
    clear(&mut r);
    let none =
        codec::encode(&d, &RegionRecord::from_parts(r)).header_item(1, &vec![5; enc.shards.len()]);
    assert!(!none.contains_key(attr));
    let AttributeValue::B(b) = &written else {
        panic!("{attr} is not binary")
    };
    let cut = b.as_ref()[..b.as_ref().len() - 1].to_vec();
    items[last].insert(attr.into(), AttributeValue::B(cut.into()));
    assert!(decoded(&items).is_err_and(|e| e.contains("Malformed")));
    items[last].insert(attr.into(), AttributeValue::N("1".into()));
    assert!(decoded(&items).is_err_and(|e| e.contains("Malformed")));
    items[last].insert(attr.into(), written);
    items
}

/// The items of `enc` as one write stores them (shards and header, all at version 5).
fn stored(enc: &codec::Encoded) -> Vec<Item> {
    let mut items: Vec<Item> = (0..enc.shards.len())
        .filter_map(|i| enc.shard_item(i, 1))
        .collect();
    items.push(enc.header_item(1, &vec![5; enc.shards.len()]));
    items
}

/// What `field` reads from the record `items` decode to, or why they do not.
fn decode_as<T>(
    d: &shareplane_core::Deployment,
    items: &[Item],
    field: impl Fn(&shareplane_core::RegionRecord) -> T,
) -> Result<T, String> {
    match codec::decode(d, rid(0), rid(1), items) {
        Decoded::Record(r) => Ok(field(&r)),
        other => Err(format!("{other:?}")),
    }
}
