//! The shared limits ([`LimitsDoc`]) in the records' table: one document that
//! `shareplane limits apply` writes once and every Region's daemon reads from its own replica.
//!
//! # Items
//!
//! All under the partition key [`LIMITS_PK`] (`#limits`), which no Region's items can share: a
//! Region's partition key is its name, and the store refuses a Region name that starts with `#`.
//!
//! | `sk` | attributes |
//! |------|------------|
//! | `head` | `ver` (N, version), `dig` (S, 16 lowercase hex digits: FNV-1a 64 of the text), `parts` (N), `bytes` (N, text length), `by` (S, applied by), `at` (N, applied at, Unix ms) |
//! | `v#<ver, 20 digits>#<dig>#<index, 4 digits>` | `txt` (S): part `index` of the text |
//!
//! The text is cut into parts of at most [`MAX_PART_BYTES`] at UTF-8 character boundaries, so
//! that every part is a DynamoDB string on its own and a 16 MiB document fits in at most
//! [`MAX_LIMITS_PARTS`] items well under DynamoDB's 400 KB.
//!
//! # Why the digest is in the part keys
//!
//! A global table resolves concurrent writes to one item by last writer wins, and conditions are
//! checked on the local replica only, so two applies of the same version from two Regions can
//! both succeed locally. Keyed by version alone, their parts could interleave item by item; keyed
//! by version and digest, each head names only parts that its own writer wrote, and whichever
//! head wins finds all of its parts.
//!
//! # Writing
//!
//! A write refuses a text beyond [`MAX_LIMITS_DOC_BYTES`] before any call, and a version not
//! above the stored head's (read consistently) before writing any part. Then it puts every part,
//! and only then the head, conditionally (`attribute_not_exists(pk) OR ver < :v`): a reader that
//! sees the new head on the writer's replica finds every part there. A refused head means the
//! parts just written are named by nothing, so they are deleted (best effort), unless the stored
//! head has the same version and digest: then they are the very items it names (an apply
//! retried after it had succeeded) and must stay. A stored head that does not parse refuses the
//! write too ([`StoreError::Fatal`]): nothing is written over what no reader can use, and an
//! operator who deletes that head starts over.
//!
//! After a successful head put, the parts of versions lower than the *previous* head's are
//! deleted, at most [`MAX_COLLECT_PER_WRITE`] per write and best effort: the previous version's
//! parts stay, so that a reader in the middle of reading them can finish; what one write leaves
//! (or an aborted apply left) the next write collects.
//!
//! # Reading
//!
//! A read gets the head from the local replica (not consistently: that replica is what the
//! daemon runs on), then queries the parts the head names. Parts replicate item by item in no
//! promised order, so a head may arrive before its parts: when their count, indexes, length or
//! digest do not match the head, the read says [`LimitsRead::Incomplete`] and nothing of the text
//! is used. A head that can never be whole (a missing or mistyped attribute, sizes beyond the
//! maximum) is a [`StoreError::Fatal`] naming the attribute. The last complete text is kept in
//! memory, so a daemon reading every period queries the parts only when the head changes.

use crate::client::{describe, store_error};
use crate::codec::{item_bytes, Item};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use shareplane_store::{LimitsDoc, LimitsRead, StoreError, MAX_LIMITS_DOC_BYTES};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// The partition key of the shared limits' items (a Region's name never starts with `#`).
pub const LIMITS_PK: &str = "#limits";
/// The sort key of the head item.
pub const HEAD_SK: &str = "head";
/// Every part's sort key starts with this.
pub const PART_PREFIX: &str = "v#";
/// The most text bytes one part holds: with its keys a part item stays well under DynamoDB's
/// 400 KB item limit.
pub const MAX_PART_BYTES: usize = 350_000;
/// The most parts a document may have: a cut at a character boundary leaves at most 3 bytes of a
/// full part behind, so [`MAX_LIMITS_DOC_BYTES`] needs at most this many.
pub const MAX_LIMITS_PARTS: usize = MAX_LIMITS_DOC_BYTES.div_ceil(MAX_PART_BYTES - 3);
/// Deletes of older versions' parts per write.
pub const MAX_COLLECT_PER_WRITE: usize = 64;
/// Query pages per read of one version's parts: each page holds at least one part.
const MAX_PART_PAGES: usize = MAX_LIMITS_PARTS + 1;
/// Query pages per search for older parts to delete (a page of 1 MB holds 2 full parts).
const MAX_COLLECT_PAGES: usize = MAX_COLLECT_PER_WRITE;

const HEAD_CONDITION: &str = "attribute_not_exists(pk) OR ver < :v";

/// The last complete document a store read, so that an unchanged head costs one `GetItem`.
#[derive(Default)]
pub(crate) struct Seen(Mutex<Option<(u64, LimitsDoc)>>);

impl Seen {
    /// The remembered text, if it is the one `head` names.
    fn get(&self, head: &Head) -> Option<String> {
        let seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        seen.as_ref()
            .filter(|(digest, doc)| {
                doc.version == head.version
                    && *digest == head.digest
                    && doc.text.len() == head.bytes
            })
            .map(|(_, doc)| doc.text.clone())
    }

    fn set(&self, digest: u64, doc: &LimitsDoc) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((digest, doc.clone()));
    }
}

/// Reads the newest shared limits on the replica `client` reaches.
pub(crate) async fn read(
    client: &Client,
    table: &str,
    seen: &Seen,
) -> Result<LimitsRead, StoreError> {
    let Some(head) = get_head(client, table, false).await? else {
        return Ok(LimitsRead::Absent);
    };
    if let Some(text) = seen.get(&head) {
        return Ok(LimitsRead::Complete(head.doc(text)));
    }
    let items = query_parts(client, table, &head).await?;
    match assemble(&head, &items) {
        Ok(text) => {
            let doc = head.doc(text);
            seen.set(head.digest, &doc);
            Ok(LimitsRead::Complete(doc))
        }
        Err(why) => {
            tracing::debug!(version = head.version, %why, "shared limits not whole on this replica yet");
            Ok(LimitsRead::Incomplete {
                version: head.version,
            })
        }
    }
}

/// Writes `doc` as the newest shared limits (see the module doc) and returns the write units the
/// successful puts and deletes consumed.
pub(crate) async fn write(
    client: &Client,
    table: &str,
    doc: &LimitsDoc,
) -> Result<u64, StoreError> {
    if doc.text.len() > MAX_LIMITS_DOC_BYTES {
        return Err(StoreError::Fatal(format!(
            "the limits document is {} bytes, more than {MAX_LIMITS_DOC_BYTES}",
            doc.text.len()
        )));
    }
    if let Some(stored) = get_head(client, table, true).await? {
        if stored.version >= doc.version {
            return Err(conflict(doc.version, Some(stored.version)));
        }
    }
    let digest = doc.digest();
    let parts = split(&doc.text, MAX_PART_BYTES);
    let mut units = 0;
    let mut written = Vec::with_capacity(parts.len());
    for (i, text) in parts.iter().enumerate() {
        let item = part_item(doc.version, digest, i, text);
        let bytes = item_bytes(&item);
        let put = client.put_item().table_name(table).set_item(Some(item));
        put.send()
            .await
            .map_err(|e| store_error("PutItem (shared limits part)", e))?;
        units += plain_units(bytes);
        written.push(part_sk(doc.version, digest, i));
    }
    let head = head_item(doc, digest, parts.len());
    units += plain_units(item_bytes(&head));
    let previous = match put_head(client, table, head, doc.version).await {
        Ok(previous) => previous,
        Err(HeadRefused::Refused(stored)) => {
            discard(
                client,
                table,
                doc.version,
                digest,
                stored.as_ref(),
                &written,
            )
            .await;
            return Err(conflict(doc.version, stored.map(|h| h.0)));
        }
        Err(HeadRefused::Failed(e)) => return Err(e),
    };
    if let Some(below) = previous {
        units += collect(client, table, below).await;
    }
    Ok(units)
}

/// The fields of a well-formed head.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Head {
    version: u64,
    digest: u64,
    parts: usize,
    bytes: usize,
    by: String,
    at_ms: u64,
}

impl Head {
    fn doc(&self, text: String) -> LimitsDoc {
        LimitsDoc {
            version: self.version,
            text,
            applied_by: self.by.clone(),
            applied_at_ms: self.at_ms,
        }
    }

    /// The sort key prefix of this version's parts.
    fn part_prefix(&self) -> String {
        part_prefix(self.version, self.digest)
    }
}

/// Why a head put did not land.
enum HeadRefused {
    /// The condition failed; the stored head's version and digest when they could be learnt.
    Refused(Option<(u64, u64)>),
    Failed(StoreError),
}

fn conflict(version: u64, stored: Option<u64>) -> StoreError {
    match stored {
        Some(s) => StoreError::Conflict(format!(
            "limits version {version} is not higher than the stored {s}"
        )),
        None => StoreError::Conflict(format!(
            "limits version {version} is not higher than the stored one"
        )),
    }
}

/// Write units of a plain (non-transactional) put of `bytes`: 1 per started KB. Deletes are
/// counted as 1 KB, as in the record writes ([`crate::DynamoStore::write_units`]).
fn plain_units(bytes: usize) -> u64 {
    bytes.div_ceil(1024).max(1) as u64
}

/// `text` cut into pieces of at most `max` bytes (at least 4, so that every character fits), each
/// ending at a character boundary; none for an empty text.
fn split(text: &str, max: usize) -> Vec<&str> {
    let max = max.max(4);
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(max);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (part, tail) = rest.split_at(cut);
        parts.push(part);
        rest = tail;
    }
    parts
}

fn part_prefix(version: u64, digest: u64) -> String {
    format!("{PART_PREFIX}{version:020}#{digest:016x}#")
}

/// The sort key of part `index` of the text of `version` with `digest`.
pub fn part_sk(version: u64, digest: u64, index: usize) -> String {
    format!("{}{index:04}", part_prefix(version, digest))
}

fn key(sk: &str) -> Item {
    HashMap::from([
        ("pk".to_string(), AttributeValue::S(LIMITS_PK.to_string())),
        ("sk".to_string(), AttributeValue::S(sk.to_string())),
    ])
}

fn num(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn part_item(version: u64, digest: u64, index: usize, text: &str) -> Item {
    let mut item = key(&part_sk(version, digest, index));
    item.insert("txt".into(), AttributeValue::S(text.to_string()));
    item
}

fn head_item(doc: &LimitsDoc, digest: u64, parts: usize) -> Item {
    let mut item = key(HEAD_SK);
    item.insert("ver".into(), num(doc.version));
    item.insert("dig".into(), AttributeValue::S(format!("{digest:016x}")));
    item.insert("parts".into(), num(parts as u64));
    item.insert("bytes".into(), num(doc.text.len() as u64));
    item.insert("by".into(), AttributeValue::S(doc.applied_by.clone()));
    item.insert("at".into(), num(doc.applied_at_ms));
    item
}

/// Reads a head item, refusing every attribute that is missing, mistyped or out of range, and a
/// part count that cannot hold the length (each part holds 1 to [`MAX_PART_BYTES`] bytes).
fn parse_head(item: &Item) -> Result<Head, String> {
    let n = |k: &str| match item.get(k) {
        Some(AttributeValue::N(v)) => v
            .parse::<u64>()
            .map_err(|_| format!("attribute {k} is not an unsigned integer: {v}")),
        _ => Err(format!("attribute {k} is missing or not a number")),
    };
    let s = |k: &str| match item.get(k) {
        Some(AttributeValue::S(v)) => Ok(v.clone()),
        _ => Err(format!("attribute {k} is missing or not a string")),
    };
    let dig = s("dig")?;
    let hex = dig.len() == 16 && dig.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let digest = u64::from_str_radix(&dig, 16)
        .ok()
        .filter(|_| hex)
        .ok_or_else(|| format!("attribute dig is not 16 lowercase hex digits: {dig:?}"))?;
    let parts = usize::try_from(n("parts")?).unwrap_or(usize::MAX);
    if parts > MAX_LIMITS_PARTS {
        return Err(format!(
            "attribute parts is {parts}, more than {MAX_LIMITS_PARTS}"
        ));
    }
    let bytes = usize::try_from(n("bytes")?).unwrap_or(usize::MAX);
    if bytes > MAX_LIMITS_DOC_BYTES {
        return Err(format!(
            "attribute bytes is {bytes}, more than {MAX_LIMITS_DOC_BYTES}"
        ));
    }
    if parts > bytes || parts < bytes.div_ceil(MAX_PART_BYTES) {
        return Err(format!(
            "attributes parts ({parts}) and bytes ({bytes}) disagree: a part holds 1 to {MAX_PART_BYTES} bytes"
        ));
    }
    Ok(Head {
        version: n("ver")?,
        digest,
        parts,
        bytes,
        by: s("by")?,
        at_ms: n("at")?,
    })
}

/// The text of the parts `head` names, in index order, if `items` hold exactly those parts and
/// they add up to the head's length and digest; otherwise why not.
fn assemble(head: &Head, items: &[Item]) -> Result<String, String> {
    let prefix = head.part_prefix();
    let mut parts = BTreeMap::new();
    for item in items {
        let (Some(AttributeValue::S(sk)), Some(AttributeValue::S(txt))) =
            (item.get("sk"), item.get("txt"))
        else {
            return Err("a part has no sort key or no text".into());
        };
        let index = sk
            .strip_prefix(&prefix)
            .filter(|i| i.len() == 4 && i.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|i| i.parse::<usize>().ok())
            .filter(|i| *i < head.parts)
            .ok_or_else(|| format!("unexpected part {sk}"))?;
        if parts.insert(index, txt.as_str()).is_some() {
            return Err(format!("part {index} appears twice"));
        }
    }
    if parts.len() != head.parts {
        return Err(format!("{} of {} parts", parts.len(), head.parts));
    }
    let text: String = parts.into_values().collect();
    if text.len() != head.bytes {
        return Err(format!("{} bytes, not {}", text.len(), head.bytes));
    }
    let digest = shareplane_core::fnv1a_64(text.as_bytes());
    if digest != head.digest {
        return Err(format!("digest {digest:016x}, not {:016x}", head.digest));
    }
    Ok(text)
}

async fn get_head(
    client: &Client,
    table: &str,
    consistent: bool,
) -> Result<Option<Head>, StoreError> {
    let got = client
        .get_item()
        .table_name(table)
        .set_key(Some(key(HEAD_SK)))
        .consistent_read(consistent)
        .send()
        .await
        .map_err(|e| store_error("GetItem (shared limits head)", e))?;
    got.item
        .as_ref()
        .map(|item| {
            parse_head(item).map_err(|why| {
                StoreError::Fatal(format!(
                    "the shared limits head (pk {LIMITS_PK}, sk {HEAD_SK}) is malformed: {why}"
                ))
            })
        })
        .transpose()
}

/// Every item whose sort key starts with `head`'s part prefix (stopping once there are more than
/// the head names: the set is wrong whatever the rest holds).
async fn query_parts(client: &Client, table: &str, head: &Head) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::new();
    let mut start = None;
    for _ in 0..MAX_PART_PAGES {
        let page = client
            .query()
            .table_name(table)
            .key_condition_expression("pk = :p AND begins_with(sk, :pre)")
            .expression_attribute_values(":p", AttributeValue::S(LIMITS_PK.to_string()))
            .expression_attribute_values(":pre", AttributeValue::S(head.part_prefix()))
            .consistent_read(false)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| store_error("Query (shared limits parts)", e))?;
        items.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() || items.len() > head.parts {
            return Ok(items);
        }
    }
    // More pages than parts can fill: more items than the head names.
    Ok(items)
}

/// Puts `head` if its version is above the stored one's; returns the previous head's version.
async fn put_head(
    client: &Client,
    table: &str,
    head: Item,
    version: u64,
) -> Result<Option<u64>, HeadRefused> {
    let result = client
        .put_item()
        .table_name(table)
        .set_item(Some(head))
        .condition_expression(HEAD_CONDITION)
        .expression_attribute_values(":v", num(version))
        .return_values(ReturnValue::AllOld)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    match result {
        // A previous head that does not parse is not trusted for collecting: nothing is deleted.
        Ok(out) => Ok(out
            .attributes
            .as_ref()
            .and_then(|old| parse_head(old).ok())
            .map(|h| h.version)),
        Err(e) => match e.as_service_error() {
            Some(PutItemError::ConditionalCheckFailedException(c)) => {
                let stored = match c.item() {
                    Some(item) => parse_head(item).ok(),
                    // Not every endpoint returns the item: ask (best effort).
                    None => get_head(client, table, true).await.ok().flatten(),
                };
                tracing::debug!(version, refused = %describe(&e), "shared limits head refused");
                Err(HeadRefused::Refused(stored.map(|h| (h.version, h.digest))))
            }
            _ => Err(HeadRefused::Failed(store_error(
                "PutItem (shared limits head)",
                e,
            ))),
        },
    }
}

/// Deletes the parts of a refused write (best effort), unless the stored head may name them.
async fn discard(
    client: &Client,
    table: &str,
    version: u64,
    digest: u64,
    stored: Option<&(u64, u64)>,
    written: &[String],
) {
    match stored {
        Some(&(v, d)) if (v, d) != (version, digest) => {}
        // The stored head names these very items (or it could not be read): keep them.
        _ => return,
    }
    for sk in written {
        if let Err(e) = delete(client, table, sk).await {
            tracing::warn!(version, part = %sk, error = %e, "could not delete a refused write's part; a later write collects it");
            return;
        }
    }
}

/// Deletes up to [`MAX_COLLECT_PER_WRITE`] parts of versions below `below` (best effort) and
/// returns the write units of the deletes that succeeded.
async fn collect(client: &Client, table: &str, below: u64) -> u64 {
    let keys = match older_parts(client, table, below).await {
        Ok(keys) => keys,
        Err(e) => {
            tracing::warn!(below, error = %e, "could not list older shared limits parts; a later write collects them");
            return 0;
        }
    };
    let mut units = 0;
    for sk in keys {
        if let Err(e) = delete(client, table, &sk).await {
            tracing::warn!(part = %sk, error = %e, "could not delete an older shared limits part; a later write collects it");
            break;
        }
        units += plain_units(0);
    }
    units
}

/// The sort keys of up to [`MAX_COLLECT_PER_WRITE`] parts of versions below `below`, oldest first.
async fn older_parts(client: &Client, table: &str, below: u64) -> Result<Vec<String>, StoreError> {
    let mut keys = Vec::new();
    let mut start = None;
    for _ in 0..MAX_COLLECT_PAGES {
        // Every part key of a lower version sorts between the prefix and `v#<below>` (inclusive
        // bounds: no key equals the upper one, and `below`'s own keys sort after it).
        let page = client
            .query()
            .table_name(table)
            .key_condition_expression("pk = :p AND sk BETWEEN :lo AND :hi")
            .expression_attribute_values(":p", AttributeValue::S(LIMITS_PK.to_string()))
            .expression_attribute_values(":lo", AttributeValue::S(PART_PREFIX.to_string()))
            .expression_attribute_values(
                ":hi",
                AttributeValue::S(format!("{PART_PREFIX}{below:020}")),
            )
            .projection_expression("sk")
            .limit(MAX_COLLECT_PER_WRITE as i32)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| store_error("Query (older shared limits parts)", e))?;
        keys.extend(
            page.items
                .unwrap_or_default()
                .iter()
                .filter_map(|i| match i.get("sk") {
                    Some(AttributeValue::S(sk)) => Some(sk.clone()),
                    _ => None,
                }),
        );
        start = page.last_evaluated_key;
        if start.is_none() || keys.len() >= MAX_COLLECT_PER_WRITE {
            break;
        }
    }
    keys.truncate(MAX_COLLECT_PER_WRITE);
    Ok(keys)
}

async fn delete(client: &Client, table: &str, sk: &str) -> Result<(), StoreError> {
    client
        .delete_item()
        .table_name(table)
        .set_key(Some(key(sk)))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| store_error("DeleteItem (shared limits part)", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn doc(version: u64, text: &str) -> LimitsDoc {
        LimitsDoc {
            version,
            text: text.into(),
            applied_by: "ops@example".into(),
            applied_at_ms: 1_700_000_000_000,
        }
    }

    fn head_of(d: &LimitsDoc, parts: usize) -> Item {
        head_item(d, d.digest(), parts)
    }

    proptest! {
        #[test]
        fn parts_are_bounded_non_empty_and_add_up(text in "\\PC{0,200}", max in 4usize..24) {
            let parts = split(&text, max);
            prop_assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= max));
            // Only the last part may be short by more than a cut character.
            let full = parts.len().saturating_sub(1);
            prop_assert!(parts[..full].iter().all(|p| p.len() + 3 >= max));
            prop_assert_eq!(parts.concat(), text);
        }
    }

    #[test]
    fn a_maximal_document_fits_in_the_parts_a_head_may_name() {
        let worst = "€".repeat(MAX_LIMITS_DOC_BYTES / 3);
        assert!(split(&worst, MAX_PART_BYTES).len() <= MAX_LIMITS_PARTS);
        let item = part_item(
            u64::MAX,
            u64::MAX,
            MAX_LIMITS_PARTS,
            &"x".repeat(MAX_PART_BYTES),
        );
        assert!(item_bytes(&item) < crate::codec::MAX_ITEM_BYTES);
        assert_eq!(split("", MAX_PART_BYTES), Vec::<&str>::new());
    }

    #[test]
    fn part_keys_sort_by_version_then_digest_then_index() {
        assert_eq!(
            part_sk(7, 0xab, 3),
            "v#00000000000000000007#00000000000000ab#0003"
        );
        let mut keys = vec![part_sk(10, 1, 0), part_sk(9, 2, 11), part_sk(9, 2, 2)];
        keys.sort();
        assert_eq!(
            keys,
            vec![part_sk(9, 2, 2), part_sk(9, 2, 11), part_sk(10, 1, 0)]
        );
        // The collection bound of version 10 lies above every key of version 9, below version 10's.
        let hi = format!("{PART_PREFIX}{:020}", 10);
        assert!(part_sk(9, u64::MAX, 9999) < hi && hi < part_sk(10, 0, 0));
    }

    #[test]
    fn a_head_round_trips_and_every_malformed_attribute_is_named() {
        let d = doc(3, "abc");
        let head = parse_head(&head_of(&d, 1)).expect("well formed");
        assert_eq!(head.doc("abc".into()), d);
        let spoil = |k: &str, v: AttributeValue| {
            let mut item = head_of(&d, 1);
            item.insert(k.into(), v);
            parse_head(&item).expect_err(k)
        };
        let s = |v: &str| AttributeValue::S(v.into());
        let n = |v: &str| AttributeValue::N(v.into());
        assert_eq!(
            spoil("parts", s("1")),
            "attribute parts is missing or not a number"
        );
        assert_eq!(
            spoil("ver", n("-1")),
            "attribute ver is not an unsigned integer: -1"
        );
        assert!(spoil("dig", s("ABCDEF0123456789")).starts_with("attribute dig"));
        assert!(spoil("dig", s("abc")).starts_with("attribute dig"));
        assert!(spoil("by", n("1")).starts_with("attribute by"));
        assert!(spoil("parts", n("1000")).starts_with("attribute parts is 1000"));
        assert!(spoil("bytes", n(&(MAX_LIMITS_DOC_BYTES + 1).to_string()))
            .starts_with("attribute bytes"));
        assert!(spoil("bytes", n("0")).contains("disagree"));
        assert!(spoil("bytes", n("400000")).contains("disagree"));
        let mut missing = head_of(&d, 1);
        missing.remove("at");
        assert_eq!(
            parse_head(&missing).expect_err("at"),
            "attribute at is missing or not a number"
        );
    }

    #[test]
    fn only_the_exact_parts_of_the_head_assemble() {
        let d = doc(5, "héllo wörld");
        let parts = split(&d.text, 4);
        let items: Vec<Item> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| part_item(5, d.digest(), i, p))
            .collect();
        let head = parse_head(&head_of(&d, parts.len())).expect("head");
        let mut shuffled = items.clone();
        shuffled.reverse();
        assert_eq!(assemble(&head, &shuffled), Ok(d.text.clone()));
        assert!(assemble(&head, &items[1..]).is_err(), "a part missing");
        let mut twice = items.clone();
        twice.push(items[0].clone());
        assert!(assemble(&head, &twice).is_err(), "a part repeated");
        let mut altered = items.clone();
        assert_eq!(parts[1], "lo w");
        altered[1].insert("txt".into(), AttributeValue::S("lo x".into()));
        assert!(
            assemble(&head, &altered).is_err_and(|e| e.starts_with("digest")),
            "same length, other text"
        );
        let mut foreign = items;
        foreign[0].insert(
            "sk".into(),
            AttributeValue::S(part_sk(5, d.digest() ^ 1, 0)),
        );
        assert!(assemble(&head, &foreign).is_err(), "another digest's part");
    }
}
