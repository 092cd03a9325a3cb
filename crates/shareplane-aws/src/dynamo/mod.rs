//! [`DynamoStore`]: the [`RecordStore`] on a DynamoDB (global) table.
//!
//! # Writing
//!
//! A Region's record is a header item plus shard items (see [`crate::codec`]). A write sends, in
//! one `TransactWriteItems` call, the header and every shard whose bytes changed since this
//! store's last successful write (all shards after a restart, a token change or any failure).
//! Unchanged shards keep the version they were written at, which the header lists, so a quiet
//! limit costs nothing per period.
//!
//! Conditions (fencing): the header is put only if `attribute_not_exists(pk) OR (ver < :v AND
//! tok <= :t)`: a higher record version and a writer token not lower than the stored one; every
//! shard put or delete only if its own stored `tok <= :t`. A record too large for one transaction
//! (100 actions, 4 MB) is sent as several: each earlier one carries a `ConditionCheck` of the same
//! header condition, the last one puts the header. Until the header lands, readers see the old
//! header and shards at other versions than it names, which they treat as "not updated".
//!
//! Conditions are evaluated against the replica the call reaches. That is sound because every
//! item is written in one Region only: its own Region's daemons write its record and take its
//! lease, always through that Region's replica (a global table resolves concurrent writes to one
//! item in different Regions by last writer wins, which no condition could stop).
//!
//! # Ended epochs
//!
//! A survivor closes a peer's ended epochs one by one, each against exactly the record whose
//! version the next epoch names (`prev_final`); one that restarted, or was cut off while the peer
//! ended several epochs, needs those records from the table. So a write that starts a new epoch
//! (its epoch is higher than the stored record's) also copies the stored header and shards,
//! exactly as stored, to `prev#<epoch>` and `prev#<epoch>#NNNN` (same partition key; the writer
//! token of the write). The store first reads its own items with a consistent read (only when it
//! does not know the stored epoch already: after a restart, a token change or a failure), and the
//! header put (and every earlier transaction's check) is then conditioned on `ver = :pv` as
//! well, so the copy is exactly the record the new epoch replaces. The copies travel in the
//! first transactions of the write (they count toward the 100 actions and 4 MB of a transaction
//! like every other action, and the batching above spreads them): a kept shard never changes
//! again, so it may land before the header that switches epochs, never after it. If the stored set is not consistent (a write of
//! several transactions failed half-way, overwriting shards the header still names), there is
//! nothing exact to keep: the store logs an error and writes the new epoch; heirs then keep that
//! estate frozen (`waiting_for_record`): room is stranded, never created.
//!
//! A kept epoch is collected by its owner, in its normal writes, at most
//! [`MAX_COLLECT_PER_WRITE`] deletes per write (shards first, the header last, so a partly
//! collected set reads as inconsistent and is left out), once **every other configured Region's
//! latest record** (as this store last read it) accounts with a later epoch of the owner and marks
//! a later one (the core's rule, [`shareplane_core::closed_for_good`], which the simulated tables
//! apply too), and the owner is `KEEP_ENDED_EPOCHS` epochs past it. A heir moves its accounting
//! past epoch `E` only by closing `E` against exactly its last record, and its mark past `E` only
//! by closing a later epoch, which it defers while it may still have to settle `E` up: until
//! then, after a restart, it still needs the kept record. A Region
//! that never wrote, or whose record is rejected, has marked nothing: its peers' kept epochs stay.
//! A record claiming an epoch of the owner beyond the owner's current one counts as not marking.
//!
//! # Reading
//!
//! One `Query` per configured Region, run concurrently: `pk = name AND sk BETWEEN "prev#" AND
//! "rec$"` covers the kept sets and the current record and leaves out the lease (`'$'` is the
//! byte after `'#'`; moto refuses an empty `begins_with` prefix, which rules out one prefix for
//! both). Each Region's items are decoded and validated; a rejected record is counted and logged
//! once per cause; an inconsistent current set (a write still replicating) yields the last
//! consistent record this store read for that Region, if any. The kept sets are decoded the same
//! way and returned in epoch order (at most [`MAX_KEPT_EPOCHS_READ`], the oldest first) **before**
//! the Region's current record, and only those of epochs older than that current record's: a
//! copy that replicated before the header that switched epochs names the record the reader still
//! sees as current. An inconsistent kept set is left out (it is replicating, or being
//! collected); a rejected one is reported, never adopted. `read_one` reads the current record
//! only (`begins_with(sk, "rec")`).
//!
//! # Shared limits
//!
//! The shared limits live in the same table under their own partition key (`#limits`), which no
//! Region's items can share: [`crate::limits`] owns their layout and protocol, and this store
//! refuses a Region name that starts with `#` wherever it turns a Region into a partition key.

mod store;
mod table;

use crate::client::{describe, store_error};
use crate::codec::{self, Decoded, Encoded, Item, HEADER_SK, LEASE_SK, MAX_ITEM_BYTES};
use crate::limits;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use shareplane_core::{Deployment, RegionId, RegionRecord};
use shareplane_store::{
    Fetched, Lease, LimitsDoc, LimitsRead, RecordStore, Rejection, StoreError, WriterToken,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
pub use table::create_table;
use table::query_items;

/// Actions per `TransactWriteItems` call (DynamoDB's limit).
const MAX_TRANSACTION_ACTIONS: usize = 100;
/// Bytes per `TransactWriteItems` call: DynamoDB allows 4 MB; keep a margin for request overhead.
const MAX_TRANSACTION_BYTES: usize = 3_500_000;
/// Query pages per Region read; a record needs at most a few (1 MB each).
const MAX_QUERY_PAGES: usize = 512;
/// Deletes of kept items per write (a kept epoch of 10,000 limits is 41 items).
pub const MAX_COLLECT_PER_WRITE: usize = 48;
/// Kept epochs returned per Region per read, the oldest first (a survivor closes them in order).
pub const MAX_KEPT_EPOCHS_READ: usize = 64;

const HEADER_CONDITION: &str = "attribute_not_exists(pk) OR (ver < :v AND tok <= :t)";
/// The header condition of a write that starts a new epoch: the stored header is still the one
/// whose items it keeps.
const SWITCH_CONDITION: &str = "ver = :pv AND ver < :v AND tok <= :t";
const SHARD_CONDITION: &str = "attribute_not_exists(pk) OR tok <= :t";

/// Which of a Region's items a query reads.
#[derive(Clone, Copy)]
enum Keys {
    /// `rec` and `rec#NNNN`.
    Current,
    /// The kept sets too (`prev#…`).
    WithKept,
}

/// The record store on one Region's replica of the table. Cheap to share behind an `Arc`.
pub struct DynamoStore {
    client: Client,
    table: String,
    /// Replaced when the daemon adopts a reloaded configuration ([`RecordStore::set_deployment`]):
    /// limits are encoded and decoded by id against it.
    deployment: std::sync::RwLock<Arc<Deployment>>,
    me: RegionId,
    written: Mutex<Option<Written>>,
    max_actions: usize,
    max_collect: usize,
    last_good: Mutex<BTreeMap<RegionId, Arc<RegionRecord>>>,
    /// The record this store last wrote, served for it when a read returns the same write.
    own_written: Mutex<Option<Arc<RegionRecord>>>,
    /// The stored sort keys of this Region's kept sets, by ended epoch, as last read or written.
    kept: Mutex<BTreeMap<u64, Vec<String>>>,
    rejections: Mutex<BTreeMap<&'static str, u64>>,
    /// Write capacity units of every write that succeeded ([`DynamoStore::write_units`]).
    write_units: std::sync::atomic::AtomicU64,
    /// The last complete shared limits this store read.
    limits_seen: limits::Seen,
}

/// Write capacity units of a transactional action that writes `bytes` (DynamoDB's published
/// rule: 2 per started KB of each item a transaction writes; deletes and condition checks are
/// counted as 1 KB).
fn transactional_units(bytes: usize) -> u64 {
    2 * bytes.div_ceil(1024).max(1) as u64
}

/// One transaction's actions and the write units it consumes.
type Batch = (Vec<TransactWriteItem>, u64);

/// One transaction action and the bytes it writes.
type SizedAction = (TransactWriteItem, usize);

/// The copies a write that starts a new epoch makes of the stored record of the ending one.
struct Carry {
    /// The ending epoch, and the version of its stored (last) record.
    epoch: u64,
    version: u64,
    actions: Vec<SizedAction>,
    /// The kept items' sort keys.
    keys: Vec<String>,
}

/// What this store last wrote successfully, so that unchanged shards need not be written again.
#[derive(Clone)]
struct Written {
    region: RegionId,
    token: WriterToken,
    version: u64,
    epoch: u64,
    shard_versions: Vec<u64>,
    shards: Vec<Vec<u8>>,
}

impl DynamoStore {
    fn d(&self) -> Arc<Deployment> {
        self.deployment
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A store for Region `me` of `deployment` on `table` (which must exist: see [`create_table`]).
    pub fn new(
        client: Client,
        table: impl Into<String>,
        deployment: Arc<Deployment>,
        me: RegionId,
    ) -> Self {
        DynamoStore {
            client,
            table: table.into(),
            deployment: std::sync::RwLock::new(deployment),
            me,
            written: Mutex::new(None),
            max_actions: MAX_TRANSACTION_ACTIONS,
            max_collect: MAX_COLLECT_PER_WRITE,
            last_good: Mutex::new(BTreeMap::new()),
            own_written: Mutex::new(None),
            kept: Mutex::new(BTreeMap::new()),
            rejections: Mutex::new(BTreeMap::new()),
            write_units: std::sync::atomic::AtomicU64::new(0),
            limits_seen: limits::Seen::default(),
        }
    }

    /// Write capacity units this store's successful writes consumed so far, in the writing Region
    /// (replication to the other replicas of a global table costs as much again in each of them):
    /// records by DynamoDB's rule for transactions, shared limits (plain puts) at 1 per started
    /// KB; deletes are counted as 1 KB.
    pub fn write_units(&self) -> u64 {
        self.write_units.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Caps the actions per transaction below DynamoDB's 100 (at least 2), so that tests can
    /// exercise records written in several transactions without 25,000 limits.
    pub fn with_max_transaction_actions(mut self, actions: usize) -> Self {
        self.max_actions = actions.clamp(2, MAX_TRANSACTION_ACTIONS);
        self
    }

    /// Caps the deletes of kept items per write below [`MAX_COLLECT_PER_WRITE`] (at least 1), so
    /// that tests can watch a kept epoch being collected over several writes.
    pub fn with_max_collect_per_write(mut self, deletes: usize) -> Self {
        self.max_collect = deletes.clamp(1, MAX_COLLECT_PER_WRITE);
        self
    }

    /// How many foreign records were rejected so far, by cause ([`Rejection::cause`]).
    pub fn rejections(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.rejections).clone()
    }

    fn count_rejection(&self, region: &str, reason: &Rejection) {
        let mut counts = lock(&self.rejections);
        let n = counts.entry(reason.cause()).or_insert(0);
        *n += 1;
        if *n == 1 {
            // Logged once per cause; the counter (and the metric built on it) carries the rest.
            tracing::warn!(region, cause = reason.cause(), %reason, "rejected a Region's record");
        }
    }

    fn region_name(&self, r: RegionId) -> Result<String, StoreError> {
        if r.index() >= self.d().n() {
            return Err(StoreError::Fatal(format!("Region {r} is not configured")));
        }
        let name = self.d().region_name(r).to_string();
        // `#…` partition keys hold what all Regions share (the shared limits, `#limits`).
        if name.starts_with('#') {
            return Err(StoreError::Fatal(format!(
                "Region name {name:?} starts with '#', which the table keeps for shared items"
            )));
        }
        Ok(name)
    }

    /// Every item of `region` whose sort key starts with `rec`.
    async fn query(&self, name: &str, consistent: bool) -> Result<Vec<Item>, StoreError> {
        query_items(&self.client, &self.table, name, consistent, Keys::Current).await
    }

    /// One Region's kept records (epoch order, older than its current one), then its current one.
    fn fetched_with_kept(&self, region: RegionId, items: Vec<Item>) -> Vec<Fetched> {
        let sets = codec::split(items);
        let current = self.fetched(region, &sets.current);
        if region == self.me {
            *lock(&self.kept) = sets.kept_keys;
        }
        let reference = lock(&self.last_good)
            .get(&region)
            .map(|r| (r.epoch(), r.version()));
        let mut out = Vec::new();
        if let Some((epoch, version)) = reference {
            let older = sets.kept.iter().filter(|(e, _)| **e < epoch);
            for (e, items) in older.take(MAX_KEPT_EPOCHS_READ) {
                out.extend(self.kept_fetched(region, *e, version, items));
            }
        }
        out.extend(current);
        out
    }

    /// Decodes the kept set of `region`'s epoch `epoch`; `current` is the version of the
    /// Region's current record, which every kept record must precede.
    fn kept_fetched(
        &self,
        region: RegionId,
        epoch: u64,
        current: u64,
        items: &[Item],
    ) -> Option<Fetched> {
        let name = self.d().region_name(region).to_string();
        let reason = match codec::decode_kept(&self.d(), self.me, region, epoch, items) {
            Decoded::Record(r) if r.version() < current => {
                return Some(Fetched::Record(Arc::from(r)))
            }
            Decoded::Record(r) => Rejection::Malformed(format!(
                "the record kept for epoch {epoch} is at version {}, not before the current {current}",
                r.version()
            )),
            // Only shards left: the set is being collected.
            Decoded::Absent => return None,
            Decoded::Inconsistent(why) => {
                tracing::debug!(region = %name, epoch, %why, "kept record still replicating or being collected; left out");
                return None;
            }
            Decoded::Rejected(reason) => reason,
        };
        self.count_rejection(&name, &reason);
        Some(Fetched::Rejected {
            region: Some(name),
            reason,
        })
    }

    /// When `record` starts a new epoch over the stored record, the copies that keep the stored
    /// record (see the module doc). `None` when the epoch does not change or nothing exact is
    /// stored.
    async fn carry(
        &self,
        record: &RegionRecord,
        token: WriterToken,
    ) -> Result<Option<Carry>, StoreError> {
        let known = lock(&self.written)
            .as_ref()
            .filter(|w| w.region == record.region() && w.token == token)
            .map(|w| w.epoch);
        if known == Some(record.epoch()) {
            return Ok(None);
        }
        let name = self.region_name(record.region())?;
        let items = self.query(&name, true).await?;
        // Decoded as its own Region's: the writer's record is not checked as a foreign one.
        let why = match codec::decode(&self.d(), record.region(), record.region(), &items) {
            Decoded::Record(stored) if stored.epoch() < record.epoch() => {
                return self.copies(record, token, &stored, &items).map(Some)
            }
            Decoded::Record(_) | Decoded::Absent => return Ok(None),
            Decoded::Inconsistent(why) => why,
            Decoded::Rejected(reason) => reason.to_string(),
        };
        tracing::error!(
            region = %name,
            %why,
            "the stored record of the ending epoch is not consistent and cannot be kept; heirs keep its estate frozen"
        );
        Ok(None)
    }

    fn copies(
        &self,
        record: &RegionRecord,
        token: WriterToken,
        stored: &RegionRecord,
        items: &[Item],
    ) -> Result<Carry, StoreError> {
        if stored.version() >= record.version() {
            return Err(StoreError::Conflict(format!(
                "version {} is not higher than the stored {}",
                record.version(),
                stored.version()
            )));
        }
        let mut actions = Vec::new();
        let mut keys = Vec::new();
        for item in codec::keep(items, stored.epoch(), token.0) {
            let size = codec::item_bytes(&item);
            if size > MAX_ITEM_BYTES {
                return Err(StoreError::Fatal(format!(
                    "a kept item would take {size} bytes"
                )));
            }
            if let Some(AttributeValue::S(sk)) = item.get("sk") {
                keys.push(sk.clone());
            }
            let put = self.conditional_put(item, SHARD_CONDITION, &[(":t", token.0)])?;
            actions.push((TransactWriteItem::builder().put(put).build(), size));
        }
        Ok(Carry {
            epoch: stored.epoch(),
            version: stored.version(),
            actions,
            keys,
        })
    }

    /// The kept items this write of `record` deletes: of epochs every heir has closed for good
    /// (never `carried`, the epoch this write keeps), shards before their header, at most
    /// `max_collect`. Only the owner collects, and only what its last read listed.
    fn collectable(&self, record: &RegionRecord, carried: Option<u64>) -> Vec<(u64, String)> {
        if record.region() != self.me {
            return Vec::new();
        }
        let kept = lock(&self.kept).clone();
        let latest = lock(&self.last_good).clone();
        let mut out = Vec::new();
        for (epoch, mut keys) in kept {
            if Some(epoch) == carried
                || !shareplane_core::closed_for_good(
                    self.d().n(),
                    record.region(),
                    record.epoch(),
                    epoch,
                    |r| latest.get(&r).map(|rec| &**rec),
                )
            {
                continue;
            }
            // The header's key is a prefix of its shards' keys: reversed, it comes last.
            keys.sort_unstable_by(|a, b| b.cmp(a));
            for key in keys {
                if out.len() >= self.max_collect {
                    return out;
                }
                out.push((epoch, key));
            }
        }
        out
    }

    /// Brings the list of this Region's kept items up to date after a successful write.
    fn wrote_kept(&self, record: &RegionRecord, carry: Option<Carry>, collected: &[(u64, String)]) {
        if record.region() != self.me {
            return;
        }
        let mut kept = lock(&self.kept);
        for (epoch, key) in collected {
            if let Some(keys) = kept.get_mut(epoch) {
                keys.retain(|k| k != key);
            }
        }
        kept.retain(|_, keys| !keys.is_empty());
        if let Some(c) = carry {
            kept.insert(c.epoch, c.keys);
        }
    }

    /// Decodes one Region's items into what the trait returns, counting rejections and serving the
    /// last consistent record while a write is still replicating.
    fn fetched(&self, region: RegionId, items: &[Item]) -> Option<Fetched> {
        let name = self.d().region_name(region).to_string();
        match codec::decode(&self.d(), self.me, region, items) {
            Decoded::Absent => None,
            Decoded::Record(r) => {
                // A copy already held of the same write (a Region's versions rise on every
                // write) is served and the decoded one dropped: an unchanged record is held
                // once, and the own record shares its entries with the daemon's (what `put` was
                // given). At 100,000 limits each copy is 32 MB.
                let same = |k: &Arc<RegionRecord>| {
                    k.region() == region && (k.epoch(), k.version()) == (r.epoch(), r.version())
                };
                let mut last = lock(&self.last_good);
                let held = (last.get(&region).filter(|k| same(k)).cloned())
                    .or_else(|| lock(&self.own_written).clone().filter(same));
                let r = held.unwrap_or_else(|| Arc::from(r));
                last.insert(region, r.clone());
                Some(Fetched::Record(r))
            }
            Decoded::Inconsistent(why) => {
                tracing::debug!(region = %name, %why, "record still replicating; serving the last consistent one");
                lock(&self.last_good)
                    .get(&region)
                    .cloned()
                    .map(Fetched::Record)
            }
            Decoded::Rejected(reason) => {
                self.count_rejection(&name, &reason);
                Some(Fetched::Rejected {
                    region: Some(name),
                    reason,
                })
            }
        }
    }

    /// The transactions that write `enc` under `token` (first the copies of `carry`, then the
    /// shards, the deletes of `collected`, and last the header), and the shard versions the
    /// header names.
    fn plan(
        &self,
        record: &RegionRecord,
        enc: &Encoded,
        token: WriterToken,
        carry: Option<&Carry>,
        collected: &[(u64, String)],
    ) -> Result<(Vec<Batch>, Vec<u64>), StoreError> {
        let prev = lock(&self.written).clone().filter(|w| {
            w.region == record.region() && w.token == token && w.version < record.version()
        });
        let (shards, shard_versions) = self.shard_actions(enc, token, prev.as_ref())?;
        let mut actions = carry.map(|c| c.actions.clone()).unwrap_or_default();
        actions.extend(shards);
        for (_, sk) in collected {
            actions.push((self.fenced_delete(&enc.region, sk, token)?, 100));
        }
        let mut cond = vec![(":v", record.version()), (":t", token.0)];
        let condition = match carry {
            Some(c) => {
                cond.push((":pv", c.version));
                SWITCH_CONDITION
            }
            None => HEADER_CONDITION,
        };
        let header = enc.header_item(token.0, &shard_versions);
        let header_size = codec::item_bytes(&header);
        if header_size > MAX_ITEM_BYTES {
            return Err(StoreError::Fatal(format!(
                "the header would take {header_size} bytes"
            )));
        }
        let mut batches = Vec::new();
        let mut batch = Vec::new();
        let mut units = 0;
        let mut bytes = header_size;
        for (action, size) in actions {
            let full = batch.len() + 1 >= self.max_actions || bytes + size > MAX_TRANSACTION_BYTES;
            if full && !batch.is_empty() {
                batch.push(self.header_check(&enc.region, condition, &cond)?);
                units += transactional_units(0);
                batches.push((std::mem::take(&mut batch), std::mem::take(&mut units)));
                bytes = header_size;
            }
            bytes += size;
            units += transactional_units(size);
            batch.push(action);
        }
        let put = self.conditional_put(header, condition, &cond)?;
        batch.push(TransactWriteItem::builder().put(put).build());
        units += transactional_units(header_size);
        batches.push((batch, units));
        Ok((batches, shard_versions))
    }

    /// Puts of the shards that changed since `prev` (all without it), deletes of shards `prev`
    /// had beyond the new count, each with its size; and the version of every shard.
    fn shard_actions(
        &self,
        enc: &Encoded,
        token: WriterToken,
        prev: Option<&Written>,
    ) -> Result<(Vec<SizedAction>, Vec<u64>), StoreError> {
        let mut shard_versions = Vec::with_capacity(enc.shards.len());
        let mut actions = Vec::new();
        for (i, bytes) in enc.shards.iter().enumerate() {
            let unchanged = prev
                .and_then(|w| Some((w.shards.get(i)?, *w.shard_versions.get(i)?)))
                .filter(|(old, _)| *old == bytes);
            if let Some((_, v)) = unchanged {
                shard_versions.push(v);
                continue;
            }
            shard_versions.push(enc.version);
            let item = enc
                .shard_item(i, token.0)
                .ok_or_else(|| StoreError::Fatal(format!("shard {i} vanished")))?;
            let size = codec::item_bytes(&item);
            if size > MAX_ITEM_BYTES {
                return Err(StoreError::Fatal(format!(
                    "shard {i} would take {size} bytes"
                )));
            }
            let put = self.conditional_put(item, SHARD_CONDITION, &[(":t", token.0)])?;
            actions.push((TransactWriteItem::builder().put(put).build(), size));
        }
        for i in enc.shards.len()..prev.map(|w| w.shards.len()).unwrap_or(0) {
            let del = self.fenced_delete(&enc.region, &codec::shard_sk(i), token)?;
            actions.push((del, 100));
        }
        Ok((actions, shard_versions))
    }

    /// A delete of item `sk` of Region `pk`, unless a higher writer token wrote it.
    fn fenced_delete(
        &self,
        pk: &str,
        sk: &str,
        token: WriterToken,
    ) -> Result<TransactWriteItem, StoreError> {
        let del = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk, sk)))
            .condition_expression(SHARD_CONDITION)
            .expression_attribute_values(":t", num(token.0))
            .build()
            .map_err(|e| StoreError::Fatal(e.to_string()))?;
        Ok(TransactWriteItem::builder().delete(del).build())
    }

    /// A put under `condition`, whose placeholders `values` fills (every one must be used).
    fn conditional_put(
        &self,
        item: Item,
        condition: &str,
        values: &[(&str, u64)],
    ) -> Result<Put, StoreError> {
        let mut put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition);
        for (name, v) in values {
            put = put.expression_attribute_values(*name, num(*v));
        }
        put.build().map_err(|e| StoreError::Fatal(e.to_string()))
    }

    /// A check of the header of Region `pk` under the header put's condition.
    fn header_check(
        &self,
        pk: &str,
        condition: &str,
        values: &[(&str, u64)],
    ) -> Result<TransactWriteItem, StoreError> {
        let mut check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(key(pk, HEADER_SK)))
            .condition_expression(condition);
        for (name, v) in values {
            check = check.expression_attribute_values(*name, num(*v));
        }
        let check = check
            .build()
            .map_err(|e| StoreError::Fatal(e.to_string()))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    async fn transact(
        &self,
        actions: Vec<TransactWriteItem>,
        record: &RegionRecord,
        token: WriterToken,
    ) -> Result<(), StoreError> {
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(actions))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let refused = match e.as_service_error() {
                    Some(TransactWriteItemsError::TransactionCanceledException(c)) => {
                        c.cancellation_reasons()
                            .iter()
                            .any(|r| r.code() == Some("ConditionalCheckFailed"))
                            || c.message()
                                .is_some_and(|m| m.contains("ConditionalCheckFailed"))
                    }
                    _ => false,
                };
                if refused {
                    Err(StoreError::Conflict(format!(
                        "version {} is not higher than the stored one, or writer token {} is lower than the stored one ({})",
                        record.version(),
                        token.0,
                        describe(&e)
                    )))
                } else {
                    Err(store_error("TransactWriteItems", e))
                }
            }
        }
    }
}

/// A poisoned lock still holds whole values (each update is one assignment), so it is safe to use.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn num(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn key(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("pk".to_string(), AttributeValue::S(pk.to_string())),
        ("sk".to_string(), AttributeValue::S(sk.to_string())),
    ])
}
