//! [`RecordStore`] on DynamoDB: the store's operations, on the helpers of [`super::DynamoStore`].

use super::*;

impl RecordStore for DynamoStore {
    fn set_deployment(&self, d: Arc<Deployment>) {
        *self.deployment.write().unwrap_or_else(|e| e.into_inner()) = d;
        // The shard layout may have grown: the next write writes every shard.
        *lock(&self.written) = None;
    }

    async fn put(&self, record: &RegionRecord, token: WriterToken) -> Result<(), StoreError> {
        self.region_name(record.region())?;
        let enc = codec::encode(&self.d(), record);
        if enc.shards.len() > codec::MAX_SHARDS {
            // Readers would reject the header; refuse here, where the cause is clear.
            return Err(StoreError::Fatal(format!(
                "{} limits need {} shards, more than the {} a record may have",
                self.d().limits.len(),
                enc.shards.len(),
                codec::MAX_SHARDS
            )));
        }
        let carry = self.carry(record, token).await?;
        let collected = self.collectable(record, carry.as_ref().map(|c| c.epoch));
        let (batches, shard_versions) =
            self.plan(record, &enc, token, carry.as_ref(), &collected)?;
        *lock(&self.written) = None;
        for (batch, units) in batches {
            self.transact(batch, record, token).await?;
            self.write_units
                .fetch_add(units, std::sync::atomic::Ordering::Relaxed);
        }
        *lock(&self.written) = Some(Written {
            region: record.region(),
            token,
            version: record.version(),
            epoch: record.epoch(),
            shard_versions,
            shards: enc.shards,
        });
        self.wrote_kept(record, carry, &collected);
        *lock(&self.own_written) = Some(Arc::new(record.clone()));
        Ok(())
    }

    async fn read_all(&self) -> Result<Vec<Fetched>, StoreError> {
        let mut tasks = tokio::task::JoinSet::new();
        for r in shareplane_core::regions(self.d().n()) {
            let (client, table, name) = (
                self.client.clone(),
                self.table.clone(),
                self.region_name(r)?,
            );
            tasks.spawn(async move {
                let items = query_items(&client, &table, &name, false, Keys::WithKept).await;
                (r, items)
            });
        }
        let mut by_region = BTreeMap::new();
        while let Some(done) = tasks.join_next().await {
            let (r, items) =
                done.map_err(|e| StoreError::Fatal(format!("a read task failed: {e}")))?;
            by_region.insert(r, items?);
        }
        let mut out = Vec::new();
        for (r, items) in by_region {
            out.extend(self.fetched_with_kept(r, items));
        }
        Ok(out)
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

    async fn read_limits(&self) -> Result<LimitsRead, StoreError> {
        limits::read(&self.client, &self.table, &self.limits_seen).await
    }

    async fn write_limits(&self, doc: &LimitsDoc) -> Result<(), StoreError> {
        let units = limits::write(&self.client, &self.table, doc).await?;
        self.write_units
            .fetch_add(units, std::sync::atomic::Ordering::Relaxed);
        Ok(())
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
