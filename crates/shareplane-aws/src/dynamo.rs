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
//! # Reading
//!
//! One `Query` per configured Region (`pk = name AND begins_with(sk, "rec")`), run concurrently.
//! Each Region's items are decoded and validated; a rejected record is counted and logged once
//! per cause; an inconsistent set (a write still replicating) yields the last consistent record
//! this store read for that Region, if any.

use crate::client::{describe, store_error};
use crate::codec::{self, Decoded, Encoded, Item, HEADER_SK, LEASE_SK, MAX_ITEM_BYTES};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, ConditionCheck, Delete, KeySchemaElement,
    KeyType, Put, ScalarAttributeType, TransactWriteItem,
};
use aws_sdk_dynamodb::Client;
use shareplane_core::{Deployment, RegionId, RegionRecord};
use shareplane_store::{Fetched, Lease, RecordStore, Rejection, StoreError, WriterToken};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Actions per `TransactWriteItems` call (DynamoDB's limit).
const MAX_TRANSACTION_ACTIONS: usize = 100;
/// Bytes per `TransactWriteItems` call: DynamoDB allows 4 MB; keep a margin for request overhead.
const MAX_TRANSACTION_BYTES: usize = 3_500_000;
/// Query pages per Region read; a record needs at most a few (1 MB each).
const MAX_QUERY_PAGES: usize = 512;

const HEADER_CONDITION: &str = "attribute_not_exists(pk) OR (ver < :v AND tok <= :t)";
const SHARD_CONDITION: &str = "attribute_not_exists(pk) OR tok <= :t";

/// The record store on one Region's replica of the table. Cheap to share behind an `Arc`.
pub struct DynamoStore {
    client: Client,
    table: String,
    deployment: Arc<Deployment>,
    me: RegionId,
    written: Mutex<Option<Written>>,
    max_actions: usize,
    last_good: Mutex<BTreeMap<RegionId, Arc<RegionRecord>>>,
    rejections: Mutex<BTreeMap<&'static str, u64>>,
}

/// One transaction action and the bytes it writes.
type SizedAction = (TransactWriteItem, usize);

/// What this store last wrote successfully, so that unchanged shards need not be written again.
#[derive(Clone)]
struct Written {
    region: RegionId,
    token: WriterToken,
    version: u64,
    shard_versions: Vec<u64>,
    shards: Vec<Vec<u8>>,
}

impl DynamoStore {
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
            deployment,
            me,
            written: Mutex::new(None),
            max_actions: MAX_TRANSACTION_ACTIONS,
            last_good: Mutex::new(BTreeMap::new()),
            rejections: Mutex::new(BTreeMap::new()),
        }
    }

    /// Caps the actions per transaction below DynamoDB's 100 (at least 2), so that tests can
    /// exercise records written in several transactions without 25,000 limits.
    pub fn with_max_transaction_actions(mut self, actions: usize) -> Self {
        self.max_actions = actions.clamp(2, MAX_TRANSACTION_ACTIONS);
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
        if r.index() >= self.deployment.n() {
            return Err(StoreError::Fatal(format!("Region {r} is not configured")));
        }
        Ok(self.deployment.region_name(r).to_string())
    }

    /// Every item of `region` whose sort key starts with `rec`.
    async fn query(&self, name: &str, consistent: bool) -> Result<Vec<Item>, StoreError> {
        query_items(&self.client, &self.table, name, consistent).await
    }

    /// Decodes one Region's items into what the trait returns, counting rejections and serving the
    /// last consistent record while a write is still replicating.
    fn fetched(&self, region: RegionId, items: &[Item]) -> Option<Fetched> {
        let name = self.deployment.region_name(region).to_string();
        match codec::decode(&self.deployment, self.me, region, items) {
            Decoded::Absent => None,
            Decoded::Record(r) => {
                let r: Arc<RegionRecord> = Arc::from(r);
                lock(&self.last_good).insert(region, r.clone());
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

    /// The transactions that write `enc` under `token`, and the shard versions the header names.
    fn plan(
        &self,
        record: &RegionRecord,
        enc: &Encoded,
        token: WriterToken,
    ) -> Result<(Vec<Vec<TransactWriteItem>>, Vec<u64>), StoreError> {
        let prev = lock(&self.written).clone().filter(|w| {
            w.region == record.region && w.token == token && w.version < record.version
        });
        let (actions, shard_versions) = self.shard_actions(enc, token, prev.as_ref())?;
        let header = enc.header_item(token.0, &shard_versions);
        let header_size = codec::item_bytes(&header);
        if header_size > MAX_ITEM_BYTES {
            return Err(StoreError::Fatal(format!(
                "the header would take {header_size} bytes"
            )));
        }
        let mut batches = Vec::new();
        let mut batch = Vec::new();
        let mut bytes = header_size;
        for (action, size) in actions {
            let full = batch.len() + 1 >= self.max_actions || bytes + size > MAX_TRANSACTION_BYTES;
            if full && !batch.is_empty() {
                batch.push(self.header_check(enc, token)?);
                batches.push(std::mem::take(&mut batch));
                bytes = header_size;
            }
            bytes += size;
            batch.push(action);
        }
        let put = self.conditional_put(header, HEADER_CONDITION, Some(record.version), token)?;
        batch.push(TransactWriteItem::builder().put(put).build());
        batches.push(batch);
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
            let put = self.conditional_put(item, SHARD_CONDITION, None, token)?;
            actions.push((TransactWriteItem::builder().put(put).build(), size));
        }
        for i in enc.shards.len()..prev.map(|w| w.shards.len()).unwrap_or(0) {
            let del = Delete::builder()
                .table_name(&self.table)
                .set_key(Some(key(&enc.region, &codec::shard_sk(i))))
                .condition_expression(SHARD_CONDITION)
                .expression_attribute_values(":t", num(token.0))
                .build()
                .map_err(|e| StoreError::Fatal(e.to_string()))?;
            actions.push((TransactWriteItem::builder().delete(del).build(), 100));
        }
        Ok((actions, shard_versions))
    }

    /// A put under `condition`, which may use `:t` (the token) and `:v` (when `version` is given).
    fn conditional_put(
        &self,
        item: Item,
        condition: &str,
        version: Option<u64>,
        token: WriterToken,
    ) -> Result<Put, StoreError> {
        let mut put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(condition)
            .expression_attribute_values(":t", num(token.0));
        if let Some(v) = version {
            put = put.expression_attribute_values(":v", num(v));
        }
        put.build().map_err(|e| StoreError::Fatal(e.to_string()))
    }

    fn header_check(
        &self,
        enc: &Encoded,
        token: WriterToken,
    ) -> Result<TransactWriteItem, StoreError> {
        let check = ConditionCheck::builder()
            .table_name(&self.table)
            .set_key(Some(key(&enc.region, HEADER_SK)))
            .condition_expression(HEADER_CONDITION)
            .expression_attribute_values(":v", num(enc.version))
            .expression_attribute_values(":t", num(token.0))
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
                        record.version,
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

async fn query_items(
    client: &Client,
    table: &str,
    name: &str,
    consistent: bool,
) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::new();
    let mut start = None;
    for _ in 0..MAX_QUERY_PAGES {
        let page = client
            .query()
            .table_name(table)
            .key_condition_expression("pk = :p AND begins_with(sk, :r)")
            .expression_attribute_values(":p", AttributeValue::S(name.to_string()))
            .expression_attribute_values(":r", AttributeValue::S(HEADER_SK.to_string()))
            .consistent_read(consistent)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| store_error("Query", e))?;
        items.extend(page.items.unwrap_or_default());
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(items);
        }
    }
    Err(StoreError::Fatal(format!(
        "Region {name}'s items span more than {MAX_QUERY_PAGES} pages"
    )))
}

/// Creates the table (on-demand, `pk`/`sk` strings) if it does not exist. For tests and local
/// runs; production tables come from the infrastructure code, with the same key schema.
pub async fn create_table(client: &Client, table: &str) -> Result<(), StoreError> {
    let attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| StoreError::Fatal(e.to_string()))
    };
    let key_el = |name: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(t)
            .build()
            .map_err(|e| StoreError::Fatal(e.to_string()))
    };
    let result = client
        .create_table()
        .table_name(table)
        .attribute_definitions(attr("pk")?)
        .attribute_definitions(attr("sk")?)
        .key_schema(key_el("pk", KeyType::Hash)?)
        .key_schema(key_el("sk", KeyType::Range)?)
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
    match result {
        Ok(_) => Ok(()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_in_use_exception()) =>
        {
            Ok(())
        }
        Err(e) => Err(store_error("CreateTable", e)),
    }
}

impl RecordStore for DynamoStore {
    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        self.region_name(record.region)?;
        let enc = codec::encode(&self.deployment, record);
        if enc.shards.len() > codec::MAX_SHARDS {
            // Readers would reject the header; refuse here, where the cause is clear.
            return Err(StoreError::Fatal(format!(
                "{} limits need {} shards, more than the {} a record may have",
                self.deployment.limits.len(),
                enc.shards.len(),
                codec::MAX_SHARDS
            )));
        }
        let (batches, shard_versions) = self.plan(record, &enc, token)?;
        *lock(&self.written) = None;
        for batch in batches {
            self.transact(batch, record, token).await?;
        }
        *lock(&self.written) = Some(Written {
            region: record.region,
            token,
            version: record.version,
            shard_versions,
            shards: enc.shards,
        });
        Ok(())
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        let mut tasks = tokio::task::JoinSet::new();
        for r in shareplane_core::regions(self.deployment.n()) {
            let (client, table, name) = (
                self.client.clone(),
                self.table.clone(),
                self.region_name(r)?,
            );
            tasks.spawn(async move { (r, query_items(&client, &table, &name, false).await) });
        }
        let mut by_region = BTreeMap::new();
        while let Some(done) = tasks.join_next().await {
            let (r, items) =
                done.map_err(|e| StoreError::Fatal(format!("a read task failed: {e}")))?;
            by_region.insert(r, items?);
        }
        Ok(by_region
            .into_iter()
            .filter_map(|(r, items)| self.fetched(r, &items))
            .collect())
    }

    async fn read_one(&self, region: RegionId) -> Result<Option<Fetched>, StoreError> {
        let name = self.region_name(region)?;
        let items = self.query(&name, true).await?;
        Ok(self.fetched(region, &items))
    }

    async fn acquire_lease(
        &self,
        region: RegionId,
        holder: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Lease, StoreError> {
        let name = self.region_name(region)?;
        let got = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(&name, LEASE_SK)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| store_error("GetItem", e))?;
        let current = got.item.as_ref().map(parse_lease).transpose()?;
        let mut put = self.client.put_item().table_name(&self.table);
        let token = match &current {
            None => {
                put = put.condition_expression("attribute_not_exists(pk)");
                WriterToken(1)
            }
            Some(l) if l.holder == holder || l.expires_at_ms <= now_ms => {
                put = put
                    .condition_expression("tok = :old AND exp_ms = :exp AND holder = :h")
                    .expression_attribute_values(":old", num(l.token.0))
                    .expression_attribute_values(":exp", num(l.expires_at_ms))
                    .expression_attribute_values(":h", AttributeValue::S(l.holder.clone()));
                if l.holder == holder {
                    l.token
                } else {
                    WriterToken(l.token.0.saturating_add(1))
                }
            }
            Some(l) => {
                return Err(StoreError::Conflict(format!(
                    "lease held by {} until {}",
                    l.holder, l.expires_at_ms
                )))
            }
        };
        let lease = Lease {
            holder: holder.to_string(),
            token,
            expires_at_ms: now_ms.saturating_add(ttl_ms),
        };
        let mut item = key(&name, LEASE_SK);
        item.insert("sv".into(), num(u64::from(codec::SCHEMA_VERSION)));
        item.insert("holder".into(), AttributeValue::S(lease.holder.clone()));
        item.insert("tok".into(), num(lease.token.0));
        item.insert("exp_ms".into(), num(lease.expires_at_ms));
        match put.set_item(Some(item)).send().await {
            Ok(_) => Ok(lease),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(StoreError::Conflict(
                    "the lease changed while it was being taken".into(),
                ))
            }
            Err(e) => Err(store_error("PutItem", e)),
        }
    }
}

fn parse_lease(item: &Item) -> Result<Lease, StoreError> {
    let n = |k: &str| match item.get(k) {
        Some(AttributeValue::N(v)) => v.parse::<u64>().ok(),
        _ => None,
    };
    match (item.get("holder"), n("tok"), n("exp_ms")) {
        (Some(AttributeValue::S(h)), Some(tok), Some(exp)) => Ok(Lease {
            holder: h.clone(),
            token: WriterToken(tok),
            expires_at_ms: exp,
        }),
        _ => Err(StoreError::Fatal(
            "the lease item is malformed; delete it to recover".into(),
        )),
    }
}
