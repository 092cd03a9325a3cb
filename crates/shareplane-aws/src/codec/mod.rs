//! The versioned codec between a core [`RegionRecord`] and the DynamoDB items that hold it.
//!
//! # Items (schema 4)
//!
//! All items of one Region share the partition key `pk` = the Region's name; only that Region
//! writes them.
//!
//! | `sk`         | attributes                                                            |
//! |--------------|-----------------------------------------------------------------------|
//! | `rec`        | `sv` (N, schema), `ver` (N, record version), `tok` (N, writer token), `h` (B, header), `ld` (N, optional: the digest of the writer's limits), `fz` (BOOL, optional: fenced), `sn` (B, optional: the newest record of each Region the writer held) |
//! | `rec#0000`…  | `sv`, `ver` (N, the record version the shard was last written at), `tok`, `d` (B, limits) |
//! | `lease`      | written by the store, not by this codec                               |
//! | `prev#0000000007`, `prev#0000000007#0000`… | a copy of the header and shards of the Region's last record of its ended epoch 7 (attributes as above), kept until every heir has closed that epoch ([`crate::dynamo`]) |
//!
//! The header blob `h` holds the writer's Region names (so that per-Region columns are mapped by
//! name, not by position), epoch, write time, the version of the previous epoch's last record,
//! peer epochs, reclaim marks (peer epoch, basis version, closing epoch) and, for each shard, the
//! record version at which that shard was last written; since schema 3 also the own epoch each
//! peer's account belongs to (`account_epochs`; a schema-2 header derives it: the closing epoch
//! of a closed account, else the writer's epoch). Schema 3 shards add, per limit, the estate debt
//! taken on from each peer (none before); schema 4 shards add what the writer took of each
//! switched-past estate's grants (`left`; zero before). Schema 1 (no previous-epoch version, marks
//! without the closing epoch) is still read for records of epoch 1; a schema-1 record of a later
//! epoch is rejected, since the estate of its previous epoch could not be closed exactly. A shard blob `d` holds the limits whose
//! index in the writer's deployment falls in the shard's range of [`LIMITS_PER_SHARD`], keyed by
//! limit id; limits still at their default (unadopted) are left out. All integers are unsigned
//! LEB128 varints, so a value can never be negative or non-finite once decoded.
//!
//! A reader accepts a record only when every shard the header names is present **at the version
//! the header names**. Shards replicate independently of the header, so a reader in another Region
//! can see a half-updated set; it then reports [`Decoded::Inconsistent`] and the store serves the
//! last consistent record (the Region simply looks not updated yet).
//!
//! Every item carries `sv`; an item with a higher schema is rejected with
//! [`Rejection::FutureSchema`], never misread.
//!
//! A kept set (`prev#E…`) is decoded exactly like the current one ([`split`] maps its sort keys
//! back to `rec`/`rec#NNNN`), with the same consistency rule, and must hold a record of epoch `E`.
//! Only the canonical spelling of a kept key (10-digit epoch, 4-digit shard) is read; any other
//! `prev…` key is ignored like every unknown sort key.

mod wire;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use shareplane_core::{
    Deployment, LimitRecord, LimitRecordParts, PerRegion, ReclaimMark, RegionId, RegionRecord,
    RegionRecordParts,
};
use shareplane_store::Rejection;
use std::collections::{BTreeMap, HashMap};
use wire::{decode_shard, parse_header, place, put_limit, put_varint, Reader};

/// The schema this code writes and the newest it reads.
pub const SCHEMA_VERSION: u32 = 4;
/// The sort key of a Region's record header.
pub const HEADER_SK: &str = "rec";
/// The header attribute holding the digest of the writer's limits (N, optional: a header
/// without it, from an older writer, decodes to an unknown digest; older readers ignore it).
pub const DIGEST_ATTR: &str = "ld";
/// The header attribute saying that the writer was fenced (BOOL, present only when true: a
/// header without it, from an older writer or an unfenced one, decodes to not fenced; older
/// readers ignore it).
pub const FENCED_ATTR: &str = "fz";
/// The header attribute holding, per Region of the header, `(epoch, version)` of the newest
/// record of it the writer held (B: varint pairs in the header's Region order; optional: a
/// header without it, from an older writer, decodes to `(0, 0)` everywhere, "did not say";
/// older readers ignore it).
pub const SEEN_ATTR: &str = "sn";
/// The header attribute holding, per Region of the header, `(epoch, version)` of the record of
/// it at which the writer froze it (B: varint pairs in the header's Region order, `(0, 0)` where
/// it froze nothing; optional: a header without it, from an older writer or one that froze
/// nobody, decodes to no freeze; older readers ignore it, and an heir waits for a freeze from
/// a Region that never says one, so roll an upgrade out while no Region is silent).
pub const FROZEN_ATTR: &str = "fr";
/// The sort key of a Region's writer lease.
pub const LEASE_SK: &str = "lease";
/// Limits per shard, by deployment index. At most ~450 bytes per limit (a 128-byte id and every
/// amount at its largest, 8 Regions) keeps a shard under 120 KB, well below DynamoDB's 400 KB item
/// limit; a typical limit takes 40-80 bytes, so a typical shard is 10-20 KB.
pub const LIMITS_PER_SHARD: usize = 256;
/// DynamoDB's item size limit; anything larger is rejected as oversized before decoding.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;
/// The most shards a header may name (10^6 limits); a larger count is malformed.
pub const MAX_SHARDS: usize = 4096;

/// One DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// A record encoded for writing: the header's fields and one blob per shard.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    pub region: String,
    pub version: u64,
    /// The shard blobs, shard `i` holding deployment limits `i*LIMITS_PER_SHARD..`.
    pub shards: Vec<Vec<u8>>,
    epoch: u64,
    written_at_ms: u64,
    prev_final: u64,
    peer_epochs: Vec<u64>,
    reclaims: Vec<Option<ReclaimMark>>,
    account_epochs: Vec<u64>,
    seen: Vec<(u64, u64)>,
    frozen: Vec<(u64, u64)>,
    regions: Vec<String>,
    limits_digest: Option<u64>,
    fenced: bool,
}

/// What the items of one Region decode to.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    /// No header item: the Region never wrote.
    Absent,
    Record(Box<RegionRecord>),
    /// A shard the header names is missing or at another version (a write still replicating).
    Inconsistent(String),
    Rejected(Rejection),
}

/// The sort key of shard `i`.
pub fn shard_sk(i: usize) -> String {
    format!("{HEADER_SK}#{i:04}")
}

/// The shard a current sort key (`rec#NNNN`) names, as [`decode`] reads it.
fn shard_index(sk: &str) -> Option<usize> {
    sk.strip_prefix("rec#")?.parse().ok()
}

/// The first sort key of the kept sets: every kept key starts with it.
pub const KEPT_PREFIX: &str = "prev#";

/// The sort key of the kept header of ended epoch `epoch`.
pub fn kept_sk(epoch: u64) -> String {
    format!("{KEPT_PREFIX}{epoch:010}")
}

/// The sort key of kept shard `i` of ended epoch `epoch`.
pub fn kept_shard_sk(epoch: u64, i: usize) -> String {
    format!("{KEPT_PREFIX}{epoch:010}#{i:04}")
}

/// The epoch (and the shard, `None` for the header) of a kept sort key in its canonical spelling.
pub fn parse_kept_sk(sk: &str) -> Option<(u64, Option<usize>)> {
    let rest = sk.strip_prefix(KEPT_PREFIX)?;
    let (epoch, shard) = match rest.split_once('#') {
        Some((e, i)) => (e, Some(i)),
        None => (rest, None),
    };
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(epoch, 10) || !shard.is_none_or(|i| digits(i, 4)) {
        return None;
    }
    let epoch = epoch.parse().ok()?;
    match shard {
        None => Some((epoch, None)),
        Some(i) => Some((epoch, Some(i.parse().ok()?))),
    }
}

/// One Region's items, split into its current record's items and the kept sets of its ended
/// epochs (with their sort keys mapped back to `rec`/`rec#NNNN`, ready for [`decode`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sets {
    /// Every item that is not a kept one (the lease and unknown keys included: [`decode`] skips
    /// them, and reports an item without a string sort key).
    pub current: Vec<Item>,
    /// By ended epoch, in epoch order.
    pub kept: BTreeMap<u64, Vec<Item>>,
    /// The stored sort keys of each kept set, as they are in the table (to delete them).
    pub kept_keys: BTreeMap<u64, Vec<String>>,
}

/// Splits one Region's items into the current record's and the kept sets.
pub fn split(items: Vec<Item>) -> Sets {
    let mut sets = Sets::default();
    for mut item in items {
        let kept = match item.get("sk") {
            Some(AttributeValue::S(sk)) => parse_kept_sk(sk).map(|k| (k, sk.clone())),
            _ => None,
        };
        let Some(((epoch, shard), stored)) = kept else {
            sets.current.push(item);
            continue;
        };
        let sk = match shard {
            None => HEADER_SK.to_string(),
            Some(i) => shard_sk(i),
        };
        item.insert("sk".into(), AttributeValue::S(sk));
        sets.kept.entry(epoch).or_default().push(item);
        sets.kept_keys.entry(epoch).or_default().push(stored);
    }
    sets
}

/// Copies of a record's stored items (`rec` and `rec#NNNN`, as read) under the kept keys of its
/// epoch `epoch`, carrying writer token `token`. Other items (the lease, unknown keys) are left.
pub fn keep(items: &[Item], epoch: u64, token: u64) -> Vec<Item> {
    let mut out = Vec::new();
    for item in items {
        let Some(AttributeValue::S(sk)) = item.get("sk") else {
            continue;
        };
        let kept = if sk == HEADER_SK {
            kept_sk(epoch)
        } else if let Some(i) = shard_index(sk) {
            kept_shard_sk(epoch, i)
        } else {
            continue;
        };
        let mut copy = item.clone();
        copy.insert("sk".into(), AttributeValue::S(kept));
        copy.insert("tok".into(), AttributeValue::N(token.to_string()));
        out.push(copy);
    }
    out
}

/// Decodes the kept set of Region `region`'s ended epoch `epoch` (items as [`split`] gives
/// them). As [`decode`], and the record must be of epoch `epoch`.
pub fn decode_kept(
    d: &Deployment,
    me: RegionId,
    region: RegionId,
    epoch: u64,
    items: &[Item],
) -> Decoded {
    match decode(d, me, region, items) {
        Decoded::Record(r) if r.epoch() != epoch => Decoded::Rejected(malformed(format!(
            "the items kept for epoch {epoch} hold a record of epoch {}",
            r.epoch()
        ))),
        other => other,
    }
}

/// Encodes a Region's own record. Limits and Region columns follow `d`'s order.
pub fn encode(d: &Deployment, record: &RegionRecord) -> Encoded {
    let n = d.n();
    let shard_count = d.limits.len().div_ceil(LIMITS_PER_SHARD).max(1);
    let mut shards = Vec::with_capacity(shard_count);
    for s in 0..shard_count {
        let lo = s * LIMITS_PER_SHARD;
        let hi = (lo + LIMITS_PER_SHARD).min(record.limits().len());
        let entries: Vec<(&str, &LimitRecord)> = (lo..hi)
            .filter_map(|i| {
                let l = record.limits().get(i)?;
                let spec = d.limits.get(i)?;
                (*l != LimitRecord::default()).then_some((spec.id.as_str(), l))
            })
            .collect();
        let mut out = Vec::with_capacity(entries.len() * 48 + 4);
        put_varint(&mut out, entries.len() as u64);
        for (id, l) in entries {
            put_limit(&mut out, id, l, n);
        }
        shards.push(out);
    }
    Encoded {
        region: d.region_name(record.region()).to_string(),
        version: record.version(),
        shards,
        epoch: record.epoch(),
        written_at_ms: record.written_at_ms(),
        prev_final: record.prev_final(),
        peer_epochs: record.peer_epochs().0[..n].to_vec(),
        reclaims: record.reclaims().0[..n].to_vec(),
        account_epochs: record.account_epochs().0[..n].to_vec(),
        seen: record.seen().0[..n].to_vec(),
        frozen: record.frozen().0[..n]
            .iter()
            .map(|f| f.unwrap_or((0, 0)))
            .collect(),
        regions: d.regions.clone(),
        limits_digest: record.limits_digest(),
        fenced: record.fenced(),
    }
}

impl Encoded {
    /// The header item, naming `shard_versions[i]` as the version of shard `i`.
    pub fn header_item(&self, token: u64, shard_versions: &[u64]) -> Item {
        self.header_item_of_schema(token, shard_versions, SCHEMA_VERSION)
    }

    /// The header item as schema `schema` (2 or later) writes it: what an older daemon wrote.
    pub fn header_item_of_schema(&self, token: u64, shard_versions: &[u64], schema: u32) -> Item {
        let mut h = Vec::with_capacity(64 + 4 * shard_versions.len());
        put_varint(&mut h, self.regions.len() as u64);
        for name in &self.regions {
            put_varint(&mut h, name.len() as u64);
            h.extend_from_slice(name.as_bytes());
        }
        put_varint(&mut h, self.epoch);
        put_varint(&mut h, self.written_at_ms);
        put_varint(&mut h, self.prev_final);
        for e in &self.peer_epochs {
            put_varint(&mut h, *e);
        }
        for m in &self.reclaims {
            match m {
                None => put_varint(&mut h, 0),
                Some(m) => {
                    put_varint(&mut h, 2);
                    put_varint(&mut h, m.epoch());
                    put_varint(&mut h, m.version());
                    put_varint(&mut h, m.by());
                }
            }
        }
        if schema >= 3 {
            for e in &self.account_epochs {
                put_varint(&mut h, *e);
            }
        }
        put_varint(&mut h, shard_versions.len() as u64);
        for v in shard_versions {
            put_varint(&mut h, *v);
        }
        let mut item = self.base(HEADER_SK.to_string(), self.version, token);
        item.insert("h".into(), AttributeValue::B(Blob::new(h)));
        item.insert("sv".into(), AttributeValue::N(schema.to_string()));
        if let Some(digest) = self.limits_digest {
            item.insert(DIGEST_ATTR.into(), AttributeValue::N(digest.to_string()));
        }
        if self.fenced {
            item.insert(FENCED_ATTR.into(), AttributeValue::Bool(true));
        }
        put_pairs(&mut item, SEEN_ATTR, &self.seen);
        put_pairs(&mut item, FROZEN_ATTR, &self.frozen);
        item
    }

    /// Shard `i`'s item, written at this record's version.
    pub fn shard_item(&self, i: usize, token: u64) -> Option<Item> {
        let blob = self.shards.get(i)?;
        let mut item = self.base(shard_sk(i), self.version, token);
        item.insert("d".into(), AttributeValue::B(Blob::new(blob.clone())));
        Some(item)
    }

    fn base(&self, sk: String, version: u64, token: u64) -> Item {
        HashMap::from([
            ("pk".to_string(), AttributeValue::S(self.region.clone())),
            ("sk".to_string(), AttributeValue::S(sk)),
            (
                "sv".to_string(),
                AttributeValue::N(SCHEMA_VERSION.to_string()),
            ),
            ("ver".to_string(), AttributeValue::N(version.to_string())),
            ("tok".to_string(), AttributeValue::N(token.to_string())),
        ])
    }
}

/// The size DynamoDB bills for an item: attribute names plus values (numbers approximated by
/// their text length, which is never less than DynamoDB's own count).
pub fn item_bytes(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + value_bytes(v)).sum()
}

fn value_bytes(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(l) | AttributeValue::Ns(l) => l.iter().map(String::len).sum(),
        AttributeValue::Bs(l) => l.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + value_bytes(v)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, v)| 1 + k.len() + value_bytes(v))
                .sum::<usize>()
        }
        _ => 0,
    }
}

/// Decodes the items of Region `region` (all items whose `pk` is its name; the lease and unknown
/// sort keys are ignored) as seen by Region `me`. Never panics, whatever the items hold.
/// A record of another Region is also checked with [`RegionRecord::validate`].
pub fn decode(d: &Deployment, me: RegionId, region: RegionId, items: &[Item]) -> Decoded {
    match decode_inner(d, region, items) {
        Ok(Some(record)) => {
            if region != me {
                if let Err(e) = record.validate(d, me) {
                    return Decoded::Rejected(Rejection::Invalid(e));
                }
            }
            Decoded::Record(Box::new(record))
        }
        Ok(None) => Decoded::Absent,
        Err(Failure::Rejected(r)) => Decoded::Rejected(r),
        Err(Failure::Inconsistent(why)) => Decoded::Inconsistent(why),
    }
}

enum Failure {
    Rejected(Rejection),
    Inconsistent(String),
}

impl From<Rejection> for Failure {
    fn from(r: Rejection) -> Failure {
        Failure::Rejected(r)
    }
}

fn malformed(why: impl Into<String>) -> Rejection {
    Rejection::Malformed(why.into())
}

fn decode_inner(
    d: &Deployment,
    region: RegionId,
    items: &[Item],
) -> Result<Option<RegionRecord>, Failure> {
    let (header, shards) = sort_items(d.region_name(region), items)?;
    let Some(header) = header else {
        return Ok(None);
    };
    let h = parse_header(d, header)?;
    let limits = decode_limits(d, &h, &shards)?;
    // The codec's door into the core; `decode` and the reading coordinator check what it holds.
    Ok(Some(RegionRecord::from_parts(RegionRecordParts {
        region,
        epoch: h.epoch,
        version: h.version,
        written_at_ms: h.written_at_ms,
        prev_final: h.prev_final,
        peer_epochs: h.peer_epochs,
        account_epochs: h.account_epochs,
        reclaims: h.reclaims,
        seen: parse_pairs(header, SEEN_ATTR, &h.columns)?,
        frozen: PerRegion(
            parse_pairs(header, FROZEN_ATTR, &h.columns)?
                .0
                .map(|f| (f != (0, 0)).then_some(f)),
        ),
        limits,
        limits_digest: match header.get(DIGEST_ATTR) {
            None => None,
            Some(_) => Some(number(header, DIGEST_ATTR)?),
        },
        fenced: match header.get(FENCED_ATTR) {
            None => false,
            Some(AttributeValue::Bool(b)) => *b,
            Some(_) => return Err(malformed(format!("{FENCED_ATTR} is not a BOOL")).into()),
        },
    })))
}

/// A Region's header item and its shard items by index.
type Sorted<'a> = (Option<&'a Item>, HashMap<usize, &'a Item>);

/// The header item and the shard items (by index) of Region `name` among `items`, each checked
/// for size, partition key and schema; other sort keys (the lease, later features) are skipped.
fn sort_items<'a>(name: &str, items: &'a [Item]) -> Result<Sorted<'a>, Failure> {
    let mut header = None;
    let mut shards: HashMap<usize, &Item> = HashMap::new();
    for item in items {
        let Some(AttributeValue::S(sk)) = item.get("sk") else {
            return Err(malformed("an item without a string sort key").into());
        };
        let slot = if sk == HEADER_SK {
            None
        } else if let Some(i) = shard_index(sk) {
            Some(i)
        } else {
            continue; // the lease, or an item of a later feature: not part of the record
        };
        if item_bytes(item) > MAX_ITEM_BYTES {
            return Err(Rejection::Oversized(MAX_ITEM_BYTES).into());
        }
        match item.get("pk") {
            Some(AttributeValue::S(pk)) if pk == name => {}
            _ => {
                return Err(
                    malformed(format!("item {sk:?} does not belong to Region {name}")).into(),
                )
            }
        }
        check_schema(item)?;
        match slot {
            None => header = Some(item),
            Some(i) => {
                if shards.insert(i, item).is_some() {
                    return Err(malformed(format!("shard {i} appears twice")).into());
                }
            }
        }
    }
    Ok((header, shards))
}

/// The limits of every shard the header names, each at the version the header names.
fn decode_limits(
    d: &Deployment,
    h: &wire::Header,
    shards: &HashMap<usize, &Item>,
) -> Result<Vec<LimitRecordParts>, Failure> {
    let mut limits = vec![LimitRecordParts::default(); d.limits.len()];
    let mut seen = vec![false; d.limits.len()];
    // `Deployment::limit_index` searches linearly; 10,000 limits need a map.
    let index: HashMap<&str, usize> = d
        .limits
        .iter()
        .enumerate()
        .map(|(i, l)| (l.id.as_str(), i))
        .collect();
    for (i, want) in h.shard_versions.iter().enumerate() {
        let Some(item) = shards.get(&i) else {
            return Err(Failure::Inconsistent(format!(
                "shard {i} of version {want} is missing"
            )));
        };
        let got = number(item, "ver")?;
        if got != *want {
            return Err(Failure::Inconsistent(format!(
                "shard {i} is at version {got}, the header names {want}"
            )));
        }
        let blob = blob(item, "d")?;
        let schema = number(item, "sv")?;
        decode_shard(&index, &h.columns, blob, schema, &mut limits, &mut seen)?;
    }
    Ok(limits)
}

/// Writes `pairs` (one per Region of the header) as the binary attribute `attr`, unless every
/// pair is `(0, 0)` (see [`SEEN_ATTR`], [`FROZEN_ATTR`]).
fn put_pairs(item: &mut Item, attr: &str, pairs: &[(u64, u64)]) {
    if pairs.iter().all(|p| *p == (0, 0)) {
        return;
    }
    let mut b = Vec::with_capacity(4 * pairs.len());
    for (e, v) in pairs {
        put_varint(&mut b, *e);
        put_varint(&mut b, *v);
    }
    item.insert(attr.into(), AttributeValue::B(Blob::new(b)));
}

/// The `sn` or `fr` attribute (`attr`) of a header whose Regions are `columns` (see
/// [`SEEN_ATTR`], [`FROZEN_ATTR`]): `(0, 0)` for every Region when absent.
fn parse_pairs(
    header: &Item,
    attr: &str,
    columns: &[Option<RegionId>],
) -> Result<PerRegion<(u64, u64)>, Rejection> {
    let mut seen = PerRegion::default();
    if header.get(attr).is_none() {
        return Ok(seen);
    }
    let mut r = Reader::new(blob(header, attr)?);
    for col in columns {
        let pair = (r.varint()?, r.varint()?);
        place(&mut seen, *col, pair, (0, 0))?;
    }
    r.end()?;
    Ok(seen)
}

fn check_schema(item: &Item) -> Result<(), Rejection> {
    let sv = number(item, "sv")?;
    if sv > u64::from(SCHEMA_VERSION) {
        return Err(Rejection::FutureSchema(
            u32::try_from(sv).unwrap_or(u32::MAX),
        ));
    }
    if sv == 0 {
        return Err(malformed("schema version 0"));
    }
    Ok(())
}

/// Reads a number attribute as an unsigned integer, naming negative and non-integer values.
fn number(item: &Item, name: &str) -> Result<u64, Rejection> {
    let Some(AttributeValue::N(text)) = item.get(name) else {
        return Err(malformed(format!(
            "attribute {name} is missing or not a number"
        )));
    };
    let text = text.trim();
    if let Ok(v) = text.parse::<u64>() {
        return Ok(v);
    }
    match text.parse::<f64>() {
        Ok(f) if !f.is_finite() => Err(malformed(format!("attribute {name} is not finite"))),
        Ok(f) if f < 0.0 => Err(malformed(format!("attribute {name} is negative"))),
        _ => Err(malformed(format!(
            "attribute {name} is not an unsigned integer: {text:.40}"
        ))),
    }
}

fn blob<'a>(item: &'a Item, name: &str) -> Result<&'a [u8], Rejection> {
    match item.get(name) {
        Some(AttributeValue::B(b)) => Ok(b.as_ref()),
        _ => Err(malformed(format!(
            "attribute {name} is missing or not binary"
        ))),
    }
}
